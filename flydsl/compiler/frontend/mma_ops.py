"""``fx.gemm``: MMA atoms on register fragments, per target.

* **CUDA** (sm_80+): ``nvvm.mma.sync`` (``mma.sync.aligned.m16n8k16.row.col...``).
* **ROCm**: ``rocdl.mfma.*`` on gfx90a/gfx942/gfx950, ``rocdl.wmma.*`` on gfx11/gfx12.
* **CPU** (and other host backends): the instruction is executed with the hardware's
  per-lane fragment layouts (``flydsl.expr.mma_layouts``): every lane writes the A and
  B values it holds to their (row, k) places in block-shared scratch, a barrier, then
  every lane computes the accumulators it holds (``fma`` over k in order), and a
  barrier before the scratch is reused. A lane that holds the wrong values gives the
  wrong answer on the CPU exactly as on the GPU.

An atom the target does not have is an error naming the arches that have it.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, math as mmath, nvvm, rocdl, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from ...expr import layout_algebra as la
from . import context
from .values import Value, cast
from .views import TensorView, as_view, when

#: Largest CPU block: the scratch has room for every lane group of one.
MAX_BLOCK_THREADS = 1024


def gemm(atom, d, a, b, c) -> None:
    """``fx.gemm(atom, d, a, b, c)``: ``d = a @ b.T + c`` over fragments of shapes
    ``(values, m, k)``, ``(values, n, k)`` and ``(values, m, n)``."""
    d, a, b, c = (_fragment(x, name) for x, name in ((d, "d"), (a, "a"), (b, "b"), (c, "c")))
    spec = atom.spec
    _check_target(atom, spec)
    rm, rk = _rest(a, "a", spec.a_tv)
    rn, rk_b = _rest(b, "b", spec.b_tv)
    rm_c, rn_c = _rest(c, "c", spec.c_tv)
    if rk != rk_b or (rm, rn) != (rm_c, rn_c) or _rest(d, "d", spec.c_tv) != (rm, rn):
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


def _rest(frag: TensorView, name: str, tv) -> tuple:
    """``(rest_x, rest_y)`` of a ``(values, x, y)`` fragment (a rank-1 one is one atom)."""
    values = la.size(la.make_layout(*tv)[1])
    shape = frag.shape
    if la.rank(frag.layout) == 1:
        rest = (1, 1)
    elif la.rank(frag.layout) == 3:
        rest = (int(la.size(shape[1])), int(la.size(shape[2])))
    else:
        raise DSLTypeError(f"fx.gemm: {name} has shape {shape}; want (values, x, y)")
    if la.size(shape[0]) != values if la.rank(frag.layout) == 3 else la.size(shape) != values:
        raise DSLTypeError(f"fx.gemm: {name} holds {la.size(shape[0])} values per atom, the "
                           f"atom needs {values}")
    return rest


def _element(frag: TensorView, v: int, x: int, y: int):
    if la.rank(frag.layout) == 1:
        return (v,)
    return (v, x, y)


def _values(frag: TensorView, count: int, x: int, y: int) -> list:
    return [frag[_element(frag, v, x, y) if la.rank(frag.layout) == 3 else v]
            for v in range(count)]


def _store(frag: TensorView, vals: list, x: int, y: int) -> None:
    for v, val in enumerate(vals):
        frag[_element(frag, v, x, y) if la.rank(frag.layout) == 3 else v] = val


def _counts(spec) -> tuple:
    return tuple(int(la.size(la.make_layout(*tv)[1])) for tv in (spec.a_tv, spec.b_tv, spec.c_tv))


# -- which targets have which atoms ------------------------------------------------------

def _check_target(atom, spec) -> None:
    target = context.current().target
    if target.backend not in ("cuda", "rocm"):
        return
    if target.arch in spec.arches or _newer_sm(target.arch, spec):
        return
    raise DSLTypeError(f"{atom!r} ({spec.family}) is not available on {target.backend} "
                       f"{target.arch}; it exists on {', '.join(spec.arches)}")


def _newer_sm(arch: str, spec) -> bool:
    """mma.sync exists on every sm_80 and later."""
    if spec.family != "mma_sync" or not arch.startswith("sm_"):
        return False
    digits = "".join(ch for ch in arch[3:] if ch.isdigit())
    return bool(digits) and int(digits) >= 80


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
    if spec.family == "mfma":
        return _mfma(spec, a_vals, b_vals, c_vals)
    return _wmma(spec, a_vals, b_vals, c_vals)


_ELEM = {"f32": dt.Float32, "f16": dt.Float16, "bf16": dt.BFloat16, "tf32": dt.Float32}


def _pack(vals: list, regs: tuple, as_int: bool = False) -> list:
    """Per-lane values as instruction operands: ``regs`` = (operands, elements each, type)."""
    count, per, _ = regs
    out = []
    for r in range(count):
        chunk = [v.v for v in vals[r * per:(r + 1) * per]]
        if per == 1:
            out.append(chunk[0])
            continue
        vec = vector.from_elements(ir.VectorType.get([per], chunk[0].type), chunk)
        if as_int:
            bits = per * ir.FloatType(chunk[0].type).width if not isinstance(
                chunk[0].type, ir.IntegerType) else per * ir.IntegerType(chunk[0].type).width
            vec = vector.bitcast(ir.VectorType.get([1], ir.IntegerType.get_signless(bits)), vec)
            vec = vector.extract(vec, [], [0])
        out.append(vec)
    return out


def _unpack_vector(vec: ir.Value, n: int, dtype) -> list:
    return [Value(vector.extract(vec, [], [i]), dtype) for i in range(n)]


def _mfma(spec, a_vals, b_vals, c_vals) -> list:
    ab = _ELEM[spec.ab_dtype]
    a_in = [cast(v, ab) for v in a_vals]
    b_in = [cast(v, ab) for v in b_vals]
    if spec.ab_dtype == "bf16":     # the _1k forms take bf16 bits as i16 vectors
        a_in = [_bits16(v) for v in a_in]
        b_in = [_bits16(v) for v in b_in]
    a_op = _pack(a_in, spec.a_regs)[0]
    b_op = _pack(b_in, spec.b_regs)[0]
    f32 = ir.F32Type.get()
    ctype = ir.VectorType.get([len(c_vals)], f32)
    c_op = vector.from_elements(ctype, [cast(v, dt.Float32).v for v in c_vals])
    fn = getattr(rocdl, spec.intrinsic.replace("llvm.amdgcn.", "").replace(".", "_"))
    zero = arith.constant(ir.IntegerType.get_signless(32), 0)
    out = fn(ctype, [a_op, b_op, c_op, zero, zero, zero])
    return _unpack_vector(out, len(c_vals), dt.Float32)


def _bits16(v: Value) -> Value:
    return Value(arith.bitcast(ir.IntegerType.get_signless(16), v.v), dt.Int16)


def _wmma(spec, a_vals, b_vals, c_vals) -> list:
    ab = _ELEM[spec.ab_dtype]
    a_op = _pack([cast(v, ab) for v in a_vals], (1, len(a_vals), spec.ab_dtype))[0]
    b_op = _pack([cast(v, ab) for v in b_vals], (1, len(b_vals), spec.ab_dtype))[0]
    ctype = ir.VectorType.get([len(c_vals)], ir.F32Type.get())
    c_op = vector.from_elements(ctype, [cast(v, dt.Float32).v for v in c_vals])
    name = "wmma_f32_16x16x16_f16" if spec.ab_dtype == "f16" else "wmma_f32_16x16x16_bf16"
    if spec.ab_dtype == "bf16":
        a_op = _as_i16_vector(a_op)
        b_op = _as_i16_vector(b_op)
    out = getattr(rocdl, name)(ctype, a_op, b_op, c_op)
    return _unpack_vector(out, len(c_vals), dt.Float32)


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
    lanes = spec.lanes
    mk, nk = spec.m * spec.k, spec.n * spec.k
    per_group = rk * (rm * mk + rn * nk)
    owner = a.owner
    groups = (owner[0].num_threads if owner else MAX_BLOCK_THREADS) // lanes
    scratch = _scratch(groups * per_group)
    tid = _linear_thread_id()
    lane = tid % lanes
    base = (tid // lanes) * per_group
    member = tid < groups * lanes     # threads outside the tiled MMA take no part
    a_tv, b_tv, c_tv = (la.make_layout(*tv) for tv in (spec.a_tv, spec.b_tv, spec.c_tv))
    na, nb, nc = _counts(spec)

    def a_slot(m, k):
        return base + (k * rm + m) * mk

    def b_slot(n, k):
        return base + rk * rm * mk + (k * rn + n) * nk

    with when(member):
        for k in range(rk):
            for m in range(rm):
                vals = _values(a, na, m, k)
                for v in range(na):
                    scratch[a_slot(m, k) + a_tv((lane, v))] = _operand(spec, vals[v])
            for n in range(rn):
                vals = _values(b, nb, n, k)
                for v in range(nb):
                    scratch[b_slot(n, k) + b_tv((lane, v))] = _operand(spec, vals[v])
    gpu.barrier()
    with when(member):
        for m in range(rm):
            for n in range(rn):
                acc = [cast(x, dt.Float32) for x in _values(c, nc, m, n)]
                out = []
                for v in range(nc):
                    idx = c_tv((lane, v))
                    row, col = idx % spec.m, idx // spec.m
                    s = acc[v]
                    for k in range(rk):
                        for kk in range(spec.k):
                            s = _fma(scratch[a_slot(m, k) + row + spec.m * kk],
                                     scratch[b_slot(n, k) + col + spec.n * kk], s)
                    out.append(s)
                _store(d, [cast(x, d.dtype) for x in out], m, n)
    gpu.barrier()


def _operand(spec, v: Value) -> Value:
    """An input as the instruction sees it: rounded to its type, then exact in f32."""
    ab = _ELEM[spec.ab_dtype]
    x = cast(cast(v, ab), dt.Float32)
    if spec.ab_dtype == "tf32":   # tf32 keeps 10 mantissa bits
        i32 = ir.IntegerType.get_signless(32)
        bits = arith.bitcast(i32, x.v)
        bits = arith.andi(bits, arith.constant(i32, -(1 << 13)))
        x = Value(arith.bitcast(ir.F32Type.get(), bits), dt.Float32)
    return x


def _fma(a: Value, b: Value, c: Value) -> Value:
    return Value(mmath.fma(a.v, b.v, c.v), dt.Float32)


def _scratch(count: int):
    ctx = context.current()
    cache = ctx.extra.setdefault("mma_scratch", {})
    hit = cache.get(count)
    if hit is None:
        hit = cache[count] = implementation.ops().shared_array((count,), dt.Float32)
    return hit


def _linear_thread_id() -> Value:
    index = implementation.ops().launch_index
    x, y, z = (index("thread_idx", a) for a in "xyz")
    bx, by = index("block_dim", "x"), index("block_dim", "y")
    return x + bx * (y + by * z)

