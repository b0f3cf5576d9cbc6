"""Memory-access recording for the SIMT-to-CPU pass (``CompileOptions.profile ==
"memory"``, ``FLYDSL_PROFILE=memory``): the input of the memory profiler
(:mod:`flydsl.runtime.memory_profile`).

Every load and store of a kernel argument (*global* memory) or of a shared buffer
(*shared* memory) in a thread loop calls, just before the access, the out-of-line
helper :data:`~flydsl.runtime.memory_profile.RECORD_FUNC` with the access's *site*
(an index into the site table), the linear block id, the linear thread id, the
byte offset of the access from the start of its buffer (the tensor argument or
the shared array: as if each began aligned, as GPU allocations do) and the access
width in bytes::

    llvm.call @__flydsl_memprof_record(site, block, thread, address, bytes)

The helper appends one record (:data:`~flydsl.runtime.memory_profile.RECORD_WORDS`
``int64`` words) to the buffer the runtime points the kernel library's exported
control block :data:`~flydsl.runtime.memory_profile.CONTROL_SYMBOL` at (its words:
records held, capacity, buffer address, a callback, records lost). When the buffer
is full it calls the callback, which gives it a bigger one; an access it still has
no room for is counted as lost. Profiled launches run on one host thread (the
runtime serializes them), so the helper needs no atomics. The accesses themselves
are unchanged; private memory and the pass's own scratch buffers are not recorded,
nor are shared arrays whose name starts with :data:`~._simt_racecheck.INTERNAL_PREFIX` (flydsl's own
scratch, such as the CPU's emulation of MMA instructions).

The site table (JSON: kernel, file, line, source text, ``space`` "shared" or
"global", ``access`` "load"/"store"/"atomic", the tensor's label, the access
width) goes into the module attribute :data:`SITES_ATTR`; the CPU backend copies
it into the artifact's ``memprofile_sites`` stage. Without the option nothing
here runs: unprofiled kernels are unchanged.
"""
from __future__ import annotations

import json
from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref

from flydsl.runtime import memory_profile as prof

from ._simt_bounds import root_memref
from ._simt_ir import source_location
from ._simt_racecheck import byte_address, element_bytes, is_scratch
from .ir import walk

#: Module attribute holding the JSON site table.
SITES_ATTR = "flydsl.memprofile_sites"

#: op name -> (index of the memref operand, index of the first index operand, access)
_ACCESSES = {
    "memref.load": (0, 1, "load"),
    "memref.store": (1, 2, "store"),
    "memref.atomic_rmw": (1, 2, "atomic"),
    "vector.load": (0, 1, "load"),
    "vector.store": (1, 2, "store"),
    "vector.maskedload": (0, 1, "load"),
    "vector.maskedstore": (0, 1, "store"),
}

_HELPER = f"""
llvm.mlir.global external @{prof.CONTROL_SYMBOL}(dense<0> : tensor<{prof.CONTROL_WORDS}xi64>)
    {{addr_space = 0 : i32}} : !llvm.array<{prof.CONTROL_WORDS} x i64>
llvm.func internal @{prof.RECORD_FUNC}(%site: i64, %block: i64, %thread: i64, %addr: i64,
                                       %bytes: i64) attributes {{passthrough = ["noinline"]}} {{
  %control = llvm.mlir.addressof @{prof.CONTROL_SYMBOL} : !llvm.ptr
  %one = llvm.mlir.constant(1 : i64) : i64
  %n = llvm.load %control : !llvm.ptr -> i64
  %cap_at = llvm.getelementptr %control[{prof.CAPACITY}] : (!llvm.ptr) -> !llvm.ptr, i64
  %cap = llvm.load %cap_at : !llvm.ptr -> i64
  %room = llvm.icmp "ult" %n, %cap : i64
  llvm.cond_br %room, ^store, ^grow
^grow:
  %grow_at = llvm.getelementptr %control[{prof.GROW}] : (!llvm.ptr) -> !llvm.ptr, i64
  %grow = llvm.load %grow_at : !llvm.ptr -> !llvm.ptr
  llvm.call %grow() : !llvm.ptr, () -> ()
  %cap2 = llvm.load %cap_at : !llvm.ptr -> i64
  %room2 = llvm.icmp "ult" %n, %cap2 : i64
  llvm.cond_br %room2, ^store, ^drop
^drop:
  %lost_at = llvm.getelementptr %control[{prof.LOST}] : (!llvm.ptr) -> !llvm.ptr, i64
  %lost = llvm.load %lost_at : !llvm.ptr -> i64
  %lost1 = llvm.add %lost, %one : i64
  llvm.store %lost1, %lost_at : i64, !llvm.ptr
  llvm.return
^store:
  %buf_at = llvm.getelementptr %control[{prof.BUFFER}] : (!llvm.ptr) -> !llvm.ptr, i64
  %buf = llvm.load %buf_at : !llvm.ptr -> !llvm.ptr
  %words = llvm.mlir.constant({prof.RECORD_WORDS} : i64) : i64
  %first = llvm.mul %n, %words : i64
  %w0_at = llvm.getelementptr %buf[%first] : (!llvm.ptr, i64) -> !llvm.ptr, i64
  %shift = llvm.mlir.constant({prof.BYTES_SHIFT} : i64) : i64
  %c32 = llvm.mlir.constant(32 : i64) : i64
  %b = llvm.shl %bytes, %shift : i64
  %t = llvm.shl %thread, %c32 : i64
  %sb = llvm.or %site, %b : i64
  %w0 = llvm.or %sb, %t : i64
  llvm.store %w0, %w0_at : i64, !llvm.ptr
  %w1_at = llvm.getelementptr %w0_at[1] : (!llvm.ptr) -> !llvm.ptr, i64
  llvm.store %block, %w1_at : i64, !llvm.ptr
  %w2_at = llvm.getelementptr %w0_at[2] : (!llvm.ptr) -> !llvm.ptr, i64
  llvm.store %addr, %w2_at : i64, !llvm.ptr
  %n1 = llvm.add %n, %one : i64
  llvm.store %n1, %control : i64, !llvm.ptr
  llvm.return
}}
"""


class MemoryRecorder:
    """The memory recording of one module: its control block, helper and sites."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.sites: list = []
        self._declared = False

    def _declare(self) -> None:
        if self._declared:
            return
        self._declared = True
        helper = ir.Module.parse(_HELPER)
        top = self.module.body
        first = top.operations[0] if len(top.operations) else None
        for op in list(helper.body.operations):
            if first is not None:
                op.move_before(first)
            else:
                top.append(op)

    def instrument(self, func_op, kernel: str, *, shared: set, labels: dict,
                   block_id: ir.Value, linear_tid: Callable[[], ir.Value],
                   in_thread: Callable[[ir.Operation], bool]) -> int:
        """Record every shared or global access in ``func_op``'s thread loops; how many.

        ``shared``: the kernel's shared buffers; ``labels``: memref -> how a report
        names it (kernel arguments carry ``"arg"``); ``block_id``: the linear block
        id; ``linear_tid()``: the thread's linear id at the insertion point;
        ``in_thread(op)``: whether ``op`` runs per thread.
        """
        count = 0
        i64 = ir.IntegerType.get_signless(64)
        for op in walk(func_op, lambda o: o.name in _ACCESSES):
            mem_at, idx_at, access = _ACCESSES[op.name]
            operands = list(op.operands)
            mem = operands[mem_at]
            if not isinstance(mem.type, ir.MemRefType) or not in_thread(op):
                continue
            root = _buffer_of(mem)
            label = labels.get(root, {})
            if root in shared:
                if is_scratch(label):      # flydsl's scratch, not the kernel's traffic
                    continue
                space = "shared"
            elif "arg" in label:
                space = "global"
            else:
                continue      # private memory, constants, the pass's scratch buffers
            rank = ir.MemRefType(mem.type).rank
            indices = operands[idx_at:idx_at + rank]
            width = _access_bytes(op, mem)
            if width is None or width > prof.MAX_BYTES or len(self.sites) > prof.MAX_SITE:
                continue
            site = self._add_site(op, kernel, space=space, access=access, bytes=width,
                                  **label)
            with ir.InsertionPoint(op), op.location:
                address = byte_address(mem, indices)
                if address is None:
                    self.sites.pop()
                    continue
                # from the buffer's start: as if each buffer began aligned, as on a GPU
                address = arith.subi(address, memref.extract_aligned_pointer_as_index(root))
                self._declare()
                args = [arith.ConstantOp(i64, site).result,
                        arith.index_cast(i64, block_id),
                        arith.index_cast(i64, linear_tid()),
                        arith.index_cast(i64, address),
                        arith.ConstantOp(i64, width).result]
                llvm.call(None, args, [], [], callee=prof.RECORD_FUNC)
            count += 1
        return count

    def _add_site(self, op, kernel: str, **fields) -> int:
        filename, lineno, source = source_location(op)
        self.sites.append({"kernel": kernel, "file": filename, "line": lineno,
                           "source": source, **fields})
        return len(self.sites) - 1

    def finish(self) -> None:
        """Attach the site table to the module (nothing when no access was recorded)."""
        if self.sites:
            self.module.operation.attributes[SITES_ATTR] = ir.StringAttr.get(
                json.dumps(self.sites, separators=(",", ":")))


def _buffer_of(mem: ir.Value) -> ir.Value:
    """The buffer ``mem`` views: :func:`root_memref`, also through the base buffer of
    ``memref.extract_strided_metadata`` (fx.copy builds flat views from it)."""
    while True:
        mem = root_memref(mem)
        if not isinstance(mem, ir.OpResult) or mem.result_number != 0:
            return mem
        owner = mem.owner
        if owner.name != "memref.extract_strided_metadata":
            return mem
        mem = owner.operands[0]


def _access_bytes(op, mem) -> Optional[int]:
    """Bytes one thread moves in the access ``op`` of ``mem`` (a vector access: the
    whole vector)."""
    if op.name.startswith("vector."):
        value = op.results[0] if op.name.endswith("load") else op.operands[0]
        if op.name == "vector.maskedstore":
            value = op.operands[-1]
        return element_bytes(value.type)
    return element_bytes(ir.MemRefType(mem.type).element_type)
