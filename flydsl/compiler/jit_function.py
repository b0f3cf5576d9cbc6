"""FlyDSL's ``flydsl.compiler.jit_function`` module path, for code that imports it.

flydsl's ``@flyc.jit`` is :class:`flydsl.jit.JitFunction` (reach it as ``flyc.jit``).
FlyDSL's own test fixtures patch two names of this module to compile without a
GPU: :func:`_flydsl_key` (the compiler-version part of FlyDSL's cache key) and
``MlirCompiler.compile`` (its pipeline driver). flydsl keys its cache on its sources
(:mod:`flydsl.compiler.cache`) and compiles through
:class:`flydsl.compiler.mlir_compiler.MlirCompiler`, so patching them here changes
nothing: a fixture that does so keeps working, and ``COMPILE_ONLY=1`` (which those
fixtures set) makes ``@flyc.jit`` calls compile their kernels without launching them.
"""
from __future__ import annotations

from ..version import __version__


def _flydsl_key() -> str:
    """The compiler-version part of FlyDSL's cache key (flydsl: its version)."""
    return f"flydsl-{__version__}"


class MlirCompiler:
    """FlyDSL's pipeline-driver hook point (see the module docstring): not used by flydsl."""

    @classmethod
    def compile(cls, module, **_kwargs):
        """Return ``module`` unchanged (flydsl compiles through its own MlirCompiler)."""
        return module


__all__ = ["MlirCompiler"]
