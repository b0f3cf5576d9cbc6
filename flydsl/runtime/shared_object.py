"""Loading a shared object held in memory (the CPU backend's binary) with ctypes.

dlopen recognizes an already-loaded library by its path, so each load uses a path
no live library has: a private temporary file with a random 128-bit name, removed
as soon as it is loaded (in TMPDIR, else in the cache folder, for a full, read-only
or ``noexec`` TMPDIR), or, where neither works, an anonymous memory file
(``memfd_create``) whose ``/proc/self/fd/N`` stays open while the library is
loaded. A library is unloaded (``dlclose``) when nothing refers to it any more:
the entry functions launchers call refer to their library, so no code is unmapped
while a launcher can still call it.

Each loaded library costs the process ~5 memory mappings, and a process may have
only ``vm.max_map_count`` (65,530 by default): a program that specializes a kernel
tens of thousands of times would run out ("failed to map segment"). So launchers
hold their library through a :class:`ReloadableLibrary`: at most
``FLYDSL_CPU_LIVE_LIBRARIES`` (default 1024) of those are loaded at once; loading
one more unloads the least recently launched idle one (a clock sweep), which loads
again, from the bytes it keeps, on its next launch.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import threading
import uuid
import weakref
from collections import OrderedDict
from functools import partial
from typing import Callable, Optional

from ..errors import FlydslRuntimeError
from ..private_files import scratch_folders

#: Libraries loaded and not yet unloaded (for tests and diagnostics).
live = {"count": 0}


def load_shared_object(data: bytes, tag: str = "kernel") -> ctypes.CDLL:
    """dlopen ``data``; unloaded again when the returned object is collected."""
    errors = []
    for folder in scratch_folders():
        try:
            return _track(_load_from_file(data, tag, folder), None)
        except OSError as e:
            errors.append(f"{folder}: {e}")
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create(f"flydsl-{tag[:40]}", os.MFD_CLOEXEC)
        except OSError as e:
            errors.append(f"memfd: {e}")
        else:
            try:
                _write_all(fd, data)
                return _track(ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_LOCAL), fd)
            except OSError as e:
                os.close(fd)
                errors.append(f"memfd: {e}")
    raise FlydslRuntimeError(f"cannot load the CPU kernel library of {tag!r}: "
                             + "; ".join(errors))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _load_from_file(data: bytes, tag: str, folder: str) -> ctypes.CDLL:
    fd, path = tempfile.mkstemp(prefix=f"flydsl-{uuid.uuid4().hex}-", suffix=".so",
                                dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        os.unlink(path)   # the mapping outlives the file


def _track(lib: ctypes.CDLL, fd) -> ctypes.CDLL:
    live["count"] += 1
    weakref.finalize(lib, _unload, lib._handle, fd).atexit = False
    return lib


def _unload(handle: int, fd) -> None:
    import _ctypes
    with contextlib.suppress(OSError):
        _ctypes.dlclose(handle)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    live["count"] -= 1



def symbol_address(lib: ctypes.CDLL, name: str) -> Optional[int]:
    """The address of ``name`` in ``lib``, or None.

    ``lib[name]`` and ``getattr(lib, name)`` make function objects that refer to
    themselves (and ``ctypes.cast`` ties its result to its argument): such a
    reference cycle keeps the library mapped until the garbage collector runs. So
    the symbol is looked up directly, and a caller keeps ``lib`` alive itself while
    it uses the address.
    """
    import _ctypes
    try:
        return _ctypes.dlsym(lib._handle, name)
    except OSError:
        return None


#: Reloadable libraries loaded at once, at most, unless ``FLYDSL_CPU_LIVE_LIBRARIES`` says.
DEFAULT_LIVE_LIBRARIES = 1024


def live_library_limit() -> int:
    """How many :class:`ReloadableLibrary` may be loaded at once
    (``FLYDSL_CPU_LIVE_LIBRARIES``, default :data:`DEFAULT_LIVE_LIBRARIES`, at least 1)."""
    text = os.environ.get("FLYDSL_CPU_LIVE_LIBRARIES", "").strip()
    return max(1, int(text)) if text.isdigit() else DEFAULT_LIVE_LIBRARIES


class ReloadableLibrary:
    """A library held in memory as bytes, loaded while in use: unloaded when it is the
    idlest of more than :func:`live_library_limit` loaded ones, loaded again on demand.

    ``call(*args)`` calls its entry point ``entry`` (a function of ctypes type
    ``prototype``), loading the library first when needed: the warm path of a launch
    is that one attribute read and call. :meth:`acquire` gives ``(library, entry
    function, extra)`` for callers that need more (``extra``: what ``setup(lib)``
    returned; ``setup`` runs after each load). Callers keep what they got in locals
    while they use it: the library and the entry function (which refers to it) keep
    it mapped, so an unload that happens meanwhile takes effect when the last of
    them is gone, never while a launch runs code in it.

    Idleness is seen with no cost to launches: a library is loaded with ``call`` set
    to a hook that puts a probe in its place on the first call (the launch that
    loaded it), and the probe swaps the entry function in on the next call; the
    sweep unloads the first library whose hook or probe is still in place, and puts
    the probe back on those that have been called since it last passed them (a
    clock's second chance). A specialization launched once is thus unloaded before
    those launched again and again, and a load never unloads the library it loads.
    ``pinned``: never unloaded (its globals hold state between calls).
    """

    __slots__ = ("_data", "tag", "_entry", "_prototype", "_setup", "pinned", "_state",
                 "call", "_reload", "_first", "_probe", "loads", "__weakref__")

    def __init__(self, data: bytes, tag: str, entry: str, prototype,
                 setup: Callable[[ctypes.CDLL], object] = lambda lib: None,
                 pinned: bool = False):
        self._data, self.tag, self._entry = data, tag, entry
        self._prototype, self._setup, self.pinned = prototype, setup, pinned
        self._state: Optional[tuple] = None       # (library, entry function, extra)
        ref = weakref.ref(self)    # no cycle: an unused library goes with its launcher
        self._reload = partial(_first_call, ref)
        self._first = partial(_first_call, ref)
        self._probe = partial(_probe_call, ref)
        self.call = self._reload
        #: How often it was loaded (for tests and diagnostics).
        self.loads = 0

    @property
    def loaded(self) -> bool:
        """Whether it is loaded now."""
        return self._state is not None

    def acquire(self, used: bool = False) -> tuple:
        """``(library, entry function, extra)``, loaded; ``used``: count it as a launch
        (``call`` counts its own)."""
        state = self._state or _LIVE.load(self)
        if used:
            self.call = state[1]
        return state

    def entry(self, used: bool = True) -> tuple:
        """``(entry function, its address)``, loaded and counted as a launch (unless
        ``used`` is False: a launcher built, not yet called): a caller that calls the
        address itself keeps the function while it does (it keeps the library mapped)
        and calls this again once ``call`` is no longer it."""
        lib, fn, _ = self.acquire(used=used)
        return fn, symbol_address(lib, self._entry)

    def _load(self) -> tuple:
        lib = load_shared_object(self._data, self.tag)
        fn = self._prototype(symbol_address(lib, self._entry))
        fn.library = lib     # mapped while fn is in use
        self._state = (lib, fn, self._setup(lib))
        # used once called twice: the launch that loaded it is not yet a use
        self.call = fn if self.pinned else self._first
        self.loads += 1
        return self._state

    def _unload(self) -> None:
        self._state = None
        self.call = self._reload


def _first_call(ref, *args):
    """The first call since a load (or one that loads): not yet a use."""
    library = ref()
    state = library.acquire()
    if library.call is library._first:
        library.call = library._probe
    return state[1](*args)


def _probe_call(ref, *args):
    library = ref()
    state = library.acquire(used=True)
    return state[1](*args)


class _LivePool:
    """The loaded unpinned :class:`ReloadableLibrary` objects, in sweep order, at most
    :func:`live_library_limit` of them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loaded: "OrderedDict[int, weakref.ref]" = OrderedDict()

    def load(self, library: ReloadableLibrary) -> tuple:
        """Load ``library`` (unless another thread just did) and unload idle ones."""
        with self._lock:
            state = library._state
            if state is not None:
                return state
            state = library._load()
            if not library.pinned:
                # room first, then the new one: swept with the others, it would be
                # the one not yet called when all they have been since the last
                # sweep, unloaded by its own load (and reloaded on every launch)
                self._sweep(live_library_limit() - 1)
                key = id(library)
                self._loaded[key] = weakref.ref(library, partial(self._forget, key))
            return state

    def _forget(self, key: int, _ref) -> None:
        self._loaded.pop(key, None)     # collected: its library unloads with it

    def _sweep(self, limit: int) -> None:
        """Unload the first libraries not called since the sweep last passed them."""
        loaded = self._loaded
        while len(loaded) > limit:
            key, ref = loaded.popitem(last=False)
            library = ref()
            if library is None:
                continue
            if library.call is not library._probe and library.call is not library._first:
                library.call = library._probe    # called since: a second chance
                loaded[key] = ref
                continue
            library._unload()

    def count(self) -> int:
        """How many are loaded now."""
        return len(self._loaded)


_LIVE = _LivePool()


def live_reloadable() -> int:
    """How many unpinned :class:`ReloadableLibrary` are loaded now (at most
    :func:`live_library_limit`)."""
    return _LIVE.count()
