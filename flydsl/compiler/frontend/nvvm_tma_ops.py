"""Hopper TMA copies (``fx.nvvm.tma_load`` / ``tma_store``) and the bulk-async fences,
per target (the descriptor format: :mod:`flydsl.expr.nvvm_tma`).

* **CUDA**: one ``cp.async.bulk.tensor.<N>d`` instruction per call, the descriptor
  read from global memory through its generic address (inline PTX, as the waits of
  :mod:`.nvvm_hopper_ops`).
* **CPU**: the calling thread copies the box at once from flydsl's host record: nested
  loops over the box (runtime sizes), zero for elements outside the tensor (stores skip
  them), the shared-memory byte offset of element ``j`` being ``Swizzle<B,4,3>(j *
  element bytes)`` as on the hardware; a load then completes the box's bytes on the
  mbarrier. Commit/wait groups and proxy fences are no-ops (the copies are done).
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, scf

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from . import async_marks
from .buffer_resources import address
from .nvvm_copy_ops import physical_memory, shared_ptr
from .nvvm_hopper_ops import barrier_slot, inline_ptx, mbarrier_complete_tx, require_hopper
from .pointer_ops import PointerValue, inttoptr, ptr_load, ptr_store
from .tensors import storage_type
from .values import Value, as_value, cast
from .views import Memory, as_view

__all__ = ["tma_load", "tma_store", "bulk_commit_group", "bulk_wait_group",
           "fence_proxy_async", "shared_buffer"]


def _i64():
    return ir.IntegerType.get_signless(64)


def _i32():
    return ir.IntegerType.get_signless(32)


def _descriptor(fname: str, desc) -> tuple:
    """(memory, offset) of the 16 Int64 words of a descriptor tensor."""
    try:
        view = as_view(desc)
    except DSLTypeError:
        raise DSLTypeError(f"{fname}: the descriptor must be the tensor "
                           f"fx.nvvm.make_tma_descriptor returned, got {desc!r}") from None
    mem = view.memory
    if mem is None or mem.space != "global" or mem.dtype.bits != 64 or \
            mem.dtype.kind not in ("int", "uint"):
        raise DSLTypeError(f"{fname}: the descriptor must be the int64[16] global tensor "
                           "fx.nvvm.make_tma_descriptor returned")
    return mem, view.element_offset(0)


def shared_buffer(fname: str, buf, role: str) -> tuple:
    """(memory, physical offset of element 0) of the shared box buffer."""
    if isinstance(buf, PointerValue):
        if buf.is_raw or buf.space != "shared":
            raise DSLTypeError(f"{fname}: the {role} must be shared memory")
        return buf.memory, buf.memory.physical(buf.offset)
    view = as_view(buf)
    if view.memory is None or view.memory.space != "shared":
        got = "a coordinate tensor" if view.memory is None else f"a {view.memory.label()}"
        raise DSLTypeError(f"{fname}: the {role} must be shared memory, got {got}")
    return view.memory, view.memory.physical(view.element_offset(0))


def _coords(fname: str, coords) -> list:
    """The coordinates as i32 values, innermost (TMA's dimension 0) first."""
    if not isinstance(coords, (tuple, list)) or not 1 <= len(coords) <= 5:
        raise DSLTypeError(f"{fname}: coords must be a tuple of 1 to 5 coordinates (one per "
                           f"dimension of the tensor), got {coords!r}")
    out = []
    for c in coords:
        v = as_value(c, dt.Int32) if isinstance(c, int) and not isinstance(c, bool) else c
        if not isinstance(v, Value) or v.dtype.kind not in ("int", "uint"):
            raise DSLTypeError(f"{fname}: coordinates must be integers, got {c!r}")
        out.append(cast(v, dt.Int32).v)
    return out[::-1]


def _desc_address(mem: Memory, offset) -> ir.Value:
    return arith.index_cast(_i64(), address(mem, offset))


def _coord_list(n: int, first: int) -> str:
    return ", ".join(f"${first + k}" for k in range(n))


# -- loads and stores -------------------------------------------------------------------

def tma_load(desc, dst, bar, coords) -> None:
    fname = "fx.nvvm.tma_load"
    dmem, doff = _descriptor(fname, desc)
    smem, base = shared_buffer(fname, dst, "destination")
    bmem, bel = barrier_slot(fname, bar)
    cs = _coords(fname, coords)
    n = len(cs)
    if require_hopper(f"cp.async.bulk.tensor.{n}d"):
        text = (f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx"
                f"::bytes [$0], [$1, {{{_coord_list(n, 2)}}}], [${n + 2}];")
        inline_ptx(None, [shared_ptr(smem, base), _desc_address(dmem, doff), *cs,
                          shared_ptr(bmem, bel)], text, "r,l," + "r," * n + "r")
        return
    box = _HostBox(dmem, doff, n, smem)
    with async_marks.async_writes("tma", async_marks.tma_issue(bmem, bel)):
        box.copy(cs, smem, base, load=True)
    mbarrier_complete_tx(bmem, bel, box.bytes())


def tma_store(desc, src, coords) -> None:
    fname = "fx.nvvm.tma_store"
    dmem, doff = _descriptor(fname, desc)
    smem, base = shared_buffer(fname, src, "source")
    cs = _coords(fname, coords)
    n = len(cs)
    if require_hopper(f"cp.async.bulk.tensor.{n}d"):
        text = (f"cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group "
                f"[$0, {{{_coord_list(n, 1)}}}], [${n + 1}];")
        inline_ptx(None, [_desc_address(dmem, doff), *cs, shared_ptr(smem, base)], text,
                   "l," + "r," * n + "r")
        return
    _HostBox(dmem, doff, n, smem).copy(cs, smem, base, load=False)


def bulk_commit_group() -> None:
    if require_hopper("cp.async.bulk.commit_group"):
        inline_ptx(None, [], "cp.async.bulk.commit_group;", "")


def bulk_wait_group(n: int, read: bool) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DSLTypeError(f"fx.nvvm.tma_store_wait_group(n): n must be a constant int >= 0, "
                           f"got {n!r}")
    if require_hopper("cp.async.bulk.wait_group"):
        inline_ptx(None, [], f"cp.async.bulk.wait_group{'.read' if read else ''} {n};", "")


def fence_proxy_async() -> None:
    if require_hopper("fence.proxy.async"):
        inline_ptx(None, [], "fence.proxy.async.shared::cta;", "")


# -- the CPU's box copy -----------------------------------------------------------------

def _idx(v: ir.Value) -> ir.Value:
    return arith.index_cast(ir.IndexType.get(), v)


def _ci(v: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), v)


class _HostBox:
    """The box a host record describes (see ``flydsl.expr.nvvm_tma.HOST_LAYOUT``)."""

    def __init__(self, dmem: Memory, doff, rank: int, smem: Memory):
        word = lambda k: dmem.load(_plus(doff, k)).v                       # noqa: E731
        self.rank, self.dtype = rank, smem.dtype
        self.esize = smem.itemsize
        self.address = word(1)
        meta = word(2)
        self.swizzle_bits = arith.andi(arith.shrui(meta, _c64(16)), _c64(0xFF))
        self.dims = [word(3 + k) for k in range(rank)]
        self.strides = [_c64(self.esize)] + [word(8 + k) for k in range(rank - 1)]
        packed = word(12)
        self.boxes = [arith.andi(arith.shrui(packed, _c64(16 * k)), _c64(0xFFFF))
                      for k in range(min(rank, 4))]
        if rank == 5:
            self.boxes.append(word(13))

    def bytes(self) -> ir.Value:
        total = _c64(self.esize)
        for b in self.boxes:
            total = arith.muli(total, b)
        return total

    def _swizzled(self, j: ir.Value) -> ir.Value:
        """The shared element of box element ``j``: Swizzle<B,4,3> on its byte offset."""
        byte = arith.muli(j, _c64(self.esize))
        mask = arith.shli(arith.subi(arith.shli(_c64(1), self.swizzle_bits), _c64(1)),
                          _c64(4))
        moved = arith.xori(byte, arith.andi(arith.shrui(byte, _c64(3)), mask))
        return arith.divui(moved, _c64(self.esize))

    def copy(self, coords: list, smem: Memory, base, load: bool) -> None:
        """Loops over the box (outermost dimension first), each element moved at once."""
        flat = physical_memory(smem)
        coords64 = [arith.extsi(_i64(), c) for c in coords]

        def level(k: int, index: list) -> None:
            if k < 0:
                self._element(coords64, index, flat, base, load)
                return
            loop = scf.ForOp(_ci(0), _idx(self.boxes[k]), _ci(1))
            with ir.InsertionPoint(loop.body):
                level(k - 1, index + [(k, arith.index_cast(_i64(), loop.induction_variable))])
                scf.YieldOp([])

        level(self.rank - 1, [])

    def _element(self, coords64, index, flat: Memory, base, load: bool) -> None:
        b = dict(index)
        inside = None
        addr = self.address
        j = _c64(0)
        for k in reversed(range(self.rank)):        # j = row-major index in the box
            j = arith.addi(arith.muli(j, self.boxes[k]), b[k])
        for k in range(self.rank):
            g = arith.addi(coords64[k], b[k])
            ok = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, g, _c64(0)),
                            arith.cmpi(arith.CmpIPredicate.slt, g, self.dims[k]))
            inside = ok if inside is None else arith.andi(inside, ok)
            addr = arith.addi(addr, arith.muli(g, self.strides[k]))
        slot = _plus(base, Value(arith.trunci(_i32(), self._swizzled(j)), dt.Int32))
        # bits move as integers of the element's width (TMA copies bytes; fp8 has no
        # LLVM load type)
        word = {1: dt.Int8, 2: dt.Int16, 4: dt.Int32, 8: dt.Int64}[self.esize]
        elem = storage_type(self.dtype)
        if load:
            safe = arith.select(inside, addr, self.address)   # outside: read element 0
            # the descriptor's tensor is no kernel argument: its box is checked above
            raw = ptr_load(inttoptr(word, Value(safe, dt.Int64)), checked=False).v
            raw = arith.select(inside, raw, arith.constant(raw.type, 0))
            flat.store(slot, Value(raw if raw.type == elem else arith.bitcast(elem, raw),
                                   self.dtype))
            return
        branch = scf.IfOp(inside, [], has_else=False)
        with ir.InsertionPoint(branch.then_block):
            raw = flat.load(slot).v
            wtype = word.mlir_type()
            raw = raw if raw.type == wtype else arith.bitcast(wtype, raw)
            ptr_store(Value(raw, word), inttoptr(word, Value(addr, dt.Int64)), checked=False)
            scf.YieldOp([])


def _c64(v: int) -> ir.Value:
    return arith.constant(_i64(), v)


def _plus(offset, k):
    if isinstance(k, int) and k == 0:
        return offset
    if isinstance(offset, int) and offset == 0:
        return k
    return offset + k
