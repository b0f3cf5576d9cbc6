"""The GPU run kit: run flydsl's GPU kernels on a machine with no compiler.

``python -m flydsl.gpu_kit build --arch sm_90 --out kit/`` (on a build machine, no
GPU needed) compiles every kernel of :mod:`.cases` for that arch into a bundle and
writes a folder holding the bundle, a manifest, the flydsl sources (run side only
needs the ones that import no MLIR) and the example kernels.

``PYTHONPATH=kit python -m flydsl.gpu_kit run kit/`` (on the GPU machine: torch with
CUDA and cuda-python, no MLIR, no install) runs each case from the bundle in
offline mode, checks it against torch on the device, times it next to torch (and
Triton, when importable), and writes ``results.json`` and ``results.md``.
"""
