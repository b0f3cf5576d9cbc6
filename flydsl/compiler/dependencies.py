"""What a trace read: the values behind a kernel's cache key (no MLIR here).

While tracing, every name, attribute or constant subscript the tracer resolves to a
compile-time value is recorded as a *path* from the kernel: ``G:cfg`` (a global or
closure variable of the kernel), ``G:cfg/A:S`` (its attribute ``S``),
``G:helper/G:K`` (a global of the helper ``helper``), ``P:mode`` (a constexpr
argument), ``G:TABLE/I:3`` (a constant subscript). Each path has a *mode*, which
says how much of the value the trace depended on:

* ``S``: only looked through (attributes read from it are paths of their own), so
  its kind and type are enough (:func:`~flydsl.compiler.content_hash.identity_hash`);
* ``D``: used as data (arithmetic, a branch, passed to a function that runs while
  tracing): hashed by content, or the kernel stays out of the disk cache;
* ``F``: a function whose body was traced inline: its source.

A data file opened while tracing (``open``, ``np.load``, ``pathlib.Path.read_text``)
is the path ``O:/abs/file`` (from no object: the step reads the file), hashed by
content (:func:`reading_files`); an environment variable read while tracing
(``os.environ.get``, ``os.getenv``, ``os.environ[...]``) is ``E:NAME``, hashed by its value
(``E:`` with no name: the whole environment, when the trace iterates over it), so
``os.environ`` itself is described by name only. A module a kernel body imports (``from m import f``)
is ``M:m`` (from no object: the step imports it), ``M:m/A:f`` its name.

The cache stores the paths (a *manifest* per base key); a later process resolves
the same paths against its own values (:func:`resolve_hashes`) and so finds the
entry without tracing, or misses when any value differs.
"""
from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import threading
import types
from typing import Any, Optional, Sequence

from .content_hash import (Unhashable, content_hash, identity_hash, is_plain,
                           traced_function_hash)

Step = tuple          # (kind, argument)
Path = tuple          # of Steps; () is the kernel function itself
#: ``getattr(x, name, default)`` / ``hasattr`` found nothing.
MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


class NotFound(LookupError):
    """A name a function refers to is bound nowhere (closure, globals, builtins)."""


def lookup_name(fn: types.FunctionType, name: str, closure: Optional[dict] = None) -> Any:
    """``name`` as Python resolves it inside ``fn``: closure cell, then the module's
    globals, then builtins. The tracer and the cache lookup both use this."""
    if closure is None:
        closure = closure_vars(fn)
    if name in closure:
        return closure[name]
    g = fn.__globals__
    if name in g:
        return g[name]
    b = g.get("__builtins__", builtins)
    b = vars(b) if isinstance(b, types.ModuleType) else b
    if name in b:
        return b[name]
    raise NotFound(name)


def closure_vars(fn: types.FunctionType) -> dict:
    """Free variables of ``fn`` bound in enclosing scopes (empty cells left out)."""
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def module_path(fn: Any) -> Optional[Path]:
    """``M:module/A:Class/A:name``: the path of a function (or of a bound method's
    function) from its module by its qualified name, when that name leads back to it;
    None for a function defined inside another (``<locals>``) or no longer reachable.
    A method of an object made while tracing is found again this way."""
    import sys
    func = getattr(fn, "__func__", fn)
    if not isinstance(func, types.FunctionType):
        return None
    module = sys.modules.get(func.__module__ or "")
    parts = func.__qualname__.split(".")
    if module is None or "<locals>" in parts:
        return None
    obj: Any = module
    for part in parts:
        obj = getattr(obj, part, None)
    path = (("M", func.__module__),) + tuple(("A", part) for part in parts)
    if obj is func:
        return path
    if getattr(obj, "__wrapped__", None) is func:    # a decorated one (@flyc.jit)
        return path + (("A", "__wrapped__"),)
    return None


def _is_flydsl_object(value: Any) -> bool:
    """A flydsl instance (``fx.thread_idx``, a traced Value): what is read from it is
    decided by flydsl's sources, which every key covers, and may emit IR: not a path."""
    if isinstance(value, (types.ModuleType, type, types.FunctionType)):
        return False
    module = getattr(type(value), "__module__", "") or ""
    return module.partition(".")[0] == "flydsl"


def constant_index(index: Any) -> bool:
    """A subscript a path can hold: numbers, strings, None, and tuples of them (their
    repr reads back with ``ast.literal_eval``)."""
    if isinstance(index, tuple):
        return all(map(constant_index, index))
    return type(index) in (int, float, bool, str, bytes, type(None))


def runs_user_code(base: Any, name: str) -> bool:
    """Whether reading ``base.name`` runs code of ``base``'s class (a property, another
    descriptor, ``__getattr__``): then that class is part of what the trace read."""
    if isinstance(base, (types.ModuleType, type, types.FunctionType)):
        return False
    t = type(base)
    if t.__getattribute__ is not object.__getattribute__ or hasattr(t, "__getattr__"):
        return True
    for klass in t.__mro__:
        member = vars(klass).get(name, MISSING)
        if member is not MISSING:
            return hasattr(type(member), "__get__") and not isinstance(
                member, (types.FunctionType, staticmethod, classmethod))
    return False


def step_value(value: Any, step: Step, constexprs: Optional[dict] = None) -> Any:
    """Take one step of a path from ``value``."""
    kind, arg = step
    if kind == "G":
        if not isinstance(value, types.FunctionType):
            raise NotFound(f"names are looked up in functions, not in {type(value).__name__}")
        return lookup_name(value, arg)
    if kind == "A":
        return getattr(value, arg)
    if kind == "H":
        return getattr(value, arg, MISSING)
    if kind == "I":
        return value[arg]
    if kind == "T":
        return type(value)
    if kind == "P":
        return (constexprs or {})[arg]
    if kind == "O":
        with _ORIGINAL_OPEN(arg, "rb") as f:
            return f.read()
    if kind == "E":
        return os.environ.get(arg, MISSING) if arg else dict(os.environ)
    if kind == "M":
        import importlib
        try:
            return importlib.import_module(arg)
        except ImportError as e:
            raise NotFound(f"module {arg!r} cannot be imported: {e}") from None
    raise NotFound(f"unknown path step {kind!r}")


def describe(value: Any, modes: str) -> str:
    """The hash of ``value`` under ``modes`` (see the module docstring); Unhashable."""
    parts = []
    for mode in modes:
        if value is MISSING:
            parts.append("missing")
        elif mode == "D":
            parts.append(content_hash(value))
        elif mode == "F":
            if not isinstance(value, types.FunctionType):
                parts.append("not-a-function:" + identity_hash(value))
            else:
                parts.append(traced_function_hash(value))
        else:
            parts.append(identity_hash(value))
    return "+".join(parts)


def encode_path(path: Path) -> str:
    """A path as stable text (JSON; subscripts by repr, read back with literal_eval)."""
    return json.dumps([[k, repr(a) if k == "I" else a] for k, a in path],
                      ensure_ascii=False, separators=(",", ":"))


def decode_path(text: str) -> Path:
    import ast
    return tuple((k, ast.literal_eval(a) if k == "I" else a) for k, a in json.loads(text))


def show_path(path: Path) -> str:
    """A path the way the kernel spelled it: ``cfg.S``, ``helper.K``, ``TABLE[3]``."""
    out = ""
    for kind, arg in path:
        if kind in ("G", "P"):
            out = f"{out}.{arg}" if out else arg
        elif kind in ("A", "H"):
            out += f".{arg}"
        elif kind == "I":
            out += f"[{arg!r}]"
        elif kind == "T":
            out = f"type({out})"
        elif kind == "O":
            out = f"the file {arg}"
        elif kind == "E":
            out = f"os.environ[{arg!r}]" if arg else "os.environ"
        elif kind == "M":
            out = arg
    return out or "<kernel>"


class _Record:
    __slots__ = ("value", "modes", "where")

    def __init__(self, value: Any, modes: set, where: str):
        self.value, self.modes, self.where = value, modes, where


class Dependencies:
    """A finished record: ``entries`` are ``(encoded path, modes, hash)`` sorted by
    path; ``problems`` say why the kernel cannot go to the disk cache (empty: it can)."""

    __slots__ = ("entries", "problems")

    def __init__(self, entries: tuple, problems: tuple):
        self.entries, self.problems = entries, problems

    @property
    def variant(self) -> list:
        """What a manifest stores: ``[encoded path, modes]`` per entry."""
        return [[p, m] for p, m, _ in self.entries]

    @property
    def hashes(self) -> list:
        return [h for _, _, h in self.entries]


class DependencyRecorder:
    """Collects the paths one trace reads (see the module docstring).

    Values are followed by identity: the path that most recently produced an object
    is the one its attributes hang from. Recorded values are kept alive until the
    record is finished, so identities stay unique.
    """

    def __init__(self) -> None:
        self.records: dict[Path, _Record] = {}
        self.latest: dict[int, Path] = {}
        self.consumed: set[int] = set()
        self.problems: list[str] = []

    def found(self, path: Optional[Path], value: Any, where: str = "") -> Any:
        """Record that ``path`` resolved to ``value``; returns ``value``."""
        if path is None:
            return value
        rec = self.records.get(path)
        if rec is None:
            self.records[path] = _Record(value, set(), where)
        if not is_plain(value):
            self.latest[id(value)] = path
        return value

    def path_of(self, value: Any) -> Optional[Path]:
        """The path ``value`` was last read through (None: computed while tracing, or a
        flydsl object)."""
        if is_plain(value) or _is_flydsl_object(value):
            return None
        return self.latest.get(id(value))

    def child(self, base: Any, step: Step) -> Optional[Path]:
        path = self.path_of(base)
        return None if path is None else path + (step,)

    def consume(self, *values: Any) -> None:
        """``values`` were used as data: their paths need content hashes."""
        for v in values:
            if not is_plain(v) and id(v) in self.latest:
                self.consumed.add(id(v))

    def traced(self, path: Path) -> None:
        """The function at ``path`` was traced inline."""
        self.records[path].modes.add("F")

    def problem(self, message: str) -> None:
        if message not in self.problems:
            self.problems.append(message)

    def finish(self) -> Dependencies:
        """Hash every recorded value by its modes."""
        entries, problems = [], list(self.problems)
        for path, rec in self.records.items():
            modes = set(rec.modes)
            if id(rec.value) in self.consumed or is_plain(rec.value):
                modes.add("D")
            text = "".join(sorted(modes or {"S"}))
            try:
                entries.append((encode_path(path), text, describe(rec.value, text)))
            except Unhashable as e:
                where = f" (read at {rec.where})" if rec.where else ""
                problems.append(f"the value of `{show_path(path)}`{where}: {e}")
        entries.sort()
        self.records.clear()
        self.latest.clear()
        return Dependencies(tuple(entries), tuple(problems))


_ORIGINAL_OPEN = builtins.open
_reading = threading.local()
_open_lock = threading.Lock()
_users = {"files": 0, "environ": 0}


@contextlib.contextmanager
def _noting(kind: str, install, restore):
    """While the block runs on this thread, collect in a set (yielded) what ``kind``'s
    patched functions note; the first user of ``kind`` installs them, the last one
    restores the originals."""
    noted: set = set()
    stack = getattr(_reading, kind, None)
    if stack is None:
        stack = []
        setattr(_reading, kind, stack)
    stack.append(noted)
    with _open_lock:
        _users[kind] += 1
        if _users[kind] == 1:
            install()
    try:
        yield noted
    finally:
        stack.pop()
        with _open_lock:
            _users[kind] -= 1
            if _users[kind] == 0:
                restore()


def _note(kind: str, item) -> None:
    stack = getattr(_reading, kind, None)
    if stack:
        stack[-1].add(item)


def _set_open(fn) -> None:
    builtins.open = io.open = fn


def reading_files():
    """While the block runs on this thread, note the data files it opens for reading
    through ``open`` (``builtins.open`` and ``io.open``; what ``np.load``, ``json``
    and ``pathlib`` use): yields the set of their absolute paths. Python sources are
    left out (tracing reads the kernel's own; the key covers sources otherwise)."""
    return _noting("files", lambda: _set_open(_noting_open),
                   lambda: _set_open(_ORIGINAL_OPEN))


def _noting_open(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and not set(mode) & set("wax+"):
        path = os.path.abspath(os.fsdecode(file))
        if not path.endswith((".py", ".pyc")):
            _note("files", path)
    return _ORIGINAL_OPEN(file, mode, *args, **kwargs)


_ENVIRON = type(os.environ)
_ENVIRON_READS = {name: getattr(_ENVIRON, name) for name in ("__getitem__", "__iter__",
                                                              "__len__")}


def reading_environ():
    """While the block runs on this thread, note the environment variables it reads
    (``os.environ[...]``, ``.get``, ``in``, ``os.getenv``; ``""`` for the whole
    environment when it iterates or counts it): yields the set of their names."""
    noting = {"__getitem__": _noting_getitem, "__iter__": _noting_iter,
              "__len__": _noting_len}
    return _noting("environ",
                   lambda: [setattr(_ENVIRON, n, f) for n, f in noting.items()],
                   lambda: [setattr(_ENVIRON, n, f) for n, f in _ENVIRON_READS.items()])


def own_setting(name: str) -> Optional[str]:
    """An environment variable flydsl itself reads while tracing that does not shape the
    kernel's code (a trace-size limit): read without noting it as a dependency."""
    try:
        return _ENVIRON_READS["__getitem__"](os.environ, name)
    except KeyError:
        return None


def _noting_getitem(self, key):
    if self is os.environ and isinstance(key, str):
        _note("environ", key)
    return _ENVIRON_READS["__getitem__"](self, key)


def _noting_iter(self):
    if self is os.environ:
        _note("environ", "")
    return _ENVIRON_READS["__iter__"](self)


def _noting_len(self):
    if self is os.environ:
        _note("environ", "")
    return _ENVIRON_READS["__len__"](self)


def environ_names_in(encoded_paths) -> tuple:
    """The environment variables among a dependency set's encoded paths (``""``: the
    whole environment), sorted."""
    paths = (decode_path(text) for text in encoded_paths)
    return tuple(sorted({p[0][1] for p in paths if len(p) == 1 and p[0][0] == "E"}))


def environ_values(names: tuple) -> tuple:
    """The current values of the environment variables ``names`` (``""``: all of them),
    to compare with those a kernel was compiled under."""
    return tuple(tuple(sorted(os.environ.items())) if n == "" else os.environ.get(n)
                 for n in names)


def with_files(deps: Dependencies, paths, environ_names=()) -> Dependencies:
    """``deps`` with the contents of the files ``paths`` and the values of the
    environment variables ``environ_names`` (read now) as entries: a file or variable
    that changes, or goes, changes the key."""
    extra, problems = [], list(deps.problems)
    for name in sorted(environ_names):
        step = ("E", name)
        extra.append((encode_path((step,)), "D", describe(step_value(None, step), "D")))
    for path in sorted(paths):
        step = ("O", path)
        try:
            extra.append((encode_path((step,)), "D", describe(step_value(None, step), "D")))
        except OSError as e:
            problems.append(f"the file {path}, read while tracing: {e}")
    return Dependencies(tuple(sorted(deps.entries + tuple(extra))), tuple(problems))


def resolve_hashes(fn: types.FunctionType, constexprs: dict,
                   variant: Sequence) -> Optional[list]:
    """The hashes of a manifest ``variant`` (``[encoded path, modes]`` per entry)
    against this process's values, or None when a path no longer resolves or a value
    cannot be hashed (the variant then simply does not match)."""
    memo: dict[Path, Any] = {(): fn}
    out = []
    try:
        for text, modes in variant:
            path = decode_path(text)
            out.append(describe(_resolve(path, memo, constexprs), modes))
    except Exception:   # noqa: BLE001 - any failure means "not this variant"
        return None
    return out


def _resolve(path: Path, memo: dict, constexprs: dict) -> Any:
    hit = memo.get(path, memo)
    if hit is not memo:
        return hit
    value = step_value(_resolve(path[:-1], memo, constexprs), path[-1], constexprs)
    memo[path] = value
    return value


__all__ = ["Dependencies", "DependencyRecorder", "MISSING", "NotFound", "Path",
           "closure_vars", "constant_index", "decode_path", "describe", "encode_path",
           "environ_names_in", "environ_values", "own_setting",
           "lookup_name", "reading_environ", "reading_files", "resolve_hashes", "runs_user_code", "show_path",
           "step_value", "with_files"]

