"""Translate an LLVM-dialect module to LLVM IR text.

MLIR's translation aborts the process (instead of raising) on an op it
cannot translate, so every module is checked first.
"""
from __future__ import annotations


#: Dialects whose ops MLIR can translate to LLVM IR (anything else crashes the C API).
_TRANSLATABLE = ("builtin.", "llvm.", "nvvm.", "rocdl.")


def translate_to_llvm_ir(op) -> str:
    """LLVM IR text of ``op``, a ``builtin.module`` holding only LLVM-dialect ops
    (and NVVM/ROCDL intrinsics). Raises ValueError naming an op left unlowered."""
    from mlir.dialects.llvm import translate_module_to_llvmir

    from ..passes.ir import unlowered_ops
    left = unlowered_ops(op, _TRANSLATABLE)
    if left:
        raise ValueError(f"op {left[0].name!r} at {left[0].location} was not lowered to the "
                         "LLVM dialect")
    return translate_module_to_llvmir(op.operation)


def gpu_module_to_llvm_ir(gpu_module_op) -> str:
    """LLVM IR text of one lowered ``gpu.module`` (its body re-parsed as a builtin.module).

    The ``gpu.module``'s attributes that matter for codegen (data layout,
    target triple) are carried over.
    """
    import mlir.ir as ir
    op = gpu_module_op.operation
    body = "\n".join(str(inner) for inner in op.regions[0].blocks[0].operations)
    attrs = []
    for name in ("llvm.data_layout", "llvm.target_triple"):
        if name in op.attributes:
            attrs.append(f'{name} = {op.attributes[name]}')
    head = f"module attributes {{{', '.join(attrs)}}} {{" if attrs else "module {"
    with op.context:
        inner = ir.Module.parse(f"{head}\n{body}\n}}")
        return translate_to_llvm_ir(inner.operation)
