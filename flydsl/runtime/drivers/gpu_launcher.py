"""Launching a compiled kernel on a GPU through a :class:`~.gpu.GpuDriver` (CUDA, HIP).

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

import sys
import threading
import weakref
from typing import Callable, Sequence

from ...errors import FlydslRuntimeError, LaunchError
from .. import devices
from ..packing import BoundLaunch, SlotTable, make_packers, param_layout
from ..tensors import is_torch_tensor
from .base import driver_error, stream_handle, used_devices
from .gpu import DEFAULT_SHARED_LIMIT, GpuDriver

if sys.byteorder != "little":  # pragma: no cover - no big-endian GPU hosts
    raise ImportError("flydsl's GPU launchers assume a little-endian host")


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

    def __init__(self, compiled, driver: GpuDriver):
        self.kernel = compiled.kernel_name
        self.symbol = compiled.name
        self.backend = compiled.backend_name
        self.arch = compiled.target.arch
        self.static_shared = compiled.shared_bytes
        self.names, self.layout, self.offsets, self.nslots = param_layout(compiled.specs)
        self.driver = driver
        self.images = driver.images(compiled)
        self._devices: dict[int, _DeviceFunction] = {}
        self._lock = threading.Lock()
        # Device modules go when the launcher goes (not at exit: the driver may be gone).
        weakref.finalize(self, _unload_modules, self.driver, self._devices).atexit = False

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
        index = devices.common_device(self.kernel, self.driver, self.names, samples)
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
        return BoundLaunch(self.layout, self.offsets, packers, local, new_buffer, submit,
                           lambda: SlotTable(nslots))

    def _launch_failed(self, code, index: int, grid, block, smem: int, handle: int) -> None:
        drv = self.driver
        raise driver_error(
            f"kernel {self.kernel!r}: {drv.launch_name} on {drv.name} device {index} failed: "
            f"{drv.error_text(code)} (grid {tuple(grid)}, block {tuple(block)}, "
            f"dynamic shared memory {smem} bytes, stream {handle:#x}). An error of an "
            "earlier asynchronous launch also shows up here; synchronize after launches "
            "to find the one that failed", drv.name, code)
