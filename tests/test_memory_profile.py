"""The memory profiler of the CPU backend (``FLYDSL_PROFILE=memory``, ``flydsl.profile``).

Kernels with known answers: a shared-memory transpose read by columns has 32-way bank
conflicts, padded or XOR-swizzled none; a coalesced global copy moves 4 sectors per
32-lane f32 request (100% efficiency), a stride-32 copy 32 sectors (12.5%). The
bank model's phases (by access width, NVIDIA and AMD gfx9) are checked on synthetic
records.
"""
import io

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.frontend import ops as frontend_ops
from flydsl.compiler.options import CompileOptions
from flydsl.runtime import memory_profile as mp
from conftest import marked_line


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@flydsl.kernel
def transpose(x: fx.Tensor, y: fx.Tensor, PAD: fx.Constexpr[int]):
    tile = fx.shared_array((32, 32 + PAD), fx.Float32)
    r, c = fx.thread_idx.y, fx.thread_idx.x
    tile[r, c] = x[r, c]  # FILL
    fx.barrier()
    y[r, c] = tile[c, r]  # DRAIN


@flydsl.kernel
def swizzled_transpose(x: fx.Tensor, y: fx.Tensor):
    tile = fx.shared_array((32, 32), fx.Float32)
    r, c = fx.thread_idx.y, fx.thread_idx.x
    tile[r, c ^ r] = x[r, c]  # SWIZZLED FILL
    fx.barrier()
    y[r, c] = tile[c, r ^ c]  # SWIZZLED DRAIN


@flydsl.kernel
def strided_copy(x: fx.Tensor, y: fx.Tensor, STRIDE: fx.Constexpr[int]):
    t = fx.thread_idx.x + fx.block_idx.x * fx.block_dim.x
    y[t * STRIDE] = x[t * STRIDE]  # COPY


@flydsl.kernel
def vector_copy(a: fx.Tensor, b: fx.Tensor):
    t = fx.thread_idx.x
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    fx.copy(atom, fx.flat_divide(a, (4,))[None, t], fx.flat_divide(b, (4,))[None, t])  # VEC


@flydsl.kernel
def even_lanes(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    if t % 2 == 0:
        y[t] = x[t]  # EVEN


def _transpose(pad: int, arch=None):
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros_like(x)
    with flydsl.profile("memory", arch=arch) as report:
        transpose[2, (32, 32)](x, y, pad)
    np.testing.assert_array_equal(y, x.T)
    return report


def test_a_naive_transpose_reads_shared_memory_with_32_way_conflicts():
    report = _transpose(0)
    drain = report.find(line_of("DRAIN"), space="shared")
    assert (drain.kind, drain.tensor, drain.kernel) == ("shared load", "tile", "transpose[PAD=0]")
    assert drain.requests == 2 * 32           # 2 blocks x 32 warps
    assert drain.ways == 32.0 and drain.max_ways == 32
    assert drain.conflicts_per_request == 31.0   # 32 wavefronts where 1 would do
    fill = report.find(line_of("FILL"), space="shared")
    assert (fill.kind, fill.ways, fill.conflicts_per_request) == ("shared store", 1.0, 0.0)
    for marker, access in (("FILL", "load"), ("DRAIN", "store")):
        g = report.find(line_of(marker), space="global")
        assert g.access == access and g.tensor == ("x" if access == "load" else "y")
        assert (g.sectors_per_request, g.efficiency) == (4.0, 1.0)
    assert report.launches == 1 and report.dropped == 0


def test_a_padded_transpose_has_no_bank_conflicts():
    drain = _transpose(1).find(line_of("DRAIN"), space="shared")
    assert (drain.ways, drain.conflicts_per_request, drain.max_ways) == (1.0, 0.0, 1)


def test_an_xor_swizzled_transpose_has_no_bank_conflicts():
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros_like(x)
    with flydsl.profile() as report:
        swizzled_transpose[1, (32, 32)](x, y)
    np.testing.assert_array_equal(y, x.T)
    for marker in ("SWIZZLED FILL", "SWIZZLED DRAIN"):
        s = report.find(line_of(marker), space="shared")
        assert (s.requests, s.ways, s.conflicts_per_request) == (32, 1.0, 0.0)


def test_coalesced_and_strided_global_copies():
    x = np.arange(4096, dtype=np.float32)
    with flydsl.profile() as report:
        strided_copy[4, 32](x, np.zeros_like(x), 1)
    for access in ("load", "store"):
        s = report.find(line_of("COPY"), access=access)
        assert (s.requests, s.lanes_per_request) == (4, 32.0)
        assert (s.sectors_per_request, s.efficiency) == (4.0, 1.0)
    with flydsl.profile() as report:
        strided_copy[4, 32](x, np.zeros_like(x), 32)
    s = report.find(line_of("COPY"), access="load")
    assert s.kernel == "strided_copy[STRIDE=32]"
    assert (s.sectors_per_request, s.efficiency) == (32.0, 0.125)


@flydsl.kernel
def broadcast(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    y[t] = x[0]  # BROADCAST


def test_a_broadcast_load_uses_one_sector_of_which_4_bytes():
    x = np.arange(32, dtype=np.float32)
    with flydsl.profile() as report:
        broadcast[1, 32](x, np.zeros_like(x))
    s = report.find(line_of("BROADCAST"), access="load")
    assert (s.sectors_per_request, s.requested_bytes, s.efficiency) == (1.0, 4, 0.125)


def test_vector_accesses_count_their_width():
    a = np.arange(256, dtype=np.float32)
    b = np.zeros_like(a)
    with flydsl.profile() as report:
        vector_copy[1, 64](a, b)
    np.testing.assert_array_equal(a, b)
    s = report.find(line_of("VEC"), access="load")
    assert (s.bytes, s.requests, s.sectors_per_request, s.efficiency) == (16, 2, 16.0, 1.0)


def test_divergent_requests_are_counted():
    x = np.arange(48, dtype=np.float32)
    with flydsl.profile() as report:
        even_lanes[1, 48](x, np.zeros_like(x))
    s = report.find(line_of("EVEN"), access="load")
    # warp 0: 16 of 32 lanes; warp 1 (16 threads): 8 of them
    assert (s.requests, s.lanes, s.partial, s.divergence) == (2, 24, 2, 1.0)
    assert (s.sectors_per_request, s.efficiency) == (3.0, 24 * 4 / (6 * 32))


def test_a_full_last_warp_of_a_small_block_is_not_divergent():
    x = np.arange(48, dtype=np.float32)
    with flydsl.profile() as report:
        strided_copy[1, 48](x, np.zeros_like(x), 1)
    s = report.find(line_of("COPY"), access="load")
    assert (s.requests, s.lanes, s.partial) == (2, 48, 0)


def test_the_gfx9_model_serves_64_lane_waves_in_halves():
    drain = _transpose(0, arch="gfx942").find(line_of("DRAIN"), space="shared")
    assert (drain.requests, drain.lanes_per_request) == (2 * 16, 64.0)
    assert (drain.ways, drain.conflicts_per_request) == (32.0, 62.0)   # 2 halves x 31
    g = _transpose(1, arch="gfx942").find(line_of("DRAIN"), space="global")
    assert (g.sector_bytes, g.sectors_per_request, g.efficiency) == (64, 4.0, 1.0)


def test_the_model_comes_from_flydsl_gpu_arch(monkeypatch):
    assert mp.model_for() is mp.NVIDIA
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx942")
    assert mp.model_for() is mp.GFX9 and flydsl.MemoryProfile().model is mp.GFX9
    assert mp.model_for("sm_90") is mp.NVIDIA
    with pytest.raises(ValueError, match="no model for arch 'gfx1100'"):
        mp.model_for("gfx1100")
    with pytest.raises(ValueError, match="unknown profile 'time'"):
        with flydsl.profile("time"):
            pass


def _named(array, name: str):
    frontend_ops.name_shared_array(array, name)     # before any variable names it
    return array


@flydsl.kernel
def through_scratch(x: fx.Tensor, y: fx.Tensor):
    tile = fx.shared_array((32,), fx.Float32)
    scratch = _named(fx.shared_array((32,), fx.Float32), ".scratch")   # flydsl's own
    t = fx.thread_idx.x
    scratch[t] = x[t]
    tile[t] = scratch[t]
    y[t] = tile[t]  # THROUGH


def test_flydsl_scratch_arrays_and_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.arange(32, dtype=torch.float32)
    y = torch.zeros(32)
    with flydsl.profile() as report:
        through_scratch[1, 32](x, y)
    assert torch.equal(x, y)
    assert {(s.tensor, s.kind) for s in report.sites} == {
        ("x", "global load"), ("tile", "shared store"), ("tile", "shared load"),
        ("y", "global store")}
    assert report.find(line_of("THROUGH"), space="global").efficiency == 1.0


# -- the bank model on synthetic records ------------------------------------------------------

def _shared(model: str, lanes: int, width: int, offset, access="load") -> mp.SiteStats:
    """One request of ``lanes`` lanes of a block, lane i at byte ``offset(i)``."""
    report = mp.MemoryProfile(model)
    sites = [{"kernel": "k", "file": "k.py", "line": 1, "space": "shared", "access": access,
              "tensor": "shared array 's'", "bytes": width}]
    rec = np.array([[0 | width << mp.BYTES_SHIFT | lane << 32, 0, offset(lane)]
                    for lane in range(lanes)], np.int64)
    report.add_records(rec, sites, lanes)
    return report.find(1)


@pytest.mark.parametrize("model, lanes, width, offset, phases, wavefronts", [
    ("nvidia", 32, 4, lambda i: 4 * i, 1, 1),
    ("nvidia", 32, 4, lambda i: 0, 1, 1),                 # a broadcast
    ("nvidia", 32, 4, lambda i: 8 * i, 1, 2),             # stride 2 words: 2-way
    ("nvidia", 32, 8, lambda i: 8 * i, 2, 2),             # half-warps
    ("nvidia", 32, 16, lambda i: 16 * i, 4, 4),           # quarter-warps
    ("nvidia", 32, 16, lambda i: 32 * i, 4, 8),           # 8 lanes over 256 bytes
    ("gfx9", 64, 4, lambda i: 4 * i, 2, 2),               # half-waves
    ("gfx9", 64, 8, lambda i: 8 * i, 4, 4),               # quarter-waves
    ("gfx9", 64, 16, lambda i: 16 * i, 8, 8),             # eighths (ds_read_b128)
    ("gfx9", 64, 8, lambda i: 16 * i, 4, 8),              # 16 lanes over 256 bytes
    ("gfx9", 64, 4, lambda i: 128 * (i % 32), 2, 64),     # one bank: 32-way per half
])
def test_shared_memory_phases_by_access_width(model, lanes, width, offset, phases, wavefronts):
    s = _shared(model, lanes, width, offset)
    assert (s.requests, s.phases, s.wavefronts) == (1, phases, wavefronts)
    assert s.conflicts_per_request == wavefronts - phases


def _paired_quads(i: int) -> int:
    """Lane i's byte: quads 0, 1, 4, 5 (mod 8) on banks 0-15, the others on 16-31."""
    quad = i // 4
    return 16 * (i % 4) + 64 * (0, 0, 1, 1, 1, 1, 0, 0)[quad % 8] + 128 * quad


def test_gfx9_ds_read_b128_pairs_quads_that_are_not_neighbours():
    # lanes 0-3 with 20-23, 4-7 with 16-19, ...: one bank half each, so no conflict
    s = _shared("gfx9", 64, 16, _paired_quads)
    assert (s.phases, s.wavefronts) == (8, 8)
    # a store (ds_write_b128) pairs neighbours: 0-3 with 4-7 share banks 0-15
    s = _shared("gfx9", 64, 16, _paired_quads, access="store")
    assert (s.phases, s.wavefronts) == (8, 16)
    # NVIDIA's quarter-warps are neighbours too
    s = _shared("nvidia", 32, 16, _paired_quads)
    assert (s.phases, s.wavefronts) == (4, 8)


# -- options, cache, reports ---------------------------------------------------------------------

def test_profiled_kernels_are_a_separate_specialization(monkeypatch):
    assert CompileOptions(profile="memory").key() != CompileOptions().key()
    monkeypatch.setenv("FLYDSL_PROFILE", "memory")
    assert CompileOptions.from_env().profile == "memory"
    monkeypatch.setenv("FLYDSL_PROFILE", "memroy")
    with pytest.raises(ValueError, match="must be 'memory' or empty, got 'memroy'"):
        CompileOptions.from_env()
    monkeypatch.delenv("FLYDSL_PROFILE")
    x = np.arange(4096, dtype=np.float32)
    y = np.zeros_like(x)
    with flydsl.profile() as report:
        strided_copy[4, 32](x, y, 1)
    z = np.zeros_like(x)
    strided_copy[4, 32](x, z, 1)          # unprofiled: a binary that records nothing
    assert report.launches == 1
    assert report.find(line_of("COPY"), access="load").requests == 4
    np.testing.assert_array_equal(y[:128], x[:128])
    np.testing.assert_array_equal(z, y)


def test_flydsl_profile_env_records_into_the_process_report(monkeypatch, capsys):
    monkeypatch.setattr(mp, "_env_profile", None)
    monkeypatch.setenv("FLYDSL_PROFILE", "memory")
    x = np.arange(4096, dtype=np.float32)
    strided_copy[4, 32](x, np.zeros_like(x), 32)
    report = mp.active_profile()
    assert report.launches == 1
    mp._print_at_exit()
    err = capsys.readouterr().err
    assert "flydsl memory profile (nvidia model" in err and "strided_copy[STRIDE=32]" in err


def test_debug_checks_and_the_profiler_together(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    drain = _transpose(0).find(line_of("DRAIN"), space="shared")
    assert (drain.requests, drain.ways) == (64, 32.0)


@flydsl.kernel
def big_copy(x: fx.Tensor, y: fx.Tensor, TAG: fx.Constexpr[int]):   # TAG: a launcher each
    t = fx.thread_idx.x + fx.block_idx.x * fx.block_dim.x
    y[t] = x[t]


def test_the_record_buffer_grows_while_a_block_runs(monkeypatch):
    monkeypatch.setattr(mp, "_FIRST_CAPACITY", 100)
    x = np.arange(4096, dtype=np.float32)
    with flydsl.profile() as report:
        big_copy[4, 1024](x, np.zeros_like(x), 1)     # 2048 records a block
    s = report.find(access="load")
    assert (report.dropped, s.requests, s.sectors_per_request) == (0, 128, 4.0)


def test_accesses_past_the_largest_buffer_are_reported_lost(monkeypatch):
    monkeypatch.setattr(mp, "_FIRST_CAPACITY", 512)
    monkeypatch.setattr(mp, "MAX_CAPACITY", 1024)
    x = np.arange(2048, dtype=np.float32)
    with flydsl.profile() as report:
        big_copy[2, 1024](x, np.zeros_like(x), 2)
    assert report.dropped == 2 * (2048 - 1024)
    assert report.find(access="load").requests == 2 * 16    # the first 512 threads' loads
    assert "2048 accesses were not recorded: a block made more than 1024" in report.table()


def test_the_report_table():
    report = _transpose(0)
    out = io.StringIO()
    report.print(out)
    lines = out.getvalue().splitlines()
    assert lines[0] == ("flydsl memory profile (nvidia model: 32 banks x 4 B, 32-lane warps, "
                        "32-byte sectors; 1 launch)")
    assert lines[1].split() == ["site", "kernel", "tensor", "kind", "requests", "lanes/req",
                                "divergent", "ways", "conflicts/req", "sectors/req",
                                "efficiency"]
    drain = [row.split() for row in lines[2:] if "shared" in row and "load" in row]
    assert drain == [[f"test_memory_profile.py:{line_of('DRAIN')}", "transpose[PAD=0]", "tile",
                      "shared", "load", "64", "32.0", "0%", "32.0", "31.0", "-", "-"]]
    assert str(report) == out.getvalue().rstrip("\n")


def test_an_mma_atom_emulated_on_the_cpu_shows_no_shared_traffic():
    """The CPU runs fx.gemm through a shared scratch array; the GPU exchanges the
    fragments in registers, so the profile has global rows only."""
    from test_layout_model import one_atom
    A = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float16)
    B = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float16)
    C = np.zeros((16, 8), np.float32)
    with flydsl.profile() as report:
        one_atom[1, 32](A, B, C, fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16))
    np.testing.assert_allclose(C, A.astype(np.float32) @ B.astype(np.float32).T, rtol=1e-5)
    assert report.sites and {s.kind.split()[0] for s in report.sites} == {"global"}
