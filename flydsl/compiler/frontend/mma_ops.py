"""``fx.gemm``: MMA atoms on register fragments, per target.

* **CUDA** (sm_80+): ``nvvm.mma.sync`` (``mma.sync.aligned.m16n8k16.row.col...``).
* **ROCm**: ``rocdl.mfma.*`` on gfx90a/gfx942/gfx950, ``rocdl.wmma.*`` on gfx11/gfx12.
* **CPU** (and other host backends): the instruction is executed with the hardware's
  per-lane fragment layouts (``flydsl.expr.mma_layouts``): every lane writes the A and
  B values it holds to their (row, k) places in block-shared scratch, a barrier, then
  every lane computes the accumulators it holds (``fma`` over k in order, one
  ``scf.for`` per atom; a run of accumulators in consecutive rows as one vector), and a
  barrier before the scratch is reused, dropped when the next call follows in the same
  block and writes another scratch array. The atoms of a call are runtime loops (a call
  of 32 atoms traces to 140 to 290 ops, not 1,600 to 6,000 unrolled: FlyDSL's
  preshuffle GEMM makes 96 such calls). Raw ``fx.rocdl.mfma_*`` calls work on the
  lane's values (about 65 ops a call) and run in groups that share one barrier
  (:func:`_join_group`): upstream's flash attention, 128 calls, has 37 barriers, not 256.
  Integer atoms (int8 MFMA)
  run the same loop in i32: exact products, sums wrapping at 32 bits as the hardware's.
  A lane that holds the wrong values gives the wrong answer on the CPU exactly as on
  the GPU. Each wave exchanges through its own scratch region, and the barriers are
  marked wave-scoped (:func:`_wave_barrier`): an MFMA under an ``if`` whole waves take
  or skip (``if tid // 64 == 0:``, producer and consumer waves) runs predicated, as on
  the GPU; one under an ``if`` that splits a wave is a located error.

An atom the target does not have is an error naming the arches that have it.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager, nullcontext

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, memref, nvvm, rocdl, scf, vector
from mlir.dialects import math as mmath

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from ...expr import layout_algebra as la
from ...expr.mma_layouts import values_per_lane
from ...passes._simt_collectives import WAVE_EXCHANGE_ATTR
from ...runtime.dispatch import MAX_BLOCK_THREADS
from . import context
from .values import Value, cast, to_index
from .views import TensorView, as_view, when



def gemm(atom, d, a, b, c) -> None:
    """``fx.gemm(atom, d, a, b, c)``: ``d = a @ b.T + c`` over fragments of shapes
    ``(values, m, k)``, ``(values, n, k)`` and ``(values, m, n)``."""
    d, a, b, c = (_fragment(x, name) for x, name in ((d, "d"), (a, "a"), (b, "b"), (c, "c")))
    spec = atom.spec    # an atom the GPU target lacks is an error here (its arch's table)
    na, nb, nc = _counts(spec)
    rm, rk = _rest(a, "a", na)
    rn, rk_b = _rest(b, "b", nb)
    rm_c, rn_c = _rest(c, "c", nc)
    if rk != rk_b or (rm, rn) != (rm_c, rn_c) or _rest(d, "d", nc) != (rm, rn):
        raise DSLTypeError(f"fx.gemm: fragment shapes do not agree: a {a.shape}, b {b.shape}, "
                           f"c {c.shape}, d {d.shape} (want (v, m, k), (v, n, k), (v, m, n))")
    backend = context.current().target.backend
    if backend in ("cuda", "rocm"):
        _gpu_gemm(atom, spec, d, a, b, c, rm, rn, rk)
    else:
        _emulated_gemm(atom, spec, d, a, b, c, rm, rn, rk)


def _fragment(x, name: str) -> TensorView:
    v = as_view(x)
    if v.memory is None or v.memory.space != "register":
        raise DSLTypeError(f"fx.gemm: {name} must be a register fragment "
                           "(thr_mma.make_fragment_A/B/C or fx.make_fragment_like)")
    return v


def _rest(frag: TensorView, name: str, values: int) -> tuple:
    """``(rest_x, rest_y)`` of a ``(values, x, y)`` fragment (a rank-1 one is one atom)."""
    shape, rank = frag.shape, la.rank(frag.layout)
    if rank not in (1, 3):
        raise DSLTypeError(f"fx.gemm: {name} has shape {shape}; want (values, x, y)")
    per_atom = la.size(shape[0]) if rank == 3 else la.size(shape)
    if per_atom != values:
        raise DSLTypeError(f"fx.gemm: {name} holds {per_atom} values per atom, the "
                           f"atom needs {values}")
    return (int(la.size(shape[1])), int(la.size(shape[2]))) if rank == 3 else (1, 1)


def _element(frag: TensorView, v: int, x: int, y: int):
    """Value ``v`` of atom ``(x, y)`` in a ``(values, x, y)`` or rank-1 fragment."""
    return (v, x, y) if la.rank(frag.layout) == 3 else v


def _values(frag: TensorView, count: int, x: int, y: int) -> list:
    return [frag[_element(frag, v, x, y)] for v in range(count)]


def _store(frag: TensorView, vals: list, x: int, y: int) -> None:
    for v, val in enumerate(vals):
        frag[_element(frag, v, x, y)] = val


def _counts(spec) -> tuple:
    """Values per lane of A, B and C."""
    return tuple(values_per_lane(spec, operand) for operand in "abc")


# -- GPUs: the instruction -----------------------------------------------------------------

def _gpu_gemm(atom, spec, d, a, b, c, rm, rn, rk) -> None:
    na, nb, nc = _counts(spec)
    for k in range(rk):
        for m in range(rm):
            for n in range(rn):
                acc = _values(c if k == 0 else d, nc, m, n)
                out = _instruction(spec, _values(a, na, m, k), _values(b, nb, n, k), acc)
                _store(d, out, m, n)


def _instruction(spec, a_vals: list, b_vals: list, c_vals: list) -> list:
    if spec.family == "mma_sync":
        return _mma_sync(spec, a_vals, b_vals, c_vals)
    return _amd_matrix_core(spec, a_vals, b_vals, c_vals)


_ELEM = {"f32": dt.Float32, "f16": dt.Float16, "bf16": dt.BFloat16, "tf32": dt.Float32,
         "e4m3fnuz": dt.Float8E4M3FNUZ, "e5m2fnuz": dt.Float8E5M2FNUZ,
         "e4m3fn": dt.Float8E4M3FN, "e5m2": dt.Float8E5M2, "i8": dt.Int8,
         "f64": dt.Float64}   # the block-scaled MFMA's emulation (mma_scale_ops)
#: The accumulator types of the matrix instructions (``spec.acc_dtype``).
_ACC = {"f32": dt.Float32, "i32": dt.Int32, "f64": dt.Float64}


def _pack(vals: list, regs: tuple, as_int: bool = False) -> list:
    """Per-lane values as instruction operands: ``regs`` = (operands, elements each, type);
    ``as_int``: each multi-element operand as one integer of its width (``.b32``)."""
    count, per, _ = regs
    out = []
    for r in range(count):
        chunk = [v.v for v in vals[r * per:(r + 1) * per]]
        if per == 1:
            out.append(chunk[0])
            continue
        vec = vector.from_elements(ir.VectorType.get([per], chunk[0].type), chunk)
        if as_int:
            bits = per * ir.FloatType(chunk[0].type).width
            vec = vector.bitcast(ir.VectorType.get([1], ir.IntegerType.get_signless(bits)), vec)
            vec = vector.extract(vec, [], [0])
        out.append(vec)
    return out


def _amd_matrix_core(spec, a_vals, b_vals, c_vals) -> list:
    """MFMA (operands ``a, b, c, cbsz, abid, blgp``) or WMMA (``a, b, c``)."""
    ab = _ELEM[spec.ab_dtype]
    if spec.extra.get("packed_bytes"):      # fp8/bf8: 8 codes in one i64, value 0 lowest
        a_op, b_op = _pack_bytes([cast(v, ab) for v in a_vals]), \
            _pack_bytes([cast(v, ab) for v in b_vals])
    else:
        a_op = _pack([cast(v, ab) for v in a_vals], spec.a_regs)[0]
        b_op = _pack([cast(v, ab) for v in b_vals], spec.b_regs)[0]
    # bf16 operands are i16 vectors of the same bits, except where the intrinsic takes
    # bfloat (gfx950's 32x32x16/16x16x32 bf16: <8 x bfloat>; an i16 vector there is
    # a call LLVM aborts on)
    if spec.ab_dtype == "bf16" and spec.extra["llvm_operand_types"][0].endswith("i16>"):
        a_op, b_op = _as_i16_vector(a_op), _as_i16_vector(b_op)
    acc = _ACC[spec.acc_dtype]
    ctype = ir.VectorType.get([len(c_vals)], acc.mlir_type())
    c_op = vector.from_elements(ctype, [cast(v, acc).v for v in c_vals])
    fn = getattr(rocdl, spec.extra["rocdl_op"].replace("rocdl.", "").replace(".", "_"))
    if spec.family == "mfma":
        zero = arith.constant(ir.IntegerType.get_signless(32), 0)
        out = fn(ctype, [a_op, b_op, c_op, zero, zero, zero])
    else:
        out = fn(ctype, a_op, b_op, c_op)
    return [Value(vector.extract(out, [], [i]), acc) for i in range(len(c_vals))]


def _pack_bytes(vals: list) -> ir.Value:
    """8-bit values (fp8/bf8 codes, int8) as one integer operand, value 0 in the lowest
    byte."""
    i8 = ir.IntegerType.get_signless(8)
    codes = [v.v if v.v.type == i8 else arith.bitcast(i8, v.v) for v in vals]
    vec = vector.from_elements(ir.VectorType.get([len(codes)], i8), codes)
    wide = ir.IntegerType.get_signless(8 * len(codes))
    return vector.extract(vector.bitcast(ir.VectorType.get([1], wide), vec), [], [0])


def _as_i16_vector(vec: ir.Value) -> ir.Value:
    n = ir.VectorType(vec.type).shape[0]
    return vector.bitcast(ir.VectorType.get([n], ir.IntegerType.get_signless(16)), vec)


def _mma_sync(spec, a_vals, b_vals, c_vals) -> list:
    ab = _ELEM[spec.ab_dtype]
    as_int = spec.ab_dtype in ("bf16", "tf32")
    if spec.ab_dtype == "tf32":
        a_ops = [arith.bitcast(ir.IntegerType.get_signless(32), cast(v, dt.Float32).v)
                 for v in a_vals]
        b_ops = [arith.bitcast(ir.IntegerType.get_signless(32), cast(v, dt.Float32).v)
                 for v in b_vals]
    else:
        a_ops = _pack([cast(v, ab) for v in a_vals], spec.a_regs, as_int)
        b_ops = _pack([cast(v, ab) for v in b_vals], spec.b_regs, as_int)
    f32 = ir.F32Type.get()
    c_ops = [cast(v, dt.Float32).v for v in c_vals]
    res = llvm.StructType.get_literal([f32] * len(c_vals))
    shape = ir.Attribute.parse(f"#nvvm.shape<m = {spec.m}, n = {spec.n}, k = {spec.k}>")
    # The op's builder cannot infer every operand type (an unset one aborts the
    # process in MLIR's assertion builds): always name them.
    kind = ir.Attribute.parse(f"#nvvm.mma_type<{spec.ab_dtype}>")
    kwargs = {"multiplicandAPtxType": kind, "multiplicandBPtxType": kind}
    op = nvvm.MmaOp(res, shape, nvvm.MMALayout.row, nvvm.MMALayout.col, a_ops, b_ops, c_ops,
                    **kwargs)
    return [Value(llvm.extractvalue(f32, op.result, [i]), dt.Float32)
            for i in range(len(c_vals))]


# -- host backends: the instruction's semantics, lane by lane ----------------------------------

def _emulated_gemm(atom, spec, d, a, b, c, rm, rn, rk) -> None:
    """Every lane writes its A and B values to their (row, k) places in its group's
    scratch, a barrier, then every lane runs one loop per atom over the ``rk * K``
    products of the accumulators it holds (``fma`` in k order), and a barrier.

    Scratch per lane group: A of atom ``(m, k)`` at ``(m * rk + k) * M * K``, then B of
    ``(n, k)`` at ``(n * rk + k) * N * K``, each ``row + M * kk`` inside (column-major), so
    element ``(row, k * K + kk)`` of a whole K-row of atoms is ``row + M * t`` past its
    first: the loop steps one index by ``M`` and one by ``N``. A TV layout maps
    ``(lane, v)`` to ``lane part + value part``, so each lane's part is computed once
    per kernel (:func:`_lane_indexes`).

    The atoms of a call are runtime loops, not unrolled copies, so a call's traced size
    does not grow with ``rm * rn * rk`` (FlyDSL's kernels issue hundreds of atoms): one
    loop stores every A value of the lane, one every B value, one over the ``(m, n)``
    atoms runs their K loops (the accumulators of an atom as :func:`_k_loop` runs).
    Index arithmetic is on non-negative ``index`` values (unsigned division)."""
    lanes = spec.lanes
    acc_t = _ACC[spec.acc_dtype]    # also the scratch's type: int8 inputs widened to i32
    mk, nk = spec.m * spec.k, spec.n * spec.k
    per_group = rk * (rm * mk + rn * nk)
    owner = a.owner
    groups = (owner[0].num_threads if owner else MAX_BLOCK_THREADS) // lanes
    scratch = _next_scratch(groups * per_group, acc_t)
    na, nb, nc = _counts(spec)
    idx = _lane_indexes(spec, groups, per_group, rk * rm * mk)

    with _members(idx.member):
        _scatter(spec, scratch, a, (na, rm, rk), spec.a_tv, idx.a_first, mk)
        _scatter(spec, scratch, b, (nb, rn, rk), spec.b_tv, idx.b_first, nk)
    _wave_barrier(lanes)
    with _members(idx.member):
        runs = _runs(spec, idx)
        with _runtime_range(rm * rn) as t:          # atom (m, n), m outer as unrolled
            m, n = _div(t, rn), _rem(t, rn)
            c_at, d_at = _atom_values(c, m, n), _atom_values(d, m, n)
            a_off, b_off = _mul(m, rk * mk), _mul(n, rk * nk)
            vals = [cast(c_at.get(v), acc_t) for v in range(nc)]
            accs = [vals[r.first] if r.length == 1 else
                    vector.from_elements(_vec_type(r.length, acc_t), [x.v for x in
                                                                      vals[r.first:r.end]])
                    for r in runs]
            out = _k_loop(spec, scratch, rk, [r.moved(a_off, b_off) for r in runs],
                          [x.v if isinstance(x, Value) else x for x in accs])
            for r, x in zip(runs, out):
                for j in range(r.length):
                    elem = x if r.length == 1 else vector.extract(x, [], [j])
                    d_at.set(r.first + j, cast(Value(elem, acc_t), d.dtype))
    _trailing_barrier(lanes)


def emulated_mfma(spec, a_vals: list, b_vals: list, c: ir.Value) -> ir.Value:
    """One raw MFMA call (``fx.rocdl.mfma_*(result_type, [a, b, c, 0, 0, 0])``) on a host
    backend, on the lane's values: its A and B values to their places in scratch (a few
    stores, no loop), a barrier, the K loop over the accumulators of ``c`` (a vector)
    as :func:`_k_loop` runs, a barrier. Returns the new accumulator vector.

    The same scratch layout, products and fma order as :func:`_emulated_gemm` on one
    atom, in a fifth of the traced operations (upstream's flash attention makes 128
    such calls per kernel: 347 traced operations each through register fragments)."""
    acc_t = _ACC[spec.acc_dtype]
    mk, nk = spec.m * spec.k, spec.n * spec.k
    groups = MAX_BLOCK_THREADS // spec.lanes      # every thread of any block takes part
    idx = _lane_indexes(spec, groups, mk + nk, mk)
    joined = _join_group(groups * (mk + nk), acc_t, [x.v for x in a_vals + b_vals])
    scratch = joined[0] if joined else _next_scratch(groups * (mk + nk), acc_t)
    with ir.InsertionPoint(joined[1]) if joined else nullcontext():
        for vals, tv, first in ((a_vals, spec.a_tv, idx.a_first),
                                (b_vals, spec.b_tv, idx.b_first)):
            for v, val in enumerate(vals):
                at = _add(first, _tv_part(tv, 1, v))
                memref.store(_operand(spec, val).v, scratch.mem, [at])
    if not joined:
        context.current().block_state["mma_group"] = (_wave_barrier(spec.lanes), 1)
    runs = _runs(spec, idx)
    nc = ir.VectorType(c.type).shape[0]
    whole = len(runs) == 1 and runs[0].length == nc
    accs = [c if whole else vector.extract(c, [], [r.first]) if r.length == 1 else
            vector.shuffle(c, c, list(range(r.first, r.end))) for r in runs]
    out = _k_loop(spec, scratch, 1, runs, accs)
    _trailing_barrier(spec.lanes)
    return out[0] if whole else _concat([x if r.length > 1 else
                                         vector.from_elements(_vec_type(1, acc_t), [x])
                                         for r, x in zip(runs, out)])


def _concat(parts: list) -> ir.Value:
    """The vectors ``parts`` end to end (shuffles, pairwise)."""
    while len(parts) > 1:
        joined = []
        for x, y in zip(parts[::2], parts[1::2]):
            n = ir.VectorType(x.type).shape[0] + ir.VectorType(y.type).shape[0]
            joined.append(vector.shuffle(x, y, list(range(n))))
        parts = joined + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def _members(member):
    """``if member:`` around what the body emits; nothing when every thread takes part."""
    return nullcontext() if member is None else when(member)


def _vec_type(n: int, dtype) -> ir.Type:
    return ir.VectorType.get([n], dtype.mlir_type())


class _LaneIndexes:
    """Where a lane's values go in (and come from) its group's MMA scratch."""

    def __init__(self, spec, groups: int, per_group: int, b_start: int):
        tid = to_index(implementation.ops().block_thread_index())
        lane = _rem(tid, spec.lanes)
        base = _mul(_div(tid, spec.lanes), per_group)
        #: threads outside the tiled MMA take no part (None: every thread does)
        self.member = (None if groups * spec.lanes >= MAX_BLOCK_THREADS else
                       arith.cmpi(arith.CmpIPredicate.ult, tid, _ci(groups * spec.lanes)))
        self.a_first = _add(base, _tv_part(spec.a_tv, 0, lane))
        self.b_first = _add(_add(base, b_start), _tv_part(spec.b_tv, 0, lane))
        #: the first A and B scratch index each accumulator reads
        self.rows, self.cols = _first_elements(spec.c_tv, spec.m, values_per_lane(spec, "c"),
                                               spec.lanes, lane, base, _add(base, b_start))


def _lane_indexes(spec, groups: int, per_group: int, b_start: int) -> _LaneIndexes:
    """The calling lane's scratch indexes, computed once per kernel at its entry (a
    kernel's threads keep their ids, so every call of the kernel can use them)."""
    ctx = context.current()
    cache = ctx.extra.setdefault("mma_lane_indexes", {})
    key = (spec.m, spec.n, spec.k, spec.lanes, spec.a_tv, spec.b_tv, spec.c_tv, groups,
           per_group, b_start)
    if key not in cache:
        entry = ctx.func_op.regions[0].blocks[0]
        anchor = ctx.extra.get("mma_entry_anchor")
        if anchor is None:      # after the cached constants (they go to the very top)
            anchor = ctx.extra["mma_entry_anchor"] = _entry_anchor(entry)
        with ir.InsertionPoint(anchor):
            cache[key] = _LaneIndexes(spec, groups, per_group, b_start)
    return cache[key]


def _entry_anchor(entry: ir.Block):
    """An op of the kernel's entry block to insert per-kernel values before: a no-op
    constant made at its top (the block may be empty yet)."""
    with ir.InsertionPoint.at_block_begin(entry):
        return arith.ConstantOp(ir.IndexType.get(), 0).operation


class _Run:
    """Accumulators ``first .. end`` of a lane whose A rows follow each other in one C
    column: one vector load of A and one B value per K step (``length`` 1: a scalar)."""

    def __init__(self, first: int, length: int, a, b):
        self.first, self.length, self.a, self.b = first, length, a, b

    @property
    def end(self) -> int:
        return self.first + self.length

    def moved(self, a_off, b_off) -> "_Run":
        return _Run(self.first, self.length, _add(self.a, a_off), _add(self.b, b_off))


def _runs(spec, idx: _LaneIndexes) -> list:
    """The lane's accumulators as runs of consecutive C rows in one column (the value
    parts of every MFMA C table have runs of 4: 32x32x8's 16 values are 4 runs)."""
    value_rc = _value_rows_cols(spec.c_tv, spec.m, len(idx.rows), spec.lanes)
    runs, v = [], 0
    while v < len(idx.rows):
        n = 1
        while value_rc is not None and v + n < len(idx.rows) and \
                value_rc[v + n] == (value_rc[v][0] + n, value_rc[v][1]):
            n += 1
        runs.append(_Run(v, n, idx.rows[v], idx.cols[v]))
        v += n
    return runs


def _first_elements(c_tv: tuple, m: int, nc: int, lanes: int, lane, a_first,
                    b_first) -> tuple:
    """The scratch indexes of the first A and B element each of the lane's ``nc``
    accumulators reads: ``a_first + row`` and ``b_first + column`` of its C index."""
    c_lane = _tv_part(c_tv, 0, lane)
    value_rc = _value_rows_cols(c_tv, m, nc, lanes)
    if value_rc is not None:
        row, col = _add(a_first, _rem(c_lane, m)), _add(b_first, _div(c_lane, m))
        return [_add(row, r) for r, _ in value_rc], [_add(col, c) for _, c in value_rc]
    idx = [_add(c_lane, _tv_part(c_tv, 1, v)) for v in range(nc)]
    return [_add(a_first, _rem(i, m)) for i in idx], [_add(b_first, _div(i, m)) for i in idx]


@functools.lru_cache(maxsize=None)
def _value_rows_cols(c_tv: tuple, m: int, nc: int, lanes: int):
    """Each value's (row, column) in C when no lane's part carries into another row or
    column as the value's part is added (so the lane's row and column are computed once
    and each value adds constants: true of every table's layout); else None."""
    def row_col(i: int) -> tuple:
        return i % m, i // m
    value_rc = [row_col(_tv_part(c_tv, 1, v)) for v in range(nc)]
    for x in range(lanes):
        part = _tv_part(c_tv, 0, x)
        lr, lc = row_col(part)
        for v, (vr, vc) in enumerate(value_rc):
            if row_col(part + _tv_part(c_tv, 1, v)) != (lr + vr, lc + vc):
                return None
    return tuple(value_rc)


def _scatter(spec, scratch, frag: TensorView, counts: tuple, tv: tuple, lane_first,
             size: int) -> None:
    """Value ``v`` of atom ``(x, k)`` of the lane's fragment, as the instruction sees it,
    to ``scratch[lane_first + (x * rk + k) * size + tv((0, v))]``: one runtime loop over
    every value of every atom, its body traced once."""
    values, rest, rk = counts
    with _runtime_range(values * rest * rk) as i:
        v, atom = _rem(i, values), _div(i, values)
        val = _atom_values(frag, _div(atom, rk), _rem(atom, rk)).get(v)
        at = _add(_add(lane_first, _mul(atom, size)), _tv_part(tv, 1, v))
        memref.store(_operand(spec, val).v, scratch.mem, [to_index(at)])


# -- index arithmetic: non-negative ``index`` values or Python ints (folded) ---------------

@contextmanager
def _runtime_range(count: int):
    """Yields ``0`` when ``count`` is 1 (no loop), else the induction variable of an
    ``scf.for`` over ``0 .. count`` whose body the block emits."""
    if count == 1:
        yield 0
        return
    loop = scf.ForOp(_ci(0), _ci(count), _ci(1))
    with ir.InsertionPoint(loop.body):
        yield loop.induction_variable
        scf.YieldOp([])


def _ci(k: int) -> ir.Value:
    """The index constant ``k``, made once per kernel at its entry (a call with its
    loops would otherwise trace dozens of copies of the same few constants)."""
    ctx = context.current()
    cache = ctx.extra.setdefault("mma_index_constants", {})
    if k not in cache:
        with ir.InsertionPoint.at_block_begin(ctx.func_op.regions[0].blocks[0]):
            cache[k] = arith.constant(ir.IndexType.get(), k)
    return cache[k]


def _add(i, k):
    if isinstance(i, int) and isinstance(k, int):
        return i + k
    if isinstance(i, int):
        i, k = k, i
    if isinstance(k, int):
        return arith.addi(i, _ci(k)) if k else i
    return arith.addi(i, k)


def _mul(i, k: int):
    if isinstance(i, int):
        return i * k
    return i if k == 1 else _ci(0) if k == 0 else arith.muli(i, _ci(k))


def _div(i, k: int):
    if isinstance(i, int):
        return i // k
    return i if k == 1 else arith.divui(i, _ci(k))


def _rem(i, k: int):
    if isinstance(i, int):
        return i % k
    return 0 if k == 1 else arith.remui(i, _ci(k))


def _mode(shape, stride, x):
    """The offset of the 1-D coordinate ``x`` (< the mode's size) of a static mode:
    ``sum((x // before) % size * stride)`` over its leaves, colexicographically."""
    leaves = [(s, d) for s, d in zip(la._flatten(shape), la._flatten(stride))]
    out, before = 0, 1
    for j, (size, step) in enumerate(leaves):
        if size != 1 and step != 0:
            part = _div(x, before)
            if j < len(leaves) - 1:         # the last leaf's coordinate is < its size
                part = _rem(part, size)
            out = _add(out, _mul(part, step))
        before *= size
    return out


def _tv_part(tv: tuple, mode: int, x):
    """The lane (``mode`` 0) or value (1) part of a TV layout ``(shape, stride)``."""
    return _mode(tv[0][mode], tv[1][mode], x)


class _atom_values:
    """The values of atom ``(x, y)`` of a ``(values, x, y)`` or rank-1 fragment, ``x``
    and ``y`` ints or index values: the atom's offset is computed once; with a static
    layout the value ``v`` is at a constant past it (else the view's general path)."""

    def __init__(self, frag: TensorView, x, y):
        self.frag, self.x, self.y = frag, x, y
        layout = frag.layout
        self.static = frag.memory.remap is None and all(
            isinstance(e, int) for e in la._flatten(layout.shape) + la._flatten(layout.stride))
        if not self.static:
            return
        off = frag.offset if isinstance(frag.offset, int) else to_index(frag.offset)
        if la.rank(layout) == 3:
            for j, coord in ((1, x), (2, y)):
                off = _add(off, _mode(layout.shape[j], layout.stride[j], coord))
            self.value_mode = (layout.shape[0], layout.stride[0])
        else:
            self.value_mode = (layout.shape, layout.stride)
        self.base = off

    def _offset(self, v):
        return to_index(_add(self.base, _mode(*self.value_mode, v)))

    def _coord(self, v):
        return _element(self.frag, *(x if isinstance(x, int) else Value(x, dt.Index)
                                     for x in (v, self.x, self.y)))

    def get(self, v) -> Value:
        if self.static:
            return self.frag.memory.load(self._offset(v))
        return self.frag[self._coord(v)]

    def set(self, v, val: Value) -> None:
        if self.static:
            self.frag.memory.store(self._offset(v), val)
        else:
            self.frag[self._coord(v)] = val


def _k_loop(spec, scratch, rk: int, runs: list, accs: list) -> list:
    """``acc[v] = fma(A[v, t], B[v, t], acc[v])`` for ``t`` in ``0 .. rk * K``: one
    ``scf.for`` whatever ``rk * K`` (an unrolled chain is 5 ops per product). Each run's
    accumulators are one vector (``accs[i]``, a scalar for a run of 1): a vector load
    of its A rows, its one B value broadcast, an elementwise fma (the same fma per
    accumulator, so the same bits). Integer accumulators: ``acc + A * B`` in i32,
    wrapping as the instruction's adders. Returns the runs' new accumulators."""
    integer = spec.acc_dtype == "i32"
    elem = _ACC[spec.acc_dtype].mlir_type()
    loop = scf.ForOp(_ci(0), _ci(rk * spec.k), _ci(1), accs)
    with ir.InsertionPoint(loop.body):
        t = loop.induction_variable
        tm = arith.muli(t, _ci(spec.m))
        tn = tm if spec.n == spec.m else arith.muli(t, _ci(spec.n))
        b_values, sums = {}, []
        for r, s in zip(runs, loop.inner_iter_args):
            at = arith.addi(r.a, tm)
            if r.length == 1:
                x = memref.load(scratch.mem, [at])
            else:
                x = vector.load(ir.VectorType.get([r.length], elem), scratch.mem, [at])
            key = (r.b, r.length)
            if key not in b_values:      # runs of one column share its B value
                y = b_values.get(r.b)
                if y is None:
                    y = b_values[r.b] = memref.load(scratch.mem, [arith.addi(r.b, tn)])
                b_values[key] = y if r.length == 1 else \
                    vector.broadcast(ir.VectorType.get([r.length], elem), y)
            y = b_values[key]
            sums.append(arith.addi(s, arith.muli(x, y)) if integer else mmath.fma(x, y, s))
        scf.YieldOp(sums)
    return list(loop.results)


def _operand(spec, v: Value) -> Value:
    """An input as the instruction sees it: rounded to its type, then exact in f32 (in
    i32 for integer inputs: int8 sign-extended)."""
    ab = _ELEM[spec.ab_dtype]
    x = cast(cast(v, ab), _ACC[spec.acc_dtype])
    if spec.ab_dtype == "tf32":   # tf32 keeps 10 mantissa bits
        i32 = ir.IntegerType.get_signless(32)
        bits = arith.bitcast(i32, x.v)
        bits = arith.andi(bits, arith.constant(i32, -(1 << 13)))
        x = Value(arith.bitcast(ir.F32Type.get(), bits), dt.Float32)
    return x


def _next_scratch(count: int, dtype):
    """The scratch of the next emulated MMA call, and the trailing barrier of the one
    before dropped where that is safe.

    A call writes its scratch, a barrier, reads it, a barrier (so that no lane writes
    the next call's values while another still reads). When the call before was made
    in the same block (straight-line code, nothing between them can branch back) this
    call writes the other of two scratch arrays: its own first barrier orders the
    previous call's reads before anything writes that array again, so the previous
    call's trailing barrier is removed (a dense run of N MFMAs has N + 1 barriers, not
    2N: each is a thread-loop split on the CPU)."""
    ctx = context.current()
    prev = ctx.block_state.pop("mma_last_call", None)
    block = ir.InsertionPoint.current.block
    parity = 0
    if prev is not None and prev[0] == block:
        _, barrier, (prev_count, prev_dtype, prev_parity), _ = prev
        if (prev_count, prev_dtype) == (count, dtype.name):
            parity = 1 - prev_parity
        barrier.erase()
    ctx.block_state["mma_next_key"] = (count, dtype.name, parity)
    return _scratch_array(count, dtype, parity)


def _wave_barrier(lanes: int) -> ir.Operation:
    """A barrier of the exchange of one wave's (``lanes`` threads') values through their
    own scratch region: a block barrier on the CPU, marked so that the CPU pass lowers
    it, like a warp collective, under an ``if`` that whole waves take or skip (an MFMA
    in ``if wave_id == 0:``, legal on the GPU, where the wave's registers are the
    exchange), and refuses it under one that splits a wave."""
    barrier = gpu.BarrierOp().operation
    barrier.attributes[WAVE_EXCHANGE_ATTR] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(32), lanes)
    return barrier


def _trailing_barrier(lanes: int) -> None:
    """The barrier after a call's reads of its scratch (:func:`_next_scratch` or
    :func:`_join_group` may remove it when the next call comes)."""
    ctx = context.current()
    barrier = _wave_barrier(lanes)
    ctx.block_state["mma_last_call"] = (ir.InsertionPoint.current.block, barrier,
                                  ctx.block_state.pop("mma_next_key"),
                                  ctx.block_state.pop("mma_group", None))


#: Bytes of MMA scratch a kernel's grouped raw calls may use (both sets of arrays): each
#: call of a group writes its own array (32 KiB for a 64-lane 32x32x8 MFMA, sized for
#: any block), which the CPU allocates with the block's shared memory.
GROUP_SCRATCH_BYTES = 256 * 1024


def _join_group(count: int, dtype, operands: list):
    """``(scratch, barrier)`` when this raw MFMA call can store its operands before the
    first barrier of the group of calls just before it, else None.

    A group is a run of raw calls in one block whose operands exist before the first
    call's barrier: each stores its operands to its own scratch array before that one
    barrier, then each reads its array after it, in order (accumulator chains stay in
    order: only the stores move). The ops that unpacked the operands since that barrier
    (pure: extracts, bitcasts, shifts) move before it; an operand made otherwise (a load)
    ends the group. The next group uses the other set of arrays, as :func:`_next_scratch`
    alternates: its barrier orders this group's reads before any write of them again."""
    ctx = context.current()
    prev = ctx.block_state.get("mma_last_call")
    if prev is None or prev[3] is None or prev[0] != ir.InsertionPoint.current.block:
        return None
    _, trailing, (prev_count, prev_dtype, parity), (barrier, n) = prev
    slots = max(1, GROUP_SCRATCH_BYTES // (2 * count * dtype.bits // 8))
    if (prev_count, prev_dtype) != (count, dtype.name) or n >= slots:
        return None
    moves = _movable_before(barrier, operands)
    if moves is None:
        return None
    for op in moves:
        op.move_before(barrier)
    trailing.erase()
    ctx.block_state.pop("mma_last_call")
    ctx.block_state["mma_next_key"] = (count, dtype.name, parity)
    ctx.block_state["mma_group"] = (barrier, n + 1)
    return _scratch_array(count, dtype, parity, n), barrier


#: Ops an operand may be made by after a group's barrier and still move before it.
_MOVABLE = ("arith.", "vector.extract", "vector.bitcast", "vector.from_elements",
            "vector.shuffle", "vector.broadcast", "vector.insert")
_NOT_MOVABLE = ("vector.extract_strided_slice",)


def _movable_before(barrier, operands: list):
    """The ops (in block order) that make ``operands`` after ``barrier`` in its block, if
    all are pure ops without regions whose own operands exist before it; else None."""
    block, found, todo = barrier.block, {}, list(operands)
    while todo:
        v = todo.pop()
        if not isinstance(v, ir.OpResult):
            continue                    # a block argument: defined before every op
        op = v.owner.operation
        if op.block != block or op.is_before_in_block(barrier) or op in found.values():
            continue                    # an enclosing block's value, or made before
        if not op.name.startswith(_MOVABLE) or op.name in _NOT_MOVABLE or \
                len(op.regions) or op.name in ("arith.divsi", "arith.divui", "arith.remsi",
                                               "arith.remui", "arith.ceildivsi",
                                               "arith.floordivsi", "arith.ceildivui"):
            return None
        found[len(found)] = op
        todo.extend(op.operands)
    return sorted(found.values(), key=functools.cmp_to_key(
        lambda x, y: -1 if x.is_before_in_block(y) else 1))


def _scratch(count: int, dtype=dt.Float32):
    """Block-shared MMA scratch for another emulation (wgmma): it may share the array of
    an emulated MMA call, so that call keeps its trailing barrier."""
    context.current().block_state.pop("mma_last_call", None)
    return _scratch_array(count, dtype, 0)


def _scratch_array(count: int, dtype, parity: int, slot: int = 0):
    ctx = context.current()
    cache = ctx.extra.setdefault("mma_scratch", {})
    hit = cache.get((count, dtype.name, parity, slot))
    if hit is None:
        hit = cache[(count, dtype.name, parity, slot)] = implementation.ops().shared_array(
            (count,), dtype)
        # flydsl's own scratch (a '.' name): the memory profiler and reports skip it,
        # as the GPU's register exchange has no shared traffic
        implementation.ops().name_shared_array(hit, ".mma_scratch")
    return hit
