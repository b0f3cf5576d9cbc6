"""Makes a child process look like the GPU machine: the MLIR bindings and llvmlite
cannot be imported (an import hook refuses them), and the interpreter and numpy
report other versions than the build machine's. Put this folder on PYTHONPATH."""
import importlib.abc
import sys

BLOCKED = ("mlir", "llvmlite")


class _NoCompiler(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on this machine (blocked for the test)")
        return None


sys.meta_path.insert(0, _NoCompiler())
sys.version = "3.12.3 (main, Feb  4 2025, 14:48:35) [GCC 13.3.0]"
import numpy  # noqa: E402

numpy.__version__ = "1.26.4"
