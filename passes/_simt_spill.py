"""How the SIMT-to-CPU pass (:mod:`.simt_to_cpu`) keeps a per-thread value in a
per-thread slot, for a later thread loop (a value used across a barrier) or the next
iteration of a barrier-containing loop.

A slot has one row per thread. Most values are stored as they are (``memref<?xT>``);
those that are no memref element type are stored as words:

* ``i1`` as ``i8``: memrefs of ``i1`` have no LLVM lowering;
* ``!llvm.ptr<N>`` as ``i64`` (``llvm.ptrtoint``, and ``llvm.inttoptr`` back to the same
  address space);
* a memref as its descriptor, ``3 + 2 * rank`` ``i64`` words in a row of a
  ``memref<?xKxi64>``: allocated pointer, aligned pointer, offset, sizes, strides. It is
  taken apart and rebuilt through the LLVM descriptor struct with
  ``builtin.unrealized_conversion_cast`` (the LLVM lowering folds the pair away, as it
  does for :mod:`flydsl.compiler.frontend.raw_memory`'s views). Only the descriptor is
  kept: the memory it points at must outlive the slot, which the pass makes sure of
  for per-thread arrays by giving each thread its own copy at the function entry.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import arith, builtin, llvm

__all__ = ["SPILL_ATTR", "SlotCodec", "codec_for"]

#: Marks the op taking a memref apart for a slot (what the pass checks a per-thread
#: array's views against: its memory must then outlive the segment).
SPILL_ATTR = "flydsl.slot_spill"


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


@dataclass(frozen=True)
class SlotCodec:
    """How values of one type go into a slot's row and come back."""

    value_type: ir.Type
    kind: str          # "plain", "bool", "ptr" or "memref"
    stored: ir.Type    # the slot's element type
    words: int = 1     # elements per thread (a memref: its descriptor's fields)

    def slot_type(self) -> ir.MemRefType:
        """``memref<?xT>`` (one element per thread) or ``memref<?xKxi64>``."""
        dyn = ir.ShapedType.get_dynamic_size()
        shape = [dyn] if self.kind != "memref" else [dyn, self.words]
        return ir.MemRefType.get(shape, self.stored, loc=ir.Location.unknown())

    def encode(self, value: ir.Value) -> list:
        """The words of ``value``, built at the current insertion point."""
        if self.kind == "plain":
            return [value]
        if self.kind == "bool":
            return [arith.extui(self.stored, value)]
        if self.kind == "ptr":
            return [llvm.ptrtoint(_i64(), value)]
        desc = builtin.unrealized_conversion_cast([self._struct()], [value])
        desc.owner.attributes[SPILL_ATTR] = ir.UnitAttr.get()
        words = []
        for pos, is_ptr in self._fields():
            field = llvm.extractvalue(llvm.PointerType.get(0) if is_ptr else _i64(), desc, pos)
            words.append(llvm.ptrtoint(_i64(), field) if is_ptr else field)
        return words

    def decode(self, words: list) -> ir.Value:
        """The value back from ``words`` (as :meth:`encode` made them)."""
        if self.kind == "plain":
            return words[0]
        if self.kind == "bool":
            return arith.trunci(self.value_type, words[0])
        if self.kind == "ptr":
            return llvm.inttoptr(self.value_type, words[0])
        desc = llvm.mlir_poison(self._struct())
        for (pos, is_ptr), word in zip(self._fields(), words):
            field = llvm.inttoptr(llvm.PointerType.get(0), word) if is_ptr else word
            desc = llvm.insertvalue(desc, field, pos)
        return builtin.unrealized_conversion_cast([self.value_type], [desc])

    # -- memref descriptors ------------------------------------------------
    def _rank(self) -> int:
        return (self.words - 3) // 2

    def _struct(self) -> ir.Type:
        """The LLVM descriptor of the memref (pointers in the default address space:
        the CPU backend drops memory spaces)."""
        rank = self._rank()
        fields = "!llvm.ptr, !llvm.ptr, i64"
        if rank:
            fields += f", !llvm.array<{rank} x i64>, !llvm.array<{rank} x i64>"
        return ir.Type.parse(f"!llvm.struct<({fields})>")

    def _fields(self) -> list:
        """(position in the struct, is a pointer) of each word."""
        rank = self._rank()
        return ([([0], True), ([1], True), ([2], False)]
                + [([3, i], False) for i in range(rank)]
                + [([4, i], False) for i in range(rank)])


def codec_for(t: ir.Type) -> SlotCodec:
    """The codec of values of type ``t``; TypeError for a type no slot can hold
    (an unranked memref, a struct, a token...)."""
    if isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1:
        return SlotCodec(t, "bool", ir.IntegerType.get_signless(8))
    if isinstance(t, llvm.PointerType):
        return SlotCodec(t, "ptr", _i64())
    if isinstance(t, ir.MemRefType):
        return SlotCodec(t, "memref", _i64(), 3 + 2 * ir.MemRefType(t).rank)
    if isinstance(t, ir.UnrankedMemRefType):
        raise TypeError(f"no per-thread slot for values of type {t}")
    try:
        ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], t, loc=ir.Location.unknown())
    except (ValueError, ir.MLIRError) as e:
        raise TypeError(f"no per-thread slot for values of type {t}") from e
    return SlotCodec(t, "plain", t)
