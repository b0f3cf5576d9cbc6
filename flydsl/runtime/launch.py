"""Choosing and checking a launcher for a compiled kernel."""
from __future__ import annotations

from typing import Sequence

from ..errors import FlydslRuntimeError, LaunchError

#: Threads per block every backend accepts (CUDA, HIP and the CPU emulation).
MAX_BLOCK_THREADS = 1024
#: Static shared memory a block may use without opt-in, per backend.
MAX_SHARED_BYTES = {"cpu": 1 << 20, "cuda": 48 * 1024, "rocm": 64 * 1024}


class _CheckedLauncher:
    def __init__(self, compiled, impl):
        self.compiled = compiled
        self.impl = impl
        self.backend = compiled.backend.driver or compiled.backend.name
        self.kernel = compiled.kernel.name

    def check_and_launch(self, runtime: Sequence, grid: tuple, block: tuple, smem: int,
                         stream) -> None:
        threads = block[0] * block[1] * block[2]
        if threads > MAX_BLOCK_THREADS:
            raise LaunchError(f"kernel {self.kernel!r}: block {block} has {threads} threads; "
                              f"the {self.backend} backend allows at most {MAX_BLOCK_THREADS}")
        limit = MAX_SHARED_BYTES.get(self.backend)
        total_smem = self.compiled.shared_bytes + smem
        if limit is not None and total_smem > limit:
            raise LaunchError(f"kernel {self.kernel!r} uses {total_smem} bytes of shared "
                              f"memory; the {self.backend} backend allows {limit}")
        self.impl(runtime, grid, block, smem, stream)


def launcher_for(compiled) -> _CheckedLauncher:
    name = compiled.backend.name
    if compiled.backend.driver == "cpu":
        from .cpu_launcher import CpuLauncher
        layout = [("tensor", s.rank) if s.kind == "tensor" else ("scalar", s.dtype)
                  for s in compiled.specs if s.kind != "constexpr"]
        cpu = CpuLauncher(compiled.artifact.engine, compiled.name, layout)
        kernel = compiled.kernel.name

        def run(runtime, grid, block, smem, stream):
            for spec, arg in zip((s for s in compiled.specs if s.kind == "tensor"),
                                 (a for a in runtime if hasattr(a, "device"))):
                if arg.device != "cpu":
                    raise LaunchError(f"kernel {kernel!r}: argument {spec.name!r} is on "
                                      f"{arg.device}, but the cpu backend needs host memory")
            cpu.launch(runtime, grid, block)
        return _CheckedLauncher(compiled, run)
    raise FlydslRuntimeError(
        f"kernel {compiled.kernel.name!r}: launching on the {name} backend needs its device "
        "driver, which is not available here; compile-only still works "
        "(flydsl.compile(fn, *args, backend=...))")
