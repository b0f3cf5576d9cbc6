"""Hashing Python values by content, for the compile-cache key (no MLIR here).

Two strengths:

* :func:`content_hash` (``deep``) describes everything about a value that a trace
  could observe: numbers by repr, containers item by item, user functions by their
  bytecode and every global they name, user classes by their members, dataclasses
  and enums by their fields, and any object with ``__flydsl_hash__()`` by what that
  returns. Library code (the standard library, installed packages, flydsl) is
  identified by name and version. Anything else raises :class:`Unhashable`: the
  caller then keeps the kernel out of the disk cache. A type name alone is never
  taken as the content of an object.
* :func:`identity_hash` (``shallow``) is for a value the tracer only looked
  *through* (a module, a class or an object whose attributes it read): those reads
  are recorded as dependencies of their own, so the value itself is described by
  its kind and type.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import sys
import types
from typing import Any, Optional

import numpy as np

from ..expr.dtypes import DType

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins"}
_PLAIN_ATOMS = (type(None), bool, int, str, bytes, type(Ellipsis), type(NotImplemented))
_CLASS_SKIP = frozenset({"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__",
                         "__firstlineno__", "__static_attributes__", "__annotations__",
                         "__dataclass_fields__", "__dataclass_params__", "__match_args__",
                         "__slots__", "__orig_bases__", "__parameters__", "__hash__"})


class Unhashable(Exception):
    """A value has no sound content hash; ``str(e)`` says what and how to fix it."""


def is_plain(value: Any) -> bool:
    """Numbers, strings, bytes, None and flydsl dtypes: a value that is its content."""
    if isinstance(value, _PLAIN_ATOMS) or type(value) in (float, complex):
        return True
    return isinstance(value, DType)


def content_hash(value: Any) -> str:
    """A hex digest of everything about ``value`` a trace can observe (see the module
    docstring); raises :class:`Unhashable`."""
    h = hashlib.sha256()
    try:
        _Describer(h.update).deep(value)
    except RecursionError:
        raise Unhashable(f"a {type(value).__name__} nested too deeply to hash") from None
    return h.hexdigest()


def identity_hash(value: Any) -> str:
    """What a value looked *through* is: its kind and type (or its content when that is
    cheap and plain); never raises."""
    h = hashlib.sha256()
    _Describer(h.update).shallow(value)
    return h.hexdigest()


def traced_function_hash(fn: types.FunctionType) -> str:
    """A function the tracer inlined: the source text it parsed, where that text sits
    (locations end up in the IR), and its default arguments; raises Unhashable."""
    from .frontend.source import function_source
    h = hashlib.sha256()
    d = _Describer(h.update)
    src = function_source(fn)
    d.tag("traced", f"{os.path.basename(src.filename)}:{src.first_line}")
    d.tag("src", src.text)
    d.deep(fn.__defaults__)
    d.deep(fn.__kwdefaults__)
    return h.hexdigest()


def is_library_module(module_name: str) -> bool:
    """Code whose identity is its name and version: the standard library, installed
    packages and flydsl (its sources are part of every key)."""
    top = (module_name or "").partition(".")[0]
    if top in _STDLIB or top == "flydsl":
        return True
    parts = (module_name or "").split(".")
    module = sys.modules.get(module_name) or sys.modules.get(top)
    path = getattr(module, "__file__", None)
    for k in range(len(parts), 0, -1):   # a namespace package (mlir) has no file: a parent
        if path:
            break
        path = getattr(sys.modules.get(".".join(parts[:k])), "__file__", None)
    if not path:
        return module is not None and top in sys.builtin_module_names
    return os.path.abspath(path).startswith(_library_dirs())


@functools.cache
def _library_dirs() -> tuple:
    """The standard library's and installed packages' folders (sysconfig is slow: once)."""
    import sysconfig
    return tuple(os.path.abspath(p) + os.sep for p in dict.fromkeys(
        sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")))


def library_version(module_name: str) -> str:
    """``name@version`` of the package holding ``module_name`` (its ``__version__``,
    else a digest of the module's file; flydsl's own version is in every key). The
    standard library is ``name@stdlib``: what a kernel reads from it is recorded by
    value, and its code does not change a trace between Python versions."""
    top = (module_name or "").partition(".")[0]
    if top in _STDLIB:
        return f"{top}@stdlib"
    if top == "flydsl":
        return "flydsl"
    module = sys.modules.get(top)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return f"{top}@{version}"
    target = sys.modules.get(module_name) or module
    return f"{top}@{_file_digest(getattr(target, '__file__', None))}"


_DIGESTS: dict = {}


def _file_digest(path: Optional[str]) -> str:
    if not path:
        return "?"
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    stamp = (path, st.st_size, st.st_mtime_ns)
    hit = _DIGESTS.get(stamp)
    if hit is None:
        with open(path, "rb") as f:
            hit = _DIGESTS[stamp] = hashlib.sha256(f.read()).hexdigest()[:16]
    return hit


def _qualname(obj) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}.{getattr(obj, '__qualname__', '?')}"


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Describer:
    """Feeds a description of values to ``update`` (one sha256). ``_active`` holds the
    ids of the containers being described (a cycle refers back by depth)."""

    def __init__(self, update):
        self.update = update
        self._active: dict[int, int] = {}

    def tag(self, kind: str, text: str = "") -> None:
        data = text.encode("utf-8", "surrogatepass")
        self.update(f"{kind}\0{len(data)}\0".encode())
        self.update(data)

    # -- shallow -------------------------------------------------------------
    def shallow(self, v: Any) -> None:
        if is_plain(v):
            return self.deep(v)
        if isinstance(v, types.ModuleType):
            return self.tag("module", v.__name__)
        if isinstance(v, type):
            return self.tag("class", _qualname(v))
        if isinstance(v, types.FunctionType):
            return self.tag("function", _qualname(v))
        if isinstance(v, (tuple, list)):   # items read through it are recorded one by one
            return self.tag(type(v).__name__, str(len(v)))
        if _is_flydsl(type(v)):
            return self.tag("flydsl", _flydsl_text(v))
        self.tag("object", _qualname(type(v)))

    # -- deep ----------------------------------------------------------------
    def deep(self, v: Any) -> None:
        t = type(v)
        if t is float:
            return self.tag("float", repr(v))
        if isinstance(v, _PLAIN_ATOMS) and t in _PLAIN_ATOMS:
            return self.tag(t.__name__, repr(v))
        key = id(v)
        if key in self._active:   # a cycle: refer back to the enclosing container
            return self.tag("cycle", str(len(self._active) - self._active[key]))
        self._active[key] = len(self._active)
        try:
            self._deep_compound(v, t)
        finally:
            del self._active[key]

    def _deep_compound(self, v: Any, t: type) -> None:
        custom = getattr(t, "__flydsl_hash__", None)
        if custom is not None and not isinstance(v, type):
            self.tag("custom", _qualname(t))
            return self.deep(custom(v))
        if t is complex:
            return self.tag("complex", repr(v))
        if isinstance(v, (tuple, list)):
            self.tag("seq", _qualname(t) + ":" + str(len(v)))
            for item in v:
                self.deep(item)
            return None
        if isinstance(v, dict):
            self.tag("dict", _qualname(t) + ":" + str(len(v)))
            for k, item in sorted(((self._sub(k), item) for k, item in v.items()),
                                  key=lambda kv: kv[0]):
                self.tag("key", k)
                self.deep(item)
            return None
        if isinstance(v, (set, frozenset)):
            self.tag("set", _qualname(t) + ":" + str(len(v)))
            for item in sorted(self._sub(x) for x in v):
                self.tag("item", item)
            return None
        if isinstance(v, (range, slice)):
            return self.tag(t.__name__, repr(v))
        if isinstance(v, np.ndarray):
            return self._ndarray(v)
        if isinstance(v, (np.generic, np.dtype)):
            return self.tag("np", f"{t.__name__}:{v!r}:{getattr(v, 'dtype', '')}")
        if isinstance(v, enum.Enum):
            self.tag("enum", _qualname(t) + "." + v.name)
            return self.deep(v.value)
        if isinstance(v, types.ModuleType):
            return self._module(v)
        if isinstance(v, type):
            return self._class(v)
        if isinstance(v, types.FunctionType):
            return self._function(v)
        if isinstance(v, types.CodeType):
            return self._code(v)
        if isinstance(v, (types.BuiltinFunctionType, types.WrapperDescriptorType,
                          types.MethodDescriptorType, types.MethodWrapperType,
                          types.ClassMethodDescriptorType, types.GetSetDescriptorType,
                          types.MemberDescriptorType)) or _is_nanobind_function(t):
            return self._builtin(v)
        if isinstance(v, types.MethodType):
            self.tag("method")
            self.deep(v.__func__)
            return self.deep(v.__self__)
        if isinstance(v, functools.partial):
            self.tag("partial")
            self.deep(v.func)
            self.deep(v.args)
            return self.deep(v.keywords)
        if isinstance(v, (staticmethod, classmethod)):
            self.tag(t.__name__)
            return self.deep(v.__func__)
        if isinstance(v, property):
            self.tag("property")
            for f in (v.fget, v.fset, v.fdel):
                self.deep(f)
            return None
        wrapped = getattr(v, "__wrapped__", None)
        if wrapped is not None and type(v).__module__ == "functools":  # lru_cache, cache
            self.tag("functools", t.__name__)
            return self.deep(wrapped)
        if v is os.environ:     # its reads while tracing are keyed one by one (E: paths)
            return self.tag("environ")
        if t.__module__ == "typing" or isinstance(v, (types.GenericAlias, types.UnionType)):
            # an annotation (Optional, List[int], int | None): what it names, by its repr
            return self.tag("typing", repr(v))
        if _is_flydsl(t):
            return self.tag("flydsl", _flydsl_text(v))
        if _is_torch_thing(v):
            return self.tag("torch", f"{t.__name__}:{v}")
        if dataclasses.is_dataclass(v):
            self.tag("dataclass", _qualname(t))
            self._class(t)
            for f in dataclasses.fields(v):
                self.tag("field", f.name)
                self.deep(getattr(v, f.name))
            return None
        raise Unhashable(
            f"a {_qualname(t)} object has no content hash (flydsl cannot tell two of them "
            "apart across processes)")

    def _sub(self, v: Any) -> str:
        h = hashlib.sha256()
        d = _Describer(h.update)
        d._active = self._active
        d.deep(v)
        return h.hexdigest()

    def _ndarray(self, v: np.ndarray) -> None:
        self.tag("ndarray", f"{v.dtype.str}:{v.shape}")
        if v.dtype.hasobject:
            for item in v.ravel().tolist():
                self.deep(item)
        else:
            self.update(np.ascontiguousarray(v).tobytes())

    def _module(self, m: types.ModuleType) -> None:
        if is_library_module(m.__name__):
            return self.tag("module", library_version(m.__name__))
        # A user module as a value: its source; what was read from it is recorded
        # by whoever read it (the tracer, or _function for the names it uses).
        self.tag("module", f"{m.__name__}:{_file_digest(getattr(m, '__file__', None))}")

    def _class(self, c: type) -> None:
        if is_library_module(c.__module__):
            return self.tag("class", f"{_qualname(c)}@{library_version(c.__module__)}")
        self.tag("class", _qualname(c))
        for base in c.__bases__:
            self.deep(base)
        for name, member in sorted(vars(c).items()):
            if name in _CLASS_SKIP:
                continue
            self.tag("member", name)
            self.deep(member)

    def _builtin(self, f) -> None:
        owner = getattr(f, "__self__", None)
        module = getattr(f, "__module__", None) or getattr(type(owner), "__module__", "")
        self.tag("builtin", f"{_qualname(f)}@{library_version(module or 'builtins')}")
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            self.deep(owner)   # a bound builtin method ([].append): its object matters

    def _function(self, fn: types.FunctionType) -> None:
        if is_library_module(fn.__module__ or ""):
            return self.tag("function", f"{_qualname(fn)}@{library_version(fn.__module__)}")
        self.tag("function", _qualname(fn))
        self._code(fn.__code__)
        self.deep(fn.__defaults__)
        self.deep(fn.__kwdefaults__)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            self.tag("free", name)
            try:
                self.deep(cell.cell_contents)
            except ValueError:   # an empty cell
                self.tag("empty")
        # Every global the code names (an over-approximation: attribute names too).
        names = _code_names(fn.__code__)
        g = fn.__globals__
        for name in sorted(names):
            if name in g:
                self.tag("global", name)
                value = g[name]
                if isinstance(value, types.ModuleType) and not is_library_module(value.__name__):
                    self._module_members(value, names)
                else:
                    self.deep(value)

    def _module_members(self, m: types.ModuleType, names: set) -> None:
        """A user module a function reads from: the members it may read by name."""
        self.tag("module", m.__name__)
        d = vars(m)
        for name in sorted(names):
            if name in d:
                self.tag("member", name)
                value = d[name]
                if isinstance(value, types.ModuleType) and not is_library_module(value.__name__):
                    if id(value) not in self._active:
                        self._active[id(value)] = len(self._active)
                        try:
                            self._module_members(value, names)
                        finally:
                            del self._active[id(value)]
                else:
                    self.deep(value)

    def _code(self, code: types.CodeType) -> None:
        self.tag("code", code.co_name)
        source = _code_source(code)
        if source is not None:   # bytecode differs between Python versions; source not
            self.tag("src", source)
            return
        self.update(code.co_code)
        self.tag("names", "|".join(",".join(names) for names in (
            code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)))
        for const in code.co_consts:
            self.deep(const)


@functools.lru_cache(maxsize=4096)
def _code_source(code: types.CodeType) -> Optional[str]:
    """The source text of ``code`` (its constants and nested functions included), or
    None where there is none (exec'd strings, lambdas without a file)."""
    import inspect
    try:
        return inspect.getsource(code)
    except (OSError, TypeError):
        return None


def _is_nanobind_function(t: type) -> bool:
    """A function of a nanobind extension (the MLIR bindings' ``ir.F32Type.get``): a
    builtin, named by its module and qualified name."""
    return t.__module__ == "nanobind" and t.__name__ in ("nb_func", "nb_method", "nb_bound_method")


def _is_flydsl(t: type) -> bool:
    return (getattr(t, "__module__", "") or "").partition(".")[0] == "flydsl"


def _flydsl_text(v: Any) -> str:
    text = repr(v)
    return _qualname(type(v)) + ("" if " at 0x" in text else ":" + text)


def _is_torch_thing(v: Any) -> bool:
    """torch dtypes, devices and layouts: small immutable values their str names."""
    t = type(v)
    return t.__module__ == "torch" and t.__name__ in ("dtype", "device", "layout",
                                                      "memory_format")


__all__ = ["Unhashable", "content_hash", "identity_hash", "is_library_module", "is_plain",
           "library_version", "traced_function_hash"]
