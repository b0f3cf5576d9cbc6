"""``@flydsl.jit`` host functions and ``flydsl.compile``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional

from .errors import FlydslError, KernelSelectionError
from .tracebacks import trim_traceback
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
        try:
            return self.fn(*args, **kwargs)
        except FlydslError as e:
            trim_traceback(e)   # the user's frames and kernel line, not flydsl's
            raise


def jit(fn: Optional[Callable] = None) -> Any:
    """Decorator for host functions that launch ``@flydsl.kernel``s."""
    if fn is None:
        return jit
    return JitFunction(fn)


#: Binary stages: several kernels' cannot be joined into one value.
BINARY_STAGES = frozenset({"cubin", "hsaco", "so"})
#: Line-comment syntax of each text stage (the headers that name each kernel).
_COMMENT = {"llir": ";", "amdgcn": ";", "asm": "#"}


def kernel_header(stage: str, name: str) -> str:
    """The line that names a kernel in a multi-kernel text stage, a comment in the
    stage's language: ``// ===== kernel scan_block =====`` (``;`` for LLVM IR, AMDGCN)."""
    return f"{_COMMENT.get(stage, '//')} ===== kernel {name} ====="


def join_kernel_texts(stage: str, texts: Mapping) -> str:
    """One text of several kernels' ``stage`` (``texts``: name -> text), each under
    its :func:`kernel_header`, in order."""
    return "\n".join(f"{kernel_header(stage, name)}\n{text.rstrip()}\n"
                     for name, text in texts.items())


class CombinedStages(Mapping):
    """``prog.asm`` of a program that compiled several kernels: each text stage is
    every kernel's text, each under a header naming it; a binary stage raises
    :class:`~flydsl.errors.KernelSelectionError` (pick one with ``prog.kernel(name)``)."""

    def __init__(self, by_kernel: dict):
        self._by_kernel = by_kernel          # name -> that kernel's stages

    def __getitem__(self, stage: str):
        for asm in self._by_kernel.values():
            if stage in getattr(asm, "missing", ()):
                asm[stage]   # made now, or raises why a missing tool keeps it from being made
        if stage not in self:
            raise KeyError(stage)
        names = list(self._by_kernel)
        if stage in BINARY_STAGES or any(isinstance(asm.get(stage), bytes)
                                         for asm in self._by_kernel.values()):
            raise KernelSelectionError(
                f"this program compiled {len(names)} kernels ({', '.join(names)}): the "
                f"{stage!r} stage is one binary per kernel; pick one with "
                f"prog.kernel(name).asm[{stage!r}] (or prog.asm_by_kernel[name][{stage!r}])",
                names)
        return join_kernel_texts(stage, {name: asm[stage] for name, asm in
                                         self._by_kernel.items() if stage in asm})

    def __contains__(self, stage) -> bool:
        return any(stage in asm for asm in self._by_kernel.values())

    def __iter__(self) -> Iterator[str]:
        seen: dict = {}
        for asm in self._by_kernel.values():
            seen.update(dict.fromkeys(asm))
        return iter(seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<stages {', '.join(self)} of kernels {', '.join(self._by_kernel)}>"


class CompiledProgram:
    """Result of :func:`flydsl.compile`: the compiled kernels and their stages.

    - ``kernels``: every kernel the function launched, each distinct specialization
      once, in launch order; each a ``CompiledKernel`` with ``.kernel_name`` (the
      Python name), ``.asm`` (its stages: ``mlir``, ``llir``, ``ptx``, ``cubin``,
      ``amdgcn``, ``hsaco``, ...), ``.specs``, ``.target`` and ``.metadata`` (registers,
      spills, shared memory, occupancy: docs/gpu-profiling.md).
    - ``kernel_names``: their names; a name launched with several specializations
      is numbered, ``scan#1``, ``scan#2``. ``kernel(name)`` gives one kernel,
      ``asm_by_kernel`` maps each name to its stages.
    - ``asm``: with one kernel, its stages. With several, a text stage is every
      kernel's text under a header naming it, and a binary stage (``cubin``,
      ``hsaco``) raises KernelSelectionError: pick a kernel.

    Calling it runs the function on the same backend and arch.
    """

    def __init__(self, fn, kernels: list, backend, options):
        self.fn = fn
        self.kernels = list({id(k): k for k in kernels}.values())   # repeats launched once
        self.backend = backend
        self.options = options
        self._context = LaunchContext(backend, options)   # what its calls launch with

    @property
    def kernel_names(self) -> list[str]:
        """Each kernel's name, in ``kernels`` order (``name#i`` for repeated names)."""
        names = [k.kernel_name for k in self.kernels]
        counts = {n: names.count(n) for n in names}
        seen: dict = {}
        out = []
        for n in names:
            seen[n] = seen.get(n, 0) + 1
            out.append(n if counts[n] == 1 else f"{n}#{seen[n]}")
        return out

    @property
    def asm_by_kernel(self) -> dict:
        """Kernel name (as in ``kernel_names``) -> its stages."""
        return {name: k.asm for name, k in zip(self.kernel_names, self.kernels)}

    def kernel(self, name: str):
        """The compiled kernel called ``name`` (see ``kernel_names``);
        KernelSelectionError listing the names when there is none."""
        names = self.kernel_names
        if name in names:
            return self.kernels[names.index(name)]
        numbered = [n for n in names if n.rpartition("#")[0] == name]
        if numbered:
            raise KernelSelectionError(
                f"kernel {name!r} was compiled {len(numbered)} times (different "
                f"specializations); pick one of {', '.join(numbered)}", names)
        raise KernelSelectionError(
            f"no kernel {name!r} in this program; its kernels: "
            f"{', '.join(names) or '(none)'}", names)

    @property
    def asm(self) -> Mapping:
        """The stages: one kernel's, or every kernel's (see the class docstring)."""
        if not self.kernels:
            return {}
        if len(self.kernels) == 1:
            return self.kernels[0].asm
        return CombinedStages(self.asm_by_kernel)

    def __call__(self, *args, grid=None, block=None, smem: int = 0, stream=None, **kwargs):
        try:
            with using(self._context):
                if isinstance(self.fn, KernelFunction):
                    if grid is None or block is None:
                        raise TypeError("calling a compiled kernel needs grid= and block=")
                    return self.fn(*args, **kwargs).launch(grid=grid, block=block, smem=smem,
                                                           stream=stream)
                return self.fn(*args, **kwargs)
        except FlydslError as e:
            trim_traceback(e)
            raise


def compile(fn, *args, backend: Optional[str] = None, arch: Optional[str] = None,
            options=None, **kwargs) -> CompiledProgram:
    """Compile ``fn`` (a ``@flydsl.jit`` function or a ``@flydsl.kernel``) for ``args``
    without running it and return a :class:`CompiledProgram` (``.kernels``, ``.asm``,
    ``.kernel(name)``). Host arrays stand in for device tensors of the same dtype and
    rank, so compiling for a GPU backend needs no GPU."""
    from .compiler.backends.registry import get_backend
    from .compiler.options import CompileOptions
    if not isinstance(fn, (KernelFunction, JitFunction)):
        raise TypeError(f"flydsl.compile needs a @flydsl.jit or @flydsl.kernel function, "
                        f"got {fn!r}")
    try:
        be = get_backend(backend, arch=arch)
        opts = options or CompileOptions.from_env()
        recorded: list = []
        with using(LaunchContext(be, opts, record=recorded)):
            if isinstance(fn, KernelFunction):
                fn(*args, **kwargs).launch()
            else:
                fn(*args, **kwargs)
    except FlydslError as e:
        trim_traceback(e)
        raise
    return CompiledProgram(fn, recorded, be, opts)
