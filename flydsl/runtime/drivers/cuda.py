"""Launching CUDA-backend kernels through the CUDA driver API of cuda-python
(``cuda.bindings.driver``).

A kernel's cubin (or its PTX, which the driver JIT-compiles: the fallback for
GPUs newer than the cubin's arch) is loaded with ``cuModuleLoadData`` into the
*primary context* of the device holding the tensors: the context the CUDA
runtime, and so torch, uses. Torch's pointers and streams therefore work as is.
Contexts are retained for the life of the process and modules for the life of
their compiled kernel.

Launches go through ``cuLaunchKernel`` with ``kernelParams`` (see
:mod:`.gpu_launcher`) and are asynchronous: a fault inside a kernel is reported by
the next synchronize (``flydsl.synchronize()``, ``torch.cuda.synchronize()``) or by
a later driver call.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

from ...errors import FlydslRuntimeError
from .gpu import DriverSlot, GpuDriver, as_image, binding_text, import_bindings
from .gpu_launcher import GpuLauncher

#: Where cuda-python keeps the driver bindings: >= 12.6, then older releases.
BINDING_MODULES = ("cuda.bindings.driver", "cuda.cuda")

_SLOT = DriverSlot(lambda bindings: CudaDriver(bindings))


def bindings():
    """cuda-python's driver module; FlydslRuntimeError when cuda-python is missing."""
    return import_bindings(BINDING_MODULES,
                           "cuda-python is not installed (pip install cuda-python)")


class CudaDriver(GpuDriver):
    """The CUDA driver API, return codes checked (see :class:`GpuDriver`)."""

    name = "cuda"
    launch_name = "cuLaunchKernel"
    device_types = ("cuda",)
    max_shared_bytes = 227 * 1024     # sm_90/sm_100 with the opt-in

    @classmethod
    def load(cls) -> "CudaDriver":
        """The process's CUDA driver (``cuInit`` done); FlydslRuntimeError when
        cuda-python, the driver library or a device is missing."""
        return _SLOT.get(bindings())

    def make_launcher(self, compiled) -> GpuLauncher:
        return GpuLauncher(compiled, self)

    def images(self, compiled) -> list[tuple[str, bytes]]:
        """The cubin, then the PTX: the driver JIT-compiles PTX for GPUs newer than
        the cubin's arch, which cannot load the cubin itself."""
        images = super().images(compiled)
        ptx = compiled.asm.get("ptx")
        if compiled.binary_stage != "ptx" and ptx:
            images.append(("ptx", as_image(ptx)))
        return images

    def __init__(self, cu):
        super().__init__()
        self.cu = cu
        try:
            result = cu.cuInit(0)
        except Exception as e:  # noqa: BLE001 - cuda-python raises when libcuda is missing
            raise FlydslRuntimeError(f"the CUDA driver (libcuda) is not available: {e}") from None
        self.check(result, "cuInit")
        self.launch = cu.cuLaunchKernel
        self._count: Optional[int] = None
        self._contexts: dict[int, object] = {}
        self._lock = threading.Lock()

    def error_text(self, code) -> str:
        name = binding_text(self.cu.cuGetErrorName, code) or f"CUDA error {int(code)}"
        text = binding_text(self.cu.cuGetErrorString, code)
        return f"{name} ({text})" if text else name

    # -- devices -----------------------------------------------------------
    def device_count(self) -> int:
        # Fixed once cuInit ran (CUDA_VISIBLE_DEVICES is read then): asked once.
        if self._count is None:
            self._count = int(self.check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount"))
        return self._count

    def _device(self, index: int):
        return self.check(self.cu.cuDeviceGet(index), f"cuDeviceGet({index})")

    def _attribute(self, name: str, index: int) -> int:
        attr = getattr(self.cu.CUdevice_attribute, name)
        return int(self.check(self.cu.cuDeviceGetAttribute(attr, self._device(index)),
                              f"cuDeviceGetAttribute({name})"))

    def device_arch(self, index: int) -> str:
        major = self._attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", index)
        minor = self._attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", index)
        # compute capability 9.0 (H100/H200) runs sm_90a code: sm_90 plus the
        # arch-specific wgmma/setmaxnreg, which Hopper kernels need (Triton compiles
        # for it too); an sm_90a binary runs on 9.0 devices only, which this one is
        return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"

    def max_shared_per_block(self, index: int) -> int:
        return self._attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", index)

    def current_device(self) -> int:
        ctx = self.check(self.cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if not _handle(ctx):
            return 0
        return int(self.check(self.cu.cuCtxGetDevice(), "cuCtxGetDevice"))

    def pointer_device(self, ptr: int) -> Optional[int]:
        attr = self.cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        try:
            return int(self.check(self.cu.cuPointerGetAttribute(attr, ptr),
                                  "cuPointerGetAttribute"))
        except FlydslRuntimeError:
            return None

    def context(self, index: int):
        """Device ``index``'s primary context, retained once per process."""
        ctx = self._contexts.get(index)
        if ctx is None:
            with self._lock:
                ctx = self._contexts.get(index)
                if ctx is None:
                    ctx = self.check(self.cu.cuDevicePrimaryCtxRetain(self._device(index)),
                                     f"cuDevicePrimaryCtxRetain({index})")
                    self._contexts[index] = ctx
        return ctx

    def device_guard(self, index: int) -> tuple[Callable[[], object], Callable[[object], None]]:
        ctx = self.context(index)
        want = _handle(ctx)
        get, set_current, check = self.cu.cuCtxGetCurrent, self.cu.cuCtxSetCurrent, self.check

        def enter():
            code, cur = get()
            if code:
                check((code,), "cuCtxGetCurrent")
            held = _handle(cur)
            if held == want:
                return None
            check(set_current(ctx), "cuCtxSetCurrent")
            # A thread that had no context keeps ours: its next launch is then cheap.
            return cur if held else None

        def leave(prev) -> None:
            set_current(prev)   # best effort: the launch's own result matters more
        return enter, leave

    # -- modules and launches ------------------------------------------------
    def module_load(self, image: bytes):
        return self.check(self.cu.cuModuleLoadData(image), "cuModuleLoadData")

    def module_function(self, module, symbol: str):
        return self.check(self.cu.cuModuleGetFunction(module, symbol.encode()),
                          f"cuModuleGetFunction({symbol!r})")

    def module_unload(self, module) -> None:
        self.cu.cuModuleUnload(module)

    def reserve_dynamic_shared(self, function, nbytes: int) -> None:
        """Beyond 48 KB, CUDA needs the kernel's opt-in for dynamic shared memory."""
        attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check(self.cu.cuFuncSetAttribute(function, attr, nbytes),
                   f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes})")

    def synchronize_current(self) -> None:
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def synchronize_stream(self, handle: int) -> None:
        self.check(self.cu.cuStreamSynchronize(handle), "cuStreamSynchronize")

    # -- timing ----------------------------------------------------------------
    def create_event(self) -> object:
        # CU_EVENT_DEFAULT (0): timing enabled, blocking-sync off.
        return self.check(self.cu.cuEventCreate(0), "cuEventCreate")

    def record_event(self, event: object, stream: int = 0) -> None:
        self.check(self.cu.cuEventRecord(event, stream), "cuEventRecord")

    def event_elapsed_ms(self, start: object, end: object) -> float:
        self.check(self.cu.cuEventSynchronize(end), "cuEventSynchronize")
        return float(self.check(self.cu.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def destroy_event(self, event: object) -> None:
        self.cu.cuEventDestroy(event)   # best effort: only releases the handle

    def mem_alloc(self, nbytes: int) -> object:
        return self.check(self.cu.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})")

    def memset_d32_async(self, ptr: object, value: int, count: int, stream: int) -> None:
        self.check(self.cu.cuMemsetD32Async(ptr, value, count, stream), "cuMemsetD32Async")


def _handle(obj) -> int:
    """A driver handle (CUcontext, ...) as an int; NULL and None are 0."""
    return 0 if obj is None else int(obj)


__all__ = ["CudaDriver", "bindings"]
