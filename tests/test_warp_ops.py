"""Warp- and block-level collectives (fx.lane_id, fx.active_mask, votes, shuffles,
fx.syncwarp, warp/block reductions and scans, fx.syncthreads_*): run on the CPU against
numpy references with CUDA's semantics, and compiled for sm_90 and gfx942."""
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import CompileTimeValueRequired, DSLTypeError, UnsupportedConstructError

RNG = np.random.default_rng(13)
WARP = 32   # the CPU backend's warp
# Kernels whose parametrized cases pass both multiples of 16 and others as the thread
# count take do_not_specialize: one compile serves every case (the collectives, not the
# divisibility specialization, are under test; each compile is seconds of LLVM -O3).


@pytest.fixture
def llvm_o0(monkeypatch):
    """FLYDSL_OPT_LEVEL=0 for the heaviest kernels: the same results, a fifth of the
    compile (LLVM -O3 took ~7 s of CPU for each). The votes, lane ids, float warp
    reductions, shuffles and counting barriers below still run at -O3."""
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")


def linear_ids(block):
    """Linear thread id of each thread of a block, in launch order (x fastest)."""
    return np.arange(int(np.prod(block)))


def warp_groups(n_threads):
    """(start, stop) of each warp of an ``n_threads`` block; the last may be partial."""
    return [(s, min(s + WARP, n_threads)) for s in range(0, n_threads, WARP)]


def warps_of(size, block, n):
    """(start, stop) in a launch of ``size`` threads in blocks of ``block`` of each warp's
    threads below ``n`` (the active ones under ``if i < n``)."""
    for b0 in range(0, size, block):
        for start, stop in warp_groups(block):
            lo, hi = b0 + start, min(b0 + stop, n)
            if hi > lo:
                yield lo, hi


# -- lane ids and active masks -------------------------------------------------------

@flydsl.kernel
def lanes_and_masks(lane: fx.Tensor, full: fx.Tensor, even: fx.Tensor):
    t = fx.thread_idx.x + fx.block_dim.x * (fx.thread_idx.y + fx.block_dim.y * fx.thread_idx.z)
    lane[t] = fx.lane_id()
    full[t] = fx.active_mask()
    if fx.lane_id() % 2 == 0:
        even[t] = fx.active_mask()


@pytest.mark.parametrize("block", [(64, 1, 1), (40, 1, 1), (10, 7, 1), (4, 3, 5)])
def test_lane_id_and_active_mask_follow_the_linear_thread_id(block):
    n = int(np.prod(block))
    lane, full, even = (np.zeros(n, np.int32), np.zeros(n, np.uint32),
                        np.full(n, 7, np.uint32))
    lanes_and_masks[1, block](lane, full, even)
    t = linear_ids(block)
    np.testing.assert_array_equal(lane, t % WARP)
    for start, stop in warp_groups(n):
        size = stop - start
        assert (full[start:stop] == (1 << size) - 1).all()
        evens = sum(1 << k for k in range(0, size, 2))
        assert (even[start:stop:2] == evens).all()
        assert (even[start + 1:stop:2] == 7).all()      # odd lanes did not run the branch
    if n >= WARP:
        assert even[0] == 0x55555555


# -- votes ------------------------------------------------------------------------------

@flydsl.kernel(do_not_specialize=("n",))
def votes(x: fx.Tensor, thr: fx.Tensor, ballot: fx.Tensor, all_: fx.Tensor, any_: fx.Tensor,
          sub: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        p = x[i] > thr[0]
        ballot[i] = fx.vote_ballot(p)
        all_[i] = fx.vote_all(p)
        any_[i] = fx.vote_any(p)
        if x[i] > thr[1]:           # only these lanes vote here
            sub[i] = fx.ballot(x[i] < thr[2])


def vote_reference(x, thr, n, block, grid):
    ballot, all_, any_, sub = (np.zeros(grid * block, np.int64) for _ in range(4))
    for start, stop in warps_of(grid * block, block, n):
        lanes = np.arange(stop - start)
        p = x[start:stop] > thr[0]
        ballot[start:stop] = int(np.sum(p.astype(np.int64) << lanes))
        all_[start:stop], any_[start:stop] = p.all(), p.any()
        act = x[start:stop] > thr[1]
        bits = int(np.sum((act & (x[start:stop] < thr[2])).astype(np.int64) << lanes))
        sub[start:stop][act] = bits
    return ballot, all_, any_, sub


@pytest.mark.parametrize("block,grid,n", [(64, 3, 192), (48, 2, 96), (64, 2, 100)])
@pytest.mark.parametrize("thr", [(0.5, 0.3, 0.8), (-1.0, 0.1, 2.0), (2.0, 0.6, 0.7)])
def test_votes_count_only_active_lanes(block, grid, n, thr):
    x = RNG.random(grid * block).astype(np.float32)
    thr = np.array(thr, np.float32)
    outs = [np.zeros(grid * block, t) for t in (np.uint32, bool, bool, np.uint32)]
    votes[grid, block](x, thr, *outs, n)
    for got, want in zip(outs, vote_reference(x, thr, n, block, grid)):
        np.testing.assert_array_equal(got[:n].astype(np.int64), want[:n])


# -- shuffles ---------------------------------------------------------------------------

@flydsl.kernel
def shuffles(x: fx.Tensor, b: fx.Tensor, idx: fx.Tensor, up: fx.Tensor, down: fx.Tensor,
             WIDTH: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i]
    idx[i] = fx.shuffle(v, b[i], WIDTH)
    up[i] = fx.shuffle_up(v, b[i] % 5, WIDTH)
    down[i] = fx.shuffle_down(v, b[i] % 5, width=WIDTH)


def shuffle_sources(b, width):
    """Source lane of each lane for idx / up / down by CUDA's rules (full warps)."""
    lane = np.arange(b.size) % WARP
    seg = lane & ~(width - 1)
    idx = seg | (b & (width - 1))
    delta = (b % 5) & (WARP - 1)
    up = np.where(lane - delta >= seg, lane - delta, lane)
    down = np.where(lane + delta <= seg + width - 1, lane + delta, lane)
    base = np.arange(b.size) - lane
    return base + idx, base + up, base + down


@pytest.mark.parametrize("width", [32, 8])
@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.float16])
def test_shuffles_read_cuda_source_lanes(width, dtype):
    x = (RNG.standard_normal(128) * 100).astype(dtype)
    b = RNG.integers(-40, 70, 128).astype(np.int32)      # out-of-range lanes wrap / clamp
    idx, up, down = (np.zeros_like(x) for _ in range(3))
    shuffles[2, 64](x, b, idx, up, down, width)
    for got, src in zip((idx, up, down), shuffle_sources(b, width)):
        np.testing.assert_array_equal(got, x[src])


@flydsl.kernel
def bool_shuffle(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = fx.shuffle_down(x[i] > 0, 1)


def test_shuffle_of_a_bool():
    x = RNG.standard_normal(32).astype(np.float32)
    y = np.zeros(32, bool)
    bool_shuffle[1, 32](x, y)
    np.testing.assert_array_equal(y, np.append(x[1:], x[-1]) > 0)


@flydsl.kernel
def vote_then_barrier(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    p = fx.vote_any(x[i] > 0) & (x[i] < 0.5)     # a per-thread Bool kept across a barrier
    fx.barrier()
    if p:
        y[i] = 1


def test_a_per_thread_bool_lives_across_barriers_on_the_cpu():
    x = RNG.standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.int32)
    vote_then_barrier[1, 64](x, y)
    np.testing.assert_array_equal(y, x < 0.5)


# -- syncwarp ---------------------------------------------------------------------------

@flydsl.kernel
def pair_swap(x: fx.Tensor, y: fx.Tensor, z: fx.Tensor):
    t = fx.thread_idx.x
    tile = fx.shared_array(64, fx.Float32)
    tile[t] = x[t]
    fx.syncwarp()
    y[t] = tile[t ^ 1]
    if fx.lane_id() < 16:             # a warp barrier may sit under a per-thread if
        tile[t] = x[t] * 2
        fx.syncwarp(0xFFFF)
        z[t] = tile[t ^ 3]


def test_syncwarp_orders_shared_memory_between_lanes():
    x = RNG.standard_normal(64).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    pair_swap[1, 64](x, y, z)
    t = np.arange(64)
    np.testing.assert_array_equal(y, x[t ^ 1])
    low = t % WARP < 16
    np.testing.assert_array_equal(z[low], 2 * x[(t ^ 3)[low]])
    assert (z[~low] == 0).all()


# -- warp reductions and scans -------------------------------------------------------

INT_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
           "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@flydsl.kernel(do_not_specialize=("n",))
def warp_reduce_all_ops(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:                         # keeps a prefix of the last warp
        v = x[i]
        out[i, 0] = fx.warp_reduce(v)
        out[i, 1] = fx.warp_reduce(v, "prod")
        out[i, 2] = fx.warp_reduce(v, "max")
        out[i, 3] = fx.warp_reduce(v, "min")
        out[i, 4] = fx.warp_reduce(v, "and")
        out[i, 5] = fx.warp_reduce(v, "or")
        out[i, 6] = fx.warp_reduce(v, "xor")
        out[i, 7] = fx.warp_reduce(v, lambda a, b: a ^ b)     # by shuffles, as on GPUs


def per_warp(x, n, block, fn):
    """``fn(values of the warp) -> value or per-lane array``, for each (partial) warp."""
    out = np.zeros(x.shape, np.result_type(x))
    for lo, hi in warps_of(x.size, block, n):
        out[lo:hi] = fn(x[lo:hi])
    return out


@pytest.mark.usefixtures("llvm_o0")
@pytest.mark.parametrize("block,n", [(64, 128), (48, 96), (64, 100), (96, 37)])
def test_warp_reduce_named_ops_int(block, n):
    size = -(-n // block) * block
    x = RNG.integers(-3, 4, size).astype(np.int32)
    x[x == 0] = 5
    out = np.zeros((size, 8), np.int32)
    warp_reduce_all_ops[size // block, block](x, out, n)
    for k, (name, ufunc) in enumerate(INT_OPS.items()):
        want = per_warp(x, n, block, lambda w: ufunc.reduce(w, dtype=np.int32))
        np.testing.assert_array_equal(out[:n, k], want[:n], err_msg=name)
    np.testing.assert_array_equal(out[:n, 7], out[:n, 6])


def first(a, b):
    """An associative op that is not commutative: which lane comes first matters."""
    return a


@flydsl.kernel
def warp_reduce_float(x: fx.Tensor, out: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i]
    out[i, 0] = fx.warp_reduce(v)
    out[i, 1] = fx.warp_reduce(v, "max")
    out[i, 2] = fx.warp_reduce(v, lambda a, b: b)     # the last lane's value
    out[i, 3] = fx.warp_reduce(v, first)              # a helper def: the first lane's


@pytest.mark.parametrize("block", [64, 80, 200])
def test_warp_reduce_float_and_custom_ops(block):
    x = RNG.standard_normal(block * 2).astype(np.float32)
    out = np.zeros((x.size, 4), np.float32)
    warp_reduce_float[2, block](x, out)
    n = x.size
    np.testing.assert_allclose(out[:, 0], per_warp(x, n, block, np.sum), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[:, 1], per_warp(x, n, block, np.max))
    np.testing.assert_array_equal(out[:, 2], per_warp(x, n, block, lambda w: w[-1]))
    np.testing.assert_array_equal(out[:, 3], per_warp(x, n, block, lambda w: w[0]))
    for start, stop in warps_of(x.size, block, n):     # the same bits in every lane
        assert len(set(out[start:stop, 0].tolist())) == 1


@flydsl.kernel(do_not_specialize=("m",))
def suffix_lanes(x: fx.Tensor, out: fx.Tensor, m: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i >= m:                        # the active lanes of a warp need not start at lane 0
        out[i, 0] = fx.warp_reduce(x[i], lambda a, b: a + b)
        out[i, 1] = fx.warp_scan(x[i], lambda a, b: b, inclusive=False, identity=-1)
        out[i, 2] = fx.warp_reduce(x[i])


@pytest.mark.usefixtures("llvm_o0")
@pytest.mark.parametrize("m", [0, 5, 37, 100])
def test_warp_collectives_over_a_suffix_of_lanes(m):
    x = RNG.integers(-100, 100, 128).astype(np.int32)
    out = np.full((128, 3), 1234, np.int32)
    suffix_lanes[2, 64](x, out, m)
    for start in range(0, 128, WARP):
        lo, hi = max(start, m), start + WARP
        if lo >= hi:
            continue
        w = x[lo:hi]
        assert (out[lo:hi, 0] == w.sum()).all() and (out[lo:hi, 2] == w.sum()).all()
        np.testing.assert_array_equal(out[lo:hi, 1], np.concatenate([[-1], w[:-1]]))
    assert (out[:m] == 1234).all()


@flydsl.kernel(do_not_specialize=("n",))
def warp_scans(x: fx.Tensor, out: fx.Tensor, f: fx.Tensor, fout: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i, 0] = fx.warp_scan(x[i])
        out[i, 1] = fx.warp_scan(x[i], inclusive=False)
        out[i, 2] = fx.warp_scan(x[i], lambda a, b: b, inclusive=False, identity=-7)
        out[i, 3] = fx.warp_scan(x[i], first)
        fout[i, 0] = fx.warp_scan(f[i], "max")
        fout[i, 1] = fx.warp_scan(f[i], "max", inclusive=False)


@pytest.mark.usefixtures("llvm_o0")
@pytest.mark.parametrize("block,n", [(64, 128), (48, 96), (64, 90)])
def test_warp_scan_inclusive_exclusive_and_custom(block, n):
    size = -(-n // block) * block
    x = RNG.integers(0, 3, size).astype(np.int32)
    f = RNG.standard_normal(size).astype(np.float32)
    out, fout = np.zeros((size, 4), np.int32), np.zeros((size, 2), np.float32)
    warp_scans[size // block, block](x, out, f, fout, n)
    np.testing.assert_array_equal(out[:n, 0], per_warp(x, n, block, np.cumsum)[:n])
    excl = per_warp(x, n, block, lambda w: np.cumsum(w) - w)
    np.testing.assert_array_equal(out[:n, 1], excl[:n])
    # custom ops keep lane order: "last" shifts the warp up by one, "first" spreads lane 0
    shifted = per_warp(x, n, block, lambda w: np.concatenate([[-7], w[:-1]]))
    np.testing.assert_array_equal(out[:n, 2], shifted[:n])
    np.testing.assert_array_equal(out[:n, 3], per_warp(x, n, block, lambda w: w[:1])[:n])
    np.testing.assert_array_equal(fout[:n, 0], per_warp(f, n, block, np.maximum.accumulate)[:n])
    fexcl = per_warp(f, n, block,
                     lambda w: np.concatenate([[-np.inf], np.maximum.accumulate(w)[:-1]]))
    np.testing.assert_array_equal(fout[:n, 1], fexcl[:n])


# -- block reductions and scans ------------------------------------------------------

@flydsl.kernel
def block_reductions(x: fx.Tensor, total: fx.Tensor, biggest: fx.Tensor, rounds: fx.Tensor,
                     custom: fx.Tensor):
    b = fx.block_idx.x
    t = fx.thread_idx.x + fx.block_dim.x * (fx.thread_idx.y + fx.block_dim.y * fx.thread_idx.z)
    n = fx.block_dim.x * fx.block_dim.y * fx.block_dim.z
    v = x[b * n + t]
    total[b * n + t] = fx.block_reduce(v)
    biggest[b * n + t] = fx.block_reduce(fx.Int32(v * 1000), "max")
    custom[b * n + t] = fx.block_reduce(fx.Int32(v * 1000), lambda p, q: p + q)
    acc = 0
    for r in range(3):                # reused in a loop: its shared memory is reused too
        acc = acc + fx.block_reduce(r + t, "sum")
    rounds[b * n + t] = acc


@pytest.mark.usefixtures("llvm_o0")
@pytest.mark.parametrize("block", [(256, 1, 1), (100, 1, 1), (16, 12, 1), (8, 4, 3), (1, 1, 1),
                                   (1024, 1, 1)])
def test_block_reduce_any_block_shape(block):
    n, grid = int(np.prod(block)), 3
    x = RNG.standard_normal(n * grid).astype(np.float32)
    total, biggest, rounds, custom = (np.zeros(n * grid, t)
                                      for t in (np.float32, np.int32, np.int32, np.int32))
    block_reductions[grid, block](x, total, biggest, rounds, custom)
    xs = x.reshape(grid, n)
    np.testing.assert_allclose(total.reshape(grid, n),
                               np.repeat(xs.sum(1, dtype=np.float64)[:, None], n, 1),
                               rtol=1e-4, atol=1e-4)
    assert (total.reshape(grid, n) == total.reshape(grid, n)[:, :1]).all()  # one value
    want_max = (xs * 1000).astype(np.int32).max(1)
    np.testing.assert_array_equal(biggest.reshape(grid, n), np.repeat(want_max[:, None], n, 1))
    assert (rounds == 3 * n * (n - 1) // 2 + n * 3).all()
    want_sum = (xs * 1000).astype(np.int32).sum(1)
    np.testing.assert_array_equal(custom.reshape(grid, n), np.repeat(want_sum[:, None], n, 1))


@flydsl.kernel
def block_scans(x: fx.Tensor, incl: fx.Tensor, excl: fx.Tensor, low: fx.Tensor,
                shifted: fx.Tensor):
    t = fx.thread_idx.x + fx.block_dim.x * fx.thread_idx.y
    n = fx.block_dim.x * fx.block_dim.y
    i = fx.block_idx.x * n + t
    incl[i] = fx.block_scan(x[i])
    excl[i] = fx.block_scan(x[i], inclusive=False)
    low[i] = fx.block_scan(x[i], "min", inclusive=False)
    shifted[i] = fx.block_scan(x[i], lambda a, b: b, inclusive=False, identity=-99)


@pytest.mark.usefixtures("llvm_o0")
@pytest.mark.parametrize("block", [(128, 1), (100, 1), (24, 5), (7, 1), (32, 32)])
def test_block_scan_in_linear_thread_order(block):
    n, grid = block[0] * block[1], 2
    x = RNG.integers(-50, 50, n * grid).astype(np.int32)
    incl, excl, low, shifted = (np.zeros_like(x) for _ in range(4))
    block_scans[grid, block](x, incl, excl, low, shifted)
    xs = x.reshape(grid, n)
    np.testing.assert_array_equal(incl.reshape(grid, n), np.cumsum(xs, 1))
    np.testing.assert_array_equal(excl.reshape(grid, n), np.cumsum(xs, 1) - xs)
    want_low = np.minimum.accumulate(
        np.concatenate([np.full((grid, 1), 2**31 - 1), xs[:, :-1]], 1), 1)
    np.testing.assert_array_equal(low.reshape(grid, n), want_low)
    # a custom op keeps the linear thread order: "last" shifts the block up by one
    want_shift = np.concatenate([np.full((grid, 1), -99), xs[:, :-1]], 1)
    np.testing.assert_array_equal(shifted.reshape(grid, n), want_shift)


# -- counting barriers ------------------------------------------------------------------

@flydsl.kernel
def counting_barriers(x: fx.Tensor, thr: fx.Float32, out: fx.Tensor):
    t = fx.thread_idx.x + fx.block_dim.x * fx.thread_idx.y
    n = fx.block_dim.x * fx.block_dim.y
    i = fx.block_idx.x * n + t
    p = x[i] > thr
    out[i, 0] = fx.syncthreads_count(p)
    out[i, 1] = fx.syncthreads_and(p)
    out[i, 2] = fx.syncthreads_or(p)


@pytest.mark.parametrize("block", [(64, 1), (50, 1), (9, 7)])
@pytest.mark.parametrize("thr", [-10.0, 0.0, 0.9, 10.0])
def test_syncthreads_count_and_or(block, thr):
    n, grid = block[0] * block[1], 3
    x = RNG.standard_normal(n * grid).astype(np.float32)
    out = np.zeros((n * grid, 3), np.int32)
    counting_barriers[grid, block](x, thr, out)
    p = (x > np.float32(thr)).reshape(grid, n)
    want = np.stack([p.sum(1), p.all(1), p.any(1)], 1)
    np.testing.assert_array_equal(out.reshape(grid, n, 3), np.repeat(want[:, None], n, 1))


# -- errors -------------------------------------------------------------------------

@flydsl.kernel
def misuse(x: fx.Tensor, WHAT: fx.Constexpr[str]):
    i = fx.thread_idx.x
    if WHAT == "width":
        x[i] = fx.shuffle(x[i], 0, 12)
    elif WHAT == "dynamic width":
        x[i] = fx.shuffle(x[i], 0, i)
    elif WHAT == "tensor":
        x[i] = fx.warp_reduce(x)
    elif WHAT == "op":
        x[i] = fx.warp_reduce(x[i], "mean")
    elif WHAT == "float xor":
        x[i] = fx.block_reduce(x[i], "xor")
    elif WHAT == "identity":
        x[i] = fx.warp_scan(x[i], lambda a, b: a + b, inclusive=False)
    elif WHAT == "divergent loop":
        for _ in range(i):
            x[i] = fx.warp_reduce(x[i])
    elif WHAT == "divergent block":
        if i > 3:
            x[i] = fx.block_reduce(x[i])


@pytest.mark.parametrize("what,error,words", [
    ("width", DSLTypeError, "fx.shuffle: width must be a power of two"),
    ("dynamic width", CompileTimeValueRequired, "fx.shuffle: width must be a compile-time"),
    ("tensor", DSLTypeError, "fx.warp_reduce needs a number or a kernel value, got a tensor"),
    ("op", DSLTypeError, "fx.warp_reduce: op must be one of"),
    ("float xor", DSLTypeError, "fx.block_reduce: op 'xor' needs integer or Bool values"),
    ("identity", DSLTypeError, "fx.warp_scan: an exclusive scan with a custom op needs "
                               "identity="),
    ("divergent loop", UnsupportedConstructError, "warp collective"),
    ("divergent block", UnsupportedConstructError,
     "barrier under an 'if' whose condition depends on the thread id"),
])
def test_misuse_is_a_clear_error(what, error, words):
    with pytest.raises(error) as info:
        misuse[1, 32](np.zeros(32, np.float32), what)
    assert words in str(info.value)
    assert "Value" not in str(info.value).replace("kernel value", "")


# -- GPU code --------------------------------------------------------------------------

@flydsl.kernel
def everything(x: fx.Tensor, d: fx.Tensor, m: fx.Tensor, out: fx.Tensor):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i]
    out[i, 0] = fx.shuffle(v, 3) + fx.shuffle_up(v, 1) + fx.shuffle_down(v, 2, 16)
    out[i, 1] = fx.warp_reduce(v) + fx.block_reduce(v, "max") + fx.block_scan(v)
    out[i, 2] = fx.syncthreads_count(v > 0) + fx.syncthreads_and(v > 1) + fx.syncthreads_or(v > 2)
    out[i, 3] = fx.vote_all(v > 0) + fx.vote_any(v < 0) + fx.lane_id()
    fx.syncwarp()
    m[i, 0] = fx.vote_ballot(v > 0)
    m[i, 1] = fx.active_mask()
    d[i] = fx.shuffle(d[i], 5)            # 64-bit: two 32-bit shuffles on GPUs


def gpu_asm(backend, arch, stage):
    x, d = np.zeros(64, np.int32), np.zeros(64, np.float64)
    mask = np.uint32 if backend == "cuda" else np.uint64
    prog = flydsl.compile(everything, x, d, np.zeros((64, 2), mask), np.zeros((64, 4), np.int32),
                          backend=backend, arch=arch)
    return prog.asm


def test_cuda_uses_native_warp_instructions():
    asm = gpu_asm("cuda", "sm_90", "ptx")["ptx"]
    for insn in ("shfl.sync.idx.b32", "shfl.sync.up.b32", "shfl.sync.down.b32",
                 "vote.sync.ballot.b32", "vote.sync.all.pred", "vote.sync.any.pred",
                 "activemask.b32", "bar.warp.sync", "bar.red.popc.u32", "bar.red.and.pred",
                 "bar.red.or.pred", "%laneid"):
        assert insn in asm, insn
    # the member mask of the shuffles is the active mask; width 16 is segment mask 16 << 8
    assert re.search(r"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, 2, 4127, %r\d+;", asm)
    assert "shfl.sync.bfly" not in asm


def test_rocm_uses_bpermute_and_exec_ballots():
    asm = gpu_asm("rocm", "gfx942", "amdgcn")
    gcn, llir = asm["amdgcn"], asm["llir"]
    assert "ds_bpermute_b32" in gcn
    assert re.search(r"v_cmp_\w+\s+(s\[\d+:\d+\]|vcc)", gcn)       # ballot: a compare mask
    assert "exec" in gcn and "v_mbcnt_lo_u32_b32" in gcn
    assert "llvm.amdgcn.ballot.i64" in llir                       # 64-lane masks
    assert "__ockl" not in llir and "__ocml" not in llir
