"""Host time of a CUDA-backend launch, measured without a GPU.

    python benchmarks/gpu_host_stub.py [--quick]

The real cuda-python bindings run over flydsl.testing's stub ``libcuda.so.1``,
whose ``cuLaunchKernel`` records its arguments and returns: what is timed is the
host side only (flydsl's dispatch and argument packing, plus the binding's own
argument conversion), the part of launch overhead flydsl controls. Rows, per
launch of the vector-add kernel on 1-element arrays:

* ``cuLaunchKernel`` through cuda-python with a prebuilt parameter table: the floor
  any Python launcher over these bindings pays;
* flydsl ``vadd_kernel[1, 256](a, b, c, 1)`` with CuPy-like ``__cuda_array_interface__``
  arrays (``.device.id``), Numba-like ones (no ``.device``), and torch tensors (CPU
  tensors standing in for CUDA ones: only the bind-time device check is bypassed,
  the warm path is the real one), and the ``@flydsl.jit`` ``vadd``;
* torch's CPU ``a + b`` on 1-element tensors: torch's own dispatch cost without a
  device, a lower bound of the host time of its CUDA ``a + b`` (which adds a launch).

On a GPU, ``benchmarks/gpu.py`` measures the real thing. Needs cuda-python, ptxas
(the stub loads cubins only) and a C compiler; otherwise it says what is missing.
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


def child(n: int) -> dict:
    """Runs with the stub as libcuda.so.1 (LD_LIBRARY_PATH set by the parent)."""
    import ctypes
    import types

    import numpy as np

    from flydsl.runtime import devices
    from vector_add import vadd, vadd_kernel

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
    direct(*cupy, 1)
    compiled = next(iter(vadd_kernel._compiled.values()))
    if compiled.binary_stage != "cubin":
        return {"missing": "ptxas (the stub driver loads cubins only)"}
    out: dict = {}

    # The floor: the binding call alone, parameters prebuilt, on the stub's function.
    from cuda.bindings import driver as cu
    drv = devices.load_driver("cuda")
    fn = compiled.launcher().device(0).function
    vals = (ctypes.c_uint64 * 16)()
    for k, h in enumerate(hosts):
        vals[5 * k:5 * k + 5] = (h.ctypes.data, h.ctypes.data, 0, 1, 1)
    vals[15] = 1
    table = (ctypes.c_void_p * 16)(*[ctypes.addressof(vals) + 8 * i for i in range(16)])
    tptr = ctypes.addressof(table)
    launch = cu.cuLaunchKernel
    assert drv.name == "cuda"
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
    out.update(interleaved_per_call_us({
        "raw": lambda: launch(fn, 1, 1, 1, 256, 1, 1, 0, 0, tptr, 0),
        "cupy": lambda: direct(*cupy, 1),
        "numba": lambda: direct(*numba, 1),
        "torch_tensors": lambda: direct(ta, tb, tc, 1),
        "jit": lambda: vadd(*cupy, 1),
        "torch_add": lambda: ta + tb}, n))
    out["launches"] = ctypes.c_int.in_dll(ctypes.CDLL("libcuda.so.1"), "stub_launches").value
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    n = 2000 if quick else 20000
    if "--child" in sys.argv:
        print(json.dumps(child(n)))
        return
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        sys.exit("benchmarks/gpu_host_stub.py: needs cuda-python (pip install -e '.[cuda]')")
    from flydsl.testing.stub_drivers import build_stub_libcuda
    with tempfile.TemporaryDirectory() as d:
        try:
            build_stub_libcuda(d)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            sys.exit(f"benchmarks/gpu_host_stub.py: cannot build the stub libcuda: {e}")
        env = dict(os.environ, LD_LIBRARY_PATH=d, FLYDSL_COMPILE_BACKEND="cuda",
                   FLYDSL_GPU_ARCH="sm_90", FLYDSL_CACHE_DIR=os.path.join(d, "cache"))
        args = [sys.executable, os.path.abspath(__file__), "--child"] + sys.argv[1:]
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"benchmarks/gpu_host_stub.py: the measuring process failed:\n{proc.stderr}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if "missing" in r:
        sys.exit(f"benchmarks/gpu_host_stub.py: needs {r['missing']}")
    raw, torch_add = r["raw"], r["torch_add"]

    def row(name, t):
        return [name, f"{t:.2f}", f"{t / raw:.2f}x", f"{t / torch_add:.2f}x"]
    rows = [row("cuLaunchKernel via cuda-python, prebuilt params", raw),
            row("vadd_kernel[1, 256](a, b, c, 1), CuPy-like arrays", r["cupy"]),
            row("vadd_kernel[1, 256](a, b, c, 1), Numba-like arrays", r["numba"]),
            row("vadd_kernel[1, 256](a, b, c, 1), torch tensors", r["torch_tensors"]),
            row("@flydsl.jit vadd(a, b, c, 1), CuPy-like arrays", r["jit"]),
            row("torch a + b, 1-element CPU tensors", torch_add)]
    print_table("host time per launch over a stub libcuda (us; no device work; lower is "
                "better)", ["launch", "us/launch", "vs raw binding", "vs torch CPU a+b"], rows)
    print(f"\n{r['launches']} launches reached the stub's cuLaunchKernel. flydsl's own share "
          f"per direct launch (torch tensors): {r['torch_tensors'] - raw:.2f} us.")


if __name__ == "__main__":
    main()
