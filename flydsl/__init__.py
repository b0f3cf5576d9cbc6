"""flydsl: a Python DSL and JIT compiler for GPU kernels on MLIR."""
from .errors import (
    CompilationError,
    DSLError,
    FlydslError,
    FlydslRuntimeError,
    InvalidBackend,
    InvalidDriver,
    LaunchError,
)
from .compiler.backends import get_backend, list_backends, register_backend
from .compiler.bundle import load_bundle
from .compiler.deploy import NotPrecompiled, capture, set_offline
from .jit import CompiledProgram, compile, jit
from .autotune import AutotuneError, Config, autotune
from .kernel import KernelFunction, kernel
from .runtime.debug_checks import DeviceAssertError, OutOfBoundsError, SharedMemoryRaceError
from .runtime.devices import synchronize
from .runtime.memory_profile import MemoryProfile, profile
from .runtime.drivers import get_driver, list_drivers, register_driver
from .version import __version__
from . import compiler as _compiler

# ``import flydsl.compiler as flyc`` (FlyDSL's spelling) gives flyc.kernel / flyc.jit:
# the same objects, set here because the compiler layer cannot import the user API;
# flyc.compile is FlyDSL's (runs once, returns a CompiledFunction; takes compile hints).
from .jit import flyc_compile as _flyc_compile
_compiler.kernel, _compiler.jit, _compiler.compile = kernel, jit, _flyc_compile

__all__ = [
    "AutotuneError", "CompilationError", "CompiledProgram", "Config", "DSLError", "DeviceAssertError",
    "FlydslError", "FlydslRuntimeError", "InvalidBackend", "InvalidDriver", "KernelFunction",
    "LaunchError", "MemoryProfile", "NotPrecompiled", "OutOfBoundsError",
    "SharedMemoryRaceError", "autotune",
    "capture", "compile", "profile",
    "get_backend", "get_driver", "jit", "kernel", "list_backends", "list_drivers", "load_bundle",
    "register_backend", "register_driver", "set_offline", "synchronize", "__version__",
]
