"""Child process for tests/test_big_traces.py: compiles a kernel through a CPU pipeline
that starts with a pass recursing as deeply as LLVM does on a ~100k-op unrolled chain
(far past the 8 MiB main-thread stack), then prints "compiled"."""
import os
import sys

import numpy as np

import flydsl
import flydsl.expr as fx
from flydsl.compiler.backends.base import PythonPass
from flydsl.compiler.backends.cpu import CpuBackend

#: Nesting that needs tens of MiB of native stack to compare.
DEPTH = 200_000


def _nested() -> list:
    nested: list = []
    for _ in range(DEPTH):
        nested = [nested]
    return nested


def recurse_deeply(module, target, options) -> None:
    """A pass whose native recursion (comparing nested lists) needs a deep stack."""
    sys.setrecursionlimit(10 * DEPTH)
    assert _nested() == _nested()


@flydsl.kernel
def ones(x: fx.Tensor):
    x[fx.thread_idx.x] = 1.0


def main() -> None:
    assert os.environ.get("FLYDSL_CACHE_DISABLE") == "1"
    base = CpuBackend.pipeline_fragments
    CpuBackend.pipeline_fragments = lambda self, options=None: [
        PythonPass("deep", f"{__name__}:recurse_deeply"), *base(self, options)]
    flydsl.compile(ones, np.zeros(4, np.float32))
    print("compiled")


if __name__ == "__main__":
    main()
