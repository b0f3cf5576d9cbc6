"""A stand-in ``libcuda.so.1`` for exercising flydsl's CUDA launcher without a GPU.

It implements the driver calls flydsl makes, with one device (sm_90) and modules
that accept any ELF image; ``cuLaunchKernel`` records its arguments (the first
``stub_nparams`` kernel parameters as 8-byte words, the dims, stream and ``extra``)
and returns, or fails with ``stub_fail_launch`` when that is set. Loaded under its
real name through ``LD_LIBRARY_PATH``, it lets the real cuda-python bindings run:
the driver-argument tests use it, and ``benchmarks/gpu_host_stub.py`` times the
host side of a launch with it (no device work, so only flydsl and the binding count).

    lib = build_stub_libcuda(directory)   # -> directory/libcuda.so.1
    # run a child process with LD_LIBRARY_PATH=directory
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: C source of the stub; its globals (``stub_*``) are read and set with ctypes.
STUB_SOURCE = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
typedef int CUresult;
static void *current = 0;
uint64_t stub_params[64]; int stub_nparams = 0; unsigned stub_dims[7];
uint64_t stub_stream, stub_extra; int stub_launches = 0, stub_fail_launch = 0, stub_smem_attr = 0;
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st) {
  *pfn = dlsym(RTLD_DEFAULT, sym); if (st) *st = *pfn ? 0 : 1; return *pfn ? 0 : 500; }
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { if (o) return 101; *d = o; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
  *v = a == 75 ? 9 : a == 76 ? 0 : a == 97 ? 232448 : 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(uintptr_t)(0x1000 + d); return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(void *c) { current = c; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuModuleLoadData(void **m, const void *image) {
  *m = (void *)0x2000; return memcmp(image, "\x7f" "ELF", 4) == 0 ? 0 : 200; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)0x3000; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { if (a == 8) stub_smem_attr = v; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, void *stream, void **params,
                        void **extra) {
  if (!current) return 201;
  if (stub_fail_launch) return stub_fail_launch;
  for (int i = 0; i < stub_nparams; i++) stub_params[i] = *(uint64_t *)params[i];
  unsigned d[7] = {gx, gy, gz, bx, by, bz, smem}; memcpy(stub_dims, d, sizeof d);
  stub_stream = (uint64_t)(uintptr_t)stream; stub_extra = (uint64_t)(uintptr_t)extra;
  stub_launches++; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
CUresult cuGetErrorName(int e, const char **s) { *s = e == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : "?"; return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "unspecified launch failure"; return 0; }
CUresult cuPointerGetAttribute(void *data, int a, uint64_t p) { *(int *)data = 0; return 0; }
"""


def build_stub_libcuda(directory) -> Path:
    """Compile the stub into ``directory/libcuda.so.1``; RuntimeError without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) to build the stub libcuda")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "stub_libcuda.c"
    source.write_text(STUB_SOURCE)
    lib = directory / "libcuda.so.1"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(source), "-ldl"],
                   check=True, capture_output=True)
    return lib


__all__ = ["STUB_SOURCE", "build_stub_libcuda"]
