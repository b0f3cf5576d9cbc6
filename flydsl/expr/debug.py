"""Debugging inside kernels: device printf and assertions.

``fx.printf`` prints from every thread that reaches it, ``fx.device_assert``
checks a runtime condition in debug mode (``FLYDSL_DEBUG=1``) and
``fx.static_assert`` checks a compile-time condition while the kernel is traced.
"""
from __future__ import annotations

from typing import Any

from .implementation import ops as _ops

__all__ = ["device_assert", "printf", "static_assert"]


def printf(fmt: str, *values: Any) -> None:
    """Print ``values`` under the format ``fmt`` from each thread that runs this line.

    ``fmt`` is a C ``printf`` format (``"%d %5.2f\\n"``), as in CUDA, or uses ``{}``
    placeholders (``"i={} x={}"``, as in CuTe DSL and FlyDSL), where each ``{}``
    becomes the conversion of its value's dtype (``%d``, ``%lld``, ``%u``, ``%f``) and
    ``%`` is plain text (``{{`` and ``}}`` print braces). A format containing ``{}`` is
    a placeholder format; any other is a C format. No newline is added.

    Values may be kernel values of any scalar dtype, Python or numpy numbers (constants),
    and Python ``str`` (or a dtype), which is written into the format text (for ``%s``
    or ``{}``). While tracing, the number of values must match the conversions, and
    integer conversions (``%d %i %u %x %X %o %c``) need integers (or bools) and float
    conversions (``%f %e %g %a``) floats: a mismatch is a ``DSLTypeError`` naming the
    argument. Length modifiers are chosen for you (``%d`` of an Int64 prints all 64
    bits); values are passed as C varargs are (floats as double, small ints as int).

    Backends:

    * **CPU**: C ``printf`` output on the process's stdout. Threads of a block run in
      order (``thread_idx.x`` fastest), and each block's output is written as one
      piece when the block ends, so blocks never interleave. A grid of one block or
      of fewer than 16384 threads runs its blocks in order on one host thread; larger
      ones run blocks on several host threads at once, so whole blocks may appear in
      any order. Python's ``sys.stdout`` is flushed
      before the launch and C's stdio after it, so the output lands in order with
      the program's ``print``s.
    * **CUDA**: ``vprintf`` (the device printf of CUDA C); the driver prints the buffer
      at the next synchronization.
    * **ROCm**: not supported (the device printf needs the ROCm device libraries,
      which flydsl cannot link): compiling it is an error naming ``fx.printf``.

    Example::

        if fx.thread_idx.x == 0:
            fx.printf("block %d: sum = %f\\n", fx.block_idx.x, acc)
            fx.printf("block {}: first = {}\\n", fx.block_idx.x, x[0])
    """
    _ops().printf(fmt, *values)


def device_assert(cond: Any, msg: str = "") -> None:
    """Check in debug mode that ``cond`` holds in every thread that runs this line.

    Active only when debug mode is on (``FLYDSL_DEBUG=1``, or
    ``CompileOptions(debug=True)``); otherwise it emits nothing and costs nothing.
    ``cond`` is a kernel value (non-Bool values count as true when nonzero) or a
    compile-time value: False at compile time is a ``DSLError`` while tracing (in debug
    mode). ``msg`` is a Python str.

    Backends, in debug mode:

    * **CPU**: the launch finishes (every access is bounds-checked in debug mode, so
      the rest of the kernel cannot corrupt memory) and raises
      :class:`flydsl.runtime.debug_checks.DeviceAssertError`, a ``FlydslRuntimeError``
      and ``AssertionError`` giving the kernel, the file, line and source of the
      assertion, ``msg``, and the block and thread of the first failure.
    * **CUDA**: ``__assertfail`` (CUDA C's ``assert``): the driver prints ``msg`` (or the
      source line) with the file, line, block and thread, and the kernel stops; the
      launch's next synchronization reports the error.
    * **ROCm**: ``llvm.trap`` (``s_trap``): the kernel stops and the next
      synchronization reports it; no message.

    Example::

        fx.device_assert(idx[i] < n, "index out of range")
    """
    _ops().device_assert(cond, msg)


def static_assert(cond: Any, msg: str = "") -> None:
    """Check a compile-time condition while the kernel is traced; always on.

    ``cond`` must be known at compile time (Python values, ``fx.Constexpr``
    parameters, ``fx.warp_size()``, tensor ranks): a kernel value is a
    ``CompileTimeValueRequired`` error. If it is false, tracing stops with a
    ``DSLError`` at this line carrying ``msg``. Emits no code on any backend.

    Example::

        fx.static_assert(BLOCK % fx.warp_size() == 0, "BLOCK must be whole warps")
    """
    _ops().static_assert(cond, msg)
