"""``@flydsl.jit`` host functions and ``flydsl.compile``."""
from __future__ import annotations

from typing import Any, Callable, Optional

from .kernel import KernelFunction
from .launch_context import LaunchContext, using


class JitFunction:
    """A host function that computes launch configurations and launches kernels.

    It runs as ordinary Python on every call; the kernels it launches are
    compiled once per specialization and cached.
    """

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<flydsl.jit {self.__name__}>"

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def jit(fn: Optional[Callable] = None) -> Any:
    """Decorator for host functions that launch ``@flydsl.kernel``s."""
    if fn is None:
        return jit
    return JitFunction(fn)


class CompiledProgram:
    """Result of :func:`flydsl.compile`: the compiled kernels and their stages.

    ``.asm`` is the stage dict (``mlir``, ``llir``, ``ptx``, ``cubin``,
    ``hsaco``, ...) of the first kernel; ``.kernels`` lists every compiled
    kernel. Calling it runs the function on the same backend and arch.
    """

    def __init__(self, fn, kernels: list, backend, options):
        self.fn = fn
        self.kernels = kernels
        self.backend = backend
        self.options = options
        self._context = LaunchContext(backend, options)   # what its calls launch with

    @property
    def asm(self) -> dict:
        if not self.kernels:
            return {}
        return self.kernels[0].asm

    def __call__(self, *args, grid=None, block=None, smem: int = 0, stream=None, **kwargs):
        with using(self._context):
            if isinstance(self.fn, KernelFunction):
                if grid is None or block is None:
                    raise TypeError("calling a compiled kernel needs grid= and block=")
                return self.fn(*args, **kwargs).launch(grid=grid, block=block, smem=smem,
                                                       stream=stream)
            return self.fn(*args, **kwargs)


def compile(fn, *args, backend: Optional[str] = None, arch: Optional[str] = None,
            options=None, **kwargs) -> CompiledProgram:
    """Compile ``fn`` (a ``@flydsl.jit`` function or a ``@flydsl.kernel``) for ``args``
    without running it. Host arrays stand in for device tensors of the same
    dtype and rank, so compiling for a GPU backend needs no GPU."""
    from .compiler.backends.registry import get_backend
    from .compiler.options import CompileOptions
    if not isinstance(fn, (KernelFunction, JitFunction)):
        raise TypeError(f"flydsl.compile needs a @flydsl.jit or @flydsl.kernel function, "
                        f"got {fn!r}")
    be = get_backend(backend, arch=arch)
    opts = options or CompileOptions.from_env()
    recorded: list = []
    with using(LaunchContext(be, opts, record=recorded)):
        if isinstance(fn, KernelFunction):
            fn(*args, **kwargs).launch()
        else:
            fn(*args, **kwargs)
    return CompiledProgram(fn, recorded, be, opts)
