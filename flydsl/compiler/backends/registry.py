"""The one registry of compile backends: registration, lazy entry points, listing.

Built-in backends are named here as ``module:Class`` strings and imported on
first use; out-of-tree backends are discovered from the ``flydsl.backends``
entry-point group, e.g. in a plugin's ``pyproject.toml``::

    [project.entry-points."flydsl.backends"]
    mybackend = "my_pkg.backend:MyBackend"
"""
from __future__ import annotations

import functools
import importlib
import os
import threading
from importlib.metadata import EntryPoint
from typing import Callable, Iterable, Optional, Sequence, Union

from ...errors import InvalidBackend
from .base import BaseBackend, GPUTarget

ENTRY_POINT_GROUP = "flydsl.backends"
#: Auto-selection order when ``FLYDSL_COMPILE_BACKEND`` is unset.
AUTO_ORDER = ("rocm", "cuda", "cpu")

_BUILTIN = {
    "rocm": "flydsl.compiler.backends.rocm:RocmBackend",
    "cuda": "flydsl.compiler.backends.cuda:CudaBackend",
    "cpu": "flydsl.compiler.backends.cpu:CpuBackend",
}

# name -> loaded class, or a lazy reference ("module:Class" string / EntryPoint)
_BACKENDS: dict[str, Union[type[BaseBackend], str, EntryPoint]] = dict(_BUILTIN)
# Tags of built-ins are known without importing them, so listing stays lazy.
_TAGS: dict[str, tuple[str, ...]] = {name: () for name in _BUILTIN}
_INSTANCES: dict[tuple, BaseBackend] = {}
_LOCK = threading.RLock()


def register_backend(cls: Optional[type[BaseBackend]] = None, *, name: Optional[str] = None,
                     tags: Sequence[str] = ()) -> Callable:
    """Register a :class:`BaseBackend` subclass; usable as ``@register_backend``,
    ``@register_backend(name=..., tags=(...))`` or ``register_backend(Cls, name=...)``.

    A name registered twice raises ValueError (re-registering the same class
    under its lazy built-in name is allowed: that is how built-ins load).
    """
    if cls is None:
        return functools.partial(register_backend, name=name, tags=tags)
    if not (isinstance(cls, type) and issubclass(cls, BaseBackend)):
        raise TypeError(f"register_backend needs a BaseBackend subclass, got {cls!r}")
    name = name or cls.name
    if not name or not isinstance(name, str):
        raise ValueError(f"backend class {cls.__name__} has no name; pass name=...")
    with _LOCK:
        current = _BACKENDS.get(name)
        if isinstance(current, type) and current is not cls:
            raise ValueError(f"duplicate flydsl backend name {name!r} "
                             f"(already {current.__module__}.{current.__qualname__})")
        if current is not None and not isinstance(current, type) \
                and _reference(current) != f"{cls.__module__}:{cls.__qualname__}":
            raise ValueError(f"duplicate flydsl backend name {name!r} (already provided by "
                             f"{_reference(current)})")
        _BACKENDS[name] = cls
        _TAGS[name] = tuple(dict.fromkeys((*cls.tags, *tags)))
        _drop_instances(name)
    return cls


def unregister_backend(name: str) -> None:
    """Remove a backend (mainly for tests and plugins that replace themselves)."""
    with _LOCK:
        _BACKENDS.pop(name, None)
        _TAGS.pop(name, None)
        _drop_instances(name)


def list_backends(exclude_tags: Iterable[str] = ("experimental",)) -> list[str]:
    """Names accepted by ``get_backend``/``FLYDSL_COMPILE_BACKEND``, sorted.

    Backends carrying any of ``exclude_tags`` are left out.
    """
    _discover_entry_points()
    exclude = set(exclude_tags or ())
    names = []
    for name in list(_BACKENDS):
        if exclude and exclude.intersection(backend_tags(name)):
            continue
        names.append(name)
    return sorted(names)


def backend_tags(name: str) -> tuple[str, ...]:
    """Tags of a registered backend (loads a plugin whose tags are not known yet)."""
    if name not in _TAGS:
        lookup_backend_class(name)
    return _TAGS.get(name, ())


def lookup_backend_class(name: str) -> type[BaseBackend]:
    """The backend class registered as ``name``; raises InvalidBackend if unknown."""
    with _LOCK:
        entry = _BACKENDS.get(name)
        if entry is None:
            _discover_entry_points()
            entry = _BACKENDS.get(name)
        if entry is None:
            raise InvalidBackend(name, _BACKENDS)
        if isinstance(entry, type):
            return entry
        cls = _load(entry)
        register_backend(cls, name=name)
        return cls


def selected_backend_name() -> str:
    """``FLYDSL_COMPILE_BACKEND`` if set, else the first of rocm, cuda, cpu with a device."""
    env = os.environ.get("FLYDSL_COMPILE_BACKEND", "").strip()
    if env:
        return env
    for name in AUTO_ORDER:
        if lookup_backend_class(name).device_present():
            return name
    return "cpu"


def resolve_target(name: str, arch: Optional[str] = None) -> GPUTarget:
    """Resolve the arch: argument, then ``FLYDSL_GPU_ARCH``, then the device, then the default."""
    cls = lookup_backend_class(name)
    if arch:
        return cls.make_target(arch)
    env_arch = os.environ.get("FLYDSL_GPU_ARCH", "").strip()
    if env_arch and cls.accepts_env_arch(env_arch):
        return cls.make_target(env_arch)
    detected = cls.detect_target()
    if detected is not None:
        return detected
    return cls.make_target(cls.default_arch())


def get_backend(name: Optional[str] = None, *, arch: Optional[str] = None) -> BaseBackend:
    """The backend instance for ``name`` (default: see :func:`selected_backend_name`).

    The arch is resolved before any caching, so changing
    ``FLYDSL_COMPILE_BACKEND`` or ``FLYDSL_GPU_ARCH`` mid-process takes effect.
    """
    name = name or selected_backend_name()
    cls = lookup_backend_class(name)
    target = resolve_target(name, arch)
    key = (name, cls, target)
    with _LOCK:
        inst = _INSTANCES.get(key)
        if inst is None:
            inst = cls(target)
            _INSTANCES[key] = inst
        return inst


def _drop_instances(name: str) -> None:
    for key in [k for k in _INSTANCES if k[0] == name]:
        del _INSTANCES[key]


def _reference(entry: Union[str, EntryPoint]) -> str:
    return entry.value if isinstance(entry, EntryPoint) else entry


def _load(entry: Union[str, EntryPoint]) -> type[BaseBackend]:
    if isinstance(entry, EntryPoint):
        cls = entry.load()
    else:
        module, _, attr = entry.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, BaseBackend)):
        raise TypeError(f"flydsl backend entry {_reference(entry)!r} is not a BaseBackend subclass")
    return cls


_discovered = False


def _discover_entry_points() -> None:
    """Record (without importing) the backends plugins declare; once per process."""
    global _discovered
    with _LOCK:
        if _discovered:
            return
        _discovered = True
        from importlib.metadata import entry_points
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in _BACKENDS:
                existing = _BACKENDS[ep.name]
                ref = f"{existing.__module__}:{existing.__qualname__}" \
                    if isinstance(existing, type) else _reference(existing)
                if ref != ep.value:
                    import warnings
                    warnings.warn(f"flydsl backend entry point {ep.name!r} = {ep.value!r} "
                                  f"ignored: the name is already taken by {ref}", stacklevel=2)
                continue
            _BACKENDS[ep.name] = ep


def rediscover_entry_points() -> None:
    """Look at the installed entry points again (after installing a plugin at run time)."""
    global _discovered
    with _LOCK:
        _discovered = False
    _discover_entry_points()
