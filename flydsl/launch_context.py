"""What the kernel launches inside a call compile for, and whether they run.

Launches resolve their backend from the environment and their tensors (the
default context). ``flydsl.compile()`` runs a ``@flydsl.jit`` function in a
context that pins the backend and options and *records* the compiled kernels
instead of launching them; calling its result runs the function again in a
context that pins the same backend and options. A context is set at those two
entry points (a ``ContextVar``, so threads and asyncio tasks keep their own), read
once per launch, and passed down from there: generated warm launches never look
at it, they are keyed by it.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional, Sequence


class LaunchContext:
    """``backend``/``options``: pinned (None: resolved per launch); ``record``: a list
    that receives compiled kernels instead of running them (``flydsl.compile``)."""

    __slots__ = ("backend", "options", "record")

    def __init__(self, backend=None, options=None, record: Optional[list] = None):
        self.backend, self.options, self.record = backend, options, record

    def resolve(self, tensors: Sequence = ()):
        """``(backend, options)`` for a launch with runtime arguments ``tensors``: the
        arch of a GPU backend is that of the device holding them unless configured."""
        from .compiler.backends.registry import get_backend
        from .compiler.options import CompileOptions
        options = self.options or CompileOptions.from_env()
        if self.backend is not None:
            return self.backend, options
        return get_backend(tensors=tensors), options

    def __repr__(self) -> str:
        if self is DEFAULT:
            return "<LaunchContext default>"
        return (f"<LaunchContext {self.backend!r}{' recording' if self.record is not None else ''}>")


#: Launches outside flydsl.compile() and CompiledProgram calls.
DEFAULT = LaunchContext()
_CURRENT: ContextVar[LaunchContext] = ContextVar("flydsl_launch_context", default=DEFAULT)
current = _CURRENT.get


@contextlib.contextmanager
def using(context: LaunchContext) -> Iterator[LaunchContext]:
    """Run a block with ``context`` as the launch context."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
