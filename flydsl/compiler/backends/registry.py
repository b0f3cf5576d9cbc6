"""The one registry of compile backends: registration, lazy entry points, listing,
and which backend and arch a launch compiles for.

Built-in backends are named here as ``module:Class`` strings and imported on
first use; out-of-tree backends are discovered from the ``flydsl.backends``
entry-point group (see :mod:`flydsl.plugins`), e.g. in a plugin's
``pyproject.toml``::

    [project.entry-points."flydsl.backends"]
    mybackend = "my_pkg.backend:MyBackend"
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Callable, Iterable, Optional, Sequence

from ...errors import InvalidBackend
from ...plugins import PluginRegistry
from ..target import GPUTarget
from .base import BaseBackend

ENTRY_POINT_GROUP = "flydsl.backends"
#: Auto-selection order when ``FLYDSL_COMPILE_BACKEND`` is unset.
AUTO_ORDER = ("rocm", "cuda", "cpu")

_INSTANCES: dict[tuple, BaseBackend] = {}
_LOCK = threading.RLock()
# Tags given at registration, beyond the class's own (built-ins have none: listing
# them stays lazy).
_EXTRA_TAGS: dict[str, tuple[str, ...]] = {}


def _drop_instances(name: str) -> None:
    with _LOCK:
        for key in [k for k in _INSTANCES if k[0] == name]:
            del _INSTANCES[key]


_REGISTRY = PluginRegistry("backend", ENTRY_POINT_GROUP, BaseBackend, {
    "rocm": "flydsl.compiler.backends.rocm:RocmBackend",
    "cuda": "flydsl.compiler.backends.cuda:CudaBackend",
    "cpu": "flydsl.compiler.backends.cpu:CpuBackend",
}, InvalidBackend, on_change=_drop_instances)


def register_backend(cls: Optional[type[BaseBackend]] = None, *, name: Optional[str] = None,
                     tags: Sequence[str] = ()) -> Callable:
    """Register a :class:`BaseBackend` subclass; usable as ``@register_backend``,
    ``@register_backend(name=..., tags=(...))`` or ``register_backend(Cls, name=...)``.

    A name registered twice raises ValueError (re-registering the same class
    under its lazy built-in name is allowed: that is how built-ins load).
    """
    if cls is None:
        return functools.partial(register_backend, name=name, tags=tags)
    registered = _REGISTRY.register(cls, name)
    if tags:
        _EXTRA_TAGS[registered] = tuple(tags)
    return cls


def unregister_backend(name: str) -> None:
    """Remove a backend (mainly for tests and plugins that replace themselves)."""
    _EXTRA_TAGS.pop(name, None)
    _REGISTRY.unregister(name)


def list_backends(exclude_tags: Iterable[str] = ("experimental",)) -> list[str]:
    """Names accepted by ``get_backend``/``FLYDSL_COMPILE_BACKEND``, sorted.

    Backends carrying any of ``exclude_tags`` are left out (which imports a plugin
    to read its tags).
    """
    exclude = set(exclude_tags or ())
    return [name for name in _REGISTRY.names()
            if not (exclude and exclude.intersection(backend_tags(name)))]


def backend_tags(name: str) -> tuple[str, ...]:
    """Tags of a registered backend (loads a plugin whose tags are not known yet)."""
    if name in _REGISTRY.builtins and _REGISTRY.loaded(name) is None:
        return _EXTRA_TAGS.get(name, ())
    cls = lookup_backend_class(name)
    return tuple(dict.fromkeys((*cls.tags, *_EXTRA_TAGS.get(name, ()))))


def lookup_backend_class(name: str) -> type[BaseBackend]:
    """The backend class registered as ``name``; raises InvalidBackend if unknown."""
    return _REGISTRY.lookup(name)


def rediscover_entry_points() -> None:
    """Look at the installed entry points again (after installing a plugin at run time)."""
    _REGISTRY.rediscover()


def selected_backend_name() -> str:
    """``FLYDSL_COMPILE_BACKEND`` if set, else the first of rocm, cuda, cpu with a device."""
    env = os.environ.get("FLYDSL_COMPILE_BACKEND", "").strip()
    if env:
        return env
    for name in AUTO_ORDER:
        if lookup_backend_class(name).device_present():
            return name
    return "cpu"


def resolve_target(name: str, arch: Optional[str] = None, tensors: Sequence = ()) -> GPUTarget:
    """The target a compile is for; the arch comes from, in order: ``arch``,
    ``FLYDSL_GPU_ARCH``, the device holding ``tensors`` (a launch's arguments), the
    first device present, the backend's default. The one place an arch is decided."""
    cls = lookup_backend_class(name)
    if arch:
        return cls.make_target(arch)
    env_arch = os.environ.get("FLYDSL_GPU_ARCH", "").strip()
    if env_arch and cls.accepts_env_arch(env_arch):
        return cls.make_target(env_arch)
    if tensors:
        from_tensors = _tensors_arch(cls, tensors)
        if from_tensors:
            return cls.make_target(from_tensors)
    detected = cls.detect_target()
    if detected is not None:
        return detected
    return cls.make_target(cls.default_arch())


def _tensors_arch(cls: type[BaseBackend], tensors: Sequence) -> Optional[str]:
    from ...errors import FlydslRuntimeError
    from ...runtime.devices import tensors_arch
    from ...runtime.drivers import get_driver
    try:
        return tensors_arch(get_driver(cls.driver), tensors)
    except FlydslRuntimeError:   # no driver runtime: the launch reports it
        return None


def get_backend(name: Optional[str] = None, *, arch: Optional[str] = None,
                tensors: Sequence = ()) -> BaseBackend:
    """The backend instance for ``name`` (default: see :func:`selected_backend_name`),
    its arch resolved by :func:`resolve_target`.

    The arch is resolved before any caching, so changing
    ``FLYDSL_COMPILE_BACKEND`` or ``FLYDSL_GPU_ARCH`` mid-process takes effect.
    """
    name = name or selected_backend_name()
    return backend_for_target(name, resolve_target(name, arch, tensors))


def backend_for_target(name: str, target: GPUTarget) -> BaseBackend:
    """The backend instance of ``name`` for ``target`` (one per target)."""
    cls = lookup_backend_class(name)
    key = (name, cls, target)
    with _LOCK:
        inst = _INSTANCES.get(key)
        if inst is None:
            inst = cls(target)
            _INSTANCES[key] = inst
        return inst
