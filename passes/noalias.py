"""Carry ``llvm.noalias`` of kernel memref arguments into the LLVM function.

The front end marks a tensor parameter ``llvm.noalias`` when the launch was
specialized on its memory overlapping no written argument
(:mod:`flydsl.runtime.specialization`). MLIR's lowerings drop that attribute on
memrefs, which become several LLVM arguments (allocated pointer, aligned pointer,
offset, sizes, strides): ``convert-gpu-to-nvvm``/``-rocdl`` refuse to copy it to
two pointers, ``convert-func-to-llvm`` to any. Only the aligned pointer is ever
read or written through, so it alone is ``noalias`` here:

* :func:`record` (before the lowering) stores, on each function whose memref
  arguments carry ``llvm.noalias``, the LLVM argument numbers of their aligned
  pointers as ``flydsl.noalias_args``;
* :func:`apply` (after it) sets ``llvm.noalias`` on those arguments of the
  ``llvm.func`` and drops the record.
"""
from __future__ import annotations

import mlir.ir as ir

from .ir import walk

_RECORD = "flydsl.noalias_args"
_KERNEL_OPS = ("gpu.func", "func.func")


def record(module: ir.Module, target=None, options=None) -> None:
    """Before lowering: note the aligned-pointer argument of each ``noalias`` memref."""
    with module.context:
        for op in walk(module.operation, lambda o: o.name in _KERNEL_OPS):
            numbers = _aligned_pointer_numbers(op)
            if numbers:
                op.attributes[_RECORD] = ir.DenseI32ArrayAttr.get(numbers)


def _aligned_pointer_numbers(op) -> list:
    """LLVM argument numbers of the aligned pointers of ``op``'s noalias memrefs (a
    memref of rank r becomes 3 + 2r arguments, anything else one)."""
    if "arg_attrs" not in op.attributes:
        return []
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    numbers, at = [], 0
    for ty, attrs in zip(ftype.inputs, ir.ArrayAttr(op.attributes["arg_attrs"])):
        if isinstance(ty, ir.MemRefType):
            if "llvm.noalias" in ir.DictAttr(attrs):
                numbers.append(at + 1)
            at += 3 + 2 * ir.MemRefType(ty).rank
        else:
            at += 1
    return numbers


def apply(module: ir.Module, target=None, options=None) -> None:
    """After lowering: ``llvm.noalias`` on the recorded arguments of each ``llvm.func``."""
    with module.context:
        unit = ir.UnitAttr.get()
        for op in walk(module.operation, lambda o: o.name == "llvm.func"
                       and _RECORD in o.attributes):
            numbers = list(ir.DenseI32ArrayAttr(op.attributes[_RECORD]))
            del op.attributes[_RECORD]
            nargs = len(op.regions[0].blocks[0].arguments)
            dicts = (list(ir.ArrayAttr(op.attributes["arg_attrs"]))
                     if "arg_attrs" in op.attributes else [])
            dicts += [ir.DictAttr.get({})] * (nargs - len(dicts))
            for k in numbers:
                entries = {a.name: a.attr for a in ir.DictAttr(dicts[k])}
                entries["llvm.noalias"] = unit
                dicts[k] = ir.DictAttr.get(entries)
            op.attributes["arg_attrs"] = ir.ArrayAttr.get(dicts)
