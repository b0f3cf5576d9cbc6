"""``@flydsl.kernel``: a SIMT kernel, specialized and compiled on first launch."""
from __future__ import annotations

import inspect
import threading
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import launch_context
from .compiler.function_attrs import check_value_attrs
from .errors import CompileTimeWarning, DSLTypeError, FlydslError, LaunchError, WarpTooNarrowError
from .tracebacks import trim_traceback
from .expr.dtypes import Stream, TensorAnnotation
from .runtime.args import annotation_kind, check_scalar, constexpr_struct_type, scalar_dtype_of
from .runtime.dispatch import (ENV_KEYS, MAX_THREADS_PER_DIM, arg_key, check_extent,
                               check_smem_arg, constexpr_token, dim3, env_token,
                               holds_lookalike)
from .runtime.specialization import checked_pairs, int_divisible, overlap
from .runtime.host_args import host_value, unwrap_args
from .runtime.tensors import as_tensor, range_of, tensor_range
from .expr.layout_algebra import rank as layout_rank

_MAX_THREADS = MAX_THREADS_PER_DIM
_DEFAULT = launch_context.DEFAULT
_current_context = launch_context.current


def _environ_read(compiled) -> tuple:
    """``(names, values)`` of the environment variables ``compiled``'s trace read besides
    those :func:`env_token` keys, as they are now (just after its compile or load);
    ``()`` when there are none."""
    from .compiler.dependencies import environ_values
    names = tuple(n for n in getattr(compiled, "environ_names", ()) if n not in ENV_KEYS)
    return (names, environ_values(names)) if names else ()


def _same_environ(compiled) -> bool:
    """Whether the environment variables ``compiled``'s trace read still have the values
    it was compiled under (in this process: a new process keys the disk cache by them)."""
    read = getattr(compiled, "environ_read", ())
    if not read:
        return True
    from .compiler.dependencies import environ_values
    return environ_values(read[0]) == read[1]


@dataclass(frozen=True)
class _Param:
    name: str
    kind: str            # "tensor" | "scalar" | "constexpr" | "infer"
    annotation: Any
    default: Any


class KernelFunction:
    """A ``@flydsl.kernel``. Call it with arguments inside a ``@flydsl.jit`` function
    and ``.launch(grid=..., block=...)`` the result, or launch directly with
    ``kernel[grid, block](*args)``."""

    def __init__(self, fn: Callable, do_not_specialize: Sequence[str] = (),
                 may_alias: Sequence[str] = (), known_block_size=None,
                 name: Optional[str] = None):
        self.fn = fn
        #: ``@flydsl.kernel(known_block_size=[x, y, z])``: the only block shape the kernel
        #: launches with (checked at each launch), a hint to the backend (the gpu.func's
        #: ``known_block_size``) and what ``fx.gpu.known_block_size()`` returns.
        self.known_block_size = _known_block_size(known_block_size, fn.__name__)
        self._known_block_size = (None if self.known_block_size is None
                                  else list(self.known_block_size))
        if name is not None and not (isinstance(name, str) and name.isidentifier()):
            raise DSLTypeError(f"kernel {fn.__name__!r}: name must be an identifier, got "
                               f"{name!r}", kernel=fn.__name__)
        #: The compiled kernel's symbol (``@flyc.kernel(name=...)``, FlyDSL's option:
        #: what profilers show); the Python function's name by default.
        self.name = name or fn.__name__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        #: The function the tracer inlines when a kernel calls this one.
        self.__flydsl_function__ = fn
        sig = inspect.signature(fn)
        self.signature = sig
        params = []
        for pos, p in enumerate(sig.parameters.values()):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise _arg_error("*args/**kwargs parameters are not supported",
                                 kernel=self.name)
            ann = p.annotation
            if isinstance(ann, str):
                ann = _resolve_string_annotation(fn, ann)
            kind = annotation_kind(ann) if ann is not inspect.Parameter.empty else "infer"
            if pos == 0 and p.name == "self" and ann is inspect.Parameter.empty:
                kind = "constexpr"   # a kernel defined in a class: its object, by identity
            params.append(_Param(p.name, kind, ann, p.default))
        self.params = tuple(params)
        self._last_compiled = None   # for ``metadata``
        #: Parameters never specialized on alignment or divisibility (runtime.specialization).
        self.do_not_specialize = self._parameter_names("do_not_specialize", do_not_specialize)
        #: Tensor parameters never checked for overlap: taken to share memory with every
        #: other tensor, so no pointer they may alias is marked noalias.
        self.may_alias = self._parameter_names("may_alias", may_alias)
        # Keyword arguments can be turned into positions (for the warm path) unless a
        # parameter is keyword-only or positional-only.
        self._kwargs_as_positions = all(p.kind == p.POSITIONAL_OR_KEYWORD
                                        for p in sig.parameters.values())
        self._constexpr_pos = tuple(i for i, p in enumerate(params) if p.kind == "constexpr")
        self._compiled: dict = {}     # full specialization key -> CompiledKernel
        self._dispatch: dict = {}     # fast key -> generated warm launch (runtime.fastpath)
        self._last = None             # the default context's last warm launch: tried first
        self._pinned_last = None      # (pinned context, its last warm launch)
        self._configs: dict = {}      # kernel[grid, block] -> launcher
        self._lock = threading.Lock()
        self._stored: Optional[frozenset] = None   # parameters the source may write
        #: It reads its launch block (fx.known_block_size() without a declaration):
        #: compiled per block, launched without the warm path.
        self._reads_launch_block = False
        #: target -> the wider-warp target this kernel needed there (WarpTooNarrowError)
        self._wider: dict = {}

    def __repr__(self) -> str:
        return f"<flydsl.kernel {self.name}>"

    def _parameter_names(self, option: str, names) -> frozenset:
        """``names`` (a name or several) of an option, each one a parameter's."""
        if isinstance(names, str):
            names = (names,)
        unknown = sorted(set(names) - {p.name for p in self.params})
        if unknown:
            raise _arg_error(f"{option} names no parameter: {', '.join(unknown)} "
                             f"(parameters: {', '.join(p.name for p in self.params)})",
                             kernel=self.name)
        return frozenset(names)

    # -- calling -------------------------------------------------------
    def __call__(self, *args, value_attrs=None, **kwargs) -> "KernelCall":
        """The kernel bound to its arguments, for ``.launch(grid=, block=)``.
        ``value_attrs`` (FlyDSL's): AMDGPU function attributes of this launch's kernel,
        ``{"rocdl.waves_per_eu": 2}`` (:mod:`flydsl.compiler.function_attrs`)."""
        # FlyDSL host arguments (flyc.from_torch_tensor(t), fx.Int32(5), registered
        # types) are passed as what they stand for.
        if kwargs:
            kwargs = {k: host_value(v) for k, v in kwargs.items()}
        attrs = check_value_attrs(value_attrs, self.name) if value_attrs else ()
        return KernelCall(self, unwrap_args(args), kwargs, attrs)

    def __get__(self, obj, objtype=None):
        """A kernel defined in a class: ``self.kernel(x).launch(...)`` passes the
        object as the first (``self``, constexpr) argument."""
        if obj is None:
            return self
        return _BoundKernel(self, obj)

    def __getitem__(self, config) -> Callable:
        try:
            hit = self._configs.get(config)
        except TypeError:   # unhashable (lists): not memoized
            hit = None
        # the memo compares by ==: a config with a bool or a float would find its int
        # twin's launcher
        if hit is not None and (hit[0] is config or not holds_lookalike(config)):
            return hit[1]
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise LaunchError("use kernel[grid, block](*args) (optionally "
                              "kernel[grid, block, smem, stream] or numba's "
                              "kernel[grid, block, stream, smem])", kernel=self.name)
        grid, block, *rest = config
        smem, stream = _smem_and_stream(rest)
        grid3 = dim3(grid, "grid", self.name)
        block3 = dim3(block, "block", self.name)
        if self.known_block_size is not None and block3 != self.known_block_size:
            _block_mismatch(self, block3)
        check_extent(grid3, block3, self.name)
        check_smem_arg(smem, self.name)
        run, kernel = self._launch, self

        def launcher(*args, **kwargs):
            try:
                # The default context's last warm launch first, without _launch's frame
                # (most launches repeat it); _launch is told which one failed.
                if not kwargs and _current_context() is _DEFAULT:
                    last = kernel._last
                    if last is not None and last(args, grid3, block3, smem, stream):
                        return None
                    return run(args, kwargs, grid3, block3, smem, stream, last)
                return run(args, kwargs, grid3, block3, smem, stream)
            except FlydslError as e:
                trim_traceback(e)   # the user's frames and kernel line, not flydsl's
                raise
        try:
            if len(self._configs) > 256:
                self._configs.clear()
            self._configs[config] = (config, launcher)
        except TypeError:
            pass
        return launcher

    def launch(self, args: tuple, kwargs: dict, grid, block, smem: int = 0, stream=None) -> None:
        """Launch with positional ``args``/``kwargs``; compiles on the first call of a
        specialization. Warm calls take the fast path (no binding, no classification)."""
        if type(stream) is Stream:
            stream = stream.value
        if smem:
            check_smem_arg(smem, self.name)
        grid3, block3 = dim3(grid, "grid", self.name), dim3(block, "block", self.name)
        if self.known_block_size is not None and block3 != self.known_block_size:
            _block_mismatch(self, block3)
        if grid3[0] * block3[0] > _MAX_THREADS:   # y, z cannot: 65535 * 1024 < 2^31
            check_extent(grid3, block3, self.name)
        return self._launch(args, kwargs, grid3, block3, smem, stream)

    def _launch(self, args: tuple, kwargs: dict, grid3: tuple, block3: tuple, smem, stream,
                tried: Optional[Callable] = None):
        """Launch ``args`` (``tried``: a warm launch whose guards just refused them)."""
        context = _current_context()
        if kwargs:
            positional = self._positional(args, kwargs)
            if positional is not None:
                args, kwargs = positional, {}
        if kwargs or context.record is not None:   # flydsl.compile(): record, never launch
            return self._launch_slow(args, kwargs, grid3, block3, smem, stream, None, context)
        # The last specialization's guards first: most launches repeat it.
        if context is _DEFAULT:
            last, pinned = self._last, None
        else:   # a CompiledProgram call: its own warm launches
            pinned, entry = context, self._pinned_last
            last = entry[1] if entry is not None and entry[0] is context else None
        if last is not None and last is not tried and last(args, grid3, block3, smem, stream):
            return None
        try:
            if self._constexpr_pos:
                key = (env_token(), pinned, self._constexpr_values(args), *map(arg_key, args))
            else:
                key = (env_token(), pinned, *map(arg_key, args))
            hit = self._dispatch.get(key)
        except TypeError:   # an unhashable argument: take the slow path
            hit = key = None
        if hit is not None and hit(args, grid3, block3, smem, stream):
            self._remember(pinned, getattr(hit, "flydsl_last", hit))
            return None
        return self._launch_slow(args, kwargs, grid3, block3, smem, stream, key, context)

    def _positional(self, args: tuple, kwargs: dict) -> Optional[tuple]:
        """``args`` extended by ``kwargs`` in parameter order (defaults filling the gaps
        before the last one given): the same binding as ``signature.bind``. None when
        that is not possible (unknown or repeated names, a required one missing,
        keyword-only parameters): the slow path then binds and reports."""
        if not self._kwargs_as_positions:
            return None
        out, left = list(args), len(kwargs)
        for p in self.params[len(args):]:
            if not left:
                break
            if p.name in kwargs:
                out.append(kwargs[p.name])
                left -= 1
            elif p.default is not inspect.Parameter.empty:
                out.append(p.default)
            else:
                return None
        return None if left else tuple(out)

    def _constexpr_values(self, args: tuple) -> tuple:
        """Constexpr arguments (plain ones by value, objects by identity): part of the
        warm-launch key."""
        n = len(args)
        return tuple(constexpr_token(args[i]) for i in self._constexpr_pos if i < n)

    def _launch_slow(self, args, kwargs, grid3, block3, smem, stream, fast_key,
                     context: launch_context.LaunchContext, launch: bool = True) -> None:
        """Bind, specialize, compile (or find) and launch; then install the warm launch
        of ``fast_key``. ``launch=False`` (for :meth:`prepare`): install it only."""
        from .runtime.launch import bind_launch
        unwrapped = unwrap_args(args)
        if unwrapped is not args or kwargs:   # host arguments: no warm launch of their own
            args = unwrapped
            kwargs = {k: host_value(v) for k, v in kwargs.items()}
            fast_key = None
        values = self.bind(args, kwargs)
        specs, runtime = self.specialize(values)
        backend, options = context.resolve(runtime)
        if options.function_attrs and backend.target.backend != "rocm":
            options = replace(options, function_attrs=())   # ROCm's: no effect elsewhere
        compiled = self._compiled_widening(specs, backend, options, block3)
        if grid3 is not None:   # what its metadata's occupancy is for
            compiled.launch_shape = (block3[0] * block3[1] * block3[2], smem)
        self._last_compiled = compiled
        if context.record is not None:  # flydsl.compile(): record instead of running
            context.record.append(compiled)
            return None
        bound = bind_launch(compiled, runtime)
        if launch:
            bound(runtime, grid3, block3, smem, stream)
        if fast_key is not None and not self._reads_launch_block and not compiled.environ_read:
            # (a kernel specialized on its launch block takes this path every time:
            # warm launches guard the arguments, not the block; so does one whose trace
            # read environment variables besides the codegen ones warm launches key)
            self._install_fast_path(fast_key, bound, args)
        return None

    def _install_fast_path(self, key: tuple, bound, args: tuple) -> None:
        """Generate the warm launch of calls whose fast key is ``key`` (positional
        ``args`` like these): guards, packing and submit inline (runtime.fastpath).
        ``key[1]`` is the pinned launch context it belongs to (None: the default)."""
        from .runtime.fastpath import build_fast_launch
        nargs = len(args)
        arg_keys = key[len(key) - nargs:]
        runtime = [("arg", i, arg_keys[i], p.kind, args[i]) if i < nargs
                   else ("default", p.default)
                   for i, p in enumerate(self.params) if p.kind != "constexpr"]
        constexprs = [(i, args[i]) for i in self._constexpr_pos if i < nargs]
        pairs = self._checked_overlaps(bound, [e[-1] if e[0] == "arg" else e[1]
                                               for e in runtime])
        fast = build_fast_launch(bound, nargs, key[0], constexprs, runtime, self.name, pairs)
        fast.flydsl_bound = bound      # for prepare()
        fast.flydsl_overlaps = pairs
        with self._lock:
            if len(self._dispatch) > 1024:
                self._dispatch.clear()
            self._dispatch[key] = _either(fast, self._dispatch.get(key))
        self._remember(key[1], fast)

    def _checked_overlaps(self, bound, runtime: list) -> tuple:
        """``(i, j, overlapping)`` for each pair of runtime tensors (indices into
        ``runtime``, the arguments) whose overlap decides the noalias attributes of
        ``bound``'s kernel: its warm launch checks that they still hold."""
        names = [p.name for p in self.params if p.kind != "constexpr"]
        tensors = [i for i, (kind, _) in enumerate(bound.layout) if kind == "tensor"]
        unchecked = {i for i in tensors if names[i] in self.may_alias}
        pairs = checked_pairs(tensors, bound.written, unchecked)
        if not pairs:
            return ()
        ranges = {i: range_of(runtime[i]) for i in {k for pair in pairs for k in pair}}
        return tuple((i, j, overlap(ranges[i], ranges[j])) for i, j in pairs)

    def prepare(self, args: tuple, grid, block, smem: int = 0, stream=None,
                fresh: Sequence[int] = ()):
        """A prepared launch (:func:`~flydsl.runtime.prepared.prepare_launch`) of the
        specialization a launch of ``args`` takes in the default launch context (found
        in memory or the cache, or compiled, when no launch of such args did yet), or
        None in another context or when an argument is not a torch tensor or a plain
        value. Calling it with new torch tensors of the same shapes, strides, dtypes
        and devices stores only their data pointers and submits (see that module for
        what it checks). ``fresh``: positions of tensors that the caller allocates
        anew for every call (so they overlap no other argument)."""
        from .runtime.prepared import prepare_launch
        if _current_context() is not _DEFAULT:
            return None
        try:
            values = self._constexpr_values(args) if self._constexpr_pos else None
            key = (env_token(), None, *(() if values is None else (values,)),
                   *map(arg_key, args))
            fast = self._dispatch.get(key)
        except TypeError:
            return None
        params = [(i, p.default) for i, p in enumerate(self.params) if p.kind != "constexpr"]
        runtime = [args[i] if i < len(args) else default for i, default in params]
        fast = self._variant_for(fast, runtime)
        if fast is None:
            # The launch took the last specialization, whose guards accept more than
            # its key (an int of another bit length), or another overlap's variant:
            # install these args' own entry.
            self._launch_slow(args, {}, None, None, smem, stream, key, _DEFAULT, launch=False)
            fast = self._variant_for(self._dispatch.get(key), runtime)
        bound = getattr(fast, "flydsl_bound", None)
        if bound is None:
            return None
        constexprs = [(i, args[i]) for i in self._constexpr_pos if i < len(args)]
        grid3, block3 = dim3(grid, "grid", self.name), dim3(block, "block", self.name)
        return prepare_launch(bound, args, params, constexprs, (grid3, block3, smem, stream),
                              fast.flydsl_overlaps, fresh)

    @staticmethod
    def _variant_for(entry: Optional[Callable], runtime: list) -> Optional[Callable]:
        """The warm launch of a keyed ``entry`` specialized on the overlaps of the
        ``runtime`` arguments, if any."""
        for fast in getattr(entry, "flydsl_candidates", (entry,) if entry else ()):
            if _holds(fast, runtime):
                return fast
        return None

    def _remember(self, pinned, fast) -> None:
        """``fast`` ran last in its context (None: the default one)."""
        if pinned is None:
            self._last = fast
        else:
            self._pinned_last = (pinned, fast)

    # -- specialization ------------------------------------------------
    def bind(self, args: Sequence, kwargs: dict) -> list:
        """Argument per parameter, defaults applied; TypeError naming the kernel if not bindable."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise _arg_error(str(e), kernel=self.name) from None
        bound.apply_defaults()
        return [bound.arguments[p.name] for p in self.params]

    def specialize(self, values: list) -> tuple:
        """(ParamSpec per parameter, runtime argument per runtime parameter)."""
        from .compiler.frontend.params import ParamSpec
        specs, runtime, ranges = [], [], {}
        for p, v in zip(self.params, values):
            kind = p.kind
            if kind == "constexpr":
                try:
                    hash(v)
                except TypeError:
                    if constexpr_struct_type(type(v)):   # keyed by content (ParamSpec.key)
                        specs.append(ParamSpec(p.name, "constexpr", value=v))
                        continue
                    raise _arg_error(f"constexpr argument {p.name!r} "
                                       f"must be hashable, got {type(v).__name__}",
                                       kernel=self.name) from None
                specs.append(ParamSpec(p.name, "constexpr", value=v))
                continue
            try:
                t = as_tensor(v)
            except TypeError as e:
                raise _arg_error(f"argument {p.name!r}: {e}",
                                   kernel=self.name) from None
            if kind == "tensor" or (kind == "infer" and t is not None):
                if t is None:
                    raise _arg_error(f"argument {p.name!r} is declared "
                                       f"a tensor but got {type(v).__name__}", kernel=self.name)
                ann = p.annotation if isinstance(p.annotation, TensorAnnotation) else None
                # a host view (fx.make_view in a @flyc.jit body): its memory, its layout
                layout = getattr(type(v), "__flydsl_layout__", None) and v.__flydsl_layout__
                rank = t.rank if layout is None else layout_rank(layout)
                if ann is not None and ann.dtype is not None and ann.dtype is not t.dtype:
                    raise _arg_error(f"argument {p.name!r} must have "
                                       f"dtype {ann.dtype!r}, got {t.dtype!r}", kernel=self.name)
                if ann is not None and ann.rank is not None and ann.rank != rank:
                    raise _arg_error(f"argument {p.name!r} must have "
                                       f"rank {ann.rank}, got {rank}", kernel=self.name)
                specs.append(ParamSpec(p.name, "tensor", dtype=t.dtype, rank=t.rank,
                                       inner_contiguous=t.inner_contiguous,
                                       aligned=t.aligned and p.name not in self.do_not_specialize,
                                       wide=t.wide, layout=layout))
                ranges[len(specs) - 1] = tensor_range(t)
                runtime.append(v)
                continue
            if t is not None:
                raise _arg_error(f"argument {p.name!r} is declared "
                                   f"{p.annotation!r} but got a tensor", kernel=self.name)
            if kind == "scalar":
                try:
                    check_scalar(self.name, p.name, p.annotation, v)
                except DSLTypeError as e:
                    raise _arg_error(e.message, kernel=self.name) from None
                dtype = p.annotation
            else:
                dtype = scalar_dtype_of(v)
                if dtype is None:
                    raise _arg_error(f"argument {p.name!r} has "
                                       f"unsupported type {type(v).__name__}; annotate it or "
                                       "pass a tensor or a number", kernel=self.name)
            divisible = (dtype.kind == "int" and p.name not in self.do_not_specialize
                         and int_divisible(int(v)))
            specs.append(ParamSpec(p.name, "scalar", dtype=dtype, divisible=divisible))
            runtime.append(v)
        return self._with_overlaps(specs, ranges), runtime

    def _with_overlaps(self, specs: list, ranges: dict) -> tuple:
        """``specs`` with each tensor's ``overlaps``: the other tensors whose byte ranges
        (``ranges``: spec index -> :func:`~flydsl.runtime.specialization.byte_range`)
        meet its own, or whose overlap with it is not checked (either is ``may_alias``,
        or the source stores through neither: then it does not matter, and leaving it
        out keeps ``k(a, a, out)`` on the binary of ``k(a, b, out)``)."""
        unchecked = self.may_alias
        stored = self._maybe_written()
        for i, r in ranges.items():
            name = specs[i].name
            shared = tuple(other for other, q in ((specs[j].name, q) for j, q in ranges.items()
                                                  if j != i)
                           if name in unchecked or other in unchecked
                           or (name not in stored and other not in stored) or overlap(r, q))
            if shared:
                specs[i] = replace(specs[i], overlaps=shared)
        return tuple(specs)

    def _maybe_written(self) -> frozenset:
        """Tensor parameters the kernel's source may store through (all of them when
        the source cannot be read), found once."""
        if self._stored is None:
            from .compiler.frontend.stores import parameters_maybe_written
            every = frozenset(p.name for p in self.params)
            try:
                self._stored = parameters_maybe_written(self.fn, every)
            except FlydslError:
                self._stored = every
        return self._stored

    def _compiled_widening(self, specs: tuple, backend, options, block3):
        """:meth:`compiled_for`, traced again for the backend's wider warp when the kernel
        needs more lanes than its warp has (the CPU's 32-lane warps and a kernel written
        for AMD's 64-lane wavefronts); later specializations go to that warp at once."""
        from .compiler.backends.registry import backend_for_target
        wide = self._wider.get(backend.target)
        if wide is not None:
            backend = backend_for_target(backend.name, wide)
        try:
            return self.compiled_for(specs, backend, options, block3)
        except WarpTooNarrowError as e:
            wide = backend.wider_warp_target()
            if wide is None:
                raise
            warnings.warn(f"kernel {self.name!r} needs {wide.warp_size}-lane warps "
                          f"({e.filename}:{e.lineno}): the {backend.name} backend runs it "
                          f"with {wide.warp_size}-lane warps (FLYDSL_CPU_WARP_SIZE sets "
                          "the width of every kernel and of get_warp_size())",
                          CompileTimeWarning, stacklevel=2)
            self._wider[backend.target] = wide
            return self.compiled_for(specs, backend_for_target(backend.name, wide), options,
                                     block3)

    def compiled_for(self, specs: tuple, backend, options, block3: Optional[tuple] = None):
        """The compiled kernel for a specialization (from memory, the disk cache, or built)
        launched with ``block3`` threads: a kernel that reads its launch block
        (``fx.known_block_size()`` without a declaration) is specialized on it."""
        from .compiler.kernel_compiler import compile_specialization
        from .compiler.kernel_function import launch_block, reads_launch_block
        # the codegen environment (FLYDSL_GPU_ARCH, ...) is part of the key, and a hit
        # whose trace read another variable that has changed since is compiled again
        key = (tuple(s.key() for s in specs), backend.name, backend.target, options.key(),
               env_token())
        if self._reads_launch_block:
            key += (block3,)
        hit = self._compiled.get(key)
        if hit is not None and _same_environ(hit):
            return hit
        with self._lock:
            hit = self._compiled.get(key)
            if hit is None or not _same_environ(hit):
                with launch_block(None if self.known_block_size else block3,
                                  self.known_block_size) as state:
                    hit = compile_specialization(self.fn, self.name, specs, backend, options)
                hit.environ_read = _environ_read(hit)
                if reads_launch_block(state, hit) and not self._reads_launch_block:
                    self._reads_launch_block = True   # from now on keyed by the block too
                    self._dispatch.clear()
                    self._last = self._pinned_last = None
                    key += (block3,)
                self._compiled[key] = hit
        return hit

    @property
    def metadata(self):
        """Registers, spills, shared memory, max threads per block and occupancy
        (:class:`~flydsl.compiler.kernel_metadata.KernelMetadata`) of the
        specialization the latest first launch compiled or loaded, its occupancy
        at that launch's block; None before any launch."""
        last = self._last_compiled
        return last.metadata if last is not None else None

    def warm_launch_source(self) -> Optional[str]:
        """The Python source generated for the warm launch that ran last (None before
        the first launch): its argument guards and packing, for debugging."""
        last = self._last or (self._pinned_last or (None, None))[1]
        return getattr(last, "__flydsl_source__", None)

    def cache_clear(self) -> None:
        """Forget this kernel's in-memory compiled specializations."""
        with self._lock:
            self._compiled.clear()
            self._dispatch.clear()
            self._last = self._pinned_last = None
            self._configs.clear()


def _either(fast: Callable, previous: Optional[Callable]) -> Callable:
    """The keyed warm launch of ``fast`` where ``previous`` held the same key: one key
    covers the variants of every overlap of its arguments (in place or not), so each
    is kept and tried in turn (the newest first) instead of being replaced."""
    if previous is None:
        return fast
    kept = [f for f in getattr(previous, "flydsl_candidates", (previous,))
            if f.flydsl_overlaps != fast.flydsl_overlaps]
    if not kept:
        return fast
    candidates = (fast, *kept)

    def either(args, grid, block, smem, stream) -> bool:
        for f in candidates:
            if f(args, grid, block, smem, stream):
                either.flydsl_last = f   # the kernel's next launch tries it alone first
                return True
        return False
    either.flydsl_candidates = candidates
    either.flydsl_last = fast
    return either


def _holds(fast: Callable, runtime: list) -> bool:
    """The overlaps ``fast`` was specialized on hold of the ``runtime`` arguments."""
    return all(overlap(range_of(runtime[i]), range_of(runtime[j])) is o
               for i, j, o in fast.flydsl_overlaps)


def _is_stream(x) -> bool:
    """None or a stream object (torch, numba, CuPy); numbers and strings are not."""
    return x is None or not isinstance(x, (int, float, str, bytes, np.number))


def _smem_and_stream(rest: list) -> tuple:
    """(smem, stream) of ``kernel[grid, block, *rest]``, in CUDA C's order
    ``[grid, block, smem, stream]`` or numba's ``[grid, block, stream, smem]``: a stream
    is None or a stream object, the shared-memory size a number. With two ints,
    ``[grid, block, 0, smem]`` is numba's (0: the default stream); any other pair is
    CUDA C's ``(smem, raw stream handle)``. The size is validated afterwards."""
    if not rest:
        return 0, None
    if len(rest) == 1:
        return (0, rest[0]) if _is_stream(rest[0]) else (rest[0], None)
    first, second = rest
    numba = _is_stream(first) or (
        isinstance(first, (int, np.integer)) and first == 0
        and isinstance(second, (int, np.integer)))
    return (second, first) if numba else (first, second)


def _arg_error(message: str, kernel: str) -> DSLTypeError:
    """A TypeError about a launch argument, located at the user's launch call."""
    from .errors import user_call_site
    filename, lineno, line = user_call_site()
    return DSLTypeError(message, kernel=kernel, filename=filename, lineno=lineno,
                        source_line=line)


def _resolve_string_annotation(fn, text: str):
    """Annotations as strings (``from __future__ import annotations``) are evaluated in
    the kernel's module; failing that (``fx`` imported inside a function), the DSL's
    own spellings (``fx.Int32``, ``fx.Tensor[fx.Float32]``, ``fx.Constexpr[int]``) are
    read by name. Anything else is an error, not a silent guess."""
    try:
        return eval(text, fn.__globals__, dict(vars(__import__("builtins"))))
    except Exception as e:  # noqa: BLE001
        resolved = _dsl_annotation_by_name(text)
        if resolved is not None:
            return resolved
        raise DSLTypeError(f"cannot resolve the annotation {text!r}: {type(e).__name__}: {e}",
                           kernel=fn.__name__) from None


def _dsl_annotation_by_name(text: str):
    import ast
    from .expr import dtypes

    def last_name(node) -> str:
        if isinstance(node, ast.Attribute):
            return node.attr
        return node.id if isinstance(node, ast.Name) else ""

    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    head = last_name(node.value if isinstance(node, ast.Subscript) else node)
    if head == "Constexpr":
        return dtypes.ConstexprAnnotation(None)
    if head == "Tensor":
        if not isinstance(node, ast.Subscript):
            return dtypes.Tensor
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        dtype = getattr(dtypes, last_name(inner[0]), None)
        rank = inner[1].value if len(inner) > 1 and isinstance(inner[1], ast.Constant) else None
        return dtypes.Tensor[dtype, rank] if isinstance(dtype, dtypes.DType) else None
    found = getattr(dtypes, head, None)
    return found if isinstance(found, dtypes.DType) and not isinstance(node, ast.Subscript) \
        else None


class _BoundKernel:
    """A class-defined kernel read from an object: calls pass the object first."""

    __slots__ = ("kernel", "obj")

    def __init__(self, kernel: KernelFunction, obj):
        self.kernel, self.obj = kernel, obj

    def __call__(self, *args, value_attrs=None, **kwargs) -> "KernelCall":
        return self.kernel(self.obj, *args, value_attrs=value_attrs, **kwargs)

    def __getitem__(self, config) -> Callable:
        launcher = self.kernel[config]
        return lambda *args, **kwargs: launcher(self.obj, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.kernel, name)


class KernelCall:
    """A kernel bound to its arguments, waiting for ``.launch(grid=, block=)``."""

    __slots__ = ("kernel", "args", "kwargs", "function_attrs")

    def __init__(self, kernel: KernelFunction, args: tuple, kwargs: dict,
                 function_attrs: tuple = ()):
        self.kernel = kernel
        self.args = args
        self.kwargs = kwargs
        self.function_attrs = function_attrs    # checked value_attrs

    def launch(self, grid=(1, 1, 1), block=None, smem: int = 0, stream=None) -> None:
        """Compile (once per specialization) and run the kernel."""
        try:
            if block is None:   # the declared known_block_size, else one thread
                block = self.kernel.known_block_size or (1, 1, 1)
            if self.function_attrs:   # compiled with them: a context whose options hold them
                with launch_context.using(
                        launch_context.with_function_attrs(self.function_attrs)):
                    return self.kernel.launch(self.args, self.kwargs, grid, block, smem,
                                              stream)
            return self.kernel.launch(self.args, self.kwargs, grid, block, smem, stream)
        except FlydslError as e:
            trim_traceback(e)   # the user's frames and kernel line, not flydsl's
            raise


def kernel(fn: Optional[Callable] = None, *, do_not_specialize: Sequence[str] = (),
           may_alias: Sequence[str] = (), known_block_size=None,
           name: Optional[str] = None) -> Any:
    """Decorator marking a SIMT kernel (see the README's "Writing kernels").

    ``do_not_specialize``: names of parameters never specialized on 16-byte alignment
    (tensors) or divisibility by 16 (ints), e.g. an int that takes many values, to
    keep one compiled variant (:mod:`flydsl.runtime.specialization`).

    ``may_alias``: names of tensor parameters whose memory may be shared with other
    tensor arguments, never checked at launch: the kernel never assumes that they,
    or a tensor they may overlap where either is written, are disjoint (no LLVM
    ``noalias``). Other tensors are checked at each launch; a kernel whose written
    tensors overlap no other argument compiles with ``noalias`` pointers.

    ``known_block_size``: ``[x, y, z]``, the block shape every launch uses (FlyDSL's
    option): a launch with another block is a ``LaunchError``; the backend gets it as
    the kernel's ``gpu.known_block_size`` (CUDA ``.reqntid``, ROCm
    ``amdgpu-flat-work-group-size``), and ``fx.gpu.known_block_size()`` returns it.

    ``name``: the compiled kernel's symbol (FlyDSL's option; what profilers and
    ``flydsl.compile(...).kernel_names`` show), by default the function's name."""
    if fn is None:
        return lambda f: KernelFunction(f, do_not_specialize, may_alias, known_block_size, name)
    return KernelFunction(fn, do_not_specialize, may_alias, known_block_size, name)


def _known_block_size(size, kernel_name: str) -> Optional[tuple]:
    """``known_block_size`` checked: None, or three positive ints (FlyDSL's messages)."""
    if size is None:
        return None
    if isinstance(size, (str, bytes)) or not hasattr(size, "__len__"):
        raise TypeError(f"kernel {kernel_name!r}: known_block_size must be a sequence of 3 "
                        f"positive integers, got {size!r}")
    if len(size) != 3:
        raise ValueError(f"kernel {kernel_name!r}: known_block_size must have exactly 3 "
                         f"elements, got {len(size)}")
    out = []
    for k, n in enumerate(size):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"kernel {kernel_name!r}: known_block_size[{k}] must be an int, "
                            f"got {n!r}")
        if n <= 0:
            raise ValueError(f"kernel {kernel_name!r}: known_block_size[{k}] must be "
                             f"positive, got {n}")
        out.append(int(n))
    return tuple(out)


def _block_mismatch(kernel: "KernelFunction", block3: tuple) -> None:
    raise LaunchError(f"launched with block={block3}, but the kernel declares "
                      f"known_block_size={list(kernel.known_block_size)}", kernel=kernel.name)
