"""The GPU driver API: what the CUDA and HIP drivers share.

:class:`GpuDriver` is a :class:`~.base.Driver` written against a small binding
interface (devices, contexts, modules, launches, synchronization, timing events
and the cache-flush buffer; every call's return code checked); :mod:`.cuda` and
:mod:`.hip` implement it over cuda-python and hip-python, and
:class:`~.gpu_launcher.GpuLauncher` launches through it. Also here: the helpers
binding modules need.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from abc import abstractmethod
from typing import Callable, ClassVar, Iterator, Sequence

from ...errors import FlydslRuntimeError
from .base import Driver, driver_error

#: Shared memory (static + dynamic) a CUDA block gets without the kernel opting in.
DEFAULT_SHARED_LIMIT = 48 * 1024


class DriverSlot:
    """The process's one driver object, rebuilt when the binding module changes
    (tests inject fake bindings)."""

    def __init__(self, factory: Callable):
        self._factory = factory
        self._lock = threading.Lock()
        self._driver = None
        self._bindings = None

    def get(self, bindings):
        if self._driver is None or self._bindings is not bindings:
            with self._lock:
                if self._driver is None or self._bindings is not bindings:
                    self._driver = self._factory(bindings)
                    self._bindings = bindings
        return self._driver


def import_bindings(modules: Sequence[str], missing: str):
    """The first importable module of ``modules`` (a binding's names across its
    releases; one already in ``sys.modules`` first, so a warm launch skips importlib);
    FlydslRuntimeError saying ``missing`` when there is none."""
    first = None
    for name in modules:
        module = sys.modules.get(name)
        if module is not None:
            return module
        try:
            return importlib.import_module(name)
        except ImportError as e:
            first = first or e
    raise FlydslRuntimeError(f"{missing}: {first}")


def result_parts(result) -> tuple:
    """A binding's result as ``(code, *values)``: cuda-python and hip-python return
    tuples, a few hip-python calls return the bare code."""
    return result if isinstance(result, tuple) else (result,)


class GpuDriver(Driver):
    """One GPU driver API (CUDA or HIP) as the launcher needs it.

    Every method checks the driver's return code and raises
    :class:`~flydsl.errors.FlydslRuntimeError` with the driver's error name and text.
    Subclasses bind one binding module: ``load()`` returns the process's instance for
    the binding module importable now (tests inject fake ones).
    """

    #: ``cuda`` / ``hip``: the ``driver`` of the backends this driver launches.
    name: ClassVar[str] = ""
    #: torch on ROCm calls its devices ``cuda`` too.
    torch_device_type: ClassVar[str] = "cuda"
    device_kind: ClassVar[str] = "GPU"
    #: Name of the launch entry point, for messages.
    launch_name: ClassVar[str] = ""
    #: The binding's launch function ``(f, gx, gy, gz, bx, by, bz, smem, stream,
    #: kernelParams, extra) -> code``; called directly on the fast path.
    launch: Callable
    #: Launch error codes meaning "the calling thread has no, or another, current
    #: context" (INVALID_CONTEXT, INVALID_HANDLE, CONTEXT_IS_DESTROYED; HIP uses the
    #: same numbers): the launch is retried with the device selected.
    context_errors: frozenset = frozenset({201, 400, 709})
    #: Bytes :meth:`flush_cache` writes: at least the last-level cache of current GPUs
    #: (H100's L2 is 50 MB, MI300's Infinity Cache 256 MB).
    flush_bytes: ClassVar[int] = 256 << 20

    def __init__(self) -> None:
        self._flush_buffers: dict[int, object] = {}   # device index -> allocation
        self._flush_lock = threading.Lock()

    @classmethod
    @abstractmethod
    def load(cls) -> "GpuDriver":
        """The process's driver; FlydslRuntimeError when the bindings or the driver
        library are missing."""

    def images(self, compiled) -> list[tuple[str, bytes]]:
        """The binary to load, then fallbacks (``(stage, image)``; CUDA adds PTX)."""
        return [(compiled.binary_stage, as_image(compiled.binary))]

    # -- errors ----------------------------------------------------------
    @abstractmethod
    def error_text(self, code) -> str:
        """``NAME (description)`` of a driver error code."""

    def check(self, result, what: str):
        """The value(s) of a binding call's result; FlydslRuntimeError if it failed."""
        code, *values = result_parts(result)
        if code:
            raise driver_error(f"{what} failed: {self.error_text(code)}", self.name, code)
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    # -- devices ---------------------------------------------------------
    @abstractmethod
    def device_count(self) -> int:
        """Number of visible devices."""

    @abstractmethod
    def device_arch(self, index: int) -> str:
        """The arch of device ``index`` (``sm_90``, ``gfx942``)."""

    @abstractmethod
    def max_shared_per_block(self, index: int) -> int:
        """Most static + dynamic shared memory a block may use on device ``index``
        (after opting in, where the driver needs that)."""

    @abstractmethod
    def current_device(self) -> int:
        """The device the calling thread works on (0 when it never chose one)."""

    def pointer_device(self, ptr: int):
        """The device index owning device pointer ``ptr``, or None if unknown."""
        return None

    @abstractmethod
    def device_guard(self, index: int) -> tuple[Callable[[], object], Callable[[object], None]]:
        """``(enter, leave)`` for launches on ``index``: ``enter()`` makes the device
        current and returns what to restore (None when it already was current, so
        the common case costs one query); ``leave(token)`` restores it."""

    # -- modules and launches -----------------------------------------------
    @abstractmethod
    def module_load(self, image: bytes):
        """Load a module image into the current context/device."""

    @abstractmethod
    def module_function(self, module, symbol: str):
        """The kernel ``symbol`` of a loaded module."""

    @abstractmethod
    def module_unload(self, module) -> None:
        """Unload a module (best effort)."""

    @abstractmethod
    def synchronize_current(self) -> None:
        """Wait for all work on the current device."""

    def reserve_dynamic_shared(self, function, nbytes: int) -> None:
        """Allow ``function`` to use ``nbytes`` of dynamic shared memory (for drivers
        that need an opt-in beyond a default limit). Called on the function's device."""

    @contextlib.contextmanager
    def on_device(self, index: int) -> Iterator[None]:
        """Run a block with device ``index`` current, restoring the previous one."""
        enter, leave = self.device_guard(index)
        token = enter()
        try:
            yield
        finally:
            if token is not None:
                leave(token)

    def load_function(self, index: int, image: bytes, symbol: str) -> tuple[object, object]:
        """Load ``image`` on device ``index``; ``(module, function)``."""
        with self.on_device(index):
            module = self.module_load(image)
            try:
                return module, self.module_function(module, symbol)
            except FlydslRuntimeError:
                self.module_unload(module)
                raise

    def synchronize(self, index: int) -> None:
        """Wait for all work on device ``index``; raises the first asynchronous error."""
        with self.on_device(index):
            self.synchronize_current()

    # -- timing (see Driver; events are created, recorded and allocated on the
    # current device, so callers hold it with on_device) -------------------------
    @abstractmethod
    def create_event(self) -> object:
        """A timing event on the current device."""

    @abstractmethod
    def record_event(self, event: object, stream: int = 0) -> None:
        """Enqueue ``event`` on ``stream`` of the current device."""

    @abstractmethod
    def event_elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between two recorded events, after waiting for ``end``."""

    @abstractmethod
    def destroy_event(self, event: object) -> None:
        """Release an event (best effort)."""

    @abstractmethod
    def mem_alloc(self, nbytes: int) -> object:
        """``nbytes`` of device memory on the current device (the binding's pointer)."""

    @abstractmethod
    def memset_d32_async(self, ptr: object, value: int, count: int, stream: int) -> None:
        """Queue on ``stream`` a fill of ``count`` 32-bit words at ``ptr`` with ``value``."""

    def flush_cache(self, stream: int = 0) -> bool:
        """Zero :attr:`flush_bytes` of device memory on ``stream`` to evict the current
        device's L2 (the buffer is allocated on first use and kept for the process,
        one per device)."""
        index = self.current_device()
        buf = self._flush_buffers.get(index)
        if buf is None:
            with self._flush_lock:
                buf = self._flush_buffers.get(index)
                if buf is None:
                    buf = self._flush_buffers[index] = self.mem_alloc(self.flush_bytes)
        self.memset_d32_async(buf, 0, self.flush_bytes // 4, stream)
        return True


def binding_text(fn: Callable, code) -> str:
    """The string an error-name/-description binding returns for ``code``, or "".

    cuda-python returns ``(status, bytes)``; hip-python the bare bytes or str
    (before 10) or ``(status, CStr)``, a C-string object with ``decode()`` (10).
    """
    try:
        r = fn(code)
    except Exception:  # noqa: BLE001 - only used while reporting another error
        return ""
    if isinstance(r, tuple):
        if not r or (len(r) > 1 and r[0]):
            return ""
        r = r[-1]
    if isinstance(r, bytes):
        r = r.decode(errors="replace")
    elif not isinstance(r, str) and callable(getattr(r, "decode", None)):
        try:
            r = r.decode()
        except Exception:  # noqa: BLE001 - only used while reporting another error
            return ""
    return r if isinstance(r, str) else ""


def as_image(binary) -> bytes:
    """A module image for the driver: bytes, PTX text NUL-terminated."""
    if isinstance(binary, str):
        return binary.encode() + b"\0"
    if binary is None:
        raise FlydslRuntimeError("the compiled kernel has no binary to load")
    data = bytes(binary)
    if data.lstrip()[:2] in (b"//", b".v") and not data.endswith(b"\0"):
        data += b"\0"   # PTX stored as bytes
    return data

