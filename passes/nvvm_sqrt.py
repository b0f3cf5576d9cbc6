"""CUDA: ``fx.sqrt`` correctly rounded, as with nvcc's default ``-prec-sqrt=true``.

``convert-gpu-to-nvvm`` turns ``math.sqrt`` (and ``llvm.intr.sqrt``) on f32 into a call
of libdevice's ``__nv_sqrtf``, which asks ``__nvvm_reflect("__CUDA_PREC_SQRT")``; this
LLVM answers that only from a process-wide command-line option, so it answers 0 and the
PTX gets ``sqrt.approx.f32`` (not correctly rounded, unlike the CPU's and AMDGPU's square
roots). Run after that conversion, this pass turns those calls back into
``llvm.intr.sqrt``, for which NVPTX emits ``sqrt.rn.f32``, and ``sqrt.approx.f32`` only
where fast math (``afn``) allows it.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import llvm

from .ir import walk

_CALLEE = "__nv_sqrtf"


def run(module: ir.Module, target=None, options=None) -> None:
    """Replace every call of ``__nv_sqrtf`` in ``module`` by ``llvm.intr.sqrt`` with the
    call's fast-math flags (``fast`` under ``CompileOptions.fast_math``)."""
    with module.context:
        flags = ir.Attribute.parse("#llvm.fastmath<fast>" if getattr(options, "fast_math", False)
                                   else "#llvm.fastmath<contract>")
        for op in walk(module.operation, _is_sqrt_call):
            with ir.InsertionPoint(op), op.location:
                new = llvm.intr_sqrt(op.operands[0], fastmath_flags=flags)
            op.results[0].replace_all_uses_with(new)
            op.erase()


def _is_sqrt_call(op) -> bool:
    return (op.name == "llvm.call" and "callee" in op.attributes
            and str(op.attributes["callee"]) == f"@{_CALLEE}")
