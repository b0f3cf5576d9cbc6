"""Stand-in GPU driver libraries for exercising flydsl's launchers without a GPU.

``libcuda.so.1`` and ``libamdhip64.so`` stubs implement the driver calls flydsl
makes, with ``stub_device_count`` devices (sm_90 / the arch the caller sets), one
context per device that modules and functions belong to, modules that accept any
ELF image, (CUDA) device pointers listed in ``stub_pointers``, and timing events
and a cache-flush allocation (see :data:`TIMING_STUB_SOURCE`). The launch entry
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

#: C shared by both stubs: timing events and the cache-flush buffer. Events are
#: handles 0x5000 + k whose state is checked (an elapsed time needs a recorded start
#: and a synchronized end, as on the real drivers) and measure ``stub_event_ms``; a
#: memset must target an allocation. ``stub_log`` gets one letter per call, in
#: order: R record, S event synchronize, E elapsed time, M memset, Y device
#: synchronize, F ``stub_mark()`` (for the caller's own code to mark itself).
TIMING_STUB_SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#define STUB_MAX_EVENTS 8192
static unsigned char event_state[STUB_MAX_EVENTS];   /* 0 none, 1 created, 2 recorded, 3 done */
static int nevents = 0;
float stub_event_ms = 1.0f;
int stub_event_records = 0, stub_events_live = 0, stub_memsets = 0, stub_allocs = 0;
uint64_t stub_alloc_bytes = 0, stub_memset_words = 0;
char stub_log[16384]; int stub_nlog = 0;
static void stub_note(char c) {
  if (stub_nlog < (int)sizeof stub_log - 1) stub_log[stub_nlog++] = c; }
void stub_mark(void) { stub_note('F'); }
static int event_index(void *e) {
  long k = (long)((uintptr_t)e - 0x5000);
  return k >= 0 && k < nevents && event_state[k] ? (int)k : -1; }
static int stub_event_create(void **e) {
  if (nevents >= STUB_MAX_EVENTS) return 2;
  event_state[nevents] = 1; *e = (void *)(uintptr_t)(0x5000 + nevents++);
  stub_events_live++; return 0; }
static int stub_event_record(void *e) {
  int k = event_index(e); if (k < 0) return 400;
  event_state[k] = 2; stub_event_records++; stub_note('R'); return 0; }
static int stub_event_synchronize(void *e) {
  int k = event_index(e); if (k < 0) return 400;
  if (event_state[k] == 2) event_state[k] = 3;
  stub_note('S'); return 0; }
static int stub_event_elapsed(float *ms, void *a, void *b) {
  int i = event_index(a), j = event_index(b);
  if (i < 0 || j < 0) return 400;
  if (event_state[i] < 2 || event_state[j] < 3) return 600;   /* NOT_READY */
  *ms = stub_event_ms; stub_note('E'); return 0; }
static int stub_event_destroy(void *e) {
  int k = event_index(e); if (k < 0) return 400;
  event_state[k] = 0; stub_events_live--; return 0; }
static int stub_alloc(uint64_t *p, uint64_t n) {
  *p = 0x70000000ull + 0x100000000ull * stub_allocs++; stub_alloc_bytes = n; return 0; }
static int stub_memset32(uint64_t p, uint64_t words) {
  if (!stub_allocs || p < 0x70000000ull || (p - 0x70000000ull) % 0x100000000ull) return 1;
  if (words * 4 > stub_alloc_bytes) return 1;
  stub_memsets++; stub_memset_words = words; stub_note('M'); return 0; }
"""


#: C source of the CUDA stub; its globals (``stub_*``) are read and set with ctypes.
CUDA_STUB_SOURCE = TIMING_STUB_SOURCE + r"""
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
CUresult cuCtxSynchronize(void) { stub_note('Y'); return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
CUresult cuEventCreate(void **e, unsigned flags) { return current ? stub_event_create(e) : 201; }
CUresult cuEventRecord(void *e, void *stream) { return current ? stub_event_record(e) : 201; }
CUresult cuEventSynchronize(void *e) { return stub_event_synchronize(e); }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { return stub_event_elapsed(ms, a, b); }
CUresult cuEventDestroy(void *e) { return stub_event_destroy(e); }
CUresult cuMemAlloc(uint64_t *p, size_t n) { return current ? stub_alloc(p, n) : 201; }
CUresult cuMemsetD32Async(uint64_t p, unsigned v, size_t n, void *stream) {
  return current ? stub_memset32(p, n) : 201; }
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
HIP_STUB_SOURCE = TIMING_STUB_SOURCE + r"""
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
hipError_t hipDeviceSynchronize(void) { stub_note('Y'); return 0; }
hipError_t hipStreamSynchronize(void *s) { return 0; }
hipError_t hipEventCreate(void **e) { return stub_event_create(e); }
hipError_t hipEventRecord(void *e, void *stream) { return stub_event_record(e); }
hipError_t hipEventSynchronize(void *e) { return stub_event_synchronize(e); }
hipError_t hipEventElapsedTime(float *ms, void *a, void *b) {
  return stub_event_elapsed(ms, a, b); }
hipError_t hipEventDestroy(void *e) { return stub_event_destroy(e); }
hipError_t hipMalloc(uint64_t *p, size_t n) { return stub_alloc(p, n); }
hipError_t hipMemsetD32Async(uint64_t p, int v, size_t n, void *stream) {
  return stub_memset32(p, n); }
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


__all__ = ["CUDA_STUB_SOURCE", "HIP_STUB_SOURCE", "TIMING_STUB_SOURCE",
           "build_stub_libamdhip64", "build_stub_libcuda", "hip_arch_offset"]
