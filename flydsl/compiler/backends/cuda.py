"""The CUDA backend: NVVM lowering, PTX from MLIR's NVPTX target, cubin from ``ptxas``.

The ``gpu.module`` is lowered to the LLVM/NVVM dialects, then
``gpu-module-to-binary{format=isa}`` emits PTX (MLIR's NVVM target links the
libdevice it embeds, so ``math`` ops lowered to ``__nv_*`` calls need no CUDA
toolkit). ``ptxas`` assembles the PTX into a cubin when it is installed;
without it the artifact's binary is the PTX, which the CUDA driver JIT-compiles.

Kernel ABI: every ``memref`` parameter is passed as its expanded descriptor
(allocated pointer, aligned pointer, offset, sizes..., strides...), ``index``
is 64-bit.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Optional

from ...errors import CompilationError, ToolchainError
from ..kernel_metadata import parse_ptxas_log
from ..options import CompileOptions
from ..toolchain import file_identity, find_ptxas
from .base import BaseBackend, GPUTarget, PythonPass, detect_device_target

CUDA_WARP_SIZE = 32
#: ``sm_<major><minor>`` with the optional arch-specific (``a``) or family (``f``) suffix.
_ARCH_RE = re.compile(r"sm_[1-9][0-9]{1,2}[af]?")
_VALID_FORMS = "sm_<NN> or sm_<NNN>, optionally suffixed 'a' or 'f' (e.g. sm_80, sm_90, sm_90a, sm_100)"
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
_TRIPLE_ATTR = "llvm.target_triple"
#: Diagnostics notes dump whole operations; keep the first lines of each.


class CudaBackend(BaseBackend):
    """Compiles ``gpu.module`` kernels for NVIDIA GPUs (PTX, and cubin with ``ptxas``)."""

    name = "cuda"
    binary_stage = "cubin"
    driver = "cuda"
    assembly_stage = "ptx"

    # -- target --------------------------------------------------------
    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        """True for ``GPUTarget("cuda", "sm_XY[a|f]", 32)``."""
        return (isinstance(target, GPUTarget) and target.backend == "cuda"
                and isinstance(target.arch, str) and _ARCH_RE.fullmatch(target.arch) is not None
                and target.warp_size == CUDA_WARP_SIZE)

    @classmethod
    def make_target(cls, arch: str) -> GPUTarget:
        """The target for ``arch`` (e.g. ``"sm_90"``); ValueError naming the valid forms otherwise."""
        if not isinstance(arch, str) or _ARCH_RE.fullmatch(arch) is None:
            raise ValueError(f"cuda backend: invalid arch {arch!r}; expected {_VALID_FORMS}")
        return GPUTarget("cuda", arch, CUDA_WARP_SIZE)

    @classmethod
    def detect_target(cls) -> Optional[GPUTarget]:
        """Target of CUDA device 0 via ``cuda.bindings.driver``; None without driver or device."""
        return detect_device_target(cls)

    @classmethod
    def default_arch(cls) -> str:
        """``sm_90``: compiling needs no GPU, so a missing device is not an error."""
        return "sm_90"

    # -- compilation ---------------------------------------------------
    def pipeline_fragments(self, options: Optional[CompileOptions] = None) -> list:
        """Lower the ``gpu.module`` to the LLVM and NVVM dialects (no user-provided text)."""
        return [
            # a barrier some threads of a block skip: an error or a warning
            PythonPass("barrier-check", "flydsl.passes.barrier_divergence:run"),
            # FlyDSL's raw AMD buffer loads/stores/atomics: predicated accesses
            PythonPass("rocdl-buffers", "flydsl.passes.rocdl_buffers:run"),
            PythonPass("fp-flags", "flydsl.passes.fp_flags:run"),   # contract / fast math
            PythonPass("noalias-record", "flydsl.passes.noalias:record"),
            # Strided/sub-view memref metadata -> affine.apply -> arith; then structured
            # control flow -> cf, so that the NVVM conversion sees only flat CFGs.
            "gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf)",
            # gpu/arith/math/memref/index -> llvm+nvvm; math becomes libdevice __nv_* calls.
            "gpu.module(convert-gpu-to-nvvm{index-bitwidth=64},canonicalize,cse)",
            PythonPass("nvvm-sqrt", "flydsl.passes.nvvm_sqrt:run"),  # sqrt.rn, as nvcc
            PythonPass("noalias-apply", "flydsl.passes.noalias:apply"),
            "reconcile-unrealized-casts",
        ]

    def gpu_module_targets(self, options: Optional[CompileOptions] = None) -> list[str]:
        """``#nvvm.target`` for the arch (validated in the constructor, safe to interpolate)
        at the options' LLVM optimization level."""
        level = (options or CompileOptions()).opt_level   # an int in 0..3, validated
        return [f'#nvvm.target<chip = "{self.target.arch}", O = {level}>']

    def toolchain_versions(self) -> dict[str, str]:
        """MLIR/LLVM and ``ptxas`` (its file identity): a new ptxas means a new cubin."""
        versions = super().toolchain_versions()
        versions["ptxas"] = file_identity(find_ptxas())
        return versions

    @classmethod
    def describe_toolchain(cls) -> str:
        path = find_ptxas()
        return f"ptxas: {path}" if path else "PTX only (no ptxas: set CUDA_HOME or FLYDSL_PTXAS)"

    def finalize(self, module, artifact, options: CompileOptions) -> None:
        """Store ``llir`` and ``ptx`` text and, when ``ptxas`` is found, the ``cubin`` bytes.

        Without ``ptxas`` the artifact's ``binary_stage`` becomes ``ptx``.
        """
        kernel = ",".join(artifact.kernel_names)
        gpu_module = _single_gpu_module(module, kernel)
        _check_lowered(gpu_module, kernel)
        artifact.asm["llir"] = _llvm_ir(gpu_module, kernel)
        ptx = _emit_ptx(module, kernel)
        artifact.asm["ptx"] = ptx
        if not artifact.kernel_names:  # finalize called outside MlirCompiler
            artifact.kernel_names = re.findall(r"\.entry\s+([\w$.]+)", ptx)

        ptxas = find_ptxas()
        if ptxas is None:
            artifact.binary_stage = "ptx"  # the driver JIT-compiles PTX
            return
        artifact.asm["cubin"], log = _run_ptxas(ptxas, ptx, self.target.arch, options, kernel)
        artifact.resources = {name: parse_ptxas_log(log, name) for name in artifact.kernel_names}


def _single_gpu_module(module, kernel: str):
    from ...passes.ir import gpu_modules
    found = gpu_modules(module)
    if len(found) != 1:
        raise CompilationError(
            f"the cuda backend compiles exactly one gpu.module per module, found {len(found)}",
            stage="finalize", kernel=kernel)
    return found[0]


def _check_lowered(gpu_module, kernel: str) -> None:
    """Name the ops the NVVM conversion left behind (it is a partial conversion, so they
    would otherwise surface as an opaque LLVM translation failure)."""
    from ...passes.ir import describe_unlowered, unlowered_ops
    left = unlowered_ops(gpu_module, ("llvm.", "nvvm."))
    if left:
        real = [op for op in left if op.name != "builtin.unrealized_conversion_cast"]
        raise CompilationError("ops left after NVVM lowering", stage="convert-gpu-to-nvvm",
                               diagnostics=describe_unlowered(real or left,
                                                              "the LLVM/NVVM dialects"),
                               kernel=kernel)


def _llvm_ir(gpu_module, kernel: str) -> str:
    """LLVM IR text of the lowered gpu.module, before libdevice linking and optimization."""
    import mlir.ir as ir
    from ..llvm_ir import gpu_module_to_llvm_ir

    # The triple makes the text usable with llc/opt; the NVVM target sets its own
    # when serializing, so the attribute is only there while translating.
    attrs = gpu_module.operation.attributes
    attrs[_TRIPLE_ATTR] = ir.StringAttr.get(NVPTX_TRIPLE)
    try:
        return gpu_module_to_llvm_ir(gpu_module)
    except ValueError as e:
        raise CompilationError(str(e), stage="llir", kernel=kernel) from None
    finally:
        del attrs[_TRIPLE_ATTR]


def _emit_ptx(module, kernel: str) -> str:
    """Serialize the gpu.module to PTX; the text is the ``gpu.binary``'s ``#gpu.object``."""
    import mlir.ir as ir
    from mlir.dialects.gpu import ObjectAttr
    from mlir.passmanager import PassManager

    from ...passes.ir import diagnostics
    try:
        PassManager.parse("builtin.module(gpu-module-to-binary{format=isa})").run(module.operation)
    except ir.MLIRError as e:
        raise CompilationError("PTX generation failed", stage="gpu-module-to-binary",
                               diagnostics=diagnostics(e), kernel=kernel) from None
    for op in module.body.operations:
        if op.operation.name == "gpu.binary":
            objects = op.operation.attributes["objects"]
            return ObjectAttr(objects[0]).object.decode()
    raise CompilationError("gpu-module-to-binary produced no gpu.binary",
                           stage="gpu-module-to-binary", kernel=kernel)


def _run_ptxas(ptxas: str, ptx: str, arch: str, options: CompileOptions,
               kernel: str) -> tuple[bytes, str]:
    """The cubin, and ptxas' ``-v`` report of each kernel's resources."""
    with tempfile.TemporaryDirectory(prefix="flydsl-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [ptxas, "-v", f"-arch={arch}", f"-O{options.opt_level}", src, "-o", out]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise ToolchainError(f"could not run ptxas: {e}", stage="ptxas",
                                 kernel=kernel) from None
        if proc.returncode != 0 or not os.path.exists(out):
            raise ToolchainError(f"ptxas failed (exit {proc.returncode}): {' '.join(cmd)}",
                                 stage="ptxas", diagnostics=(proc.stderr or proc.stdout).strip(),
                                 kernel=kernel)
        with open(out, "rb") as f:
            return f.read(), proc.stderr + proc.stdout
