"""Launching ROCm-backend kernels through HIP's module API (hip-python's ``hip.hip``).

A kernel's HSACO is loaded with ``hipModuleLoadData`` on the device holding the
tensors (HIP selects devices per thread with ``hipSetDevice``; torch on ROCm
shares them). Launches go through ``hipModuleLaunchKernel`` with ``kernelParams``
(see :mod:`.gpu_launcher`) and are asynchronous: a fault inside a kernel is
reported by the next synchronize (``flydsl.synchronize()``,
``torch.cuda.synchronize()``).
"""
from __future__ import annotations

from typing import Callable

from ...errors import FlydslRuntimeError
from .gpu import DriverSlot, GpuDriver, binding_text, import_bindings
from .gpu_launcher import GpuLauncher

#: Where hip-python keeps the HIP bindings: releases before 10, then 10 and later
#: (whose ``hip`` package only aliases ``rocm.bindings.hip`` as an attribute, so
#: ``import hip.hip`` fails there while ``from hip import hip`` works).
BINDING_MODULES = ("hip.hip", "rocm.bindings.hip")

_SLOT = DriverSlot(lambda bindings: HipDriver(bindings))


def bindings():
    """hip-python's HIP module; FlydslRuntimeError when hip-python is missing."""
    return import_bindings(BINDING_MODULES, "hip-python is not installed (pip install "
                                            "hip-python matching your ROCm version)")


class HipDriver(GpuDriver):
    """HIP's device and module API, return codes checked (see :class:`GpuDriver`)."""

    name = "hip"
    launch_name = "hipModuleLaunchKernel"
    device_types = ("cuda", "hip", "rocm")   # torch on ROCm says "cuda"
    max_shared_bytes = 160 * 1024             # gfx950

    @classmethod
    def load(cls) -> "HipDriver":
        """The process's HIP driver; FlydslRuntimeError when hip-python or the HIP
        runtime is missing."""
        return _SLOT.get(bindings())

    def make_launcher(self, compiled) -> GpuLauncher:
        return GpuLauncher(compiled, self)

    def __init__(self, hip):
        super().__init__()
        self.hip = hip
        try:
            result = hip.hipGetDeviceCount()   # also initializes the runtime
        except Exception as e:  # noqa: BLE001 - a broken install raises from the binding
            raise FlydslRuntimeError(f"the HIP runtime is not available: {e}") from None
        self.check(result, "hipGetDeviceCount")
        self.launch = hip.hipModuleLaunchKernel

    def error_text(self, code) -> str:
        try:   # hip-python's error functions take the enum only
            code = self.hip.hipError_t(code)
        except (ValueError, TypeError, AttributeError):
            pass
        name = binding_text(self.hip.hipGetErrorName, code) or f"HIP error {int(code)}"
        text = binding_text(self.hip.hipGetErrorString, code)
        return f"{name} ({text})" if text and text != name else name

    # -- devices -----------------------------------------------------------
    def device_count(self) -> int:
        return int(self.check(self.hip.hipGetDeviceCount(), "hipGetDeviceCount"))

    def device_properties(self, index: int):
        """Device ``index``'s ``hipDeviceProp_t``."""
        get = self.hip.hipGetDeviceProperties
        try:   # hip-python >= 10 allocates and returns them: (err, props)
            result = get(index)
        except TypeError:   # earlier releases fill a caller's struct: (err,)
            props = self.hip.hipDeviceProp_t()
            self.check(get(props, index), f"hipGetDeviceProperties({index})")
            return props
        return self.check(result, f"hipGetDeviceProperties({index})")

    def device_arch(self, index: int) -> str:
        name = self.device_properties(index).gcnArchName
        name = name.decode() if isinstance(name, bytes) else str(name)
        return name.split(":", 1)[0].strip().lower()   # gfx942:sramecc+:xnack- -> gfx942

    def max_shared_per_block(self, index: int) -> int:
        attr = self.hip.hipDeviceAttribute_t.hipDeviceAttributeMaxSharedMemoryPerBlock
        return int(self.check(self.hip.hipDeviceGetAttribute(attr, index),
                              "hipDeviceGetAttribute(MaxSharedMemoryPerBlock)"))

    def current_device(self) -> int:
        return int(self.check(self.hip.hipGetDevice(), "hipGetDevice"))

    def device_guard(self, index: int) -> tuple[Callable[[], object], Callable[[object], None]]:
        get, set_device, check = self.hip.hipGetDevice, self.hip.hipSetDevice, self.check

        def enter():
            cur = check(get(), "hipGetDevice")
            if cur == index:
                return None
            check(set_device(index), f"hipSetDevice({index})")
            return cur

        def leave(prev) -> None:
            set_device(prev)   # best effort: the launch's own result matters more
        return enter, leave

    # -- modules and launches ------------------------------------------------
    def module_load(self, image: bytes):
        return self.check(self.hip.hipModuleLoadData(image), "hipModuleLoadData")

    def module_function(self, module, symbol: str):
        return self.check(self.hip.hipModuleGetFunction(module, symbol.encode()),
                          f"hipModuleGetFunction({symbol!r})")

    def module_unload(self, module) -> None:
        self.hip.hipModuleUnload(module)

    def synchronize_current(self) -> None:
        self.check(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    def synchronize_stream(self, handle: int) -> None:
        self.check(self.hip.hipStreamSynchronize(handle), "hipStreamSynchronize")

    # -- timing ----------------------------------------------------------------
    def create_event(self) -> object:
        return self.check(self.hip.hipEventCreate(), "hipEventCreate")   # timing enabled

    def record_event(self, event: object, stream: int = 0) -> None:
        self.check(self.hip.hipEventRecord(event, stream), "hipEventRecord")

    def event_elapsed_ms(self, start: object, end: object) -> float:
        self.check(self.hip.hipEventSynchronize(end), "hipEventSynchronize")
        return float(self.check(self.hip.hipEventElapsedTime(start, end), "hipEventElapsedTime"))

    def destroy_event(self, event: object) -> None:
        self.hip.hipEventDestroy(event)   # best effort: only releases the handle

    def mem_alloc(self, nbytes: int) -> object:
        return self.check(self.hip.hipMalloc(nbytes), f"hipMalloc({nbytes})")

    def memset_d32_async(self, ptr: object, value: int, count: int, stream: int) -> None:
        self.check(self.hip.hipMemsetD32Async(ptr, value, count, stream), "hipMemsetD32Async")


__all__ = ["HipDriver", "bindings"]
