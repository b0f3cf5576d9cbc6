"""GPU modules, contexts and devices through the fake CUDA driver: loading and unloading,
device selection, driver errors, missing drivers, synchronize."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import flydsl
from flydsl.errors import FlydslRuntimeError, LaunchError
from flydsl.runtime import devices
from flydsl.runtime.drivers.base import used_devices
from fake_gpu import (
    CUresult, FakeCuda, Handle, compiled_vadd, dev, handmade, launcher_for, new_launcher,
    no_smem_check, register, vadd_kernel)


# ----------------------------------------------------------------------------------
# Modules, contexts, devices
# ----------------------------------------------------------------------------------

def test_module_loaded_once_per_device_in_its_primary_context(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    launcher = launcher_for(fake_cuda)
    a0, a1 = dev(4, device=0), dev(4, device=1)
    run0 = launcher.bind([a0, a0, a0, 4], no_smem_check)
    run1 = launcher.bind([a1, a1, a1, 4], no_smem_check)
    launcher.bind([a1, a1, a1, 4], no_smem_check)
    loads = [args for name, args in fake_cuda.calls if name == "cuModuleLoadData"]
    assert len(loads) == 2 and loads[0][0] == compiled_vadd().asm["cubin"]
    retained = [int(args[0]) for name, args in fake_cuda.calls
                if name == "cuDevicePrimaryCtxRetain"]
    assert retained == [0, 1]
    run0([a0, a0, a0, 4], (1, 1, 1), (4, 1, 1), 0, None)
    run1([a1, a1, a1, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert [int(launch["ctx"]) for launch in fake_cuda.launches] == [0x1000, 0x1001]
    assert [int(launch["function"].info["module"].info["ctx"]) for launch in
            fake_cuda.launches] == [0x1000, 0x1001]
    assert used_devices == {("cuda", 0), ("cuda", 1)}


def test_one_device_launches_without_context_calls(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    assert int(fake_cuda.current) == 0x1000   # loading left the primary context current
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel"]


def test_thread_without_context_gets_the_primary_one(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    fake_cuda.current = Handle("CUcontext", 0)   # e.g. a new thread
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent",
                                 "cuLaunchKernel"]
    assert len(fake_cuda.launches) == 1 and int(fake_cuda.current) == 0x1000   # kept
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuLaunchKernel"]


def test_foreign_context_is_restored_after_the_launch(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    other = Handle("CUcontext", 0x9999, device=0)
    fake_cuda.current = other          # e.g. a user's own context
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert int(fake_cuda.launches[-1]["ctx"]) == 0x1000
    assert fake_cuda.current is other


def test_several_devices_select_the_device_around_each_launch(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    a = dev(4, device=1)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    device0 = Handle("CUcontext", 0x1000, device=0)
    fake_cuda.current = device0        # e.g. torch's current device is 0
    fake_cuda.calls.clear()
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    assert fake_cuda.names() == ["cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel",
                                 "cuCtxSetCurrent"]
    assert int(fake_cuda.launches[-1]["ctx"]) == 0x1001 and fake_cuda.current is device0


def test_cubin_rejected_falls_back_to_ptx(fake_cuda):
    fake_cuda.fail["cuModuleLoadData"] = [CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU]
    a = dev(4)
    launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    images = [args[0] for name, args in fake_cuda.calls if name == "cuModuleLoadData"]
    assert images[0] == compiled_vadd().asm["cubin"]
    assert images[1] == compiled_vadd().asm["ptx"].encode() + b"\0"


def test_unloadable_binary_names_arches_and_errors(fake_cuda):
    fake_cuda.archs = ["sm_80"]
    fake_cuda.fail["cuModuleLoadData"] = CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
    a = dev(4)
    with pytest.raises(FlydslRuntimeError) as info:
        launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    msg = str(info.value)
    assert "vadd_kernel" in msg and "sm_90" in msg and "sm_80" in msg
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available)" in msg
    assert "FLYDSL_GPU_ARCH=sm_80" in msg


def test_missing_symbol_unloads_the_module(fake_cuda):
    compiled = compiled_vadd()
    launcher = new_launcher(compiled)   # the fake knows no kernel symbols
    a = dev(4)
    with pytest.raises(FlydslRuntimeError, match="CUDA_ERROR_NOT_FOUND"):
        launcher.bind([a, a, a, 4], no_smem_check)
    assert "cuModuleUnload" in fake_cuda.names()


def test_dropping_a_launcher_unloads_its_modules(fake_cuda):
    import gc
    a = dev(4)
    launcher = launcher_for(fake_cuda)
    launcher.bind([a, a, a, 4], no_smem_check)
    assert "cuModuleUnload" not in fake_cuda.names()
    del launcher
    gc.collect()
    assert "cuModuleUnload" in fake_cuda.names()


def test_reloading_a_kernel_unloads_the_old_modules(fake_cuda, monkeypatch):
    """cache_clear() + launch loads the binary again (here from the disk cache): the
    modules of the dropped launchers are unloaded, so device memory stays bounded."""
    import gc
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    a = dev(64)
    for _ in range(6):
        vadd_kernel.cache_clear()
        vadd_kernel[1, 64](a, a, a, 64)
    gc.collect()
    names = fake_cuda.names()
    assert names.count("cuModuleLoadData") == 6
    assert names.count("cuModuleLoadData") - names.count("cuModuleUnload") <= 1


def test_launch_error_code_raises_with_driver_message(fake_cuda):
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    fake_cuda.fail["cuLaunchKernel"] = CUresult.CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(FlydslRuntimeError) as info:
        run([a, a, a, 4], (3, 1, 1), (64, 1, 1), 0, 0x42)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "cuLaunchKernel" in msg
    assert "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)" in msg
    assert "(3, 1, 1)" in msg and "0x42" in msg
    assert info.value.code == CUresult.CUDA_ERROR_LAUNCH_FAILED


def test_every_driver_call_is_checked(fake_cuda):
    launcher = launcher_for(fake_cuda)
    a = dev(4)
    for name in ("cuDevicePrimaryCtxRetain", "cuCtxGetCurrent", "cuDeviceGetAttribute"):
        fake_cuda.fail = {name: CUresult.CUDA_ERROR_INVALID_VALUE}
        launcher._devices.clear()
        with pytest.raises(FlydslRuntimeError, match=f"{name}.*CUDA_ERROR_INVALID_VALUE"):
            launcher.bind([a, a, a, 4], no_smem_check)


def test_device_index_out_of_range(fake_cuda):
    a = dev(4, device=3)
    with pytest.raises(FlydslRuntimeError, match="device 3 does not exist"):
        launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)


def test_host_arrays_are_rejected(fake_cuda):
    a, h = dev(4), np.zeros(4, np.float32)
    with pytest.raises(LaunchError) as info:
        launcher_for(fake_cuda).bind([a, h, a, 4], no_smem_check)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "'b'" in msg and "cpu" in msg and "GPU" in msg


def test_mixed_devices_are_rejected(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_90"]
    a, b = dev(4, device=0), dev(4, device=1)
    with pytest.raises(LaunchError) as info:
        launcher_for(fake_cuda).bind([a, b, a, 4], no_smem_check)
    msg = str(info.value)
    assert "'vadd_kernel'" in msg and "'a' on cuda:0" in msg and "'b' on cuda:1" in msg


def test_device_detection_and_arch(fake_cuda):
    fake_cuda.archs = ["sm_90", "sm_80"]
    assert devices.device_count("cuda") == 2
    assert devices.device_arch("cuda", 1) == "sm_80"
    cuda = flydsl.get_driver("cuda")
    assert devices.tensors_arch(cuda, [dev(4, device=1), 3]) == "sm_80"
    assert devices.tensors_arch(cuda, [np.zeros(3), 3]) is None
    with pytest.raises(FlydslRuntimeError, match="device 2 does not exist"):
        devices.device_arch("cuda", 2)


# ----------------------------------------------------------------------------------
# No driver
# ----------------------------------------------------------------------------------

def test_no_cuda_python_means_no_device_and_a_clear_launch_error(monkeypatch):
    for name in ("cuda.bindings.driver", "cuda.cuda"):
        monkeypatch.setitem(sys.modules, name, None)    # import raises ImportError
    assert devices.device_count("cuda") == 0
    with pytest.raises(FlydslRuntimeError) as info:
        new_launcher(handmade())
    msg = str(info.value)
    assert "cuda-python is not installed" in msg
    assert "Compile-only still works" in msg and "flydsl.compile(" in msg


def test_missing_libcuda_is_reported(monkeypatch):
    fake = FakeCuda()
    fake.init_error = OSError("libcuda.so.1: cannot open shared object file")
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    assert devices.device_count("cuda") == 0
    with pytest.raises(FlydslRuntimeError, match="libcuda.*not available.*Compile-only"):
        new_launcher(handmade())


def test_cuinit_error_code_is_reported(monkeypatch):
    fake = FakeCuda()
    fake.fail["cuInit"] = CUresult.CUDA_ERROR_NO_DEVICE
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake.module())
    with pytest.raises(FlydslRuntimeError, match="cuInit failed: CUDA_ERROR_NO_DEVICE"):
        new_launcher(handmade())


# ----------------------------------------------------------------------------------
# Synchronize
# ----------------------------------------------------------------------------------

def test_synchronize_reports_async_faults(fake_cuda):
    devices.synchronize()                       # nothing launched on a GPU: no-op
    assert "cuCtxSynchronize" not in fake_cuda.names()
    a = dev(4)
    run = launcher_for(fake_cuda).bind([a, a, a, 4], no_smem_check)
    run([a, a, a, 4], (1, 1, 1), (4, 1, 1), 0, None)
    devices.synchronize()
    assert "cuCtxSynchronize" in fake_cuda.names()
    fake_cuda.fail["cuCtxSynchronize"] = CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(FlydslRuntimeError) as info:
        devices.synchronize()
    assert "cuda device 0" in str(info.value)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" in \
        str(info.value)
    fake_cuda.fail.clear()
    devices.synchronize(stream=0x99)
    assert fake_cuda.calls[-1] == ("cuStreamSynchronize", (0x99,))
