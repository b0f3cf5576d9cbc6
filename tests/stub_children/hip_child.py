"""Child process of test_gpu_bindings_over_stubs.py: the real hip-python over the stub libamdhip64.so
(LD_LIBRARY_PATH points at the stub). Prints one JSON line."""
import ctypes, json, sys, types
import numpy as np
from hip import hip
import flydsl, flydsl.expr as fx
from flydsl.compiler.toolchain import find_lld
from flydsl.errors import FlydslRuntimeError
from flydsl.runtime import devices
from flydsl.runtime.launch import launcher_of
from flydsl.testing.stub_drivers import hip_arch_offset

@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]

class Dev:   # CuPy-like: the device index comes with the array
    def __init__(self, n, device=0):
        self.host = np.zeros(n, np.float32)
        self.device = types.SimpleNamespace(id=device)
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": "<f4",
                                         "data": (self.host.ctypes.data, False), "strides": None}

if find_lld() is None:
    print(json.dumps({"skip": "no ld.lld: no HSACO to load"})); sys.exit(0)
lib = ctypes.CDLL("libamdhip64.so")
g = lambda t, name: t.in_dll(lib, name)
g(ctypes.c_long, "stub_arch_offset").value = hip_arch_offset(hip)
g(ctypes.c_int, "stub_device_count").value = 2
g(ctypes.c_int, "stub_nparams").value = 16
a, b, c = Dev(50), Dev(50), Dev(50)
compiled = flydsl.compile(vadd_kernel, a.host, a.host, a.host, 50, backend="rocm",
                          arch="gfx942").kernels[0]
out = {"count": devices.device_count("hip"), "arch": devices.device_arch("hip", 1),
       "current": flydsl.get_driver("hip").current_device()}
launcher = launcher_of(compiled, flydsl.get_driver("hip"))
run = launcher.bind([a, b, c, 50], lambda smem: None)
run([a, b, c, -9], (2, 1, 1), (64, 1, 1), 1024, 0x1234)
out["params"] = list(g(ctypes.c_uint64 * 16, "stub_params"))
out["dims"] = list(g(ctypes.c_uint * 7, "stub_dims"))
out["stream"] = g(ctypes.c_uint64, "stub_stream").value
out["extra"] = g(ctypes.c_uint64, "stub_extra").value
out["attr"] = g(ctypes.c_int, "stub_last_attr").value
out["want_attr"] = int(hip.hipDeviceAttribute_t.hipDeviceAttributeMaxSharedMemoryPerBlock)
out["ptrs"] = [a.host.ctypes.data, b.host.ctypes.data, c.host.ctypes.data]
d1 = [Dev(50, device=1) for _ in range(3)]
launcher.bind(d1 + [50], lambda smem: None)(d1 + [50], (1, 1, 1), (64, 1, 1), 0, None)
out["second_device"] = g(ctypes.c_int, "stub_launch_device").value
out["current_after"] = flydsl.get_driver("hip").current_device()
before = g(ctypes.c_int, "stub_launches").value
for _ in range(3):   # through the kernel: arch detected from the device, then warm launches
    vadd_kernel[1, 64](*d1, 50)
out["kernel_launches"] = g(ctypes.c_int, "stub_launches").value - before
out["kernel_device"] = g(ctypes.c_int, "stub_launch_device").value
out["warm_source"] = vadd_kernel.warm_launch_source() or ""
devices.synchronize()
devices.synchronize(stream=5)
g(ctypes.c_int, "stub_fail_launch").value = 719
try:
    run([a, b, c, 1], (1, 1, 1), (64, 1, 1), 0, None)
except FlydslRuntimeError as e:
    out["error"] = str(e)
print(json.dumps(out))
