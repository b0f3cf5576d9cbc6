"""The real cuda-python and hip-python bindings over C stubs of libcuda.so.1 and
libamdhip64.so (flydsl.testing.stub_drivers): the argument types they take (ints
for NULL, bytes images, handles), devices, errors and synchronization, with no GPU.
The child programs are in tests/stub_children."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from flydsl.errors import FlydslRuntimeError
from flydsl.runtime.drivers import cuda, hip
from flydsl.testing.stub_drivers import build_stub_libamdhip64, build_stub_libcuda

CHILDREN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub_children")


def u64(v: int) -> int:
    return v & (1 << 64) - 1


def run_over_stub(tmp_path, bindings, build, child: str, backend: str,
                  *child_args: str) -> dict:
    """Run ``stub_children/<child>`` in a process whose driver library is the stub; its
    last stdout line (JSON) is the result. Skips without the Python bindings
    (``bindings()`` raises) or a C compiler."""
    try:
        bindings()
    except FlydslRuntimeError as e:
        pytest.skip(str(e))
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the stub driver")
    build(tmp_path)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FLYDSL_COMPILE_BACKEND=backend)
    proc = subprocess.run([sys.executable, os.path.join(CHILDREN, child), *child_args],
                          capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


@pytest.mark.parametrize("ndev", [1, 2])
def test_real_cuda_python_over_a_stub_driver(tmp_path, ndev):
    """cuda-python's real argument conversion (ints for NULL, bytes images, handles)
    with a C stub standing in for libcuda.so.1; with two devices, arrays found on
    device 1 by their pointers launch in its context, and the caller's is restored."""
    out = run_over_stub(tmp_path, cuda.bindings, build_stub_libcuda, "cuda_child.py", "cuda",
                        str(ndev))
    pa, pb, pc = out["ptrs"]
    assert out["count"] == ndev and out["arch"] == "sm_90a" and out["current"] == 0
    assert out["params"][:15] == [pa, pa, 0, 50, 1, pb, pb, 0, 50, 1, pc, pc, 0, 50, 1]
    assert out["params"][15] & 0xFFFFFFFF == u64(-9) & 0xFFFFFFFF   # the i32 the driver reads
    assert out["dims"] == [2, 1, 1, 32, 1, 1, 64 * 1024]
    assert out["stream"] == 0x1234 and out["extra"] == 0 and out["smem_attr"] == 64 * 1024
    assert "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)" in out["error"]
    if ndev > 1:
        assert out["device1"] == 1 and out["device1_ptr"]
        assert out["current_after"] == 0 and out["device0_again"] == 0


def test_real_hip_python_over_a_stub_driver(tmp_path):
    """hip-python's real argument conversion (kernelParams address, int stream and
    NULL extra, bytes image, the device-properties call, enum-only error names) with a
    C stub standing in for libamdhip64.so, on two devices."""
    out = run_over_stub(tmp_path, hip.bindings, build_stub_libamdhip64, "hip_child.py",
                        "rocm")
    pa, pb, pc = out["ptrs"]
    assert out["count"] == 2 and out["arch"] == "gfx942" and out["current"] == 0
    assert out["params"][:15] == [pa, pa, 0, 50, 1, pb, pb, 0, 50, 1, pc, pc, 0, 50, 1]
    assert out["params"][15] & 0xFFFFFFFF == u64(-9) & 0xFFFFFFFF
    assert out["dims"] == [2, 1, 1, 64, 1, 1, 1024]
    assert out["stream"] == 0x1234 and out["extra"] == 0 and out["attr"] == out["want_attr"]
    assert out["second_device"] == 1 and out["current_after"] == 0
    assert out["kernel_launches"] == 3 and out["kernel_device"] == 1
    assert "cai" in out["warm_source"]   # the generated launch ran over the real binding
    assert "hipErrorLaunchFailure (unspecified launch failure)" in out["error"]
