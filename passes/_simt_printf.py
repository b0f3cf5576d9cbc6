"""``fx.printf`` on the CPU backend: ``gpu.printf`` becomes C ``fprintf``.

The front end gives every ``gpu.printf`` operands already promoted as C varargs
are (``i32``, ``i64``, ``f64``) and the matching format, so each one becomes::

    %stream = llvm.call @__flydsl_printf_stream()
    llvm.call @fprintf(%stream, @<format>, operands...)

Blocks run one after another on each host thread, the threads of a block as loops.
``__flydsl_printf_stream`` returns the output buffer of the block this host thread
runs: a thread-local ``open_memstream``, opened at the block's first printf.
:meth:`PrintfLowering.end_blocks` adds ``__flydsl_printf_end_block`` at the end
of every block that may print: it writes the block's buffer to ``stdout`` in one
``fwrite`` and closes it. So a block's output is contiguous, in thread order,
even when blocks run on several host threads at once (if no buffer can be
opened, printf goes straight to ``stdout``).

A kernel library that prints exports the marker
:data:`flydsl.runtime.debug_checks.PRINTF_SYMBOL`: its launcher flushes
Python's ``sys.stdout`` before a launch and C's stdio after it.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import llvm

from flydsl.runtime.debug_checks import PRINTF_SYMBOL

from .ir import block_ops, op_of, terminator, walk

STREAM_FUNC = "__flydsl_printf_stream"
END_BLOCK_FUNC = "__flydsl_printf_end_block"
#: Thread-local ``{FILE *stream, char *buffer, size_t length}`` of the running block.
STATE = "__flydsl_printf_state"
FORMAT_PREFIX = "__flydsl_printf_format_"
BLOCK_LOOP = "flydsl.block_loop"

#: libc functions the helpers call, declared unless the module has them.
_LIBC = {  # one line each
    "open_memstream": "llvm.func @open_memstream(!llvm.ptr, !llvm.ptr) -> !llvm.ptr",
    "fprintf": "llvm.func @fprintf(!llvm.ptr, !llvm.ptr, ...) -> i32",
    "fclose": "llvm.func @fclose(!llvm.ptr) -> i32",
    "fwrite": "llvm.func @fwrite(!llvm.ptr, i64, i64, !llvm.ptr) -> i64",
    "free": "llvm.func @free(!llvm.ptr)",
    "stdout": "llvm.mlir.global external @stdout() {addr_space = 0 : i32} : !llvm.ptr",
}

_HELPERS = f"""
llvm.mlir.global internal thread_local @{STATE}(dense<0> : tensor<3xi64>)
    {{addr_space = 0 : i32}} : !llvm.array<3 x i64>
llvm.mlir.global external constant @{PRINTF_SYMBOL}(1 : i8) {{addr_space = 0 : i32}} : i8
llvm.func internal @{STREAM_FUNC}() -> !llvm.ptr {{
  %state = llvm.mlir.addressof @{STATE} : !llvm.ptr
  %stream = llvm.load %state : !llvm.ptr -> !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  %open = llvm.icmp "ne" %stream, %null : !llvm.ptr
  llvm.cond_br %open, ^done(%stream : !llvm.ptr), ^open
^open:
  %buffer = llvm.getelementptr %state[1] : (!llvm.ptr) -> !llvm.ptr, i64
  %length = llvm.getelementptr %state[2] : (!llvm.ptr) -> !llvm.ptr, i64
  %new = llvm.call @open_memstream(%buffer, %length) : (!llvm.ptr, !llvm.ptr) -> !llvm.ptr
  llvm.store %new, %state : !llvm.ptr, !llvm.ptr
  %failed = llvm.icmp "eq" %new, %null : !llvm.ptr
  llvm.cond_br %failed, ^direct, ^done(%new : !llvm.ptr)
^direct:
  %out = llvm.mlir.addressof @stdout : !llvm.ptr
  %stdout = llvm.load %out : !llvm.ptr -> !llvm.ptr
  llvm.br ^done(%stdout : !llvm.ptr)
^done(%result: !llvm.ptr):
  llvm.return %result : !llvm.ptr
}}
llvm.func internal @{END_BLOCK_FUNC}() {{
  %state = llvm.mlir.addressof @{STATE} : !llvm.ptr
  %stream = llvm.load %state : !llvm.ptr -> !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  %open = llvm.icmp "ne" %stream, %null : !llvm.ptr
  llvm.cond_br %open, ^write, ^done
^write:
  %closed = llvm.call @fclose(%stream) : (!llvm.ptr) -> i32
  %buffer_at = llvm.getelementptr %state[1] : (!llvm.ptr) -> !llvm.ptr, i64
  %length_at = llvm.getelementptr %state[2] : (!llvm.ptr) -> !llvm.ptr, i64
  %buffer = llvm.load %buffer_at : !llvm.ptr -> !llvm.ptr
  %length = llvm.load %length_at : !llvm.ptr -> i64
  %out = llvm.mlir.addressof @stdout : !llvm.ptr
  %stdout = llvm.load %out : !llvm.ptr -> !llvm.ptr
  %one = llvm.mlir.constant(1 : i64) : i64
  %written = llvm.call @fwrite(%buffer, %one, %length, %stdout)
      : (!llvm.ptr, i64, i64, !llvm.ptr) -> i64
  llvm.call @free(%buffer) : (!llvm.ptr) -> ()
  llvm.store %null, %state : !llvm.ptr, !llvm.ptr
  llvm.br ^done
^done:
  llvm.return
}}
"""


class PrintfLowering:
    """The ``fx.printf`` calls of one module (see the module docstring)."""

    def __init__(self, module: ir.Module):
        self.top = module.body
        self.formats: dict = {}     # format bytes -> its global's name
        self.count = 0
        self._declared = False

    def lower(self, root: ir.Operation) -> int:
        """Replace every ``gpu.printf`` nested in ``root``; returns how many."""
        found = walk(root, lambda o: o.name == "gpu.printf")
        if not found:
            return 0
        self._declare()
        ptr = ir.Type.parse("!llvm.ptr")
        i32 = ir.IntegerType.get_signless(32)
        vararg = ir.TypeAttr.get(ir.Type.parse("!llvm.func<i32 (ptr, ptr, ...)>"))
        for op in found:
            fmt = self._format_global(ir.StringAttr(op.attributes["format"]).value)
            with ir.InsertionPoint(op), op.location:
                stream = llvm.call(ptr, [], [], [], callee=STREAM_FUNC)
                address = llvm.AddressOfOp(ptr, fmt).result
                llvm.call(i32, [stream, address, *op.operands], [], [], callee="fprintf",
                          var_callee_type=vararg)
            op.erase()
        self.count += len(found)
        return len(found)

    def end_blocks(self, root: ir.Operation) -> None:
        """End each block loop in ``root`` that may print with the flush of its output."""
        if not self.count:
            return
        for loop in walk(root, lambda o: o.name == "scf.for" and BLOCK_LOOP in o.attributes):
            if not walk(loop, _is_stream_call):
                continue
            end = terminator(loop.regions[0].blocks[0])
            with ir.InsertionPoint(end), end.location:
                llvm.call(None, [], [], [], callee=END_BLOCK_FUNC)

    # -- declarations ------------------------------------------------------------
    def _declare(self) -> None:
        if self._declared:
            return
        self._declared = True
        # parsed as one module (so that its symbol uses verify), then moved over
        helpers = ir.Module.parse("\n".join(_LIBC.values()) + _HELPERS)
        first = op_of(self.top.operations[0])
        for op in block_ops(helpers.body, with_terminator=True):
            if self._defined(ir.StringAttr(op.attributes["sym_name"]).value):
                op.erase()      # the module declares it already (e.g. free)
            else:
                op.move_before(first)

    def _defined(self, name: str) -> bool:
        attr = ir.StringAttr.get(name)
        return any("sym_name" in op.attributes and op.attributes["sym_name"] == attr
                   for op in block_ops(self.top, with_terminator=True))

    def _format_global(self, text: str) -> str:
        """The name of a private constant holding ``text`` NUL-terminated (one per text)."""
        data = text.encode() + b"\0"
        name = self.formats.get(data)
        if name is None:
            name = f"{FORMAT_PREFIX}{len(self.formats)}"
            self.formats[data] = name
            escaped = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}"
                              for b in data)
            glob = ir.Operation.parse(
                f'llvm.mlir.global private constant @{name}("{escaped}") '
                f'{{addr_space = 0 : i32}} : !llvm.array<{len(data)} x i8>')
            ir.InsertionPoint(op_of(self.top.operations[0])).insert(glob)
        return name


def _is_stream_call(op: ir.Operation) -> bool:
    return op.name == "llvm.call" and "callee" in op.attributes and \
        ir.FlatSymbolRefAttr(op.attributes["callee"]).value == STREAM_FUNC
