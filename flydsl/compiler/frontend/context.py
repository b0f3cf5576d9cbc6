"""The trace in progress: which kernel, which target, where ops go."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ...errors import DSLError
from ..dependencies import DependencyRecorder

_local = threading.local()


@dataclass
class TraceContext:
    kernel_name: str
    target: Any                 # GPUTarget
    options: Any                # CompileOptions
    func_op: Any = None         # the gpu.func being built
    shared_count: int = 0
    #: Python-source position of the statement being traced, for errors.
    filename: str = ""
    lineno: int = 0
    extra: dict = field(default_factory=dict)
    #: State naming blocks and ops being built (the emulated MMA's last call, its
    #: barrier): dropped whenever traced IR is discarded (:meth:`discard`), since an
    #: erased block's address may come back as a new block's.
    block_state: dict = field(default_factory=dict)
    #: What the trace read from globals, closures and attributes (the cache key's part).
    deps: DependencyRecorder = field(default_factory=DependencyRecorder)
    #: How many runtime regions (scf.if branches, loop bodies) enclose the statement
    #: being traced, across inlined helpers.
    runtime_depth: int = 0
    #: Per open runtime region (innermost last), the Python containers a literal or
    #: comprehension made inside it (id -> container): those may change there.
    region_containers: list = field(default_factory=list)
    #: Statements traced, and per outermost unrolled loop ((file, line)) how many of
    #: them its unrolling produced: what the trace-size warning reports.
    statements: int = 0
    unroll_stack: list = field(default_factory=list)
    unrolled_statements: dict = field(default_factory=dict)

    def discard(self, op) -> None:
        """Erase traced IR ``op`` (a loop traced again, a probe whose ops moved out)."""
        self.block_state.clear()
        op.erase()


def current() -> TraceContext:
    ctx = getattr(_local, "trace", None)
    if ctx is None:
        raise DSLError("this flydsl.expr function can only be used inside a @flydsl.kernel body")
    return ctx


def active():
    """The trace in progress on this thread, or None."""
    return getattr(_local, "trace", None)


class tracing:
    """Context manager installing a TraceContext for the current thread."""

    def __init__(self, ctx: TraceContext):
        self.ctx = ctx

    def __enter__(self) -> TraceContext:
        self.prev = getattr(_local, "trace", None)
        _local.trace = self.ctx
        return self.ctx

    def __exit__(self, *exc) -> None:
        _local.trace = self.prev
