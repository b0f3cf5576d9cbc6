"""``@flydsl.jit`` host functions and ``flydsl.compile``."""
from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .compiler.kernel_function import JIT_CALLS, CompilationContext, merge_compile_hints
from .compiler.options import env_flag
from .errors import DSLTypeError, FlydslError, KernelSelectionError
from .tracebacks import trim_traceback
from .expr.dtypes import Stream
from .expr.host_scalar import HostScalar
from .kernel import KernelFunction
from .launch_context import DEFAULT as DEFAULT_CONTEXT, LaunchContext, using
from .launch_context import current as current_context
from .runtime.host_args import JitArgumentRegistry, PointerArgument, TensorArgument
from .runtime import host_views as _host_views   # noqa: F401 - fx.get_iter/make_view on the host
from .jit_views import ViewPlan, view_plan


class JitFunction:
    """A host function that computes launch configurations and launches kernels.

    It runs as ordinary Python on every call; the kernels it launches are
    compiled once per specialization and cached. As in FlyDSL:

    - a tensor passed for a parameter annotated ``fx.Tensor`` is seen as a
      :class:`~flydsl.runtime.host_args.TensorArgument` (``M, N = A.shape.unpack()``,
      ``A.stride[0]``; other attributes are the tensor's), layout-dynamic unless it
      was wrapped by ``flyc.from_torch_tensor``/``from_dlpack`` already (a tensor the
      body only passes on to kernels is passed as it is: :mod:`flydsl.jit_views`);
    - a number passed for a parameter annotated with a numeric type (``n: fx.Int32``)
      is seen as ``fx.Int32(n)``, which the layouts built from it keep as a run-time
      value, as FlyDSL's dynamic ``Int32`` (one the body only computes with or passes
      to kernels is passed as it is: the same values, without the wrapping's cost);
    - values of types registered in ``flyc.JitArgumentRegistry`` are converted;
    - ``compile_hints`` (set by ``flyc.compile[{...}](fn)``) and the enclosing
      ``CompilationContext.compile_hints`` apply to the kernels it launches;
    - defined in a class, it binds ``self`` like a method;
    - with ``COMPILE_ONLY=1`` in the environment a call compiles the kernels it
      launches without running them.
    """

    def __init__(self, fn: Callable, compile_hints: Optional[dict] = None):
        self.fn = fn
        self.func = fn   # FlyDSL's name for the wrapped function
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        #: FlyDSL compile hints (``flyc.compile[{"fast_fp_math": True}](fn)``).
        self.compile_hints: dict = dict(compile_hints or {})
        self._views: Optional[ViewPlan] = None   # which tensor parameters get host views

    def __repr__(self) -> str:
        return f"<flydsl.jit {self.__name__}>"

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        try:
            plan = self._views
            if plan is None or plan.views or JitArgumentRegistry.registry or not plan.holds():
                args, kwargs = self._host_arguments(args, kwargs)
            scoped = _SCOPED.__dict__.get("hints")   # CompilationContext.get_compile_hints()
            context = (hinted_context(merge_compile_hints(self.compile_hints, scoped))
                       if self.compile_hints or scoped else None)
            if _compile_only() and current_context() is DEFAULT_CONTEXT:
                # FlyDSL's COMPILE_ONLY=1: the kernels compile, none launches
                context = LaunchContext(None, context.options if context else None, record=[])
            calls = JIT_CALLS.stack   # CompilationContext.get_current() answers this call's
            calls.append(None)
            try:
                if context is None:
                    return self.fn(*args, **kwargs)
                with using(context):
                    return self.fn(*args, **kwargs)
            finally:
                calls.pop()
        except FlydslError as e:
            trim_traceback(e)   # the user's frames and kernel line, not flydsl's
            raise

    def _host_arguments(self, args: tuple, kwargs: dict) -> tuple:
        """``args``/``kwargs`` as the body sees them: registered types converted,
        tensors of ``fx.Tensor`` parameters as host tensor views (except those the
        body only passes on to kernels, see :func:`view_plan`)."""
        plan = self._views
        if plan is None or not plan.holds():
            plan = self._views = view_plan(self.fn)   # first call, or a kernel name rebound
        if JitArgumentRegistry.registry:
            args = tuple(map(convert_registered, args))
            kwargs = {k: convert_registered(v) for k, v in kwargs.items()}
        positions, names = plan.positions, plan.names
        n = len(args)
        if any(i < n for i in positions) or any(i < n for i, _ in plan.scalars):
            args = list(args)
            for i in positions:
                if i < n:
                    args[i] = host_tensor_view(args[i])
            for i, dtype in plan.scalars:
                if i < n:
                    args[i] = host_number(args[i], dtype)
            args = tuple(args)
        if kwargs and names:
            kwargs = {k: host_tensor_view(v) if k in names else v for k, v in kwargs.items()}
        if kwargs and plan.scalar_names:
            typed = plan.scalar_names
            kwargs = {k: host_number(v, typed[k]) if k in typed else v
                      for k, v in kwargs.items()}
        return args, kwargs


def jit(fn: Optional[Callable] = None) -> Any:
    """Decorator for host functions that launch ``@flydsl.kernel``s."""
    if fn is None:
        return jit
    return JitFunction(fn)


def host_tensor_view(value):
    """A tensor argument of a ``@flyc.jit`` function as its body sees it (FlyDSL's
    layout-dynamic default); other values (not tensors) as they are."""
    if type(value) is TensorArgument:
        return value
    try:
        return TensorArgument(value, dynamic_layout=True)
    except (TypeError, DSLTypeError):
        return value


def host_number(value, dtype):
    """A number argument of a ``@flyc.jit`` parameter annotated ``dtype`` (``fx.Int32``)
    as its body sees it: ``dtype(value)``, a host number of that type which layouts
    keep as a run-time value (FlyDSL's dynamic ``Int32``); anything else as it is."""
    if type(value) in (int, float, bool) or isinstance(value, np.generic):
        return HostScalar(value, dtype)
    return value


#: CompilationContext's per-thread state: its ``__dict__`` is this thread's (a read of
#: a missing attribute of a thread-local raises and catches, about 1.5 us).
_SCOPED = CompilationContext._local

_ENV = getattr(os.environ, "_data", None)   # CPython's raw dict: a lookup without encoding
_COMPILE_ONLY_KEY = os.environ.encodekey("COMPILE_ONLY") if _ENV is not None else None


def _compile_only() -> bool:
    """``env_flag("COMPILE_ONLY")``, without its cost when the variable is unset."""
    if _ENV is not None and _COMPILE_ONLY_KEY not in _ENV:
        return False
    return env_flag("COMPILE_ONLY")


def convert_registered(value):
    """``value`` converted by its ``flyc.JitArgumentRegistry`` converter, if its type has one."""
    conv = JitArgumentRegistry.get(type(value))[0]
    if conv is None or (isinstance(conv, type) and issubclass(conv, Stream)):
        return value   # a stream type: launch(stream=...) takes it as it is
    return conv(value)


#: Launch contexts of compile hints, one per distinct options (warm launches are keyed by it).
_HINTED: dict = {}


def hinted_context(hints: dict) -> Optional[LaunchContext]:
    """The launch context that compiles with ``hints`` (None: no hint changes the
    options, or a context is already pinned, e.g. by ``flydsl.compile``)."""
    if not hints:
        return None
    from .compiler.kernel_function import options_overrides
    from .compiler.options import CompileOptions
    from .launch_context import DEFAULT, current
    overrides = options_overrides(hints)
    if not overrides or current() is not DEFAULT:
        return None
    options = CompileOptions.from_env(**overrides)
    key = options.key()
    context = _HINTED.get(key)
    if context is None:
        context = _HINTED.setdefault(key, LaunchContext(None, options))
    return context


class CompiledFunction:
    """What ``flyc.compile(fn, *args)`` returns (FlyDSL's API): calling it with
    positional arguments like those runs ``fn`` again on its compiled kernels."""

    __slots__ = ("fn", "_pointers")

    def __init__(self, fn: "JitFunction", args: tuple = ()):
        self.fn = fn
        #: position -> the flyc.from_c_void_p argument compiled there: a later call may
        #: pass a bare address (``t.data_ptr()``) in its place, as FlyDSL allows.
        self._pointers = {i: a for i, a in enumerate(args) if type(a) is PointerArgument}

    def __call__(self, *args):
        if self._pointers:
            args = tuple(self._pointers[i].with_address(a)
                         if i in self._pointers and isinstance(a, (int, ctypes.c_void_p))
                         else a for i, a in enumerate(args))
        return self.fn(*args)

    @property
    def compile_hints(self) -> dict:
        return self.fn.compile_hints

    def __repr__(self) -> str:
        return f"<flyc.CompiledFunction {self.fn.__name__}>"


class CompileCallable:
    """``flyc.compile`` (FlyDSL's API; flydsl's own is :func:`flydsl.compile`).

    - ``flyc.compile(fn, *args)`` runs the ``@flyc.jit`` function ``fn`` once (compiling
      and launching its kernels) and returns a :class:`CompiledFunction` that runs it
      again with new positional arguments; with ``COMPILE_ONLY=1`` in the environment it
      compiles without launching and returns None.
    - ``flyc.compile[{"fast_fp_math": True}](fn, *args)`` first adds compile hints to
      ``fn`` (see :mod:`flydsl.compiler.kernel_function`); ``flyc.compile[hints](fn)``
      only adds them and returns ``fn``.
    """

    def __init__(self, compile_hints: Optional[dict] = None):
        self._compile_hints = compile_hints

    def __getitem__(self, hints: dict) -> "CompileCallable":
        if not isinstance(hints, dict):
            raise DSLTypeError(f"flyc.compile[...] expects a dict of compile hints, got "
                               f"{type(hints).__name__}")
        return CompileCallable(dict(hints))

    def __call__(self, fn, *args):
        if not isinstance(fn, JitFunction):
            raise DSLTypeError(f"flyc.compile() expects a @flyc.jit function, got "
                               f"{type(fn).__name__}")
        if self._compile_hints:
            fn.compile_hints = {**fn.compile_hints, **self._compile_hints}
        if not args:
            return fn
        if env_flag("COMPILE_ONLY"):
            context = hinted_context(merge_compile_hints(
                fn.compile_hints, CompilationContext.get_compile_hints()))
            compile(fn, *args, options=context.options if context else None)
            return None
        fn(*args)
        return CompiledFunction(fn, args)


#: ``flydsl.compiler.compile`` (``flyc.compile``).
flyc_compile = CompileCallable()


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
