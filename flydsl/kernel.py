"""``@flydsl.kernel``: a SIMT kernel, specialized and compiled on first launch."""
from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from .errors import DSLTypeError, LaunchError
from .expr.dtypes import ConstexprAnnotation, DType, TensorAnnotation
from .runtime.args import annotation_kind, as_host_tensor, check_scalar, scalar_dtype_of

_override = threading.local()


@dataclass(frozen=True)
class _Param:
    name: str
    kind: str            # "tensor" | "scalar" | "constexpr" | "infer"
    annotation: Any
    default: Any


def _dim3(value, what: str, kernel: str) -> tuple:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(int(v) if not isinstance(v, bool) else None for v in value)
    except (TypeError, ValueError):
        raise LaunchError(f"kernel {kernel!r}: {what} must be an int or a tuple of up to 3 "
                          f"ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(d is None for d in dims) or \
            any(d != v for d, v in zip(dims, value)):
        raise LaunchError(f"kernel {kernel!r}: {what} must be an int or a tuple of up to 3 "
                          f"ints, got {value!r}")
    dims = dims + (1,) * (3 - len(dims))
    if any(d <= 0 for d in dims):
        raise LaunchError(f"kernel {kernel!r}: every {what} dimension must be > 0, got {dims}")
    return dims


class KernelFunction:
    """A ``@flydsl.kernel``. Call it with arguments inside a ``@flydsl.jit`` function
    and ``.launch(grid=..., block=...)`` the result, or launch directly with
    ``kernel[grid, block](*args)``."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.name = fn.__name__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        sig = inspect.signature(fn)
        self.signature = sig
        params = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise DSLTypeError(f"kernel {self.name!r}: *args/**kwargs parameters are not "
                                   "supported", kernel=self.name)
            ann = p.annotation
            if isinstance(ann, str):
                ann = _resolve_string_annotation(fn, ann)
            kind = annotation_kind(ann) if ann is not inspect.Parameter.empty else "infer"
            params.append(_Param(p.name, kind, ann, p.default))
        self.params = tuple(params)
        self._compiled: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<flydsl.kernel {self.name}>"

    # -- calling -------------------------------------------------------
    def __call__(self, *args, **kwargs) -> "KernelCall":
        return KernelCall(self, args, kwargs)

    def __getitem__(self, config) -> Callable:
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise LaunchError(f"kernel {self.name!r}: use kernel[grid, block](*args) "
                              "(optionally kernel[grid, block, smem, stream])")
        grid, block, *rest = config
        smem = rest[0] if rest else 0
        stream = rest[1] if len(rest) > 1 else None

        def launch(*args, **kwargs):
            return KernelCall(self, args, kwargs).launch(grid=grid, block=block, smem=smem,
                                                         stream=stream)
        return launch

    # -- specialization ------------------------------------------------
    def bind(self, args: Sequence, kwargs: dict) -> list:
        """Argument per parameter, defaults applied; TypeError naming the kernel if not bindable."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise DSLTypeError(f"kernel {self.name!r}: {e}", kernel=self.name) from None
        bound.apply_defaults()
        return [bound.arguments[p.name] for p in self.params]

    def specialize(self, values: list) -> tuple:
        """(ParamSpec per parameter, runtime argument per runtime parameter)."""
        from .compiler.frontend.builder import ParamSpec
        specs, runtime = [], []
        for p, v in zip(self.params, values):
            kind = p.kind
            if kind == "constexpr":
                specs.append(ParamSpec(p.name, "constexpr", value=v))
                continue
            try:
                t = as_host_tensor(v)
            except TypeError as e:
                raise DSLTypeError(f"kernel {self.name!r}, argument {p.name!r}: {e}",
                                   kernel=self.name) from None
            if kind == "tensor" or (kind == "infer" and t is not None):
                if t is None:
                    raise DSLTypeError(f"kernel {self.name!r}: argument {p.name!r} is declared "
                                       f"a tensor but got {type(v).__name__}", kernel=self.name)
                ann = p.annotation if isinstance(p.annotation, TensorAnnotation) else None
                if ann is not None and ann.dtype is not None and ann.dtype is not t.dtype:
                    raise DSLTypeError(f"kernel {self.name!r}: argument {p.name!r} must have "
                                       f"dtype {ann.dtype!r}, got {t.dtype!r}", kernel=self.name)
                if ann is not None and ann.rank is not None and ann.rank != t.rank:
                    raise DSLTypeError(f"kernel {self.name!r}: argument {p.name!r} must have "
                                       f"rank {ann.rank}, got {t.rank}", kernel=self.name)
                specs.append(ParamSpec(p.name, "tensor", dtype=t.dtype, rank=t.rank,
                                       inner_contiguous=t.inner_contiguous))
                runtime.append(t)
                continue
            if t is not None:
                raise DSLTypeError(f"kernel {self.name!r}: argument {p.name!r} is declared "
                                   f"{p.annotation!r} but got a tensor", kernel=self.name)
            if kind == "scalar":
                check_scalar(self.name, p.name, p.annotation, v)
                dtype = p.annotation
            else:
                dtype = scalar_dtype_of(v)
                if dtype is None:
                    raise DSLTypeError(f"kernel {self.name!r}: argument {p.name!r} has "
                                       f"unsupported type {type(v).__name__}; annotate it or "
                                       "pass a tensor or a number", kernel=self.name)
            specs.append(ParamSpec(p.name, "scalar", dtype=dtype))
            runtime.append(v)
        return tuple(specs), runtime

    def compiled_for(self, specs: tuple, backend, options) -> "CompiledKernel":
        """The compiled kernel for a specialization (traced and compiled once)."""
        key = (tuple(s.key() for s in specs), backend.name, backend.target, options.key())
        hit = self._compiled.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._compiled.get(key)
            if hit is None:
                hit = compile_kernel(self, specs, backend, options)
                self._compiled[key] = hit
        return hit


def _resolve_string_annotation(fn, text: str):
    try:
        return eval(text, fn.__globals__)  # `from __future__ import annotations` users
    except Exception:
        return inspect.Parameter.empty


class KernelCall:
    """A kernel bound to its arguments, waiting for ``.launch(grid=, block=)``."""

    def __init__(self, kernel: KernelFunction, args: tuple, kwargs: dict):
        self.kernel = kernel
        self.args = args
        self.kwargs = kwargs

    def launch(self, grid=(1, 1, 1), block=(1, 1, 1), smem: int = 0, stream=None) -> None:
        """Compile (once per specialization) and run the kernel."""
        k = self.kernel
        grid3 = _dim3(grid, "grid", k.name)
        block3 = _dim3(block, "block", k.name)
        if not isinstance(smem, int) or smem < 0:
            raise LaunchError(f"kernel {k.name!r}: smem must be a non-negative int, got {smem!r}")
        values = k.bind(self.args, self.kwargs)
        specs, runtime = k.specialize(values)
        backend, options = _resolve_backend_and_options(runtime)
        compiled = k.compiled_for(specs, backend, options)
        sink = getattr(_override, "sink", None)
        if sink is not None:  # flydsl.compile(): record instead of running
            sink.append(compiled)
            return None
        compiled.launch(runtime, grid3, block3, smem, stream)
        return None


def _resolve_backend_and_options(runtime: list):
    from .compiler.backends.registry import get_backend
    from .compiler.options import CompileOptions
    forced = getattr(_override, "backend", None)
    if forced is not None:
        return forced, getattr(_override, "options", None) or CompileOptions.from_env()
    return get_backend(), CompileOptions.from_env()


class CompiledKernel:
    """One specialization of a kernel: its artifact (``.asm``) and its launcher."""

    def __init__(self, kernel: KernelFunction, specs: tuple, artifact, traced, backend):
        self.kernel = kernel
        self.specs = specs
        self.artifact = artifact
        self.backend = backend
        self.shared_bytes = traced.shared_bytes
        self.name = traced.name
        self._launcher = None

    @property
    def asm(self) -> dict:
        return self.artifact.asm

    def launch(self, runtime: list, grid: tuple, block: tuple, smem: int = 0, stream=None):
        from .runtime.launch import launcher_for
        if self._launcher is None:
            self._launcher = launcher_for(self)
        self._launcher.check_and_launch(runtime, grid, block, smem, stream)


def compile_kernel(kernel: KernelFunction, specs: tuple, backend, options) -> CompiledKernel:
    from .compiler.frontend.builder import trace_kernel
    from .compiler.mlir_compiler import MlirCompiler
    traced = trace_kernel(kernel.fn, kernel.name, specs, backend.target, options)
    artifact = MlirCompiler.compile(traced.module, backend=backend, options=options,
                                    func_name=kernel.name)
    return CompiledKernel(kernel, specs, artifact, traced, backend)


def kernel(fn: Optional[Callable] = None) -> Any:
    """Decorator marking a SIMT kernel (see the DESIGN's user API)."""
    if fn is None:
        return kernel
    return KernelFunction(fn)
