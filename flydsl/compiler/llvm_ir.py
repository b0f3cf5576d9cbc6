"""Translate an LLVM-dialect module to LLVM IR text through the MLIR C API.

The Python bindings expose no translation entry point, but the C API
function ``mlirTranslateModuleToLLVMIRToString`` is exported by the
bindings' own ``libMLIRPythonCAPI.so``; we call it with ctypes.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading

_LOCK = threading.Lock()


@functools.cache
def _capi() -> ctypes.CDLL:
    import mlir._mlir_libs as libs
    lib = ctypes.CDLL(os.path.join(os.path.dirname(libs.__file__), "libMLIRPythonCAPI.so"))
    lib.mlirTranslateModuleToLLVMIRToString.argtypes = [ctypes.c_void_p]
    lib.mlirTranslateModuleToLLVMIRToString.restype = ctypes.c_void_p
    lib.mlirRegisterAllLLVMTranslations.argtypes = [ctypes.c_void_p]
    lib.mlirRegisterAllLLVMTranslations.restype = None
    return lib


def _capsule_pointer(capsule, name: bytes) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get.restype = ctypes.c_void_p
    return get(capsule, name)


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
    """LLVM IR text of ``op``, a ``builtin.module`` holding only LLVM-dialect ops.

    Raises ValueError if MLIR cannot translate it.
    """
    _check_translatable(op)
    lib = _capi()
    ctx_ptr = _capsule_pointer(op.context._CAPIPtr, b"mlir.ir.Context._CAPIPtr")
    op_ptr = _capsule_pointer(op._CAPIPtr, b"mlir.ir.Operation._CAPIPtr")
    with _LOCK:
        lib.mlirRegisterAllLLVMTranslations(ctx_ptr)
        raw = lib.mlirTranslateModuleToLLVMIRToString(op_ptr)
    if not raw:
        raise ValueError("MLIR could not translate the module to LLVM IR")
    try:
        return ctypes.string_at(raw).decode()
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(raw))


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
