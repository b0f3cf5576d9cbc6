"""``@flydsl.autotune``: benchmark a function's configs once per key, remember the winner.

The first call for a new key value (``key=["n", "x.dtype"]`` plus the dtypes of every
tensor argument) benchmarks each :class:`Config` and keeps the fastest, in memory and
as a record in the compile cache's store (keyed by the function's source hash, the
configs, the key values, the backend, arch and options), so later processes reuse it
without benchmarking. Configs that fail (compile errors, launch limits, errors the
function raises, results ``check=`` rejects) are skipped; only all of them failing is
an error. The candidates are compiled first in a warm pool of spawned processes
(:mod:`flydsl.autotune_workers`) that fill the disk cache, so the benchmarks in this
process load them instead of compiling one after another, and a config that crashes
or hangs its compile is skipped instead of taking this process down.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from . import autotune_artifacts as artifacts
from . import autotune_workers, launch_context
from .compiler import cache as disk_cache
from .compiler.content_hash import Unhashable, traced_function_hash
from .compiler.options import env_flag
from .errors import CompilationError, FlydslError
from .expr.dtypes import DType, dtype_from_numpy
from .jit import JitFunction
from .jit import compile as compile_function
from .kernel import KernelFunction
from .runtime.dispatch import env_token
from .runtime.tensors import as_tensor, is_torch_tensor
from .version import __version__

log = logging.getLogger("flydsl.autotune")

#: What a config may raise that marks it failed instead of failing the call.
CONFIG_ERRORS = (FlydslError, ValueError, TypeError)
#: Launch options a tuned ``@flydsl.kernel`` understands (a jit function gets its own).
KERNEL_LAUNCH_OPTS = ("block", "smem")
#: Keywords of FlyDSL's ``Config(NAME=value, ...)`` that are launch options, not
#: constexpr values.
LAUNCH_OPTS = frozenset(("num_warps",) + KERNEL_LAUNCH_OPTS)
RECORD_KIND = "autotune"
RECORD_VERSION = 1
_PLAIN = frozenset((int, float, bool, str, bytes, type(None)))


class Config:
    """One point of an autotuning space: values for the function's constexpr
    parameters (``kwargs``) and launch options (``launch_opts``, e.g. ``num_warps=4``;
    a tuned kernel takes ``block=`` and ``smem=``).

    Two spellings make the same config:

    - flydsl's ``Config({"BLOCK": 128}, num_warps=4)``: the dict holds the constexpr
      values, every keyword is a launch option;
    - FlyDSL's ``Config(BLOCK=128, num_warps=4)``: every keyword is a constexpr value
      except the launch options ``num_warps``, ``block`` and ``smem``.

    Both also take FlyDSL's ``waves_per_eu=`` and ``maxnreg=`` (AMDGPU compiler hints,
    applied as :class:`~flydsl.compiler.kernel_function.CompilationContext` hints while
    the config runs: ``compiler_opts()``) and ``pre_hook=`` (called with the call's
    named arguments and the config's values before each benchmark run).

    ``Config(BLOCK=128, num_warps=4)`` reads back as ``Config(BLOCK=128, num_warps=4)``;
    two configs with the same contents are equal.
    """

    __slots__ = ("kwargs", "launch_opts", "waves_per_eu", "maxnreg", "pre_hook")

    def __init__(self, kwargs: Optional[Mapping[str, Any]] = None, /, *,
                 waves_per_eu: Optional[int] = None, maxnreg: Optional[int] = None,
                 pre_hook: Optional[Callable[[dict], Any]] = None, **launch_opts: Any):
        if kwargs is None:   # FlyDSL's Config(**kwargs)
            kwargs = {k: v for k, v in launch_opts.items() if k not in LAUNCH_OPTS}
            launch_opts = {k: v for k, v in launch_opts.items() if k in LAUNCH_OPTS}
        elif not isinstance(kwargs, Mapping):
            raise TypeError(f"Config(kwargs, **launch_opts) needs a dict of constexpr values "
                            f"first (or FlyDSL's Config(NAME=value, ...)), got "
                            f"{type(kwargs).__name__}")
        both = sorted(set(kwargs) & set(launch_opts))
        if both:
            raise TypeError(f"Config sets {', '.join(map(repr, both))} both in kwargs and as a "
                            "launch option")
        if pre_hook is not None and not callable(pre_hook):
            raise TypeError(f"Config(pre_hook=...) takes a function of the named arguments, "
                            f"got {pre_hook!r}")
        self.kwargs: dict = dict(kwargs)
        self.launch_opts: dict = dict(launch_opts)
        self.waves_per_eu = waves_per_eu
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    @property
    def num_warps(self) -> Optional[int]:
        """The ``num_warps`` launch option, or None (FlyDSL's attribute)."""
        return self.launch_opts.get("num_warps")

    def all_kwargs(self) -> dict:
        """Constexpr values and launch options in one dict (what a jit function gets)."""
        return {**self.kwargs, **self.launch_opts}

    def compiler_opts(self) -> dict:
        """FlyDSL's compiler hints of this config (``waves_per_eu``, ``maxnreg``) that
        are set."""
        return {k: v for k, v in (("waves_per_eu", self.waves_per_eu),
                                  ("maxnreg", self.maxnreg)) if v is not None}

    def to_dict(self) -> dict:
        """FlyDSL's flat form: every value and option by name (``from_dict`` reads it)."""
        return {**self.all_kwargs(), **self.compiler_opts()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Config":
        """The config of ``to_dict()``'s answer (FlyDSL's Config.from_dict)."""
        return cls(**dict(d))

    def to_json(self) -> dict:
        """The contents as JSON values (what a persistent record holds)."""
        out = {"kwargs": _json_value(self.kwargs), "launch_opts": _json_value(self.launch_opts)}
        if self.compiler_opts():
            out["compiler_opts"] = _json_value(self.compiler_opts())
        return out

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return (self.kwargs == other.kwargs and self.launch_opts == other.launch_opts
                and self.compiler_opts() == other.compiler_opts()
                and self.pre_hook is other.pre_hook)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))


def _json_value(value: Any) -> Any:
    """``value`` as JSON data (tuples become lists, other objects their repr)."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


class ConfigRejected(FlydslError):
    """A config's results failed the tuner's ``check=``: the config is skipped."""


class AutotuneError(CompilationError):
    """Every config of a tuned function failed (or pruning left none); ``failures``
    maps each config to its error text. Raised from the first config's exception
    when it failed in this process."""

    def __init__(self, message: str, *, kernel: str, failures: Mapping[Config, Any]):
        self.failures = {cfg: failure_text(f) for cfg, f in failures.items()}
        lines = "\n".join(f"  {cfg!r}: {text}" for cfg, text in self.failures.items())
        super().__init__(message, stage="autotune", diagnostics=lines, kernel=kernel)


def failure_text(failure: Any) -> str:
    """How a failed config is reported: an exception as ``Type: message``; text (from
    a worker process) as it is."""
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    return str(failure)


# -- keys ----------------------------------------------------------------------------------

_KEY_PATH = re.compile(r"([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*|\[\s*-?\d+\s*\])*)")
_KEY_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[\s*(-?\d+)\s*\]")


class KeyPath:
    """One ``key=`` entry: an argument name, then attributes and integer indices
    (``"n"``, ``"x.dtype"``, ``"x.shape[0]"``), read without ``eval``."""

    __slots__ = ("text", "name", "steps")

    def __init__(self, text: str):
        m = _KEY_PATH.fullmatch(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise TypeError(f"autotune key {text!r} is not an argument name, optionally "
                            "followed by .attribute and [integer] steps (e.g. 'x.shape[0]')")
        self.text, self.name = text, m.group(1)
        self.steps = tuple((attr, None) if attr else (None, int(index))
                           for attr, index in _KEY_STEP.findall(m.group(2)))

    def read(self, named: Mapping[str, Any]) -> Any:
        value = named[self.name]
        for attr, index in self.steps:
            value = getattr(value, attr) if attr is not None else value[index]
        return value


def key_value(value: Any) -> Any:
    """A key value that compares and prints the same in every process: numbers and
    strings as they are, sequences (shapes) as tuples, dtypes by name, tensors by
    dtype and shape. TypeError for objects known only by identity."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):     # torch.Size is a tuple
        return tuple(key_value(v) for v in value)
    t = type(value)
    if isinstance(value, (np.dtype, DType)) or (t.__module__ == "torch" and t.__name__ == "dtype"):
        return str(value)
    try:
        tensor = as_tensor(value)
    except TypeError:
        tensor = None
    if tensor is not None:
        return f"tensor[{tensor.dtype.name}, {tensor.shape}]"
    text = repr(value)
    if " at 0x" in text:
        raise TypeError(f"autotune key value {text} has no stable value: key on numbers, "
                        "strings, dtypes or shapes")
    return f"{t.__module__}.{t.__qualname__}:{text}"


# -- the tuner -----------------------------------------------------------------------------

class Autotuner:
    """A ``@flydsl.jit`` function (or a ``@flydsl.kernel``) whose configs are benchmarked
    per key value; made by :func:`autotune`. Call it like the function (a kernel:
    ``tuned[grid, block](*args)``).

    ``best_config`` is the config the last call ran with, ``configs`` the candidates
    (a list, or FlyDSL's function of the call's arguments that returns one),
    ``default`` the heuristic (or None) and ``artifact_name`` FlyDSL's offline name,
    ``cache`` the winners known in this process (``(key values, backend, target,
    options) -> Config``) and ``timings`` the last benchmark (``Config -> ms``, inf for
    a failed config).
    """

    def __init__(self, fn: Any, configs: Any, key: Sequence[str], *,
                 prune_configs_by: Optional[Mapping[str, Any]] = None, warmup: float = 25,
                 rep: float = 100, restore_value: Sequence[str] = (),
                 reset_to_zero: Sequence[str] = (), do_bench: Optional[Callable] = None,
                 check: Optional[Callable[..., Any]] = None,
                 default: Optional[Callable[..., Config]] = None,
                 artifact_name: Optional[str] = None):
        # FlyDSL also tunes a plain Python function (one that builds and launches its
        # kernels itself): called with the config's values as keyword arguments
        self._plain = not isinstance(fn, (JitFunction, KernelFunction))
        if self._plain and not (inspect.isfunction(fn) or inspect.ismethod(fn)):
            raise TypeError(f"@flydsl.autotune goes on a @flydsl.jit function, a "
                            f"@flydsl.kernel or a Python function (stacked above it), "
                            f"got {fn!r}")
        self.fn = fn
        self._py = fn if self._plain else fn.fn      # the Python function (its source)
        self.__wrapped__ = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self._kernel = isinstance(fn, KernelFunction)
        self.signature = fn.signature if self._kernel else inspect.signature(self._py)
        # FlyDSL's configs=f(*args, **kwargs): the candidates depend on the call, so the
        # names they set are known only then (calls are bound without that check)
        self._open = callable(configs) and not isinstance(configs, Config)
        self.configs: Any = configs if self._open else list(configs)
        if not self._open:
            self._check_configs(self.configs)
        self._tuned = frozenset() if self._open else frozenset(
            n for cfg in self.configs for n in (cfg.kwargs if self._kernel else cfg.all_kwargs()))
        if default is not None and not callable(default):
            raise TypeError(f"@flydsl.autotune of {self.__name__!r}: default= takes a function "
                            f"of the call's arguments returning a Config, got {default!r}")
        self.default = default
        self.artifact_name = None if artifact_name is None else \
            artifacts.check_name(artifact_name)
        self.keys = tuple(self._key_path(k) for k in
                          ([key] if isinstance(key, str) else (key or ())))
        self.restore_value = self._arg_names(restore_value, "restore_value")
        self.reset_to_zero = self._arg_names(reset_to_zero, "reset_to_zero")
        self.prune_configs_by = self._check_prune(prune_configs_by)
        self.warmup, self.rep = warmup, rep
        self.do_bench = do_bench
        if check is not None and not callable(check):
            raise TypeError(f"@flydsl.autotune of {self.__name__!r}: check= takes a function "
                            f"of the call's arguments, got {check!r}")
        self.check = check
        self._fast_bind = self._positional_binding()
        self.cache: dict = {}
        self._warm: dict = {}               # (env, launch context, key, devices) -> Config
        self.best_config: Optional[Config] = None
        self.timings: dict = {}
        self._lock = threading.Lock()
        self._fn_hash: Any = ...            # ...: not computed yet; None: memory-only
        self._where: Any = ...              # (module, qualname) a spawned child imports, or None
        self._precompiled: dict = {}        # argument signatures the pool compiled -> failures

    def __repr__(self) -> str:
        what = "configs per call" if self._open else f"{len(self.configs)} configs"
        return f"<flydsl.autotune {self.__name__}: {what}>"

    def cache_clear(self) -> None:
        """Forget the winners known in this process (the store's records stay)."""
        with self._lock:
            self.cache.clear()
            self._warm.clear()

    # -- decoration-time checks ----------------------------------------------------------
    def _params(self) -> list:
        return [p.name for p in self.signature.parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def _check_configs(self, configs: list) -> None:
        if not configs or not all(isinstance(c, Config) for c in configs):
            raise TypeError(f"@flydsl.autotune of {self.__name__!r} needs a non-empty list of "
                            f"flydsl.Config, got {configs!r}")
        params = self._params()
        takes_any = any(p.kind == p.VAR_KEYWORD for p in self.signature.parameters.values())
        for cfg in configs:
            if self._kernel:
                bad_opts = [n for n in cfg.launch_opts if n not in KERNEL_LAUNCH_OPTS]
                if bad_opts:
                    raise TypeError(
                        f"@flydsl.autotune of kernel {self.__name__!r}: config {cfg!r} sets "
                        f"launch option {bad_opts[0]!r}; a kernel's configs take "
                        f"{' and '.join(KERNEL_LAUNCH_OPTS)} (a @flydsl.jit function receives "
                        "its launch options as keyword arguments)")
            names = cfg.kwargs if self._kernel else cfg.all_kwargs()
            for name in names:
                if name not in params and not takes_any:
                    raise TypeError(f"@flydsl.autotune of {self.__name__!r}: config {cfg!r} "
                                    f"sets {name!r}, which is not a parameter of "
                                    f"{self.__name__}({', '.join(params)})")

    def _key_path(self, text: str) -> KeyPath:
        path = KeyPath(text)
        if path.name not in self._params():
            raise TypeError(f"@flydsl.autotune of {self.__name__!r}: key {text!r} names no "
                            f"parameter of {self.__name__}({', '.join(self._params())})")
        if path.name in self._tuned:
            raise TypeError(f"@flydsl.autotune of {self.__name__!r}: key {text!r} is set by "
                            "the configs; key on arguments the calls pass")
        return path

    def _arg_names(self, names: Iterable[str], what: str) -> tuple:
        names = (names,) if isinstance(names, str) else tuple(names or ())
        for name in names:
            if name not in self._params():
                raise TypeError(f"@flydsl.autotune of {self.__name__!r}: {what} names "
                                f"{name!r}, which is not a parameter of "
                                f"{self.__name__}({', '.join(self._params())})")
        return names

    def _check_prune(self, prune: Optional[Mapping[str, Any]]) -> dict:
        prune = dict(prune or {})
        unknown = sorted(set(prune) - {"perf_model", "top_k", "early_config_prune"})
        if unknown:
            raise TypeError(f"@flydsl.autotune of {self.__name__!r}: prune_configs_by takes "
                            f"perf_model, top_k and early_config_prune, not {unknown[0]!r}")
        return prune

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._kernel:
            raise TypeError(f"launch the tuned kernel {self.__name__!r} as "
                            f"{self.__name__}[grid, block](*args)")
        return self._run(args, kwargs, None)

    def __getitem__(self, launch: tuple) -> Callable:
        """``tuned[grid, block]`` (optionally ``[grid, block, smem, stream]``) of a tuned
        kernel; ``grid``, ``block`` and ``smem`` may be callables of the config's
        ``meta`` dict (the arguments by name and the config's values)."""
        if not self._kernel:
            raise TypeError(f"{self.__name__!r} is a tuned @flydsl.jit function: call it")
        if not isinstance(launch, tuple) or not 2 <= len(launch) <= 4:
            raise TypeError(f"launch the tuned kernel {self.__name__!r} as "
                            f"{self.__name__}[grid, block] or [grid, block, smem, stream]")
        launch = launch + (0, None)[len(launch) - 2:]

        def launcher(*args: Any, **kwargs: Any) -> Any:
            return self._run(args, kwargs, launch)
        return launcher

    def _run(self, args: tuple, kwargs: dict, launch: Optional[tuple]) -> Any:
        named = self._bind(args, kwargs)
        key, tensors, devices = self._key(named)
        context = launch_context.current()
        forced = env_flag("FLYDSL_AUTOTUNE")
        # Warm calls: what the backend, arch and options depend on (as a kernel's warm
        # launches key them), so a changed environment resolves and tunes afresh.
        warm = (env_token(), context, key, devices, forced)
        config = self._warm.get(warm)
        if config is None:
            backend, options = context.resolve(tensors)
            slot = (key, backend.name, backend.target, options.key())
            # FLYDSL_AUTOTUNE=1: one fresh search per slot in this process, past the
            # store, the offline configs and the default; its winner serves later calls
            searched = slot + ("searched",)
            config = self.cache.get(searched if forced else slot)
            if config is None:
                if context.record is not None:   # flydsl.compile() of a caller: all configs
                    return self._compile_all(args, kwargs, named, launch)
                with self._lock:
                    config = self.cache.get(searched if forced else slot)
                    if config is None:
                        config = self._tune(args, kwargs, named, launch, key, backend, options,
                                            forced)
                        self.cache[slot] = config
                        if forced:
                            self.cache[searched] = config
            if len(self._warm) > 1024:
                self._warm.clear()
            self._warm[warm] = config
        self.best_config = config
        return self._call(config, args, kwargs, named, launch)

    def _bind(self, args: tuple, kwargs: dict) -> dict:
        """The arguments by name in parameter order, defaults applied, the tuned names
        left out."""
        if not kwargs and self._fast_bind[0] <= len(args) <= self._fast_bind[1]:
            named = dict(zip(self._fast_bind[2], args))
            named.update(self._fast_bind[3][len(args)])
            return named
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}(): {e}") from None
        clash = sorted(self._tuned.intersection(bound.arguments).union(
            self._tuned.intersection(kwargs)))     # (a **kwargs parameter takes any name)
        if clash:
            raise TypeError(f"{self.__name__}(): {clash[0]!r} is set by the autotune configs; "
                            "do not pass it")
        bound.apply_defaults()
        missing = [n for n in self._params() if n not in bound.arguments and n not in self._tuned]
        if missing and not self._open:
            raise TypeError(f"{self.__name__}(): missing a required argument: {missing[0]!r}")
        return {k: v for k, v in bound.arguments.items() if k not in self._tuned}

    def _positional_binding(self) -> tuple:
        """(fewest, most positional args, names, defaults of the rest per count) for
        calls bound without ``Signature.bind``: positional arguments only, all required
        ones given, none tuned. (1, 0, ...) when the signature has ``*args``/``**kwargs``."""
        params = list(self.signature.parameters.values())
        if self._open or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            return 1, 0, (), ()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                     p.POSITIONAL_OR_KEYWORD)]
        most = next((i for i, p in enumerate(positional) if p.name in self._tuned),
                    len(positional))
        required = [i for i, p in enumerate(params) if p.name not in self._tuned
                    and p.default is p.empty]
        if any(i >= len(positional) for i in required):   # a required keyword-only one
            return 1, 0, (), ()
        fewest = max(required, default=-1) + 1
        rest = [{p.name: p.default for p in params[k:] if p.name not in self._tuned}
                for k in range(most + 1)]
        return fewest, most, tuple(p.name for p in positional), tuple(rest)

    def _key(self, named: dict) -> tuple:
        """(key values + every tensor argument's dtype, the tensor arguments, their
        devices)."""
        values = []
        for path in self.keys:
            try:
                values.append(key_value(path.read(named)))
            except (AttributeError, IndexError, KeyError, TypeError) as e:
                raise TypeError(f"{self.__name__}(): autotune key {path.text!r}: "
                                f"{type(e).__name__}: {e}") from None
        tensors, dtypes, devices = [], [], []
        for value in named.values():
            if type(value) in _PLAIN:
                continue
            facts = _tensor_facts(value)
            if facts is not None:
                tensors.append(value)
                dtypes.append(facts[0])
                devices.append(facts[1])
        return tuple(values) + tuple(dtypes), tensors, tuple(devices)

    def _call(self, config: Config, args: tuple, kwargs: dict, named: dict,
              launch: Optional[tuple]) -> Any:
        hints = config.compiler_opts()
        if hints:   # FlyDSL's waves_per_eu / maxnreg: compile hints while it runs
            from .compiler.kernel_function import CompilationContext
            with CompilationContext.compile_hints(hints):
                return self._call_config(config, args, kwargs, named, launch)
        return self._call_config(config, args, kwargs, named, launch)

    def _call_config(self, config: Config, args: tuple, kwargs: dict, named: dict,
                     launch: Optional[tuple]) -> Any:
        if launch is None:
            return self.fn(*args, **kwargs, **config.all_kwargs())
        grid, block, smem, stream = launch
        meta = {**named, **config.all_kwargs()}
        block = config.launch_opts.get("block", block)
        smem = config.launch_opts.get("smem", smem)
        grid, block, smem = (v(meta) if callable(v) else v for v in (grid, block, smem))
        return self.fn.launch(args, {**kwargs, **config.kwargs}, grid, block, smem, stream)

    def _compile_all(self, args, kwargs, named, launch) -> None:
        """Inside ``flydsl.compile()`` nothing runs: record every config's kernels."""
        for cfg in self._configs_for(args, kwargs):
            try:
                self._call(cfg, args, kwargs, named, launch)
            except CONFIG_ERRORS as e:
                log.debug("autotune %s: %r does not compile: %s", self.__name__, cfg, e)

    # -- tuning ----------------------------------------------------------------------------
    def _tune(self, args, kwargs, named, launch, key, backend, options,
              forced: bool = False) -> Config:
        """The config of a new slot: FlyDSL's offline config, the store's record, the
        ``default``, else the winner of a search (the only answer when ``forced``)."""
        start = time.perf_counter()
        artifact = self._artifact(named, backend)
        if artifact is not None and not forced:
            found = self._load_artifact(artifact, args, kwargs)
            if found is not None:
                self._say(key, backend, f"{found!r} (offline config {artifact[0].name})")
                return found
        # a configs function is asked only when its answer is needed: for the store's
        # record key (the configs are part of it) or for a search
        records = disk_cache.enabled() and self._function_hash() is not None
        configs = self._configs_for(args, kwargs) \
            if records or forced or self.default is None else None
        record_key = None if configs is None else \
            self._record_key(configs, key, backend, options)
        if record_key is not None and not forced:
            found = self._load_record(configs, record_key)
            if found is not None:
                self._say(key, backend, f"{found!r} (from the cache)")
                return found
        if self.default is not None and not forced:
            found = self.default(*args, **kwargs)
            if not isinstance(found, Config):
                raise TypeError(f"@flydsl.autotune of {self.__name__!r}: default() returned "
                                f"{found!r}, not a flydsl.Config")
            self._check_configs([found])
            self._say(key, backend, f"{found!r} (the default; FLYDSL_AUTOTUNE=1 searches)")
            return found
        candidates = self._prune(named, configs)   # (configs is set: no default, or forced)
        failures = self._precompile(candidates, args, kwargs, backend, options)
        timings, errors = self._benchmark(candidates, failures, args, kwargs, named, launch)
        failures.update(errors)
        self.timings = {cfg: timings.get(cfg, float("inf")) for cfg in candidates}
        if not timings:
            cause = next((f for f in failures.values() if isinstance(f, BaseException)), None)
            raise AutotuneError(f"every autotune config of {self.__name__!r} failed",
                                kernel=self.__name__, failures=failures) from cause
        best = min(timings, key=timings.__getitem__)
        seconds = time.perf_counter() - start
        if record_key is not None:
            self._store_record(configs, record_key, key, best, seconds)
        if forced and artifact is not None:
            if best.pre_hook is not None:
                raise TypeError(f"@flydsl.autotune of {self.__name__!r}: the offline config "
                                f"file cannot hold {best!r}'s pre_hook")
            artifacts.write(*artifact, best.to_dict())
        if env_flag("FLYDSL_AUTOTUNE_PRINT"):
            self._print_table(key, backend, candidates, failures, best, seconds)
        return best

    def _configs_for(self, args: tuple, kwargs: dict) -> list:
        """The candidates for this call (FlyDSL's ``configs=f(*args, **kwargs)`` asked)."""
        if not self._open:
            return self.configs
        configs = self.configs(*args, **kwargs)
        configs = list(configs) if isinstance(configs, (list, tuple)) else configs
        self._check_configs(configs)
        return configs

    def _say(self, key: tuple, backend, what: str) -> None:
        if env_flag("FLYDSL_AUTOTUNE_PRINT"):
            print(f"flydsl autotune: {self.__name__} {self._key_text(key)} on "
                  f"{backend.name}/{backend.target.arch}: {what}")

    # -- FlyDSL's offline configs (flydsl.autotune_artifacts) ------------------------------
    def _artifact(self, named: dict, backend) -> Optional[tuple]:
        """(path, identity) of this call's offline config file, or None (no
        ``artifact_name`` or no ``FLYDSL_AUTOTUNE_CONFIG_DIR``)."""
        if self.artifact_name is None or artifacts.config_dir() is None:
            return None
        key = {k.text: artifacts.key_value(k.read(named)) for k in self.keys}
        return artifacts.locate(self.artifact_name, key, artifacts.device_identity(backend))

    def _load_artifact(self, artifact: tuple, args: tuple, kwargs: dict) -> Optional[Config]:
        """The stored config if this call can take it (warned and None otherwise)."""
        body = artifacts.load(*artifact)
        if body is None:
            return None
        try:
            config = Config.from_dict(body)
            self._check_configs([config])
            passed = set(self.signature.bind_partial(*args, **kwargs).arguments)
            clash = sorted((set(config.all_kwargs()) & passed)
                           | (set(body) & {k.name for k in self.keys}))
            if clash:
                raise ValueError(f"it sets arguments the call passes: {clash}")
            if any(type(v) is not int for v in config.compiler_opts().values()):
                raise ValueError("compiler options must be integers")
        except (TypeError, ValueError) as e:
            log.warning("Ignoring offline config %s: %s", artifact[0].name, e)
            return None
        return config

    def _prune(self, named: dict, configs: list) -> list:
        """``early_config_prune(configs, named_args)`` first, then the ``top_k`` configs
        ``perf_model(**named_args, **config.all_kwargs())`` predicts fastest."""
        configs = list(configs)
        early = self.prune_configs_by.get("early_config_prune")
        if early is not None:
            configs = list(early(configs, dict(named)))
        model = self.prune_configs_by.get("perf_model")
        if model is not None and configs:
            top_k = self.prune_configs_by.get("top_k", len(configs))
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(configs) * top_k)
            predicted = {cfg: model(**named, **cfg.all_kwargs()) for cfg in configs}
            configs = sorted(configs, key=predicted.__getitem__)[:max(int(top_k), 1)]
        if not configs:
            raise AutotuneError(f"prune_configs_by left no autotune config of "
                                f"{self.__name__!r}", kernel=self.__name__, failures={})
        return configs

    def _benchmark(self, candidates, failed, args, kwargs, named, launch) -> tuple:
        """({config: ms}, {config: exception}); inputs restored after every run."""
        bench = self.do_bench or _default_do_bench()
        saved = {name: _snapshot(named[name]) for name in self.restore_value}

        def run_with(cfg: Config, checked: bool = False) -> Callable[[], None]:
            def run() -> None:
                for name in self.reset_to_zero:
                    _zero(named[name])
                if cfg.pre_hook is not None:   # after the resets, as FlyDSL orders them
                    cfg.pre_hook({**named, **cfg.all_kwargs()})
                try:
                    self._call(cfg, args, kwargs, named, launch)
                    if checked:
                        self._check_results(cfg, args, kwargs)
                finally:
                    for name, copy in saved.items():
                        _restore(named[name], copy)
            return run

        timings, errors = {}, {}
        for cfg in candidates:
            if cfg in failed:
                continue
            run = run_with(cfg)
            try:
                # compiles (or loads), checks the launch and the results before any timing
                run_with(cfg, checked=self.check is not None)()
                timings[cfg] = _milliseconds(bench(run, warmup=self.warmup, rep=self.rep,
                                                   quantiles=[0.5, 0.2, 0.8]))
            except CONFIG_ERRORS as e:
                errors[cfg] = e
                log.debug("autotune %s: %r failed: %s", self.__name__, cfg, failure_text(e))
        for name in self.reset_to_zero:   # the real call sees them zeroed, as each run did
            _zero(named[name])
        return timings, errors

    def _check_results(self, cfg: Config, args: tuple, kwargs: dict) -> None:
        """``check(*args, **kwargs)`` after ``cfg``'s run: ConfigRejected unless it holds
        (an AssertionError from it rejects too, with its message)."""
        try:
            ok = self.check(*args, **kwargs)
            why = "check() returned a false value"
        except AssertionError as e:
            ok, why = False, f"check() failed: {e}" if str(e) else "check() failed"
        if not ok:
            raise ConfigRejected(f"{cfg!r} of {self.__name__!r}: wrong results: {why}")

    # -- records ---------------------------------------------------------------------------
    def _function_hash(self) -> Optional[str]:
        """The source hash of the function and of the kernels it names; None when it has
        none (the winners then stay in memory)."""
        if self._fn_hash is ...:
            try:
                parts = [traced_function_hash(self._py)]
                parts += [f"{k.name}:{traced_function_hash(k.fn)}" for k in self._kernels_named()]
                self._fn_hash = "\0".join(parts)
            except (Unhashable, FlydslError) as e:
                log.debug("autotune %s: winners kept in memory only: %s", self.__name__, e)
                self._fn_hash = None
        return self._fn_hash

    def _kernels_named(self) -> list:
        """The kernels a jit function reaches by a global or closure name."""
        if self._kernel:
            return []
        fn = self._py
        scope = dict(fn.__globals__)
        scope.update((n, c.cell_contents) for n, c in
                     zip(fn.__code__.co_freevars, fn.__closure__ or ()) if _cell_full(c))
        found = {id(v): v for n in fn.__code__.co_names + fn.__code__.co_freevars
                 for v in [scope.get(n)] if isinstance(v, KernelFunction)}
        return sorted(found.values(), key=lambda k: k.name)

    def _record_key(self, configs: list, key: tuple, backend, options) -> Optional[str]:
        fn_hash = self._function_hash()
        if fn_hash is None or not disk_cache.enabled():
            return None
        if any(" at 0x" in repr(c) for c in configs):   # differs in every process
            return None
        h = hashlib.sha256()
        for part in (f"flydsl {__version__}", fn_hash, *map(repr, configs),
                     json.dumps([k.text for k in self.keys]), json.dumps(_json_value(key)),
                     backend.name, backend.target.arch, backend.hash(options)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _load_record(self, configs: list, record_key: str) -> Optional[Config]:
        """The recorded winner, if it is still one of the configs."""
        from .compiler.store import active_store
        record = active_store().get_record(RECORD_KIND, record_key)
        if record is None:
            return None
        chosen = record.get("config")
        index = chosen.get("index") if isinstance(chosen, dict) else None
        if (isinstance(index, int) and 0 <= index < len(configs)
                and configs[index].to_json() == {k: v for k, v in chosen.items()
                                                 if k != "index"}):
            return configs[index]
        log.debug("autotune %s: ignoring record %s: its config is not one of the configs",
                  self.__name__, record_key)
        return None

    def _store_record(self, configs: list, record_key: str, key: tuple, best: Config,
                      seconds: float) -> None:
        from .compiler.store import active_store
        record = {"version": RECORD_VERSION, "function": f"{self.__module__}.{self.__qualname__}",
                  "key": _json_value(key),
                  "config": dict(best.to_json(), index=configs.index(best)),
                  "configs": [repr(c) for c in configs],
                  "timings_ms": [None if self.timings.get(c, float("inf")) == float("inf")
                                 else self.timings[c] for c in configs],
                  "tuning_s": round(seconds, 3)}
        active_store().put_record(RECORD_KIND, record_key, record)

    # -- parallel compiles -----------------------------------------------------------------
    def _precompile(self, candidates: list, args: tuple, kwargs: dict, backend,
                    options) -> dict:
        """Compile the candidates in worker processes that fill the disk cache, when
        they can; {config: error text} of those that failed, crashed or hung there
        (never compiled here)."""
        workers = min(len(candidates), worker_count())
        # (a plain function may do host work that a compile-only worker must not repeat)
        if self._plain or workers < 1 or not disk_cache.enabled() or not disk_cache.DiskCache().usable():
            return {}
        where = self._import_path()
        if where is None:
            return {}
        try:
            stand_ins = [stand_in(a) for a in args], {k: stand_in(v) for k, v in kwargs.items()}
        except TypeError:
            return {}
        seen = (repr(stand_ins), backend.name, backend.target, options.key())
        if seen in self._precompiled:   # compiled for arguments like these already: the
            # configs that failed there stay failed (never compiled here)
            return {c: f for c, f in self._precompiled[seen].items() if c in candidates}
        failures = _compile_in_pool(where, stand_ins, candidates, self._kernel, backend, workers)
        self._precompiled[seen] = failures
        return dict(failures)

    def _import_path(self) -> Optional[tuple]:
        """(module, qualname) under which a spawned process finds this function, or None
        (defined in a function, or in a script a child would run again)."""
        if self._where is ...:
            self._where = _importable(self)
        return self._where

    # -- output ----------------------------------------------------------------------------
    def _key_text(self, key: tuple) -> str:
        names = [k.text for k in self.keys]
        parts = [f"{n}={v!r}" for n, v in zip(names, key)]
        dtypes = key[len(names):]
        if dtypes:
            parts.append("dtypes=" + ",".join(dtypes))
        return "(" + ", ".join(parts) + ")"

    def _print_table(self, key, backend, candidates, failures, best, seconds) -> None:
        rows = [(("* " if cfg == best else "  ") + repr(cfg),
                 f"{self.timings[cfg]:.4f}" if cfg in self.timings and cfg not in failures
                 else "failed: " + failure_text(failures.get(cfg, "?")).splitlines()[0])
                for cfg in candidates]
        width = max(len(r[0]) for r in rows)
        print(f"flydsl autotune: {self.__name__} {self._key_text(key)} on "
              f"{backend.name}/{backend.target.arch}: {len(candidates)} configs in "
              f"{seconds:.2f} s, best {best!r}")
        print(f"  {'config'.ljust(width)}  time (ms)")
        for name, text in rows:
            print(f"  {name.ljust(width)}  {text}")


def autotune(configs: Any, key: Sequence[str] = (), *,
             prune_configs_by: Optional[Mapping[str, Any]] = None, warmup: float = 25,
             rep: float = 100, restore_value: Sequence[str] = (),
             reset_to_zero: Sequence[str] = (), do_bench: Optional[Callable] = None,
             check: Optional[Callable[..., Any]] = None,
             default: Optional[Callable[..., Config]] = None,
             artifact_name: Optional[str] = None) -> Callable[[Any], Autotuner]:
    """Decorator (above ``@flydsl.jit``, ``@flydsl.kernel`` or, as FlyDSL allows, a Python
    function that launches kernels itself): benchmark ``configs`` on
    the first call for each value of ``key`` and run the fastest.

    - ``key``: argument names, with attributes and indices (``"n"``, ``"x.dtype"``,
      ``"x.shape[0]"``); the dtypes of all tensor arguments are part of the key too
      (none: tuned once per tensor dtypes).
    - ``prune_configs_by``: ``{"early_config_prune": f(configs, named_args) -> configs,
      "perf_model": f(**named_args, **config) -> predicted ms, "top_k": int or fraction}``.
    - ``warmup``/``rep``: ms of warm-up and of timed runs per config.
    - ``restore_value``: tensors the function writes, restored after each benchmark run;
      ``reset_to_zero``: tensors zeroed before each run (and before the real call).
    - ``do_bench``: the timer, called like ``flydsl.testing.do_bench``.
    - ``check``: called as ``check(*args, **kwargs)`` (the call's arguments) after each
      config's first run; a false answer or an ``AssertionError`` skips the config
      (list the outputs in ``restore_value`` or ``reset_to_zero``, so that a config
      cannot pass on an earlier config's results).

    - ``configs``: a list of :class:`Config`, or (FlyDSL) a function called as
      ``configs(*args, **kwargs)`` with the call's arguments when a search runs, which
      returns the list.
    - ``default``: FlyDSL's heuristic, ``default(*args, **kwargs) -> Config``: a new key
      runs it without benchmarking (after the offline config and the store's record);
      ``FLYDSL_AUTOTUNE=1`` searches anyway (once per key in a process, past the
      records, the offline configs and the default) and its winner serves later calls.
    - ``artifact_name``: FlyDSL's offline configs (:mod:`flydsl.autotune_artifacts`):
      with ``FLYDSL_AUTOTUNE_CONFIG_DIR`` set, the config for the ``key`` values and the
      device is read from ``<dir>/<name>-<hash>.json`` first, and a forced search
      writes its winner there.

    Example::

        @flydsl.autotune(configs=lambda x, out, n: [Config(BLOCK=b) for b in (64, 128)
                                                   if b <= n],
                         key=["n"], default=lambda x, out, n: Config(BLOCK=64))
        @flydsl.jit
        def scale(x, out, n, BLOCK: fx.Constexpr[int]): ...

    The winner is kept per key, backend, arch and options, in memory and in the compile
    cache's store; ``FLYDSL_AUTOTUNE_PRINT=1`` prints each benchmark table,
    ``FLYDSL_AUTOTUNE_WORKERS`` caps the processes that compile candidates (``0``: in
    this process) and ``FLYDSL_AUTOTUNE_TIMEOUT`` (seconds, default 300) stops a
    config whose compile hangs.
    """
    def decorate(fn: Any) -> Autotuner:
        return Autotuner(fn, configs, key, prune_configs_by=prune_configs_by, warmup=warmup,
                         rep=rep, restore_value=restore_value, reset_to_zero=reset_to_zero,
                         do_bench=do_bench, check=check, default=default,
                         artifact_name=artifact_name)
    return decorate


def do_bench(fn: Callable[[], Any], warmup: int = 5, rep: int = 25,
             quantiles: Optional[Sequence[float]] = None) -> Any:
    """FlyDSL's autotune timer: ``warmup`` untimed calls of ``fn()``, then ``rep`` calls
    each timed alone (device events on a GPU driver, the host clock on the CPU
    backend); the median in milliseconds, or for ``quantiles`` the sorted times at
    those ranks (``times[int(q * rep)]``), as FlyDSL picks them. Counts, not budgets:
    :func:`flydsl.testing.do_bench` (what ``@autotune`` uses by default) takes ms.

    Example::

        ms = flydsl.autotune.do_bench(lambda: add[1, 64](x, y), warmup=1, rep=3)
    """
    from .testing.bench import call_times
    if not callable(fn):
        raise TypeError(f"do_bench: fn must be callable, got {type(fn).__name__}")
    for name, n in (("warmup", warmup), ("rep", rep)):
        if isinstance(n, bool) or not isinstance(n, int) or n < (0 if name == "warmup" else 1):
            raise ValueError(f"do_bench: {name} is a number of calls (FlyDSL's autotune "
                             f"timer), got {n!r}")
    times = call_times(fn, warmup, rep)
    times.sort()
    if quantiles:
        return [times[min(int(q * len(times)), len(times) - 1)] for q in quantiles]
    return times[len(times) // 2]


# -- helpers -------------------------------------------------------------------------------

def _default_do_bench() -> Callable:
    from .testing.bench import do_bench
    return do_bench


def _tensor_facts(value: Any) -> Optional[tuple]:
    """(dtype name, device) of a tensor argument (numpy and torch read directly), or None."""
    if type(value) is np.ndarray:
        found = dtype_from_numpy(value.dtype)
        return (found.name if found is not None else str(value.dtype)), "cpu"
    try:
        t = as_tensor(value)
    except TypeError:   # a tensor flydsl cannot pass: the launch says so
        return None
    return None if t is None else (t.dtype.name, t.device)


def _milliseconds(result: Any) -> float:
    """do_bench's answer: ms, or [median, ...] when quantiles were asked for."""
    return float(result[0] if isinstance(result, (list, tuple)) else result)


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _snapshot(x: Any) -> Any:
    if is_torch_tensor(x):
        return x.clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    raise TypeError(f"restore_value takes numpy arrays and torch tensors, got {type(x).__name__}")


def _restore(x: Any, saved: Any) -> None:
    if is_torch_tensor(x):
        x.copy_(saved)
    else:
        np.copyto(x, saved)


def _zero(x: Any) -> None:
    if is_torch_tensor(x):
        x.zero_()
    elif isinstance(x, np.ndarray):
        x[...] = 0
    else:
        raise TypeError(f"reset_to_zero takes numpy arrays and torch tensors, got "
                        f"{type(x).__name__}")


def worker_count() -> int:
    """``FLYDSL_AUTOTUNE_WORKERS`` (0: compile in this process), else the CPUs this
    process may run on."""
    text = os.environ.get("FLYDSL_AUTOTUNE_WORKERS", "").strip()
    if text:
        if not text.isdigit():
            raise ValueError(f"FLYDSL_AUTOTUNE_WORKERS must be a whole number, got {text!r}")
        return int(text)
    from .runtime.drivers.cpu import usable_cpus
    return usable_cpus()


#: Seconds a config's compile may take in a worker unless FLYDSL_AUTOTUNE_TIMEOUT says.
DEFAULT_TIMEOUT_S = 300.0


def compile_timeout() -> float:
    """``FLYDSL_AUTOTUNE_TIMEOUT``: seconds a config's compile may take in a worker
    before the worker is stopped and the config skipped (default 300)."""
    text = os.environ.get("FLYDSL_AUTOTUNE_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"FLYDSL_AUTOTUNE_TIMEOUT must be a number of seconds above 0, "
                         f"got {text!r}")
    return seconds


def _importable(tuner: Autotuner) -> Optional[tuple]:
    module = sys.modules.get(tuner.__module__)
    if module is None or "<locals>" in tuner.__qualname__:
        return None
    found: Any = module
    for part in tuner.__qualname__.split("."):
        found = getattr(found, part, None)
    if found is not tuner and found is not tuner.fn:
        return None
    if not _main_reruns_safely():
        return None
    return tuner.__module__, tuner.__qualname__


def _main_reruns_safely() -> bool:
    """A spawned child first runs the parent's main script (or ``-m`` module) again, as
    ``__mp_main__``, as multiprocessing's spawn does: safe only when its work sits
    under ``if __name__ == "__main__":``. Nothing is rerun for ``-c``, a REPL, or a
    package's ``__main__`` (pytest)."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return True
    path = getattr(main, "__file__", None)
    return path is None or _has_main_guard(path)


def _has_main_guard(path: str) -> bool:
    """Whether a script keeps its work under a top-level ``if __name__ == "__main__":``
    (a spawned child runs the rest of it again, as ``__mp_main__``)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq):
            sides = [node.test.left, node.test.comparators[0]]
            names = [s.id for s in sides if isinstance(s, ast.Name)]
            texts = [s.value for s in sides if isinstance(s, ast.Constant)]
            if names == ["__name__"] and texts == ["__main__"]:
                return True
    return False


class StandIn:
    """A tensor argument described for a compile in another process: same library,
    dtype, shape, innermost contiguity and alignment (all a specialization sees), no data."""

    __slots__ = ("torch", "dtype", "shape", "inner", "aligned")

    def __init__(self, value: Any):
        t = as_tensor(value)
        self.torch = is_torch_tensor(value) or t.dtype.np_dtype is None
        self.dtype = (str(value.dtype).replace("torch.", "") if is_torch_tensor(value)
                      else t.dtype.name.lower() if self.torch else t.dtype.np_dtype.str)
        self.shape, self.inner, self.aligned = t.shape, t.inner_contiguous, t.aligned

    def __repr__(self) -> str:
        return f"StandIn({'torch' if self.torch else 'numpy'}, {self.dtype}, {self.shape}, " \
               f"{'inner' if self.inner else 'strided'})"

    def make(self) -> Any:
        """Zero-strided over one row (lazily zeroed pages): cheap at any shape; one
        element into its buffer when the argument was not 16-byte aligned."""
        rank, step = len(self.shape), 1 if self.inner else 2
        n = (max(self.shape[-1], 1) if rank else 1) * step
        strides = (0,) * (rank - 1) + (step,) if rank else ()
        skip = 0 if self.aligned else 1
        if self.torch:
            import torch
            base = torch.zeros(n + skip, dtype=getattr(torch, self.dtype))
            return base.as_strided(self.shape, strides, skip)
        base = np.zeros(n + skip, np.dtype(self.dtype))[skip:]
        return np.lib.stride_tricks.as_strided(base, self.shape,
                                               [s * base.itemsize for s in strides])


def stand_in(value: Any) -> Any:
    """``value`` for a compile in another process: tensors as :class:`StandIn`,
    anything else as it is (pickled)."""
    if type(value) in _PLAIN:
        return value
    return StandIn(value) if as_tensor(value) is not None else value


def _compile_in_pool(where: tuple, stand_ins: tuple, candidates: list, kernel: bool, backend,
                     workers: int) -> dict:
    """Run :func:`precompile_config` for each candidate in the warm worker pool
    (:mod:`flydsl.autotune_workers`: each job carries this process's environment, so
    the cache folder and backend are this call's). {config: why} of the configs that
    failed to compile, crashed their worker or overran ``FLYDSL_AUTOTUNE_TIMEOUT``;
    a config the pool could not try is compiled here."""
    args, kwargs = stand_ins
    jobs = {cfg: (precompile_config, (where, args, kwargs,
                                      cfg.kwargs if kernel else cfg.all_kwargs(),
                                      backend.name, backend.target.arch))
            for cfg in candidates}
    failures = {}
    answers = autotune_workers.pool().run(jobs, workers, compile_timeout())
    for cfg, (status, text) in answers.items():
        if status == "failed":
            failures[cfg] = text
            log.debug("autotune %s: %r failed in its compile worker: %s", where[1], cfg, text)
        elif status != "ok":
            log.debug("autotune %s: no compile of %r in a worker: %s", where[1], cfg, text)
    return failures


def _load_compiler(backend: str, arch: str) -> None:
    """What a fresh worker's first compile loads (the compile cache's modules, the
    backend and its toolchain's identity), loaded before ``FLYDSL_AUTOTUNE_TIMEOUT``
    starts: not the config's time."""
    from .compiler import kernel_compiler  # noqa: F401
    from .compiler.backends.registry import get_backend
    from .compiler.options import CompileOptions
    get_backend(backend, arch=arch).hash(CompileOptions.from_env())


def precompile_config(where: tuple, args: list, kwargs: dict, config_kwargs: dict,
                      backend: str, arch: str, ready: Callable[[], None] = lambda: None) -> tuple:
    """In a worker process: compile one config into the disk cache. Returns ("ok", ""),
    ("failed", error) for a config that does not compile, or ("error", why) when this
    process could not try (the parent then compiles it itself). ``ready()`` is called
    once the function is found: the compile, which may crash or hang, starts."""
    import importlib
    try:
        found: Any = importlib.import_module(where[0])
        for part in where[1].split("."):
            found = getattr(found, part)
        fn = found.fn if isinstance(found, Autotuner) else found
        args = [a.make() if isinstance(a, StandIn) else a for a in args]
        kwargs = {k: v.make() if isinstance(v, StandIn) else v for k, v in kwargs.items()}
        _load_compiler(backend, arch)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which compiles itself
        return "error", failure_text(e)
    ready()
    try:
        compile_function(fn, *args, backend=backend, arch=arch, **kwargs, **config_kwargs)
    except CONFIG_ERRORS as e:
        return "failed", failure_text(e)
    except Exception as e:  # noqa: BLE001
        return "error", failure_text(e)
    return "ok", ""


__all__ = ["AutotuneError", "Autotuner", "Config", "ConfigRejected", "KeyPath", "autotune",
           "compile_timeout", "do_bench", "failure_text", "key_value", "worker_count"]
