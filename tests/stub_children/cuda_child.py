"""Child process of test_gpu_bindings_over_stubs.py: the real cuda-python over the stub libcuda.so.1
(LD_LIBRARY_PATH points at the stub). Prints one JSON line."""
import ctypes, json, sys
import numpy as np
import flydsl, flydsl.expr as fx
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime import devices
from flydsl.runtime.launch import launcher_of

@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]

class Dev:
    def __init__(self, n):
        self.host = np.zeros(n, np.float32)
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": "<f4",
                                         "data": (self.host.ctypes.data, False), "strides": None}

lib = ctypes.CDLL("libcuda.so.1")
g = lambda t, name: t.in_dll(lib, name)
g(ctypes.c_int, "stub_nparams").value = 16
ndev = int(sys.argv[1])
g(ctypes.c_int, "stub_device_count").value = ndev
a, b, c = Dev(50), Dev(50), Dev(50)
compiled = flydsl.compile(vadd_kernel, a.host, a.host, a.host, 50, backend="cuda",
                          arch="sm_90").kernels[0]
if compiled.binary_stage != "cubin":
    print(json.dumps({"skip": "no ptxas: no cubin"})); sys.exit(0)
out = {"count": devices.device_count("cuda"), "arch": devices.device_arch("cuda"),
       "current": flydsl.get_driver("cuda").current_device()}
run = launcher_of(compiled, flydsl.get_driver("cuda")).bind([a, b, c, 50], lambda smem: None)
run([a, b, c, -9], (2, 1, 1), (32, 1, 1), 64 * 1024, 0x1234)
out["params"] = list(g(ctypes.c_uint64 * 16, "stub_params"))
out["dims"] = list(g(ctypes.c_uint * 7, "stub_dims"))
out["stream"] = g(ctypes.c_uint64, "stub_stream").value
out["extra"] = g(ctypes.c_uint64, "stub_extra").value
out["smem_attr"] = g(ctypes.c_int, "stub_smem_attr").value
out["ptrs"] = [a.host.ctypes.data, b.host.ctypes.data, c.host.ctypes.data]
devices.synchronize()
devices.synchronize(stream=5)
g(ctypes.c_int, "stub_fail_launch").value = 719
try:
    run([a, b, c, 1], (1, 1, 1), (32, 1, 1), 0, None)
except FlydslRuntimeError as e:
    out["error"] = str(e)
g(ctypes.c_int, "stub_fail_launch").value = 0
if ndev > 1:   # Numba-like arrays on device 1: found by pointer, launched there
    xs = [Dev(8) for _ in range(3)]
    for i, x in enumerate(xs):
        g(ctypes.c_uint64 * 8, "stub_pointers")[i] = x.host.ctypes.data
        g(ctypes.c_int * 8, "stub_pointer_devices")[i] = 1
    g(ctypes.c_int, "stub_npointers").value = 3
    for _ in range(2):   # cold, then warm
        vadd_kernel[1, 32](*xs, 8)
    out["device1"] = g(ctypes.c_int, "stub_launch_device").value
    out["device1_ptr"] = g(ctypes.c_uint64 * 16, "stub_params")[0] == xs[0].host.ctypes.data
    out["current_after"] = flydsl.get_driver("cuda").current_device()
    run([a, b, c, 3], (1, 1, 1), (32, 1, 1), 0, None)
    out["device0_again"] = g(ctypes.c_int, "stub_launch_device").value
print(json.dumps(out))
