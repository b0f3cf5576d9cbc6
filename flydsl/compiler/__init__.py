"""Compiler side of flydsl: backends, the MLIR pipeline driver, artifacts.

Also FlyDSL's ``import flydsl.compiler as flyc`` face: ``flyc.kernel``, ``flyc.jit``,
``flyc.compile`` (FlyDSL's: runs once, returns a :class:`CompiledFunction`; subscript it
with compile hints), ``flyc.from_torch_tensor``, ``flyc.from_dlpack``, ``flyc.from_c_void_p``,
``flyc.JitArgumentRegistry``, ``flyc.compile_backend_name``. ``kernel``, ``jit`` and
``compile`` are set by ``flydsl/__init__.py`` (this layer cannot import the user API);
the others load on first use.
"""
from .artifacts import CompiledArtifact
from .backends import (BaseBackend, GPUTarget, compile_backend_name, current_target, get_backend,
                       list_backends, register_backend)
from .mlir_compiler import MlirCompiler
from .options import CompileOptions

#: FlyDSL names defined by the host layer, loaded when first read: name -> module.
_LAZY = {
    "from_torch_tensor": "flydsl.runtime.host_args",
    "from_dlpack": "flydsl.runtime.host_args",
    "from_c_void_p": "flydsl.runtime.host_args",
    "JitArgumentRegistry": "flydsl.runtime.host_args",
    "CompiledFunction": "flydsl.jit",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flydsl.compiler' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["BaseBackend", "CompileOptions", "CompiledArtifact", "CompiledFunction", "GPUTarget",
           "JitArgumentRegistry", "MlirCompiler", "compile", "compile_backend_name",
           "current_target", "from_c_void_p", "from_dlpack", "from_torch_tensor", "get_backend", "jit", "kernel",
           "list_backends", "register_backend"]
