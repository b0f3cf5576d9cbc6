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


_WITH_ATTRS: dict = {}     # (base context, options key) -> its derived context


def with_function_attrs(attrs: tuple) -> LaunchContext:
    """The current context whose compile options also hold the kernel attributes
    ``attrs`` (checked ``value_attrs``): the same one for the same base, options and
    attributes, so its warm launches are found again."""
    from dataclasses import replace
    from .compiler.options import CompileOptions
    base = current()
    options = replace(base.options or CompileOptions.from_env(), function_attrs=attrs)
    key = (base, options.key())
    hit = _WITH_ATTRS.get(key)
    if hit is None:
        if len(_WITH_ATTRS) > 256:
            _WITH_ATTRS.clear()
        hit = _WITH_ATTRS[key] = LaunchContext(base.backend, options, base.record)
    return hit


@contextlib.contextmanager
def using(context: LaunchContext) -> Iterator[LaunchContext]:
    """Run a block with ``context`` as the launch context."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
