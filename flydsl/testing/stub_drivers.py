"""Stand-in GPU driver libraries for exercising flydsl's launchers without a GPU.

``libcuda.so.1`` and ``libamdhip64.so`` stubs implement the driver calls flydsl
makes, with ``stub_device_count`` devices (sm_90 / the arch the caller sets), one
context per device that modules and functions belong to, modules that accept any
ELF image, and (CUDA) device pointers listed in ``stub_pointers``. The launch entry
point records its arguments (the first ``stub_nparams`` kernel parameters as 8-byte
words, the dims, stream and ``extra``) and returns, or fails with
``stub_fail_launch`` when that is set. Loaded under their real names through
``LD_LIBRARY_PATH``, they let the real cuda-python and hip-python bindings run: the
driver-argument tests use them, and ``benchmarks/gpu_host_stub.py`` times the host
side of a launch with the CUDA one (no device work, so only flydsl and the binding
count).

    build_stub_libcuda(directory)       # -> directory/libcuda.so.1
    build_stub_libamdhip64(directory)   # -> directory/libamdhip64.so
    # then run a child process with LD_LIBRARY_PATH=directory
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: C source of the CUDA stub; its globals (``stub_*``) are read and set with ctypes.
CUDA_STUB_SOURCE = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
typedef int CUresult;
/* Contexts, modules and functions are 0x1000/0x2000/0x3000 + device index. */
static void *current = 0;
int stub_device_count = 1;
uint64_t stub_pointers[8]; int stub_pointer_devices[8]; int stub_npointers = 0;
uint64_t stub_params[64]; int stub_nparams = 0; unsigned stub_dims[7];
uint64_t stub_stream, stub_extra; int stub_launches = 0, stub_fail_launch = 0, stub_smem_attr = 0;
int stub_launch_device = -1;
static int current_device(void) { return current ? (int)((uintptr_t)current - 0x1000) : -1; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st) {
  *pfn = dlsym(RTLD_DEFAULT, sym); if (st) *st = *pfn ? 0 : 1; return *pfn ? 0 : 500; }
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDeviceGetCount(int *n) { *n = stub_device_count; return 0; }
CUresult cuDeviceGet(int *d, int o) {
  if (o < 0 || o >= stub_device_count) return 101;
  *d = o; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
  *v = a == 75 ? 9 : a == 76 ? 0 : a == 97 ? 232448 : 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) {
  *c = (void *)(uintptr_t)(0x1000 + d); return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(void *c) { current = c; return 0; }
CUresult cuCtxGetDevice(int *d) { if (!current) return 201; *d = current_device(); return 0; }
CUresult cuModuleLoadData(void **m, const void *image) {
  if (!current) return 201;
  *m = (void *)(uintptr_t)(0x2000 + current_device());
  return memcmp(image, "\x7f" "ELF", 4) == 0 ? 0 : 200; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  *f = (void *)((uintptr_t)m + 0x1000); return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { if (a == 8) stub_smem_attr = v; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, void *stream, void **params,
                        void **extra) {
  if (!current) return 201;
  if ((int)((uintptr_t)f - 0x3000) != current_device()) return 400;  /* another context's */
  if (stub_fail_launch) return stub_fail_launch;
  for (int i = 0; i < stub_nparams; i++) stub_params[i] = *(uint64_t *)params[i];
  unsigned d[7] = {gx, gy, gz, bx, by, bz, smem}; memcpy(stub_dims, d, sizeof d);
  stub_stream = (uint64_t)(uintptr_t)stream; stub_extra = (uint64_t)(uintptr_t)extra;
  stub_launch_device = current_device(); stub_launches++; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
CUresult cuGetErrorName(int e, const char **s) {
  *s = e == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : "?"; return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "unspecified launch failure"; return 0; }
CUresult cuPointerGetAttribute(void *data, int a, uint64_t p) {
  for (int i = 0; i < stub_npointers; i++)
    if (stub_pointers[i] == p) { *(int *)data = stub_pointer_devices[i]; return 0; }
  return 1; }
"""


#: C source of the HIP stub. ``gcnArchName``'s offset in ``hipDeviceProp_tR0600``
#: depends on the headers hip-python was built with: the caller sets
#: ``stub_arch_offset`` (see :func:`hip_arch_offset`).
HIP_STUB_SOURCE = r"""
#include <stdint.h>
#include <string.h>
typedef int hipError_t;
static int current_device = 0;
int stub_device_count = 1;
long stub_arch_offset = -1;
char stub_arch[64] = "gfx942:sramecc+:xnack-";
uint64_t stub_params[64]; int stub_nparams = 0; unsigned stub_dims[7];
uint64_t stub_stream, stub_extra; int stub_launches = 0, stub_fail_launch = 0;
int stub_last_attr = -1, stub_launch_device = -1;
hipError_t hipInit(unsigned f) { return 0; }
hipError_t hipDriverGetVersion(int *v) { *v = 60400000; return 0; }
hipError_t hipRuntimeGetVersion(int *v) { *v = 60400000; return 0; }
hipError_t hipGetDeviceCount(int *n) { *n = stub_device_count; return 0; }
hipError_t hipGetDevicePropertiesR0600(void *p, int d) {
  if (d < 0 || d >= stub_device_count) return 101;
  if (stub_arch_offset >= 0) strcpy((char *)p + stub_arch_offset, stub_arch);
  return 0; }
hipError_t hipDeviceGetAttribute(int *v, int attr, int d) {
  stub_last_attr = attr; *v = 65536; return 0; }
hipError_t hipGetDevice(int *d) { *d = current_device; return 0; }
hipError_t hipSetDevice(int d) {
  if (d < 0 || d >= stub_device_count) return 101;
  current_device = d; return 0; }
hipError_t hipModuleLoadData(void **m, const void *image) {
  *m = (void *)0x2000; return memcmp(image, "\x7f" "ELF", 4) == 0 ? 0 : 209; }
hipError_t hipModuleGetFunction(void **f, void *m, const char *name) {
  *f = (void *)0x3000; return 0; }
hipError_t hipModuleUnload(void *m) { return 0; }
hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, void *stream,
                                 void **params, void **extra) {
  if (stub_fail_launch) return stub_fail_launch;
  for (int i = 0; i < stub_nparams; i++) stub_params[i] = *(uint64_t *)params[i];
  unsigned d[7] = {gx, gy, gz, bx, by, bz, smem}; memcpy(stub_dims, d, sizeof d);
  stub_stream = (uint64_t)(uintptr_t)stream; stub_extra = (uint64_t)(uintptr_t)extra;
  stub_launch_device = current_device; stub_launches++; return 0; }
hipError_t hipDeviceSynchronize(void) { return 0; }
hipError_t hipStreamSynchronize(void *s) { return 0; }
const char *hipGetErrorName(hipError_t e) {
  return e == 719 ? "hipErrorLaunchFailure" : "hipErrorUnknown"; }
const char *hipGetErrorString(hipError_t e) { return "unspecified launch failure"; }
"""


def _build(directory, source: str, name: str, libs: tuple = ()) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError(f"no C compiler (cc/gcc) to build the stub {name}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    c_file = directory / (name.split(".so")[0] + "_stub.c")
    c_file.write_text(source)
    lib = directory / name
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(c_file), *libs],
                   check=True, capture_output=True)
    return lib


def build_stub_libcuda(directory) -> Path:
    """Compile the CUDA stub into ``directory/libcuda.so.1``; RuntimeError without a C
    compiler."""
    return _build(directory, CUDA_STUB_SOURCE, "libcuda.so.1", ("-ldl",))


def build_stub_libamdhip64(directory) -> Path:
    """Compile the HIP stub into ``directory/libamdhip64.so``; RuntimeError without a C
    compiler."""
    return _build(directory, HIP_STUB_SOURCE, "libamdhip64.so")


def hip_arch_offset(hip) -> int:
    """Where hip-python's ``hipDeviceProp_t`` keeps ``gcnArchName`` (found by writing a
    marker through memory and reading it back through the binding)."""
    import ctypes
    props = hip.hipDeviceProp_t()
    base, size = props.as_c_void_p().value, props.c_sizeof()
    for offset in range(size - 8):
        ctypes.memmove(base + offset, b"gfxZ\0", 5)
        found = props.gcnArchName in ("gfxZ", b"gfxZ")
        ctypes.memset(base + offset, 0, 5)
        if found:
            return offset
    raise RuntimeError("gcnArchName not found in hipDeviceProp_t")


__all__ = ["CUDA_STUB_SOURCE", "HIP_STUB_SOURCE", "build_stub_libamdhip64",
           "build_stub_libcuda", "hip_arch_offset"]
