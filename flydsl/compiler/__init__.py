"""Compiler side of flydsl: backends, the MLIR pipeline driver, artifacts."""
from .artifacts import CompiledArtifact
from .backends import BaseBackend, GPUTarget, get_backend, list_backends, register_backend
from .mlir_compiler import MlirCompiler
from .options import CompileOptions

__all__ = ["BaseBackend", "CompileOptions", "CompiledArtifact", "GPUTarget", "MlirCompiler",
           "get_backend", "list_backends", "register_backend"]
