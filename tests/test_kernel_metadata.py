"""Kernel resource metadata: ``prog.kernels[i].metadata`` and ``kernel.metadata``
(registers, spills, shared memory, max threads per block, occupancy), read from the
toolchain's report of the binary on sm_90 and gfx942 and kept in the cache entry."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flydsl
from flydsl.cli import main as cli_main
from flydsl.compiler.kernel_metadata import (AMD_LIMITS, CUDA_LIMITS, amd_occupancy,
                                             cuda_occupancy, parse_ptxas_log)
from flydsl.compiler.toolchain import find_ptxas

import metadata_kernels as mk

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_TARGETS = [("cuda", "sm_90"), ("rocm", "gfx942")]
#: Without ptxas a CUDA kernel is PTX, whose resources only the driver learns.
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
WITH_BINARY_REPORTS = [pytest.param("cuda", marks=needs_ptxas), "rocm"]


def _gpu_metadata(fn, args: tuple, cache_dir: str) -> dict:
    """``fn``'s kernel's metadata per GPU backend, compiled (once a module) into the
    tests' cache (a module fixture runs before the per-test environment is set)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLYDSL_CACHE_DIR", cache_dir)
        return {backend: flydsl.compile(fn, *args, backend=backend,
                                        arch=arch).kernels[0].metadata
                for backend, arch in GPU_TARGETS}


@pytest.fixture(scope="module")
def reverse_metadata(session_cache_dir):
    """The shared-memory kernel's metadata per GPU backend."""
    return _gpu_metadata(mk.reverse, mk.reverse_args(), session_cache_dir)


@pytest.mark.parametrize("backend", WITH_BINARY_REPORTS)
def test_a_small_kernel_reports_registers_no_spills_and_its_shared_array(reverse_metadata,
                                                                         backend):
    meta = reverse_metadata[backend]
    assert meta.n_regs == meta.registers and 0 < meta.n_regs < 64
    assert meta.n_spills == 0 and meta.spill_bytes == 0
    assert meta.shared_bytes == mk.SHARED_BYTES
    assert meta.dynamic_shared_bytes == 0
    assert meta.max_threads_per_block == 1024
    assert meta.block_threads == mk.BLOCK
    assert 0 < meta.occupancy <= 1


def test_amd_metadata_counts_scalar_registers_too(reverse_metadata):
    assert reverse_metadata["rocm"].scalar_registers > 0
    assert reverse_metadata["cuda"].scalar_registers is None


@pytest.fixture(scope="module")
def heavy_metadata(session_cache_dir):
    """The register-heavy kernel's metadata per GPU backend."""
    return _gpu_metadata(mk.heavy, mk.heavy_args(), session_cache_dir)


@needs_ptxas
def test_a_register_heavy_kernel_limits_its_block_size_and_occupancy_on_sm90(heavy_metadata):
    meta = heavy_metadata["cuda"]
    assert 128 < meta.n_regs <= 255           # 80 live doubles
    assert meta.max_threads_per_block < 1024
    assert meta.occupancy == meta.occupancy_for(64) < 0.25   # at most 12 warps of 64
    assert meta.occupancy_for(1024) == 0      # too many registers for such a block


def test_a_kernel_that_needs_more_vgprs_than_it_may_use_spills_on_gfx942(heavy_metadata):
    # A 1024-work-item workgroup must fit one CU: at most 128 VGPRs a lane.
    meta = heavy_metadata["rocm"]
    assert meta.n_regs <= 128
    assert meta.n_spills > 0 and meta.spill_bytes == 4 * meta.n_spills
    assert meta.local_bytes >= meta.spill_bytes - 8


def test_cpu_metadata_has_the_shared_memory_and_nothing_it_cannot_know():
    meta = flydsl.compile(mk.reverse, *mk.reverse_args(), backend="cpu").kernels[0].metadata
    assert meta.shared_bytes == mk.SHARED_BYTES
    assert (meta.n_regs, meta.n_spills, meta.occupancy, meta.max_threads_per_block) == \
        (None, None, None, None)


def test_kernel_metadata_after_a_launch_gives_the_launch_block_and_dynamic_shared_memory():
    a, b = mk.reverse_args()
    mk.reverse_kernel[(4, 1, 1), (mk.BLOCK, 1, 1), 512](a, b)
    np.testing.assert_array_equal(b[:mk.BLOCK], a[:mk.BLOCK][::-1])
    meta = mk.reverse_kernel.metadata
    assert (meta.block_threads, meta.dynamic_shared_bytes) == (mk.BLOCK, 512)
    assert meta.shared_bytes == mk.SHARED_BYTES


def test_metadata_survives_a_cache_hit_in_a_fresh_process_without_mlir(reverse_metadata):
    # reverse_metadata compiled (or loaded) the kernels into this session's cache
    env = dict(os.environ)
    env.pop("FLYDSL_COMPILE_BACKEND", None)
    loaded = _child(env, *(["cuda"] if find_ptxas() else []), "rocm")
    assert loaded.pop("mlir_imported") is False
    for backend, meta in loaded.items():
        assert meta.pop("from_cache") is True
        assert meta == reverse_metadata[backend].as_dict()
        assert meta["n_regs"] > 0 and meta["shared_bytes"] == mk.SHARED_BYTES


def _child(env: dict, *backends: str) -> dict:
    out = subprocess.run([sys.executable, os.path.join(HERE, "metadata_kernels.py"),
                          *backends], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_flydsl_compile_stats_prints_each_kernels_resources(capsys):
    target = os.path.join(HERE, os.pardir, "examples", "vector_add.py") + "::vadd"
    assert cli_main(["compile", target, "--backend", "rocm", "--arch", "gfx942",
                     "--signature", "f32[1],f32[1],f32[1],i32", "--stats"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("vadd_kernel (rocm/gfx942): registers ")
    assert "spills 0 B" in line and "occupancy 100% at 256 threads" in line


# -- occupancy against the documented limits, by hand -------------------------------
@pytest.mark.parametrize("registers, shared, threads, expected", [
    (32, 0, 256, 1.0),              # 64 warps fit
    (64, 0, 256, 0.5),              # 2048 registers a warp: 32 warps
    (40, 0, 128, 0.75),             # 1280 a warp: 51 warps, 48 in groups of 4 = 12 blocks
    (32, 100 * 1024, 128, 0.125),   # 101 KiB a block with the reserved 1 KiB: 2 blocks
    (32, 0, 32, 0.5),               # 32 blocks of one warp
    (255, 0, 1024, 0.0),            # too many registers for the block
    (32, 228 * 1024, 128, 0.0),     # over 227 KiB a block
])
def test_sm90_occupancy_follows_its_limits(registers, shared, threads, expected):
    assert cuda_occupancy(CUDA_LIMITS["sm_90"], registers, shared, threads) == expected


@pytest.mark.parametrize("vgprs, lds, threads, expected", [
    (32, 0, 256, 1.0),              # 8 waves a SIMD
    (128, 0, 256, 0.5),             # 512 / 128: 4 waves a SIMD
    (100, 0, 256, 0.5),             # 104 after the granule of 8: 4 waves a SIMD
    (72, 0, 64, 0.875),             # 512 / 72: 7 of 8 waves a SIMD
    (32, 40 * 1024, 256, 0.125),    # one workgroup's LDS a CU: 4 of 32 waves
    (256, 0, 1024, 0.0),            # 16 waves need 4 a SIMD, 256 VGPRs allow 2
])
def test_gfx942_occupancy_follows_its_limits(vgprs, lds, threads, expected):
    assert amd_occupancy(AMD_LIMITS["gfx942"], vgprs, lds, threads) == expected


def test_gfx942_occupancy_counts_scalar_registers():
    # 102 SGPRs take 112 after the granule of 16: 800 / 112 = 7 waves a SIMD
    assert amd_occupancy(AMD_LIMITS["gfx942"], 32, 0, 64, sgprs=102) == 7 / 8
    assert amd_occupancy(AMD_LIMITS["gfx942"], 32, 0, 64, sgprs=96) == 1.0


def test_ptxas_reports_are_read_per_entry_function():
    log = ("ptxas info    : Compiling entry function 'a' for 'sm_90'\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 30 registers, used 1 barriers, 2048 bytes smem\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_90'\n"
           "ptxas info    : Function properties for helper\n"
           "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Function properties for b\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 10 registers\n")
    assert parse_ptxas_log(log, "a") == {"local_bytes": 8, "spill_bytes": 4,
                                         "registers": 30, "shared_bytes": 2048}
    assert parse_ptxas_log(log, "b") == {"local_bytes": 0, "spill_bytes": 0,
                                         "registers": 10, "shared_bytes": 0}
    assert parse_ptxas_log(log, "c") == {}
