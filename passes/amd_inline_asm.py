"""AMD inline assembly on the CPU backend (FlyDSL kernels write waits and barriers as
``llvm.InlineAsmOp(None, [], "s_waitcnt lgkmcnt(0)\\n\\ts_barrier", "", ...)``).

The CPU has no assembler for a kernel's inline assembly: LLVM aborts the process on any
(``Inline asm not supported by this streamer``). This pass, run before
:mod:`.simt_to_cpu`, gives the AMD instructions with a meaning there that meaning and
rejects the rest with a located error:

* ``s_barrier`` (a workgroup barrier) is ``gpu.barrier``;
* ``s_waitcnt`` (and its ``vmcnt``/``lgkmcnt``/``expcnt`` forms), ``s_nop``,
  ``s_setprio``, ``s_sleep`` and ``s_sched_barrier`` wait for or order the wave's own
  memory operations or tune issue: the CPU's memory operations complete in program
  order, so they are nothing;
* any other inline assembly (an instruction computing values, or a non-AMD one) is an
  ``UnsupportedConstructError`` at the kernel line.

flydsl's own markers (``llvm.inline_asm`` with an empty string: asynchronous-copy marks)
are left to the passes that read them.
"""
from __future__ import annotations

import re

import mlir.ir as ir

from flydsl.errors import UnsupportedConstructError

from ._simt_ir import source_location
from .ir import walk

#: Instructions that are nothing on the CPU (waits, priorities, scheduling hints).
NOTHING = re.compile(r"^(s_waitcnt(_vmcnt|_lgkmcnt|_expcnt|_vscnt)?|s_nop|s_setprio|s_sleep|"
                     r"s_sched_barrier|s_wait_\w+)\b")
BARRIER = re.compile(r"^s_barrier\b")


def run(module, target=None, options=None) -> None:
    """Replace or reject every non-empty ``llvm.inline_asm`` of ``module``."""
    for op in walk(module.operation, lambda o: o.name == "llvm.inline_asm"):
        text = ir.StringAttr(op.attributes["asm_string"]).value
        lines = instructions(text)
        if not lines:
            continue
        if len(op.results) or not all(NOTHING.match(x) or BARRIER.match(x) for x in lines):
            raise _error(op, text)
        if any(BARRIER.match(x) for x in lines):
            from mlir.dialects import gpu
            with ir.InsertionPoint(op), op.location:
                gpu.barrier()
        op.erase()


def instructions(text: str) -> list:
    """The instructions of an assembly string (one per line or ``;``, comments dropped)."""
    out = []
    for part in re.split(r"[\n;]", text):
        part = part.split("//")[0].strip()
        if part:
            out.append(part)
    return out


def _error(op: ir.Operation, text: str) -> UnsupportedConstructError:
    filename, lineno, source = source_location(op)
    shown = " | ".join(instructions(text))[:120]
    return UnsupportedConstructError(
        f"inline assembly '{shown}' cannot run on the CPU backend (it runs AMD's s_barrier, "
        "and s_waitcnt/s_nop/s_setprio/s_sleep/s_sched_barrier as nothing); use the "
        "fx.rocdl builders (fx.rocdl.s_waitcnt, fx.rocdl.s_barrier, ...)",
        kernel=_kernel_of(op), filename=filename, lineno=lineno, source_line=source)


def _kernel_of(op: ir.Operation) -> str:
    p = op.parent
    while p is not None:
        p = p.operation if not isinstance(p, ir.Operation) else p
        if p.name in ("gpu.func", "func.func", "llvm.func") and "sym_name" in p.attributes:
            return ir.StringAttr(p.attributes["sym_name"]).value
        p = p.parent
    return ""
