"""flydsl: a Python DSL and JIT compiler for GPU kernels on MLIR."""
from .errors import (
    CompilationError,
    DSLError,
    FlydslError,
    FlydslRuntimeError,
    InvalidBackend,
    LaunchError,
)
from .compiler.backends import get_backend, list_backends, register_backend
from .jit import CompiledProgram, compile, jit
from .runtime.debug_checks import OutOfBoundsError
from .kernel import KernelFunction, kernel
from .runtime.devices import synchronize

__version__ = "0.1.0"

__all__ = [
    "CompilationError", "CompiledProgram", "DSLError", "FlydslError", "FlydslRuntimeError",
    "InvalidBackend", "KernelFunction", "LaunchError", "OutOfBoundsError", "compile",
    "get_backend", "jit", "kernel", "list_backends", "register_backend", "synchronize",
    "__version__",
]
