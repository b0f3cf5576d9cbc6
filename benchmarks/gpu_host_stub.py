"""Host time of a GPU launch, measured without a GPU.

    python benchmarks/gpu_host_stub.py [--quick]

The real cuda-python and hip-python bindings run over flydsl.testing's stub
``libcuda.so.1`` and ``libamdhip64.so``, whose launch entry points record their
arguments and return: what is timed is the host side only (flydsl's dispatch and
argument packing, plus the binding's own argument conversion), the part of launch
overhead flydsl controls. Rows, per launch of the vector-add kernel on 1-element
arrays, for each driver:

* the binding's launch call with a prebuilt parameter table: the floor any Python
  launcher over these bindings pays;
* flydsl ``vadd_kernel[1, 256](a, b, c, 1)`` with CuPy-like ``__cuda_array_interface__``
  arrays (``.device.id``), Numba-like ones (no ``.device``), and torch tensors (CPU
  tensors standing in for GPU ones: only the bind-time device check is bypassed,
  the warm path is the real one), and the ``@flydsl.jit`` ``vadd``;
* torch's CPU ``a + b`` on 1-element tensors: torch's own dispatch cost without a
  device, a lower bound of the host time of its GPU ``a + b`` (which adds a launch).

On a GPU, ``benchmarks/gpu.py`` measures the real thing. Needs the bindings, ptxas
(the CUDA stub loads cubins only), ld.lld (for HSACO) and a C compiler; a driver
whose needs are missing is reported and skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from common import interleaved_per_call_us, print_table  # noqa: E402


#: driver -> (backend, arch, binary stage the stub loads, stub library, launch name)
DRIVERS = {"cuda": ("cuda", "sm_90", "cubin", "libcuda.so.1", "cuLaunchKernel"),
           "hip": ("rocm", "gfx942", "hsaco", "libamdhip64.so", "hipModuleLaunchKernel")}


def child(driver: str, n: int) -> dict:
    """Runs with the stub as the driver library (LD_LIBRARY_PATH set by the parent)."""
    import ctypes
    import types

    import numpy as np

    from flydsl.runtime import devices
    from flydsl.runtime.drivers import get_driver
    from vector_add import vadd, vadd_kernel

    backend, arch, stage, libname, launch_name = DRIVERS[driver]
    stub = ctypes.CDLL(libname)
    if driver == "hip":
        from hip import hip

        from flydsl.testing.stub_drivers import hip_arch_offset
        ctypes.c_long.in_dll(stub, "stub_arch_offset").value = hip_arch_offset(hip)

    class CupyLike:
        def __init__(self, host):
            self.host, self.ptr, self.shape = host, host.ctypes.data, host.shape
            self.device = types.SimpleNamespace(id=0)

        @property
        def __cuda_array_interface__(self):   # CuPy builds the dict on each access
            return {"version": 3, "shape": self.shape, "typestr": "<f4",
                    "data": (self.ptr, False), "strides": None, "stream": None}

    class NumbaLike:
        def __init__(self, host):
            self.host = host
            self.__cuda_array_interface__ = {"version": 2, "shape": host.shape,
                                             "typestr": host.dtype.str,
                                             "data": (host.ctypes.data, False),
                                             "strides": None}

    hosts = [np.ones(1, np.float32) for _ in range(3)]
    cupy = [CupyLike(h) for h in hosts]
    numba = [NumbaLike(h) for h in hosts]
    direct = vadd_kernel[1, 256]
    try:
        direct(*cupy, 1)
    except Exception as e:  # noqa: BLE001 - reported as what is missing
        return {"missing": f"a {stage} to load ({type(e).__name__}: {e})"}
    compiled = next(iter(vadd_kernel._compiled.values()))
    if compiled.binary_stage != stage:
        return {"missing": f"the {stage} toolchain (got a {compiled.binary_stage})"}

    # The floor: the binding's launch alone, parameters prebuilt, on the stub's function.
    drv = get_driver(driver)
    fn = compiled.launcher.device(0).function
    vals = (ctypes.c_uint64 * 16)()
    for k, h in enumerate(hosts):
        vals[5 * k:5 * k + 5] = (h.ctypes.data, h.ctypes.data, 0, 1, 1)
    vals[15] = 1
    table = (ctypes.c_void_p * 16)(*[ctypes.addressof(vals) + 8 * i for i in range(16)])
    tptr = ctypes.addressof(table)
    launch = drv.launch
    direct(*numba, 1)
    vadd(*cupy, 1)

    import torch
    real_common_device = devices.common_device
    devices.common_device = lambda *args, **kwargs: 0   # CPU tensors pose as device 0
    try:
        ta, tb, tc = torch.ones(1), torch.ones(1), torch.empty(1)
        direct(ta, tb, tc, 1)
    finally:
        devices.common_device = real_common_device
    out = interleaved_per_call_us({
        "raw": lambda: launch(fn, 1, 1, 1, 256, 1, 1, 0, 0, tptr, 0),
        "cupy": lambda: direct(*cupy, 1),
        "numba": lambda: direct(*numba, 1),
        "torch_tensors": lambda: direct(ta, tb, tc, 1),
        "jit": lambda: vadd(*cupy, 1),
        "torch_add": lambda: ta + tb}, n)
    out["launches"] = ctypes.c_int.in_dll(stub, "stub_launches").value
    return out


def measure(driver: str, quick: bool) -> dict:
    """Build the driver's stub and run :func:`child` over it in a fresh process."""
    from flydsl.runtime.drivers import cuda, hip
    from flydsl.testing import stub_drivers
    backend, arch, _, _, _ = DRIVERS[driver]
    try:
        (cuda if driver == "cuda" else hip).bindings()
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return {"missing": str(e)}
    build = (stub_drivers.build_stub_libcuda if driver == "cuda"
             else stub_drivers.build_stub_libamdhip64)
    with tempfile.TemporaryDirectory() as d:
        try:
            build(d)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            return {"missing": f"a stub driver library ({e})"}
        env = dict(os.environ, LD_LIBRARY_PATH=d, FLYDSL_COMPILE_BACKEND=backend,
                   FLYDSL_GPU_ARCH=arch, FLYDSL_CACHE_DIR=os.path.join(d, "cache"))
        args = [sys.executable, os.path.abspath(__file__), "--child", driver]
        proc = subprocess.run(args + (["--quick"] if quick else []), env=env,
                              capture_output=True, text=True)
    if proc.returncode:
        return {"missing": f"a working measuring process:\n{proc.stderr}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    quick = "--quick" in sys.argv
    n = 2000 if quick else 20000
    if "--child" in sys.argv:
        print(json.dumps(child(sys.argv[sys.argv.index("--child") + 1], n)))
        return
    measured = False
    for driver, (_, _, _, libname, launch_name) in DRIVERS.items():
        r = measure(driver, quick)
        if "missing" in r:
            print(f"\n{driver}: skipped, needs {r['missing']}")
            continue
        measured = True
        raw, torch_add = r["raw"], r["torch_add"]

        def row(name, t):
            return [name, f"{t:.2f}", f"{t / raw:.2f}x", f"{t / torch_add:.2f}x"]
        binding = "cuda-python" if driver == "cuda" else "hip-python"
        rows = [row(f"{launch_name} via {binding}, prebuilt params", raw),
                row("vadd_kernel[1, 256](a, b, c, 1), CuPy-like arrays", r["cupy"]),
                row("vadd_kernel[1, 256](a, b, c, 1), Numba-like arrays", r["numba"]),
                row("vadd_kernel[1, 256](a, b, c, 1), torch tensors", r["torch_tensors"]),
                row("@flydsl.jit vadd(a, b, c, 1), CuPy-like arrays", r["jit"]),
                row("torch a + b, 1-element CPU tensors", torch_add)]
        print_table(f"{driver}: host time per launch over a stub {libname} (us; no device "
                    "work; lower is better)",
                    ["launch", "us/launch", "vs raw binding", "vs torch CPU a+b"], rows)
        print(f"{r['launches']} launches reached the stub. flydsl's own share per direct "
              f"launch (torch tensors): {r['torch_tensors'] - raw:.2f} us.")
    if not measured:
        sys.exit(1)


if __name__ == "__main__":
    main()
