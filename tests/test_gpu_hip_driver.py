"""The HIP driver through the fake hip-python module."""
from __future__ import annotations

import struct
import sys

import pytest

import flydsl
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime import devices
from fake_gpu import (
    FakeHip, ROCM_SPECS, dev, handmade, hipError_t, new_launcher, no_smem_check, u64)


def test_hip_launch_packs_and_selects_the_device(fake_hip):
    fake_hip.archs = ["gfx942", "gfx942:sramecc+:xnack-"]
    fake_hip.widths = [8, 8, 8, 8, 8, 8, 8, 4, 4]
    launcher = new_launcher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))
    x = dev((3, 5), device=1)
    run = launcher.bind([x, 7, 1.0], no_smem_check)
    load = [args for name, args in fake_hip.calls if name == "hipModuleLoadData"]
    assert load == [(b"\x7fELF-binary",)]
    assert fake_hip.current == 0                    # restored after loading on device 1
    run([x, -7, 2.0], (2, 1, 1), (64, 1, 1), 0, None)
    launch = fake_hip.launches[-1]
    assert launch["device"] == 1 and fake_hip.current == 0
    assert launch["params"] == [x.ptr, x.ptr, 0, 3, 5, 5, 1, u64(-7) & 0xFFFFFFFF,
                                struct.unpack("<I", struct.pack("<f", 2.0))[0]]
    assert devices.device_arch("hip", 1) == "gfx942"


def test_hip_errors_use_hip_names(fake_hip):
    fake_hip.widths = [8] * 7 + [4, 4]
    x = dev((3, 5))
    run = new_launcher(handmade("hsaco", specs=ROCM_SPECS, driver="hip")).bind(
        [x, 7, 1.0], no_smem_check)
    fake_hip.fail["hipModuleLaunchKernel"] = hipError_t.hipErrorLaunchFailure
    with pytest.raises(FlydslRuntimeError,
                       match=r"hipModuleLaunchKernel.*hipErrorLaunchFailure \(hip error text\)"):
        run([x, 7, 1.0], (1, 1, 1), (1, 1, 1), 0, None)


def test_hip_error_text_from_an_int_code(fake_hip):
    drv = flydsl.get_driver("hip")
    assert drv.error_text(int(hipError_t.hipErrorLaunchFailure)) == \
        "hipErrorLaunchFailure (hip error text)"


def test_hip_device_properties_of_older_hip_python(monkeypatch):
    fake = FakeHip(archs=("gfx90a:xnack-",))
    fake.old_properties_api = True
    monkeypatch.setitem(sys.modules, "hip.hip", fake.module())
    assert devices.device_arch("hip", 0) == "gfx90a"


def test_hip_load_failure_and_missing_runtime(fake_hip, monkeypatch):
    fake_hip.fail["hipModuleLoadData"] = hipError_t.hipErrorNoBinaryForGpu
    launcher = new_launcher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))
    with pytest.raises(FlydslRuntimeError, match="compiled for gfx942.*hipErrorNoBinaryForGpu"):
        launcher.bind([dev((2, 2)), 1, 1.0], no_smem_check)
    for name in ("hip.hip", "rocm.bindings.hip"):   # hip-python < 10 and >= 10
        monkeypatch.setitem(sys.modules, name, None)
    assert devices.device_count("hip") == 0
    with pytest.raises(FlydslRuntimeError, match="hip-python is not installed.*Compile-only"):
        new_launcher(handmade("hsaco", specs=ROCM_SPECS, driver="hip"))
