"""The CPU backend: SIMT kernels run on host threads.

``flydsl.passes.simt_to_cpu`` turns every ``gpu.func`` kernel into a host
function that loops over a range of blocks and, inside each block, over its
threads (with barrier fission); the result is lowered to LLVM and JIT-compiled
by MLIR's ExecutionEngine.
"""
from __future__ import annotations

import platform
from typing import Optional

from ..options import CompileOptions
from .base import BaseBackend, GPUTarget, PythonPass

#: CPU kernels emulate 32-wide warps so code written for CUDA behaves the same.
CPU_WARP_SIZE = 32


def host_arch() -> str:
    return platform.machine() or "host"


class CpuBackend(BaseBackend):
    name = "cpu"
    binary_stage = "llir"
    driver = "cpu"

    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        return target.backend == "cpu" and target.arch == host_arch() \
            and target.warp_size == CPU_WARP_SIZE

    @classmethod
    def make_target(cls, arch: str) -> GPUTarget:
        if arch not in (host_arch(), "host", "cpu"):
            raise ValueError(f"cpu backend compiles for this host ({host_arch()}), not {arch!r}")
        return GPUTarget("cpu", host_arch(), CPU_WARP_SIZE)

    @classmethod
    def detect_target(cls) -> Optional[GPUTarget]:
        return GPUTarget("cpu", host_arch(), CPU_WARP_SIZE)

    @classmethod
    def accepts_env_arch(cls, arch: str) -> bool:
        return False  # FLYDSL_GPU_ARCH names a GPU; the host is the only CPU target

    def pipeline_fragments(self, options: CompileOptions) -> list:
        return [
            PythonPass("simt-to-cpu", "flydsl.passes.simt_to_cpu:run"),
            "canonicalize,cse",
            "convert-scf-to-cf,expand-strided-metadata,lower-affine",
            "convert-math-to-llvm,convert-math-to-libm",
            "convert-to-llvm,reconcile-unrealized-casts",
        ]

    def finalize(self, module, artifact, options: CompileOptions) -> None:
        from mlir.execution_engine import ExecutionEngine
        from ..llvm_ir import translate_to_llvm_ir
        artifact.asm["llir"] = translate_to_llvm_ir(module.operation)
        artifact.engine = ExecutionEngine(module, opt_level=options.opt_level,
                                          shared_libs=self.runtime_libs())
