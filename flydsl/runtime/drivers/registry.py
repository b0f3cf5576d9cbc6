"""The one registry of launch drivers: registration, lazy entry points, listing.

Built-ins (``cpu``, ``cuda``, ``hip``) are imported on first use; out-of-tree
drivers come from the ``flydsl.drivers`` entry-point group (see
:mod:`flydsl.plugins`). A backend whose ``driver`` nobody registered fails with
:class:`~flydsl.errors.InvalidDriver`, which lists the available ones.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

from ...errors import InvalidDriver
from ...plugins import PluginRegistry
from .base import Driver

ENTRY_POINT_GROUP = "flydsl.drivers"

_REGISTRY = PluginRegistry("driver", ENTRY_POINT_GROUP, Driver, {
    "cpu": "flydsl.runtime.drivers.cpu:CpuDriver",
    "cuda": "flydsl.runtime.drivers.cuda:CudaDriver",
    "hip": "flydsl.runtime.drivers.hip:HipDriver",
}, InvalidDriver)


def register_driver(cls: Optional[type[Driver]] = None, *,
                    name: Optional[str] = None) -> Callable:
    """Register a :class:`Driver` subclass; usable as ``@register_driver``,
    ``@register_driver(name=...)`` or ``register_driver(Cls)``. A name taken by
    another class raises ValueError."""
    if cls is None:
        return functools.partial(register_driver, name=name)
    _REGISTRY.register(cls, name)
    return cls


def unregister_driver(name: str) -> None:
    """Remove a driver (mainly for tests and plugins that replace themselves)."""
    _REGISTRY.unregister(name)


def list_drivers() -> list[str]:
    """Names of every registered driver, plugins included, sorted."""
    return _REGISTRY.names()


def lookup_driver_class(name: str) -> type[Driver]:
    """The driver class registered as ``name``; InvalidDriver if unknown."""
    return _REGISTRY.lookup(name)


def get_driver(name: str) -> Driver:
    """The process's driver ``name``; FlydslRuntimeError when its runtime is missing."""
    return _REGISTRY.lookup(name).load()


def rediscover_entry_points() -> None:
    """Look at the installed ``flydsl.drivers`` entry points again."""
    _REGISTRY.rediscover()
