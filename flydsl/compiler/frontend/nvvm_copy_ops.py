"""NVIDIA copy atoms (``fx.nvvm.CpAsync``, ``LdMatrix``, ``StMatrix``) for ``fx.copy``, and
``cp.async`` group commit/wait, per target.

* **cp.async** (global -> shared, 4/8/16 bytes per call): on CUDA one
  ``cp.async.{ca,cg}.shared.global [dst], [src], bytes[, src_size]`` per call; a
  predicated-off call is the same instruction with ``src_size = 0``, which reads nothing
  and zero-fills the destination (as CUTLASS's ``SM80_CP_ASYNC_*_ZFILL``). On the CPU the
  copy (or the zero fill) happens at once: a copy that completes before its
  ``cp.async.wait_group`` is one of the orders PTX allows, so every program that is
  correct on the GPU (reads the destination only after a covering wait and a barrier)
  computes the same on the CPU. ``commit_group``/``wait_group`` are no-ops there (in
  race-check builds, marks: the checker keeps the writes pending until the wait,
  :mod:`.async_marks`).
* **ldmatrix** (shared -> registers, ``m8n8.x{1,2,4}{.trans}.b16``): a warp-collective.
  Lane ``i`` supplies the address of row ``i % 8`` of matrix ``i // 8`` (its ``src``
  view: 8 contiguous 16-bit elements; lanes past ``8 * num`` are ignored) and receives
  2 elements of each matrix ``j`` in ``dst[2j], dst[2j+1]``: row ``lane // 4``, columns
  ``2 * (lane % 4) + {0, 1}`` (with ``.trans``: column ``lane // 4``, rows
  ``2 * (lane % 4) + {0, 1}``). On CUDA the instruction; on the CPU the same exchange
  with warp shuffles (:mod:`.warp_ops`): each lane reads the row address from the lane
  that supplies it, then its elements from shared memory.
* **stmatrix** (registers -> shared, ``m8n8.x{1,2,4}{.trans}.b16``, sm_90+): the inverse
  of ldmatrix (same lanes, same fragment order); on the CPU each lane writes its
  elements to the rows the supplying lanes address.
"""
from __future__ import annotations

import copy

import mlir.ir as ir
from mlir.dialects import arith, llvm, nvvm, scf, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from . import async_marks, context
from .buffer_resources import address
from .tensors import storage_type
from .values import Value, as_value, cast
from .views import (Memory, TensorView, as_view, contiguous_runs, predicate_bit, vector_load,
                    vector_store, vector_type)
from .warp_ops import lane_id, shuffle

__all__ = ["nvvm_copy", "cp_async_commit_group", "cp_async_wait_group", "physical_memory",
           "shared_ptr"]


def _target():
    return context.current().target


def _require_arch(what: str) -> None:
    """A located error where the target lacks the instruction ``what`` (cp.async:
    sm_80+, ldmatrix: sm_75+, stmatrix: sm_90+; none on ROCm)."""
    target = _target()
    if target.backend == "rocm":
        hint = " (global -> LDS: fx.rocdl.BufferCopyLDS*)" if what.startswith("cp.async") \
            else ""
        raise DSLTypeError(f"{what} is an NVIDIA instruction; {target.arch} has no "
                           f"equivalent{hint}")
    if target.backend == "cuda":
        arch = target.arch
        num = int("".join(ch for ch in arch.split("_")[-1] if ch.isdigit()) or 0)
        if what.startswith("stmatrix"):
            if num < 90:
                raise DSLTypeError(f"{what} needs sm_90 or later, not {arch}")
        elif num < 80 and not (what.startswith("ldmatrix") and num >= 75):
            raise DSLTypeError(f"{what} needs sm_80 or later (ldmatrix: sm_75), not {arch}")


def nvvm_copy(atom, src, dst, pred=None) -> None:
    """``fx.copy`` with an ``fx.nvvm`` copy atom (see the module docstring)."""
    src, dst = as_view(src), as_view(dst)
    kind = atom.op.kind
    if kind == "nvvm_cp_async":
        _cp_async(atom, src, dst, pred)
    elif kind in ("nvvm_ldmatrix", "nvvm_stmatrix"):
        if pred is not None:
            raise DSLTypeError(f"fx.copy with {atom!r}: {kind[5:]} is warp-collective and "
                               "takes no predicate")
        if kind == "nvvm_ldmatrix":
            _ldmatrix(atom, src, dst)
        else:
            _stmatrix(atom, src, dst)
    else:   # pragma: no cover - fx.nvvm makes only these kinds
        raise DSLTypeError(f"fx.copy: unknown NVIDIA copy atom {atom!r}")


# -- cp.async ------------------------------------------------------------------------

def _cp_async(atom, src: TensorView, dst: TensorView, pred) -> None:
    op = atom.op
    what = f"cp.async.{op.cache} ({atom!r})"
    _require_arch(what)
    for role, v, space in (("source", src, "global"), ("destination", dst, "shared")):
        if v.memory is None or v.memory.space != space:
            got = "a coordinate tensor" if v.memory is None else f"a {v.memory.label()}"
            raise DSLTypeError(f"fx.copy with {atom!r}: the {role} must be {space} memory, "
                               f"got {got}")
    if src.dtype is not dst.dtype:
        raise DSLTypeError(f"fx.copy with {atom!r}: source is {src.dtype.name} but "
                           f"destination is {dst.dtype.name}")
    if src.size() != dst.size():
        raise DSLTypeError(f"fx.copy with {atom!r}: source has {src.size()} elements, "
                           f"destination {dst.size()}")
    width = op.bits // src.dtype.bits
    if width < 1 or op.bits % src.dtype.bits:
        raise DSLTypeError(f"fx.copy with {atom!r}: {op.bits} bits is not a whole number "
                           f"of {src.dtype.name} elements")
    n = src.size()
    if n % width:
        raise DSLTypeError(f"fx.copy with {atom!r}: {n} elements is not a whole number of "
                           f"{width}-element calls")
    for role, v in (("source", src), ("destination", dst)):
        if not contiguous_runs(v.layout, width) or v.memory.run() < width:
            raise DSLTypeError(f"fx.copy with {atom!r}: each call's {width} {role} elements "
                               f"must be contiguous (cp.async moves {op.bits // 8} "
                               f"consecutive bytes), got the layout {v.layout!r}")
    calls = n // width
    if pred is not None:
        pred = as_view(pred)
        if pred.size() != calls:
            raise DSLTypeError(f"fx.copy: the predicate has {pred.size()} elements but the "
                               f"copy makes {calls} cp.async calls of {width} elements")
    gpu = _target().backend == "cuda"
    for j in range(calls):
        so, do = src.element_offset(j * width), dst.element_offset(j * width)
        ok = None if pred is None else predicate_bit(pred[j])
        if gpu:
            _cp_async_ptx(op, src.memory, so, dst.memory, do, ok)
        else:
            with async_marks.async_writes("cp.async"):
                _cp_async_emulated(src.memory, so, dst.memory, do, width, ok)


def _cp_async_ptx(op, sm: Memory, so, dm: Memory, do, ok) -> None:
    i64 = ir.IntegerType.get_signless(64)
    i32 = ir.IntegerType.get_signless(32)
    gptr = llvm.inttoptr(llvm.PointerType.get(1), arith.index_cast(i64, address(sm, so)))
    sptr = shared_ptr(dm, dm.physical(do))
    nbytes = op.bits // 8
    modifier = ir.Attribute.parse(f"#nvvm<load_cache_modifier {op.cache}>")
    size = ir.IntegerAttr.get(i32, nbytes)
    if ok is None:
        nvvm.CpAsyncOp(sptr, gptr, size, modifier)
        return
    # src-size 0: nothing is read and the destination's bytes are zero-filled
    cp_size = arith.select(ok, arith.constant(i32, nbytes), arith.constant(i32, 0))
    nvvm.CpAsyncOp(sptr, gptr, size, modifier, cpSize=cp_size)


def _cp_async_emulated(sm: Memory, so, dm: Memory, do, width: int, ok) -> None:
    """The copy at once, one vector of ``width`` elements (as the instruction moves
    them: the memory profiler sees one 4/8/16-byte access per lane)."""
    vtype = vector_type(width, dm.dtype)

    def copy():
        vector_store(dm, do, vector_load(sm, so, width, sm.itemsize), dm.itemsize)

    if ok is None:
        copy()
        return
    branch = scf.IfOp(ok, [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        copy()
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        zero = as_value(0, dm.dtype)
        raw = zero.v if zero.v.type == storage_type(dm.dtype) else \
            arith.bitcast(storage_type(dm.dtype), zero.v)
        vector_store(dm, do, vector.broadcast(vtype, raw), dm.itemsize)
        scf.YieldOp([])


def _plus(offset, t: int):
    return offset + t if t else offset


def cp_async_commit_group() -> None:
    """``cp.async.commit_group`` on CUDA; nothing elsewhere (the copies are done)."""
    _require_arch("cp.async.commit_group")
    if _target().backend == "cuda":
        nvvm.CpAsyncCommitGroupOp()
    else:
        async_marks.event("cp.async.commit")


def cp_async_wait_group(n: int) -> None:
    """``cp.async.wait_group n`` on CUDA; nothing elsewhere (the copies are done)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DSLTypeError(f"fx.nvvm.cp_async_wait_group(n): n must be a constant int >= 0, "
                           f"got {n!r}")
    _require_arch("cp.async.wait_group")
    if _target().backend == "cuda":
        nvvm.CpAsyncWaitGroupOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(32), n))
    else:
        async_marks.event("cp.async.wait", n)


# -- ldmatrix ------------------------------------------------------------------------

def _check_matrix(atom, name: str, smem: TensorView, regs: TensorView, role: str) -> None:
    """``smem``: this lane's 8-element row in shared memory; ``regs``: its fragment."""
    op = atom.op
    _require_arch(name)
    if smem.memory is None or smem.memory.space != "shared":
        raise DSLTypeError(f"fx.copy with {atom!r}: the {role} must be this lane's row in "
                           "shared memory (8 contiguous 16-bit elements)")
    other = "destination" if role == "source" else "source"
    if regs.memory is None or regs.memory.space != "register":
        raise DSLTypeError(f"fx.copy with {atom!r}: the {other} must be a register fragment")
    for what, v in ((role, smem), (other, regs)):
        if v.dtype.bits != 16:
            raise DSLTypeError(f"fx.copy with {atom!r}: {name.split('.')[0]} moves 16-bit "
                               f"elements, the {what} holds {v.dtype.name}")
    if smem.dtype is not regs.dtype:
        raise DSLTypeError(f"fx.copy with {atom!r}: the {role} is {smem.dtype.name} but the "
                           f"{other} is {regs.dtype.name}")
    if smem.size() != 8 or not contiguous_runs(smem.layout, 8) or smem.memory.run() < 8:
        raise DSLTypeError(f"fx.copy with {atom!r}: each lane's {role} is the row it "
                           f"addresses, 8 contiguous elements; got {smem.layout!r}")
    if regs.size() != 2 * op.num:
        raise DSLTypeError(f"fx.copy with {atom!r}: each lane holds {2 * op.num} elements, "
                           f"the {other} has {regs.size()}")


def _matrix_name(op, what: str) -> str:
    return f"{what}.m8n8.x{op.num}{'.trans' if op.trans else ''}.b16"


def _ldmatrix(atom, src: TensorView, dst: TensorView) -> None:
    op = atom.op
    _check_matrix(atom, _matrix_name(op, "ldmatrix"), src, dst, "source")
    row = src.memory.physical(src.element_offset(0))
    if _target().backend == "cuda":
        _ldmatrix_ptx(op, src.memory, row, dst)
    else:
        _ldmatrix_emulated(op, src.memory, row, dst)


def _stmatrix(atom, src: TensorView, dst: TensorView) -> None:
    op = atom.op
    _check_matrix(atom, _matrix_name(op, "stmatrix"), dst, src, "destination")
    row = dst.memory.physical(dst.element_offset(0))
    if _target().backend == "cuda":
        _stmatrix_ptx(op, dst.memory, row, src)
    else:
        _stmatrix_emulated(op, dst.memory, row, src)


def _matrix_attrs(op):
    layout = nvvm.MMALayout.col if op.trans else nvvm.MMALayout.row
    shape = ir.Attribute.parse("#nvvm.ld_st_matrix_shape<m = 8, n = 8>")
    elt = ir.Attribute.parse("#nvvm.ld_st_matrix_elt_type<b16>")
    return layout, shape, elt


def shared_ptr(sm: Memory, row) -> ir.Value:
    """An ``!llvm.ptr<3>`` to element ``row`` (physical) of shared ``sm``."""
    i64 = ir.IntegerType.get_signless(64)
    return llvm.inttoptr(llvm.PointerType.get(3), arith.index_cast(i64, address(sm, row)))


def _stmatrix_ptx(op, sm: Memory, row, src: TensorView) -> None:
    i32 = ir.IntegerType.get_signless(32)
    pair = ir.VectorType.get([2], storage_type(src.dtype))
    words = []
    for j in range(op.num):
        halves = [_storage_bits(src[2 * j + e]) for e in range(2)]
        vec = vector.bitcast(ir.VectorType.get([1], i32), vector.from_elements(pair, halves))
        words.append(vector.extract(vec, [], [0]))
    nvvm.StMatrixOp(shared_ptr(sm, row), words, *_matrix_attrs(op))


def _storage_bits(v: Value) -> ir.Value:
    raw = v.v
    want = storage_type(v.dtype)
    return raw if raw.type == want else arith.bitcast(want, raw)


def _stmatrix_emulated(op, sm: Memory, row, src: TensorView) -> None:
    """Each lane writes its elements to the rows the supplying lanes address. A
    barrier-free exchange: every element has exactly one writer."""
    lane = lane_id()
    mine = cast(as_value(row), dt.Int32)
    flat = physical_memory(sm)
    q, r = lane // 4, lane % 4
    for j in range(op.num):
        for e in range(2):
            if op.trans:
                base = shuffle(mine, 8 * j + 2 * r + e)
                flat.store(base + q, src[2 * j + e])
            else:
                base = shuffle(mine, 8 * j + q)
                flat.store(base + 2 * r + e, src[2 * j + e])


def _ldmatrix_ptx(op, sm: Memory, row, dst: TensorView) -> None:
    i32 = ir.IntegerType.get_signless(32)
    res = i32 if op.num == 1 else llvm.StructType.get_literal([i32] * op.num)
    out = nvvm.LdMatrixOp(res, shared_ptr(sm, row), op.num, *_matrix_attrs(op)).result
    elem = storage_type(dst.dtype)
    pair = ir.VectorType.get([2], elem)
    for j in range(op.num):
        word = out if op.num == 1 else llvm.extractvalue(i32, out, [j])
        halves = vector.bitcast(pair, vector.from_elements(ir.VectorType.get([1], i32), [word]))
        for e in range(2):
            raw = vector.extract(halves, [], [e])
            dst[2 * j + e] = Value(raw, dst.dtype) if elem == dst.dtype.mlir_type() \
                else Value(arith.bitcast(dst.dtype.mlir_type(), raw), dst.dtype)


def physical_memory(sm: Memory) -> Memory:
    """``sm`` addressed by physical offsets (its swizzle, if any, already applied)."""
    flat = copy.copy(sm)         # keeps what a subclass adds (a shared pool)
    flat.remap = None
    return flat


def _ldmatrix_emulated(op, sm: Memory, row, dst: TensorView) -> None:
    """Each lane reads the row addresses it needs from the lanes that supply them."""
    lane = lane_id()
    mine = cast(as_value(row), dt.Int32)
    flat = physical_memory(sm)
    q, r = lane // 4, lane % 4
    for j in range(op.num):
        for e in range(2):
            if op.trans:     # element (row 2r+e, column q) of matrix j
                base = shuffle(mine, 8 * j + 2 * r + e)
                value = flat.load(base + q)
            else:            # element (row q, column 2r+e) of matrix j
                base = shuffle(mine, 8 * j + q)
                value = flat.load(base + 2 * r + e)
            dst[2 * j + e] = value

