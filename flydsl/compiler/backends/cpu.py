"""The CPU backend: SIMT kernels run on host threads.

``flydsl.passes.simt_to_cpu`` turns every ``gpu.func`` kernel into a host
function that loops over a range of blocks and, inside each block, over its
threads (with barrier fission); the result is lowered to LLVM and compiled
with llvmlite into a shared object the runtime loads with ctypes (so a disk
cache hit needs neither MLIR nor a JIT).
"""
from __future__ import annotations

import platform
from typing import Optional

from ...runtime.cpu_warp import (CPU_WARP_SIZE, CPU_WARP_SIZES, cpu_warp_size,  # noqa: F401
                                 cpu_warp_size_is_set)
from ..options import CompileOptions
from .base import BaseBackend, GPUTarget, PythonPass


def host_arch() -> str:
    return platform.machine() or "host"


class CpuBackend(BaseBackend):
    name = "cpu"
    binary_stage = "so"
    driver = "cpu"

    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        return target.backend == "cpu" and target.arch == host_arch() \
            and target.warp_size in CPU_WARP_SIZES

    @classmethod
    def make_target(cls, arch: str) -> GPUTarget:
        if arch not in (host_arch(), "host", "cpu"):
            raise ValueError(f"cpu backend compiles for this host ({host_arch()}), not {arch!r}")
        return GPUTarget("cpu", host_arch(), cpu_warp_size())

    @classmethod
    def detect_target(cls) -> Optional[GPUTarget]:
        return GPUTarget("cpu", host_arch(), cpu_warp_size())

    @classmethod
    def accepts_env_arch(cls, arch: str) -> bool:
        return False  # FLYDSL_GPU_ARCH names a GPU; the host is the only CPU target

    def wider_warp_target(self) -> Optional[GPUTarget]:
        """64-lane warps for a kernel written for AMD's wavefronts, when the width is
        the default one (``FLYDSL_CPU_WARP_SIZE`` unset: a width the user set stands)."""
        if self.target.warp_size < 64 and not cpu_warp_size_is_set():
            return GPUTarget("cpu", self.target.arch, 64)
        return None

    def pipeline_fragments(self, options: Optional[CompileOptions] = None) -> list:
        return [
            # FlyDSL's raw buffer loads/stores with the hardware's range check
            PythonPass("rocdl-buffers", "flydsl.passes.rocdl_buffers:run"),
            # AMD inline asm (s_waitcnt, s_barrier): LLVM's CPU streamer aborts on any
            PythonPass("amd-inline-asm", "flydsl.passes.amd_inline_asm:run"),
            PythonPass("simt-to-cpu", "flydsl.passes.simt_to_cpu:run"),
            PythonPass("cpu-interrupts", "flydsl.passes.cpu_interrupts:run"),
            PythonPass("noalias-record", "flydsl.passes.noalias:record"),
            "canonicalize,cse",
            # f32 exp/log/sin/... as vectorizable code instead of scalar libm calls
            PythonPass("math-approx", "flydsl.passes.math_approx:run"),
            PythonPass("fp-flags", "flydsl.passes.fp_flags:run"),   # contract / fast math
            # f32 -> bf16 as vector integer code (after fp-flags: its NaN test has none)
            PythonPass("bf16-round", "flydsl.passes.bf16_round:run"),
            "convert-scf-to-cf,expand-strided-metadata,lower-affine",
            "convert-math-to-llvm,convert-math-to-libm",
            "convert-to-llvm,reconcile-unrealized-casts",
            PythonPass("noalias-apply", "flydsl.passes.noalias:apply"),
        ]

    @classmethod
    def describe_toolchain(cls) -> str:
        from ..host_object import linker_version
        return f"linker: {linker_version().split(' | ')[0] or '?'}"

    def assembly(self, asm: dict) -> str:
        """Host assembly, generated from the ``llir`` stage (the binary is a .so)."""
        import llvmlite.binding as llvm
        from .. import llvm_codegen
        triple = llvm.get_process_triple()
        cpu, features = _host_cpu()
        tm = llvm_codegen.target_machine(triple, cpu, features, 3)
        text, _ = llvm_codegen.optimize_and_emit(asm["llir"], tm, triple, 3, stage="asm")
        return text

    def runtime_libs(self) -> list[str]:
        """libm: math the pipeline lowers to library calls (f64, and f32 functions
        :mod:`flydsl.passes.math_approx` leaves alone: ``sinhf``, ``powf``, ...)."""
        return ["m"]

    def toolchain_versions(self) -> dict[str, str]:
        # Cheap on purpose: a warm process hashes this before every disk-cache lookup.
        from ..host_object import linker_argv
        from ..toolchain import file_identity, host_cpu_identity, mlir_version
        return {"mlir": mlir_version(), "host": host_cpu_identity(),
                "linker": file_identity(linker_argv()[0])}

    def finalize(self, module, artifact, options: CompileOptions) -> None:
        """``llir`` (with a packed entry per kernel), then the shared object ``so``."""
        import llvmlite.binding as llvm
        import mlir.ir as ir
        from .. import llvm_codegen
        from ..host_object import (HOST_ABI, defined_functions, link_shared_object,
                                   packed_wrappers)
        from ..llvm_ir import translate_to_llvm_ir
        llir = translate_to_llvm_ir(module.operation)
        # Kernels and device functions are reached through their packed entries only:
        # internal, so a kernel named like a libc function (brk, free) is not interposed.
        internal = [n for n in defined_functions(llir) if not n.startswith(("flydsl", "_flydsl"))]
        llir += "\n" + packed_wrappers(llir, artifact.kernel_names)
        artifact.asm["llir"] = llir
        attrs = module.operation.attributes
        if "flydsl.debug_sites" in attrs:  # debug mode: what the launcher's reports describe
            artifact.asm["debug_sites"] = ir.StringAttr(attrs["flydsl.debug_sites"]).value
        if "flydsl.memprofile_sites" in attrs:  # FLYDSL_PROFILE=memory: the profiler's sites
            artifact.asm["memprofile_sites"] = ir.StringAttr(
                attrs["flydsl.memprofile_sites"]).value
        triple = llvm.get_process_triple()
        cpu, features = _host_cpu()
        tm = llvm_codegen.target_machine(triple, cpu, features, options.opt_level)
        _, obj = llvm_codegen.optimize_and_emit([llir, HOST_ABI], tm, triple,
                                                options.opt_level, stage="obj", want_asm=False,
                                                internal=internal)
        artifact.asm["so"] = link_shared_object(obj, self.runtime_libs())
        artifact.engine = HostLibrary(artifact.asm["so"])


def _host_cpu() -> tuple[str, str]:
    """This machine's CPU name and features: the code is tuned for (only) them.

    On AVX-512 hosts the full 512-bit vectors are used: LLVM's Intel tuning prefers
    256 bits (the frequency cost of 2015-era cores), which halves the throughput of
    compute-bound kernels (vector math) against ATen's AVX-512 code on current cores.
    """
    import llvmlite.binding as llvm
    from .. import llvm_codegen
    llvm_codegen.initialize()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    # float -> bfloat16 by VCVTNEPS2BF16 (AVX-512 BF16, AVX-NE-CONVERT) flushes
    # subnormal inputs and results to zero (Intel SDM; so does Zen 4): 1.5 * 2**-130
    # became 0 where torch and the kernels on other hosts give a bfloat16 subnormal.
    # The pipeline rounds f32 -> bf16 itself (passes/bf16_round); what LLVM still
    # converts calls __truncsfbf2 (host_object's, rounding every value).
    features += ",-avx512bf16,-avxneconvert"
    return llvm.get_host_cpu_name(), features


class HostLibrary:
    """A CPU kernel library, loaded on first use. ``raw_lookup(name)`` gives the
    address of the kernel's packed entry ``void(void **args)``, like MLIR's
    ExecutionEngine (the runtime's launcher loads its own copy)."""

    def __init__(self, so: bytes):
        self._so = so
        self._lib = None

    @property
    def lib(self):
        if self._lib is None:
            from ...runtime.shared_object import load_shared_object
            self._lib = load_shared_object(self._so)
        return self._lib

    def raw_lookup(self, name: str) -> int:
        import ctypes
        from ...runtime.drivers.cpu import PACKED_PREFIX
        return ctypes.cast(getattr(self.lib, PACKED_PREFIX + name), ctypes.c_void_p).value or 0
