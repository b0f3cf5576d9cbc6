"""Translate an LLVM-dialect module to LLVM IR text.

MLIR's translation aborts the process (instead of raising) on an op it
cannot translate, so every module is checked first.
"""
from __future__ import annotations


#: Dialects whose ops MLIR can translate to LLVM IR (anything else crashes the C API).
_TRANSLATABLE = ("builtin.", "llvm.", "nvvm.", "rocdl.")


def _check_translatable(op) -> None:
    """Raise ValueError naming the first op that would make translation crash."""
    stack = [op.operation]
    while stack:
        cur = stack.pop()
        for region in cur.regions:
            for block in region.blocks:
                for inner in block.operations:
                    name = inner.operation.name
                    if not name.startswith(_TRANSLATABLE):
                        raise ValueError(f"op {name!r} at {inner.operation.location} was not "
                                         "lowered to the LLVM dialect")
                    stack.append(inner.operation)


def translate_to_llvm_ir(op) -> str:
    """LLVM IR text of ``op``, a ``builtin.module`` holding only LLVM-dialect ops
    (and NVVM/ROCDL intrinsics). Raises ValueError naming an op left unlowered."""
    from mlir.dialects.llvm import translate_module_to_llvmir
    _check_translatable(op)
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
