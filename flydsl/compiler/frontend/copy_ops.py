"""``fx.copy``: copy atoms executed on views, one vector access per atom where legal.

A copy of ``n`` elements with an atom of ``bits`` runs ``n / (bits / element bits)``
atom calls; call ``j`` moves elements ``j*V .. j*V+V-1`` (in the views' column-major
order) and is guarded by ``pred[j]`` when a predicate is given.

What each call becomes:

* both sides contiguous for the call (the leading coalesced mode of each view has
  stride 1 and a size that is a multiple of V): one V-wide vector load and store. On
  GPUs a global or shared address that is not V*itemsize aligned at run time takes a
  per-element path instead (a misaligned vector access faults or reads the wrong
  bytes), so the vector instruction only ever runs aligned. The CPU loads unaligned
  vectors directly.
* otherwise: V scalar loads and stores (still exact).
* a buffer tensor (``fx.rocdl.make_buffer_tensor``): on gfx9 and the CPU a
  ``raw.ptr.buffer`` load/store through a resource covering the tensor (the hardware
  returns 0 past it and drops stores; the CPU's ``rocdl-buffers`` pass does the same
  without a branch); elsewhere the same semantics with bounds checks.
* ``fx.rocdl.BufferCopyLDS*`` (buffer tensor to shared memory) and
  ``fx.rocdl.BufferAtomic*`` (values to a buffer tensor): see :mod:`.rocdl_ops`.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, memref, scf

from ...errors import DSLTypeError
from ...expr import layout_algebra as la
from ...expr.atoms import copy_state
from . import context
from .values import Value, as_value, bitcast, to_index
from .tensors import storage_type
from .views import (Memory, TensorView, as_view, contiguous_runs, predicate_bit,
                    static_alignment, vector_load, vector_store, vector_type, when)
from .buffer_resources import GFX9_BUFFER_FLAGS  # noqa: F401  (re-exported)
from .buffer_resources import address as _address, guarded_load as _guarded_load
from .buffer_resources import guarded_store as _guarded_store
from .buffer_resources import in_records as _in_records, raw_buffer_access as _raw_buffer_access
from .buffer_resources import raw_load as _raw_load, raw_store as _raw_store
from .buffer_resources import checked_load as _checked_load, checked_store as _checked_store
from .buffer_resources import checked_vector_load as _checked_vector_load
from .buffer_resources import checked_vector_store as _checked_vector_store
from .buffer_resources import word_checked_access as _word_checked_access

def copy(atom, src, dst, pred=None, soffset=None) -> None:
    """``fx.copy(atom, src, dst, pred=None, soffset=None)``: see the module docstring.
    Without ``soffset=``, the atom's own (``atom.set_value("soffset", n)``) applies."""
    src, dst = as_view(src), as_view(dst)
    if soffset is None:
        soffset = copy_state(atom).get("soffset")
    if soffset is not None:
        src, dst = _with_soffset(atom, src, dst, soffset)
    if getattr(atom.op, "kind", "").startswith("nvvm_"):    # cp.async, ldmatrix
        from .nvvm_copy_ops import nvvm_copy
        nvvm_copy(atom, src, dst, pred)
        return
    src, dst = _widen_one_element(atom, src, dst)
    _check_views(atom, src, dst)
    n = src.size()
    width = max(atom.bits // src.dtype.bits, 1) if src.dtype.kind != "bool" else 1
    if n % width:
        raise DSLTypeError(f"fx.copy with {atom!r}: {n} elements is not a whole number of "
                           f"{width}-element atom calls")
    calls = n // width
    if pred is not None:
        pred = as_view(pred)
        if pred.size() != calls:
            raise DSLTypeError(f"fx.copy: the predicate has {pred.size()} elements but the "
                               f"copy makes {calls} atom calls of {width} elements "
                               f"(one predicate per call)")
    kind = getattr(atom.op, "kind", "")
    if kind in ("buffer_lds", "buffer_atomic"):
        _rocdl_copy(kind, atom, src, dst, pred, width, calls)
        return
    vectorizable = contiguous_runs(src.layout, width) and contiguous_runs(dst.layout, width) \
        and not _sub_byte(src.dtype) and not _sub_byte(dst.dtype)
    for j in range(calls):
        if pred is None:
            _copy_call(src, dst, j * width, width, vectorizable)
            continue
        with when(predicate_bit(pred[j])):
            _copy_call(src, dst, j * width, width, vectorizable)


def _with_soffset(atom, src: TensorView, dst: TensorView, soffset) -> tuple:
    """FlyDSL's buffer-copy atom state ``soffset``: an element offset (a kernel int)
    added to the buffer side(s) of the copy, as the ``soffset`` operand of the
    buffer instruction adds it."""
    out = []
    for v in (src, dst):
        buffered = v.memory is not None and v.memory.records is not None
        out.append(v.with_layout(v.layout, soffset) if buffered else v)
    if out[0] is src and out[1] is dst:
        raise DSLTypeError(f"fx.copy with {atom!r}: soffset= offsets a buffer tensor "
                           "(fx.rocdl.make_buffer_tensor), but neither side is one")
    return tuple(out)


def _rocdl_copy(kind: str, atom, src: TensorView, dst: TensorView, pred, width: int,
                calls: int) -> None:
    """``BufferCopyLDS*`` / ``BufferAtomic*`` calls (:mod:`.rocdl_ops`)."""
    from .rocdl_ops import buffer_atomic_copy, buffer_lds_copy
    if kind == "buffer_lds":
        if src.memory.records is None or src.memory.space != "global":
            raise DSLTypeError(f"fx.copy with {atom!r}: the source must be a buffer tensor "
                               "(fx.rocdl.make_buffer_tensor of a global tensor)")
        if dst.memory.space != "shared":
            raise DSLTypeError(f"fx.copy with {atom!r}: the destination must be shared "
                               f"memory (LDS), got a {dst.memory.label()}")
        if not contiguous_runs(src.layout, width):
            raise DSLTypeError(f"fx.copy with {atom!r}: each call's {width} source elements "
                               f"must be contiguous, got the layout {src.layout!r}")
    for j in range(calls):
        def one(j=j):
            if kind == "buffer_lds":
                buffer_lds_copy(atom, src, dst, j * width, width,
                                src.element_offset(j * width), dst.element_offset(j * width))
            else:
                buffer_atomic_copy(atom, src, dst, j * width, width)
        if pred is None:
            one()
            continue
        with when(predicate_bit(pred[j])):
            one()


def _widen_one_element(atom, src: TensorView, dst: TensorView) -> tuple:
    """FlyDSL's one-atom copy through a one-element view: ``fx.copy(BufferCopy128b of
    u8, fx.slice(flat_div, (None, i)), regs16)`` moves the atom's 16 contiguous elements
    from element ``i`` (the view names the address, the atom the width). A one-element
    side whose other side holds exactly one atom's bits becomes the atom's contiguous
    run there."""
    bits = getattr(atom, "bits", None)
    if not bits or src.memory is None or dst.memory is None:
        return src, dst
    views = [src, dst]
    whole = _whole_width_atom(atom)
    for i, (one, other) in enumerate(((src, dst), (dst, src))):
        w = bits // one.dtype.bits if one.dtype.bits else 0
        n_one, n_other = la.size(one.layout), la.size(other.layout)
        if not (isinstance(n_one, int) and isinstance(n_other, int)):
            continue
        fills = (n_other * other.dtype.bits == bits and n_other > 1) or (whole and n_other == 1)
        if n_one == 1 and w > 1 and bits % one.dtype.bits == 0 and fills:
            views[i] = one.with_layout(la.make_layout(w, 1))
    return tuple(views)


def _whole_width_atom(atom) -> bool:
    """``make_copy_atom(op, 128)``: one 128-bit element per call, whatever the views'
    element type (FlyDSL's ``BufferCopyLDS128b`` between fp8 views)."""
    d = getattr(atom, "dtype", None)
    return d is not None and d.bits == 128 and getattr(atom, "bits", None) == 128


def _check_views(atom, src: TensorView, dst: TensorView) -> None:
    for role, v in (("source", src), ("destination", dst)):
        if v.memory is None:
            raise DSLTypeError(f"fx.copy: the {role} is a coordinate tensor, which has no "
                               "memory")
    if src.dtype is not dst.dtype and not _bit_copy(atom, src, dst):
        raise DSLTypeError(f"fx.copy: source is {src.dtype.name} but destination is "
                           f"{dst.dtype.name}; convert through a fragment "
                           "(frag.store(other.load().to(dtype)))")
    if src.size() != dst.size():
        raise DSLTypeError(f"fx.copy: source has {src.size()} elements ({src.layout!r}), "
                           f"destination {dst.size()} ({dst.layout!r})")
    if atom.dtype is not None and atom.dtype.bits != src.dtype.bits \
            and not (_whole_width_atom(atom) and 128 % src.dtype.bits == 0):
        raise DSLTypeError(f"fx.copy: {atom!r} moves {atom.dtype.name} elements but the "
                           f"tensors hold {src.dtype.name}")


def _bit_copy(atom, src: TensorView, dst: TensorView) -> bool:
    """An atom of a bit width (``UniversalCopy32b``, ``BufferCopy32b``, ...) moves
    bits: elements of two dtypes of its element width copy unchanged (FlyDSL stores
    int32 results through a 32-bit copy of float32 registers)."""
    bits = getattr(atom.dtype, "bits", None)
    return (bits is not None and bits >= 8 and src.dtype.bits == dst.dtype.bits == bits
            and "bool" not in (src.dtype.kind, dst.dtype.kind))


def _sub_byte(dtype) -> bool:
    """Whether ``dtype``'s elements are narrower than a byte (Int4, the 4- and 6-bit
    floats). Their copies go element by element: a vector of them is bit-packed, which
    their memory is not in general (MLIR stores a 4-bit float in a byte of its own and
    packs two Int4 in a byte), and their size in bytes, 0, has no vector alignment."""
    return dtype.kind != "bool" and dtype.bits < 8


def _as_bits_of(raw: ir.Value, width: int, dtype) -> ir.Value:
    """``raw`` (a scalar or a vector of ``width``) reinterpreted as ``dtype`` elements."""
    if isinstance(raw.type, ir.VectorType):
        t = ir.VectorType.get(list(ir.VectorType(raw.type).shape), storage_type(dtype))
    else:
        t = storage_type(dtype)
    return raw if raw.type == t else arith.bitcast(t, raw)


def _copy_call(src: TensorView, dst: TensorView, first: int, width: int,
               vectorizable: bool) -> None:
    so, do = src.element_offset(first), dst.element_offset(first)
    if not vectorizable:
        _scalar_copy(src, dst, first, width)
        return
    buffered = src.memory.records is not None or dst.memory.records is not None
    if buffered and (_gfx9() or _raw_buffer_access(src.memory, dst.memory)):
        _buffer_copy(src.memory, so, dst.memory, do, width)
        return
    if buffered and _word_checked_access(src.memory, dst.memory):
        _checked_copy(src.memory, so, dst.memory, do, width)
        return
    if buffered:
        ok = arith.andi(_in_records(src.memory, so, width), _in_records(dst.memory, do, width))
        branch = scf.IfOp(ok, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _vector_copy(src.memory, so, dst.memory, do, width)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            _scalar_copy(src, dst, first, width)
            scf.YieldOp([])
        return
    _vector_copy(src.memory, so, dst.memory, do, width)


def _vector_copy(sm: Memory, so, dm: Memory, do, width: int) -> None:
    nbytes = width * sm.itemsize
    checks = [c for c in (_aligned(sm, so, nbytes), _aligned(dm, do, nbytes)) if c is not None]
    if not checks:
        vec = vector_load(sm, so, width, static_alignment(sm, so, nbytes))
        vector_store(dm, do, _as_bits_of(vec, width, dm.dtype), static_alignment(dm, do, nbytes))
        return
    aligned = checks[0] if len(checks) == 1 else arith.andi(checks[0], checks[1])
    branch = scf.IfOp(aligned, [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        vec = vector_load(sm, so, width, nbytes)
        vector_store(dm, do, _as_bits_of(vec, width, dm.dtype), nbytes)
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        for t in range(width):
            dm.store(_plus(do, t), _retyped(sm.load(_plus(so, t)), dm.dtype))
        scf.YieldOp([])


def _aligned(mem: Memory, offset, nbytes: int):
    """An i1 "this access is aligned" for GPU global/shared memory, or None where no
    check is needed (registers, host backends: unaligned vectors are legal there)."""
    if mem.space == "register" or not _on_gpu():
        return None
    idx_t = ir.IndexType.get()
    low = arith.andi(_address(mem, offset), arith.constant(idx_t, nbytes - 1))
    return arith.cmpi(arith.CmpIPredicate.eq, low, arith.constant(idx_t, 0))


def _checked_copy(sm: Memory, so, dm: Memory, do, width: int) -> None:
    """A buffer copy call with the raw instruction's per-word range check by memref
    accesses (the CPU's memory-profiled build: see
    :func:`.buffer_resources.word_checked_access`): vectors where every word lies inside,
    as the instruction accesses memory, else element by element."""
    if width == 1:
        v = _checked_load(sm, so, 1)[0] if sm.records is not None else sm.load(so)
        v = _retyped(v, dm.dtype)
        if dm.records is not None:
            _checked_store(dm, do, [v])
        else:
            dm.store(do, v)
        return
    if sm.records is not None:
        vec = _checked_vector_load(sm, so, width)
    else:
        vec = vector_load(sm, so, width, static_alignment(sm, so, width * sm.itemsize))
    vec = _as_bits_of(vec, width, dm.dtype)
    if dm.records is not None:
        _checked_vector_store(dm, do, vec)
    else:
        vector_store(dm, do, vec, static_alignment(dm, do, width * dm.itemsize))


def _scalar_copy(src: TensorView, dst: TensorView, first: int, width: int) -> None:
    for t in range(first, first + width):
        so, do = src.element_offset(t), dst.element_offset(t)
        value = _guarded_load(src.memory, so)
        _guarded_store(dst.memory, do, _retyped(value, dst.dtype))


def _retyped(value: Value, dtype) -> Value:
    """A loaded element as ``dtype`` (the same bits; see :func:`_bit_copy`)."""
    return value if value.dtype is dtype else bitcast(value, dtype)


def _plus(offset, t: int):
    return offset + t if t else offset


def _on_gpu() -> bool:
    return context.current().target.backend in ("cuda", "rocm")


def _gfx9() -> bool:
    target = context.current().target
    return target.backend == "rocm" and target.arch.startswith("gfx9")


# -- AMD buffer resources ------------------------------------------------------------

def _buffer_copy(sm: Memory, so, dm: Memory, do, width: int) -> None:
    # one element is a scalar access (LLVM cannot scalarize a <1 x T> buffer load)
    vtype = vector_type(width, sm.dtype) if width > 1 else storage_type(sm.dtype)
    if sm.records is not None:
        vec = _raw_load(sm, so, vtype)
    elif width == 1:      # through a swizzled view's remap, as every other access
        vec = memref.load(sm.mem, [to_index(sm.physical(so))])
    else:
        vec = vector_load(sm, so, width, static_alignment(sm, so, width * sm.itemsize))
    if dm.records is not None:
        _raw_store(_as_bits_of(vec, width, dm.dtype), dm, do)
    elif width == 1:
        memref.store(_as_bits_of(vec, 1, dm.dtype), dm.mem, [to_index(dm.physical(do))])
    else:
        vector_store(dm, do, _as_bits_of(vec, width, dm.dtype),
                     static_alignment(dm, do, width * dm.itemsize))
