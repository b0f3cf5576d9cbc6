"""Named plugin classes: compile backends and launch drivers are registered this way.

Built-ins are named as ``"module:Class"`` strings and imported on first use;
plugins are discovered from an entry-point group (without importing them) and
loaded one name at a time, e.g. in a plugin's ``pyproject.toml``::

    [project.entry-points."flydsl.backends"]
    mydevice = "my_pkg.backend:MyBackend"

    [project.entry-points."flydsl.drivers"]
    mydevice = "my_pkg.driver:MyDriver"

A name registered twice is an error, unless it is the same class (how a lazy
entry becomes a loaded one). An unknown name raises the registry's error, which
lists the known names.
"""
from __future__ import annotations

import importlib
import threading
import warnings
from importlib.metadata import EntryPoint
from typing import Callable, Iterable, Optional, Union

Entry = Union[type, str, EntryPoint]


def reference(entry: Entry) -> str:
    """``module:Class`` of a registered entry, loaded or not."""
    if isinstance(entry, type):
        return f"{entry.__module__}:{entry.__qualname__}"
    return entry.value if isinstance(entry, EntryPoint) else entry


class PluginRegistry:
    """Classes deriving from ``base`` by name (see the module docstring).

    ``unknown(name, known_names)`` builds the exception for a name nobody
    registered; ``on_change(name)`` runs after a name is (re)registered or removed.
    """

    def __init__(self, what: str, group: str, base: type, builtins: dict[str, str],
                 unknown: Callable[[str, Iterable[str]], Exception],
                 on_change: Optional[Callable[[str], None]] = None):
        self.what, self.group, self.base = what, group, base
        self.builtins = dict(builtins)
        self._unknown, self._on_change = unknown, on_change or (lambda name: None)
        self._entries: dict[str, Entry] = dict(builtins)
        self.lock = threading.RLock()
        self._discovered = False

    def register(self, cls: type, name: Optional[str] = None) -> str:
        """Register ``cls`` (a ``base`` subclass) as ``name`` (default ``cls.name``);
        returns the name. ValueError for a name taken by another class."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"a flydsl {self.what} must be a {self.base.__name__} subclass, "
                            f"got {cls!r}")
        name = name or getattr(cls, "name", "")
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.what} class {cls.__name__} has no name; pass name=...")
        with self.lock:
            current = self._entries.get(name)
            if current is not None and current is not cls and reference(current) != reference(cls):
                raise ValueError(f"duplicate flydsl {self.what} name {name!r} (already "
                                 f"{reference(current)})")
            self._entries[name] = cls
        self._on_change(name)
        return name

    def unregister(self, name: str) -> None:
        """Remove a name (mainly for tests and plugins that replace themselves)."""
        with self.lock:
            self._entries.pop(name, None)
        self._on_change(name)

    def names(self) -> list[str]:
        """Every known name, plugins included (none of them imported), sorted."""
        self._discover()
        with self.lock:
            return sorted(self._entries)

    def loaded(self, name: str) -> Optional[type]:
        """The class of ``name`` if it is already imported, else None."""
        entry = self._entries.get(name)
        return entry if isinstance(entry, type) else None

    def lookup(self, name: str) -> type:
        """The class registered as ``name``, imported on first use."""
        with self.lock:
            entry = self._entries.get(name)
            if entry is None:
                self._discover()
                entry = self._entries.get(name)
            if entry is None:
                raise self._unknown(name, self._entries)
            if isinstance(entry, type):
                return entry
            cls = self._load(entry)
            self.register(cls, name)
            return cls

    def _load(self, entry: Union[str, EntryPoint]) -> type:
        if isinstance(entry, EntryPoint):
            cls = entry.load()
        else:
            module, _, attr = entry.partition(":")
            cls = getattr(importlib.import_module(module), attr)
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"flydsl {self.what} entry {reference(entry)!r} is not a "
                            f"{self.base.__name__} subclass")
        return cls

    def _discover(self) -> None:
        """Record (without importing) the entries plugins declare; once per process."""
        with self.lock:
            if self._discovered:
                return
            self._discovered = True
            from importlib.metadata import entry_points
            for ep in entry_points(group=self.group):
                existing = self._entries.get(ep.name)
                if existing is None:
                    self._entries[ep.name] = ep
                elif reference(existing) != ep.value:
                    warnings.warn(f"flydsl {self.what} entry point {ep.name!r} = {ep.value!r} "
                                  f"ignored: the name is already taken by "
                                  f"{reference(existing)}", stacklevel=3)

    def rediscover(self) -> None:
        """Look at the installed entry points again (after installing a plugin)."""
        with self.lock:
            self._discovered = False
        self._discover()
