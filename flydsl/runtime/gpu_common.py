"""What the CUDA and HIP launchers share: the argument buffer, device-tensor packers,
stream handles, and the launcher itself, written against a small driver interface.

Kernel ABI (both GPU backends): every memref parameter is expanded into allocated
pointer, aligned pointer, i64 offset, i64 sizes..., i64 strides... (in elements);
``index`` is i64 and scalars have their own width (i32: 4 bytes, i1: 1 byte, ...).

Arguments go to the driver as ``kernelParams``: an array with one pointer per
expanded parameter. Each pointer targets its own 8-byte slot, and a value narrower
than 8 bytes sits in the slot's low bytes (the hosts are little-endian); the driver
copies only the parameter's size, which it reads from the kernel image. So the same
int64-slot packers as the CPU launcher fill the buffer, the pointer table never
changes, and a warm launch only stores numbers and calls the driver.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Iterator, Sequence

from ..errors import FlydslRuntimeError, LaunchError
from .args import is_torch_tensor
from .packing import BoundLaunch, SlotTable, make_packers, param_layout

if sys.byteorder != "little":  # pragma: no cover - no big-endian GPU hosts
    raise ImportError("flydsl's GPU launchers assume a little-endian host")

#: Shared memory (static + dynamic) a CUDA block gets without the kernel opting in.
DEFAULT_SHARED_LIMIT = 48 * 1024
#: (driver name, device index) pairs this process launched on: what synchronize() waits for.
used_devices: set = set()


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


class GpuDriver(ABC):
    """One GPU driver API (CUDA or HIP) as the launcher needs it.

    Every method checks the driver's return code and raises
    :class:`~flydsl.errors.FlydslRuntimeError` with the driver's error name and text.
    """

    #: ``cuda`` / ``hip``: the ``driver`` of the backends this driver launches.
    name: ClassVar[str] = ""
    #: Name of the launch entry point, for messages.
    launch_name: ClassVar[str] = ""
    #: The binding's launch function ``(f, gx, gy, gz, bx, by, bz, smem, stream,
    #: kernelParams, extra) -> code``; called directly on the fast path.
    launch: Callable
    #: Launch error codes meaning "the calling thread has no, or another, current
    #: context" (INVALID_CONTEXT, INVALID_HANDLE, CONTEXT_IS_DESTROYED; HIP uses the
    #: same numbers): the launch is retried with the device selected.
    context_errors: frozenset = frozenset({201, 400, 709})

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

    @abstractmethod
    def synchronize_stream(self, handle: int) -> None:
        """Wait for the work queued on one stream."""

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


def driver_error(message: str, driver: str, code) -> FlydslRuntimeError:
    """A FlydslRuntimeError carrying the driver's error code as ``.code``."""
    err = FlydslRuntimeError(message)
    err.driver = driver
    err.code = code
    return err


# -- streams -----------------------------------------------------------------

def stream_handle(stream) -> int:
    """The raw handle of a launch's ``stream=`` value.

    Accepted: ``None`` or ``0`` (the default stream), an int handle, a torch stream
    (``.cuda_stream``; ROCm torch uses the same attribute), an object speaking the
    CUDA stream protocol (``__cuda_stream__``), or a binding handle (``CUstream``,
    ``hipStream_t``) that converts with ``int()``.
    """
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    raw = getattr(stream, "cuda_stream", None)
    if raw is not None:
        return int(raw)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise LaunchError(f"stream= must be None, an int handle, a torch stream or a driver "
                          f"stream handle, got {type(stream).__name__}") from None


def default_stream_getter(samples: Sequence, index: int) -> Callable[[], int]:
    """Where ``stream=None`` launches go: torch's current stream on the device when
    torch tensors are passed (so the kernel is ordered with torch's own work),
    otherwise the default stream 0."""
    if not any(is_torch_tensor(a) for a in samples):
        return lambda: 0
    import torch
    if not torch.cuda.is_available():
        return lambda: 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # ~10x cheaper than the API
    if raw is not None:
        return lambda: raw(index)
    return lambda: torch.cuda.current_stream(index).cuda_stream


# -- argument packing ------------------------------------------------------------

# -- the launcher ----------------------------------------------------------------

class _DeviceFunction:
    """A kernel loaded on one device: its function handle and shared-memory state."""

    def __init__(self, module, function, enter, leave, guarded: bool, max_shared: int,
                 dynamic_ok: int):
        self.module = module            # kept: the function lives as long as its module
        self.function = function
        self.enter = enter
        self.leave = leave
        self.guarded = guarded          # select the device around every launch
        self.max_shared = max_shared
        self.dynamic_ok = dynamic_ok    # dynamic bytes usable without (another) opt-in
        self.lock = threading.Lock()


def _unload_modules(driver: GpuDriver, devices: dict) -> None:
    for index, loaded in list(devices.items()):
        try:
            with driver.on_device(index):
                driver.module_unload(loaded.module)
        except Exception:  # noqa: BLE001 - best effort while being collected
            pass


class GpuLauncher:
    """Launches one compiled kernel on a GPU; same protocol as the CPU launcher:
    ``bind(samples, check_smem)`` returns a :class:`~flydsl.runtime.packing.BoundLaunch`.

    The binary is loaded once per device (the device holding the tensors) into that
    device's primary context. ``run`` writes pointers, sizes, strides and scalars into
    a per-thread argument buffer and calls the driver's launch; with several devices
    it selects the kernel's device around the call (and restores the caller's).
    Launches are asynchronous: faults inside the kernel surface at the next
    synchronize (:func:`flydsl.runtime.devices.synchronize`) or driver call.
    """

    def __init__(self, compiled):
        self.kernel = compiled.kernel_name
        self.symbol = compiled.name
        self.backend = compiled.backend_name
        self.arch = compiled.target.arch
        self.static_shared = compiled.shared_bytes
        self.names, self.layout, self.offsets, self.nslots = param_layout(compiled.specs)
        self.images = self._images(compiled)
        try:
            self.driver = self.load_driver()
        except FlydslRuntimeError as e:
            stage = compiled.binary_stage
            raise FlydslRuntimeError(
                f"kernel {self.kernel!r}: cannot launch on the {self.backend} backend: {e}. "
                f"Compile-only still works without a GPU: flydsl.compile(fn, *args, "
                f"backend={self.backend!r}).asm[{stage!r}] holds the binary") from None
        self._devices: dict[int, _DeviceFunction] = {}
        self._lock = threading.Lock()
        # Device modules go when the launcher goes (not at exit: the driver may be gone).
        weakref.finalize(self, _unload_modules, self.driver, self._devices).atexit = False

    @classmethod
    def load_driver(cls) -> GpuDriver:
        """The process's driver (subclasses); FlydslRuntimeError when it is missing."""
        raise NotImplementedError

    @staticmethod
    def _images(compiled) -> list[tuple[str, bytes]]:
        """The binary to load, then fallbacks (subclasses may add, e.g. PTX)."""
        return [(compiled.binary_stage, as_image(compiled.binary))]

    # -- devices -----------------------------------------------------------
    def device(self, index: int) -> _DeviceFunction:
        """The kernel loaded on device ``index`` (loaded on first use)."""
        hit = self._devices.get(index)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._devices.get(index)
            if hit is None:
                hit = self._load(index)
                self._devices[index] = hit
                used_devices.add((self.driver.name, index))
        return hit

    def _load(self, index: int) -> _DeviceFunction:
        drv = self.driver
        count = drv.device_count()
        if not 0 <= index < count:
            raise FlydslRuntimeError(f"kernel {self.kernel!r}: device {index} does not exist "
                                     f"({count} {drv.name} device(s) visible)")
        failures = []
        for stage, image in self.images:
            try:
                module, function = drv.load_function(index, image, self.symbol)
                break
            except FlydslRuntimeError as e:
                failures.append(f"{stage}: {e}")
        else:
            try:
                device_arch = drv.device_arch(index)
            except FlydslRuntimeError:
                device_arch = "unknown"
            raise FlydslRuntimeError(
                f"kernel {self.kernel!r}: could not load its binary on {drv.name} device "
                f"{index} ({device_arch}); it was compiled for {self.arch}. "
                + "; ".join(failures)
                + ("" if device_arch in (self.arch, "unknown") else
                   f". Set FLYDSL_GPU_ARCH={device_arch} (or pass arch=) to compile for "
                   "this device"))
        enter, leave = drv.device_guard(index)
        max_shared = drv.max_shared_per_block(index)
        dynamic_ok = max(0, min(DEFAULT_SHARED_LIMIT, max_shared) - self.static_shared)
        # With one device the only wrong state is "no/foreign context on this thread",
        # which the launch reports (see context_errors): skip the per-launch query.
        return _DeviceFunction(module, function, enter, leave, count > 1, max_shared,
                               dynamic_ok)

    def _prepare_shared(self, dev: _DeviceFunction, index: int, smem: int) -> None:
        """Check ``smem`` against the device and opt the function in beyond 48 KB."""
        total = self.static_shared + smem
        if total > dev.max_shared:
            raise LaunchError(f"the kernel needs {total} bytes of shared memory "
                              f"({self.static_shared} static + {smem} dynamic); "
                              f"{self.driver.name} device {index} allows {dev.max_shared}",
                              kernel=self.kernel)
        if smem > dev.dynamic_ok:
            with dev.lock:
                if smem > dev.dynamic_ok:
                    with self.driver.on_device(index):
                        self.driver.reserve_dynamic_shared(dev.function, smem)
                    dev.dynamic_ok = smem

    # -- launching ---------------------------------------------------------
    def bind(self, samples: Sequence, check_smem: Callable[[int], None]) -> BoundLaunch:
        """The launch for arguments of the samples' types, on the device holding the
        samples' tensors (a :class:`BoundLaunch`, called as
        ``run(args, grid, block, smem, stream)``)."""
        from .devices import common_device
        index = common_device(self.kernel, self.driver.name, self.names, samples)
        if index is None:   # no tensor arguments: the thread's current device
            index = self.driver.current_device()
        dev = self.device(index)
        packers = make_packers(self.layout, self.offsets, samples)
        default_stream = default_stream_getter(samples, index)
        launch = self.driver.launch
        retry_on = self.driver.context_errors
        enter, leave, function, guarded = dev.enter, dev.leave, dev.function, dev.guarded
        nslots = self.nslots
        local = threading.local()   # the driver releases the GIL: one buffer per thread
        shared_ok: set = {0}        # dynamic sizes already checked for this device
        prepare = self._prepare_shared
        fail = self._launch_failed

        def new_buffer() -> SlotTable:
            buf = local.buf = SlotTable(nslots)
            return buf

        def launch_on_device(grid, block, smem, handle, params):
            token = enter()
            try:
                return launch(function, grid[0], grid[1], grid[2], block[0], block[1],
                              block[2], smem, handle, params, 0)
            finally:
                if token is not None:
                    leave(token)

        def submit(buf: SlotTable, grid: tuple, block: tuple, smem: int, stream) -> None:
            if smem not in shared_ok:
                check_smem(smem)
                prepare(dev, index, smem)
                shared_ok.add(smem)
            if stream is None:
                handle = default_stream()
            elif type(stream) is int:
                handle = stream
            else:
                handle = stream_handle(stream)
            if guarded:
                result = launch_on_device(grid, block, smem, handle, buf.table_ptr)
            else:   # extra = 0 (NULL): cuda-python takes only ints there
                result = launch(function, grid[0], grid[1], grid[2], block[0], block[1],
                                block[2], smem, handle, buf.table_ptr, 0)
            code = result[0] if type(result) is tuple else result
            if code:
                if not guarded and code in retry_on:   # this thread had no/another context
                    result = launch_on_device(grid, block, smem, handle, buf.table_ptr)
                    code = result[0] if type(result) is tuple else result
                if code:
                    fail(code, index, grid, block, smem, handle)
        return BoundLaunch(self.layout, self.offsets, packers, local, new_buffer, submit)

    def _launch_failed(self, code, index: int, grid, block, smem: int, handle: int) -> None:
        drv = self.driver
        raise driver_error(
            f"kernel {self.kernel!r}: {drv.launch_name} on {drv.name} device {index} failed: "
            f"{drv.error_text(code)} (grid {tuple(grid)}, block {tuple(block)}, "
            f"dynamic shared memory {smem} bytes, stream {handle:#x}). An error of an "
            "earlier asynchronous launch also shows up here; synchronize after launches "
            "to find the one that failed", drv.name, code)


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

