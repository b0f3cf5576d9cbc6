"""The ROCm backend: HSACO code objects for AMD GPUs, built without a ROCm install.

Pipeline: MLIR lowers each ``gpu.module`` to the ROCDL/LLVM dialect
(``convert-gpu-to-rocdl``), Python passes (:mod:`flydsl.passes.rocdl`)
remove every dependence on the ROCm device libraries, MLIR translates the
module to LLVM IR, llvmlite's AMDGPU target emits the ``amdgcn`` assembly and
object, and ``ld.lld -shared`` links the HSACO (:mod:`flydsl.compiler.hsaco`).
Without a linker every stage but ``hsaco`` is still produced.

Stages on the artifact: ``mlir``, ``llvm-mlir``, ``llir``, ``amdgcn``, ``hsaco``.
Kernel arguments follow MLIR's default (expanded memref descriptor) calling
convention, with ``index`` as i64.
"""
from __future__ import annotations

from typing import Optional

from ...errors import CompilationError
from ..kernel_metadata import parse_amdgpu_metadata
from ..options import CompileOptions
from .base import BaseBackend, GPUTarget, detect_device_target, PythonPass

#: Supported arches and their wavefront size (CDNA: 64, RDNA: wave32).
ARCH_WARP_SIZE = {"gfx90a": 64, "gfx942": 64, "gfx950": 64, "gfx1100": 32, "gfx1201": 32}
DEFAULT_ARCH = "gfx942"


def _base_arch(arch: str) -> str:
    """``gfx942:sramecc+:xnack-`` (HIP's gcnArchName) -> ``gfx942``."""
    return arch.split(":", 1)[0].strip().lower()


class RocmBackend(BaseBackend):
    """AMD GPUs through HIP; see the module docstring for the pipeline."""

    name = "rocm"
    binary_stage = "hsaco"
    driver = "hip"
    assembly_stage = "amdgcn"

    # -- target --------------------------------------------------------
    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        return (isinstance(target, GPUTarget) and target.backend == cls.name
                and ARCH_WARP_SIZE.get(target.arch) == target.warp_size)

    @classmethod
    def make_target(cls, arch: str) -> GPUTarget:
        base = _base_arch(arch) if isinstance(arch, str) else ""
        if base not in ARCH_WARP_SIZE:
            raise ValueError(f"rocm backend does not support arch {arch!r}; "
                             f"supported: {', '.join(ARCH_WARP_SIZE)}")
        return GPUTarget(cls.name, base, ARCH_WARP_SIZE[base])

    @classmethod
    def detect_target(cls) -> Optional[GPUTarget]:
        return detect_device_target(cls)

    @classmethod
    def default_arch(cls) -> str:
        return DEFAULT_ARCH

    # -- compilation ---------------------------------------------------
    def gpu_module_targets(self, options: Optional[CompileOptions] = None) -> list[str]:
        """``#rocdl.target`` for the arch (llvmlite, not MLIR, generates the code)."""
        level = (options or CompileOptions()).opt_level
        return [f'#rocdl.target<chip = "{self.target.arch}", O = {level}>']

    def pipeline_fragments(self, options: Optional[CompileOptions] = None) -> list:
        rp = "flydsl.passes.rocdl:"
        arch = self.target.arch
        if arch not in ARCH_WARP_SIZE:  # validated again: it goes into pass options
            raise ValueError(f"unsupported rocm arch {arch!r}")
        return [
            # a barrier some threads of a block skip: an error or a warning
            PythonPass("barrier-check", "flydsl.passes.barrier_divergence:run"),
            PythonPass("rocm-expand-tanh", rp + "expand_tanh"),
            PythonPass("rocm-debug-ops", rp + "lower_debug_ops"),
            PythonPass("fp-flags", "flydsl.passes.fp_flags:run"),   # contract / fast math
            # math without ocml; after fp-flags, so its IEEE code keeps no flags
            PythonPass("portable-math", "flydsl.passes.math_portable:run"),
            PythonPass("noalias-record", "flydsl.passes.noalias:record"),
            # bf16 math runs in f32; f16 math stays native.
            "gpu.module(math-extend-to-supported-types{extra-types=f16 target-type=f32},"
            "expand-strided-metadata,lower-affine,convert-scf-to-cf,"
            f"convert-gpu-to-rocdl{{chipset={arch} index-bitwidth=64 runtime=HIP}},"
            "canonicalize,cse)",
            "reconcile-unrealized-casts",
            PythonPass("noalias-apply", "flydsl.passes.noalias:apply"),
            PythonPass("rocm-lower-device-calls", rp + "lower_device_calls"),
            PythonPass("rocm-hsa-abi", rp + "hsa_abi"),
            PythonPass("rocm-check-device-libs", rp + "check_device_libs"),
        ]

    def features(self) -> str:
        """LLVM target features: RDNA arches are compiled for wave32."""
        return "+wavefrontsize32" if self.target.warp_size == 32 else ""

    def toolchain_versions(self) -> dict[str, str]:
        from ..toolchain import file_identity, find_lld, mlir_version
        lld = find_lld()
        return {"mlir": mlir_version(), "lld": file_identity(lld[0] if lld else None)}

    @classmethod
    def describe_toolchain(cls) -> str:
        from ..toolchain import find_lld
        lld = find_lld()
        return f"ld.lld: {' '.join(lld)}" if lld else "no ld.lld >= 17 (pip install ziglang)"

    def finalize(self, module, artifact, options: CompileOptions) -> None:
        """Store ``llir``, ``amdgcn`` and ``hsaco`` on ``artifact``.

        Without a usable ``ld.lld`` the ``hsaco`` stage is left out and linked when
        first asked for (``artifact.asm.missing``): until a linker is found, that (and
        so a launch) raises the ToolchainError saying so. Errors carry the partial
        artifact as ``err.artifact``.
        """
        from ..hsaco import emit_amdgcn, link_hsaco
        from ..llvm_ir import gpu_module_to_llvm_ir
        from ..toolchain import find_lld
        from ...passes.ir import gpu_modules
        modules = gpu_modules(module)
        if not modules:
            raise CompilationError("the module has no gpu.module to compile", stage="llir")
        try:
            llir = [gpu_module_to_llvm_ir(op) for op in modules]
        except ValueError as e:
            raise CompilationError(str(e), stage="llir") from None
        artifact.asm["llir"] = "\n".join(llir)
        try:
            asm, obj = emit_amdgcn(llir, self.target.arch, opt_level=options.opt_level,
                                   features=self.features())
            artifact.asm["amdgcn"] = asm
            artifact.resources = {name: parse_amdgpu_metadata(asm, name)
                                  for name in artifact.kernel_names}
            kernel = ",".join(artifact.kernel_names)
            lld = find_lld()
            if lld is None:   # the assembly is still worth having: only launching needs this
                artifact.asm.missing["hsaco"] = lambda: link_hsaco(obj, kernel=kernel)
                return
            artifact.asm["hsaco"] = link_hsaco(obj, lld, kernel=kernel)
        except CompilationError as err:
            err.artifact = artifact  # the stages so far stay inspectable
            raise
