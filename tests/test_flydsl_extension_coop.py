"""fx.coop (flydsl.extension.coop): warp-scope reductions and scans over groups of
``width`` lanes, and BlockReduce / BlockScan specialized on dtype, block size and
algorithm, run on the CPU backend against numpy (FlyDSL's coop tests, in our words).

Integer sums wrap at the dtype's width, as on the device; float results are compared
with a tolerance (the fold order is the algorithm's).
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

ADD, MUL, MAX, MIN = (fx.ReductionOp.ADD, fx.ReductionOp.MUL, fx.ReductionOp.MAX,
                      fx.ReductionOp.MIN)
DTYPES = [(fx.Uint8, np.uint8), (fx.Int16, np.int16), (fx.Int32, np.int32),
          (fx.Int64, np.int64), (fx.Float32, np.float32), (fx.Float64, np.float64)]


def sample(np_dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(np_dtype, np.floating):
        return rng.standard_normal(n).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, n, dtype=np_dtype, endpoint=True)


def check(out, expected):
    if np.issubdtype(out.dtype, np.floating):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(out, expected)


def fast_compile(monkeypatch):
    """LLVM -O0 for a kernel of its own: the same results for a fraction of the -O3
    compile (seconds of CPU for each of these). One warp case (UInt8) and one block
    case (128 x Int32, warp reductions) still compile at -O3, as users do."""
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")


def cumsum(x, axis=-1):
    """Inclusive sum in the array's own dtype (integers wrap)."""
    with np.errstate(over="ignore"):
        return np.cumsum(x, axis=axis, dtype=x.dtype)


# -- warp scope -----------------------------------------------------------------------

WARP = 32        # the CPU backend's warp (fx.warp_size())
WIDTHS = [2, 4, 8, 16, None]


@flydsl.kernel(known_block_size=[64, 1, 1])
def _warp_kernel(a: fx.Tensor, o: fx.Tensor):
    i = fx.thread_idx.x
    v = a[i]
    for k in fx.range_constexpr(len(WIDTHS)):
        w = WIDTHS[k]
        inc, exc, agg = fx.coop.warp_scan_with_aggregate(v, ADD, width=w)
        o[k, 0, i] = fx.coop.warp_reduce(v, ADD, width=w)
        o[k, 1, i] = inc
        o[k, 2, i] = exc
        o[k, 3, i] = agg
        o[k, 4, i] = fx.coop.warp_reduce(v, MAX, width=w)
        o[k, 5, i] = fx.coop.warp_exclusive_scan(v, MIN, width=w)
        o[k, 6, i] = fx.coop.warp_inclusive_scan(v, ADD, width=w, init=v.dtype(3))


@flydsl.jit
def _warp_launch(a: fx.Tensor, o: fx.Tensor):
    _warp_kernel(a, o).launch(grid=(1, 1, 1), block=(64, 1, 1))


WARP_DTYPES = [DTYPES[0], DTYPES[1], DTYPES[3], DTYPES[4]]   # UInt8 Int16 Int64 Float32


@pytest.mark.parametrize("dtype,np_dtype", WARP_DTYPES,
                         ids=[d.__name__ for d, _ in WARP_DTYPES])
def test_warp_collectives_over_every_width(dtype, np_dtype, monkeypatch):
    if dtype is not fx.Uint8:
        fast_compile(monkeypatch)
    a = sample(np_dtype, 64)
    o = np.zeros((len(WIDTHS), 7, 64), np_dtype)
    _warp_launch(a, o)
    for k, w in enumerate(WIDTHS):
        g = a.reshape(-1, w or WARP)
        inc = cumsum(g)
        rep = lambda per_group: np.repeat(per_group, g.shape[1])   # noqa: E731
        check(o[k, 0], rep(inc[:, -1]))
        check(o[k, 1], inc.ravel())
        with np.errstate(over="ignore"):
            check(o[k, 2], (inc - g).ravel())
            check(o[k, 6], (inc + np_dtype(3)).ravel())
        check(o[k, 3], rep(inc[:, -1]))
        check(o[k, 4], rep(g.max(1)))
        highest = np.inf if np.issubdtype(np_dtype, np.floating) else np.iinfo(np_dtype).max
        first = np.full((g.shape[0], 1), highest, np_dtype)
        exc_min = np.minimum.accumulate(np.concatenate([first, g[:, :-1]], 1), axis=1)
        check(o[k, 5], exc_min.ravel())


def test_warp_width_is_checked():
    with pytest.raises(ValueError, match="power of two"):
        fx.coop.warp_reduce(1, ADD, width=12)
    with pytest.raises(ValueError, match="must not exceed"):
        fx.coop.warp_reduce(1, ADD, width=4 * WARP)


# -- block scope ----------------------------------------------------------------------

def _block_kernel(block, dtype, reduce_algo, items):
    @flydsl.kernel(known_block_size=list(block))
    def kernel(a: fx.Tensor, o: fx.Tensor, agg: fx.Tensor):
        tid = fx.thread_idx.x + fx.thread_idx.y * block[0] + \
            fx.thread_idx.z * (block[0] * block[1])
        scan = fx.coop.BlockScan[dtype, fx.known_block_size()]
        red = fx.coop.BlockReduce[dtype, block, reduce_algo]
        s_scan = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        s_red = fx.SharedAllocator().allocate(red.SharedStorage).peek()
        if fx.const_expr(items == 1):
            v = a[tid]
            inc, total = scan.inclusive_with_aggregate(v, ADD, storage=s_scan)
            fx.barrier()
            o[0, tid] = inc
            o[1, tid] = scan.exclusive(v, ADD, storage=s_scan, init=dtype(5))
            o[2, tid] = red(v, ADD, storage=s_red)
            fx.barrier()
            o[3, tid] = red(v, MAX, storage=s_red)
            agg[tid] = total
        else:
            vec = fx.Vector.from_elements([a[tid * items + j] for j in range(items)])
            inc, total = scan.inclusive_with_aggregate(vec, ADD, storage=s_scan)
            fx.barrier()
            exc = scan.exclusive(vec, ADD, storage=s_scan)
            for j in fx.range_constexpr(items):
                o[0, tid * items + j] = inc[j]
                o[1, tid * items + j] = exc[j]
            o[2, tid] = red(vec, ADD, storage=s_red)
            agg[tid] = total

    @flydsl.jit
    def launch(a: fx.Tensor, o: fx.Tensor, agg: fx.Tensor):
        kernel(a, o, agg).launch(grid=(1, 1, 1), block=block)

    return launch


BLOCK_CASES = [
    ((128, 1, 1), fx.Int32, np.int32, "WARP_REDUCTIONS"),
    ((64, 2, 2), fx.Int16, np.int16, "RAKING"),
    ((8, 1, 1), fx.Uint8, np.uint8, "WARP_REDUCTIONS"),     # narrower than a warp
    ((1, 1, 1), fx.Int64, np.int64, "RAKING"),
    ((256, 1, 1), fx.Float32, np.float32, "RAKING"),
]


@pytest.mark.parametrize("block,dtype,np_dtype,algo", BLOCK_CASES,
                         ids=[f"{c[0][0]}x{c[0][1]}x{c[0][2]}-{c[1].__name__}-{c[3]}"
                              for c in BLOCK_CASES])
def test_block_reduce_and_scan(block, dtype, np_dtype, algo, monkeypatch):
    if algo != "WARP_REDUCTIONS" or dtype is not fx.Int32:
        fast_compile(monkeypatch)
    n = block[0] * block[1] * block[2]
    a = sample(np_dtype, n, seed=n)
    o = np.zeros((4, n), np_dtype)
    agg = np.zeros(n, np_dtype)
    _block_kernel(block, dtype, fx.coop.BlockReduceAlgorithm[algo], 1)(a, o, agg)
    inc = cumsum(a)
    check(o[0], inc)
    with np.errstate(over="ignore"):
        check(o[1], inc - a + np_dtype(5))
    check(o[2], np.full(n, inc[-1]))
    check(o[3], np.full(n, a.max()))
    check(agg, np.full(n, inc[-1]))


@pytest.mark.parametrize("items", [3, 9])
def test_block_scan_of_several_items_per_thread(items, monkeypatch):
    fast_compile(monkeypatch)
    block = (64, 1, 1)
    a = sample(np.int32, 64 * items, seed=items)
    o = np.zeros((4, 64 * items), np.int32)
    agg = np.zeros(64, np.int32)
    _block_kernel(block, fx.Int32, fx.coop.BlockReduceAlgorithm.WARP_REDUCTIONS, items)(
        a, o, agg)
    inc = cumsum(a)
    check(o[0], inc)
    with np.errstate(over="ignore"):
        check(o[1], inc - a)
    check(o[2, :64], np.full(64, inc[-1]))
    check(agg, np.full(64, inc[-1]))


def test_specialization_is_cached_and_checked():
    scan = fx.coop.BlockScan[fx.Int32, 256]
    assert scan is fx.coop.BlockScan[fx.Int32, (256, 1, 1)]
    assert scan.algorithm is fx.coop.BlockScanAlgorithm.WARP_SCANS
    assert (scan.block_threads, scan.warp_threads, scan.num_warps) == (256, WARP, 256 // WARP)
    assert fx.coop.BlockReduce[fx.Float32, 64].algorithm is \
        fx.coop.BlockReduceAlgorithm.WARP_REDUCTIONS
    assert fx.coop.BlockReduce[fx.Float32, 16].warp_threads == 16
    assert fx.coop.universal.BlockScan is fx.coop.BlockScan
    with pytest.raises(TypeError, match="already specialized"):
        scan[fx.Int32, 256]
    with pytest.raises(ValueError, match="power of two"):
        fx.coop.BlockReduce[fx.Float32, 96]
    with pytest.raises(TypeError, match="positive Python int"):
        fx.coop.BlockReduce[fx.Float32, (64, 0, 1)]
    with pytest.raises(NotImplementedError,
                       match="BlockScanAlgorithm.RAKING_MEMOIZE is not implemented"):
        fx.coop.BlockScan[fx.Float32, 64, fx.coop.BlockScanAlgorithm.RAKING_MEMOIZE]
    with pytest.raises(TypeError, match="expected a BlockReduceAlgorithm"):
        fx.coop.BlockReduce[fx.Float32, 64, fx.coop.BlockScanAlgorithm.WARP_SCANS]
    with pytest.raises(TypeError, match="two forms"):
        scan(1, ADD, storage=None)
    with pytest.raises(TypeError, match="specialize BlockReduce first"):
        fx.coop.BlockReduce(1, ADD, storage=None)


def test_op_must_be_a_reduction_op():
    from flydsl.extension.coop._common import combine, identity
    with pytest.raises(TypeError, match="fx.ReductionOp"):
        combine("sum", 1, 2)
    assert identity(MUL, fx.Int32) == 1
    assert identity(MAX, fx.Int8) == -128 and identity(MIN, fx.Uint8) == 255
    assert identity(MAX, fx.Float32) == float("-inf")


def test_a_new_block_algorithm_plugs_into_the_specialization():
    """BlockAlgorithmMeta (FlyDSL's extension point): the default policy comes from
    ``_default_algorithm_for(target)``, a named one bypasses it, the cache keys on it."""
    import enum

    from flydsl.compiler.backends import current_target
    from flydsl.extension.coop.block._spec import BlockAlgorithmMeta, storage_struct

    class Policy(enum.Enum):
        A = "a"
        B = "b"
        C = "c"

    seen = []

    def slots(dtype, threads, warp_threads):
        return storage_struct("S", slots=fx.Array[dtype, threads // warp_threads])

    class Meta(BlockAlgorithmMeta):
        _algorithms = Policy
        _shared_storage = {Policy.A: slots, Policy.B: slots}

        def _default_algorithm_for(cls, target):
            seen.append(target)
            return Policy.B

    class Algo(metaclass=Meta):
        block_threads = None

    default = Algo[fx.Float32, 128]
    assert default.algorithm is Policy.B and seen == [current_target()]
    assert Algo[fx.Float32, 128, Policy.A] is not default
    assert Algo[fx.Float32, 128, Policy.B] is default
    assert default.SharedStorage.__dsl_size_of__() == 4 * (128 // WARP)
    with pytest.raises(NotImplementedError, match="Policy.C is not implemented"):
        Algo[fx.Float32, 128, Policy.C]

    class Silent(metaclass=BlockAlgorithmMeta):
        block_threads = None
    Silent._algorithms = Policy
    with pytest.raises(NotImplementedError, match="_default_algorithm_for"):
        Silent[fx.Float32, 64]


@flydsl.kernel(known_block_size=[64, 1, 1])
def _shorthand_kernel(a: fx.Tensor, o: fx.Tensor):
    i = fx.thread_idx.x
    v = a[i]
    o[0, i] = fx.coop.warp_sum(v, width=8)
    o[1, i] = fx.coop.warp_max(v)
    o[2, i] = fx.coop.warp_min(v, width=4)
    o[3, i] = fx.coop.warp_broadcast(v, 2, width=4)
    o[4, i] = fx.coop.warp_broadcast(v, (i * 3) % 8, width=8)
    o[5, i] = fx.coop.warp_inclusive_sum(v, width=16)
    o[6, i] = fx.coop.warp_exclusive_sum(v, init=fx.Int32(7))


@flydsl.jit
def _shorthand_launch(a: fx.Tensor, o: fx.Tensor):
    _shorthand_kernel(a, o).launch(grid=(1, 1, 1), block=(64, 1, 1))


def test_warp_shorthands_and_broadcast():
    a = sample(np.int32, 64, seed=3) % 1000
    o = np.zeros((7, 64), np.int32)
    _shorthand_launch(a, o)
    lane = np.arange(64)
    check(o[0], np.repeat(a.reshape(-1, 8).sum(1), 8))
    check(o[1], np.repeat(a.reshape(-1, WARP).max(1), WARP))
    check(o[2], np.repeat(a.reshape(-1, 4).min(1), 4))
    check(o[3], a[(lane // 4) * 4 + 2])
    check(o[4], a[(lane // 8) * 8 + (lane * 3) % 8])
    check(o[5], cumsum(a.reshape(-1, 16)).ravel())
    g = a.reshape(-1, WARP)
    check(o[6], (cumsum(g) - g + 7).ravel())
    with pytest.raises(ValueError, match="inside the 4-lane group"):
        fx.coop.warp_broadcast(1, 4, width=4)


def _affine(a, b):
    """A function op without an ``identity`` attribute."""
    return a * 3 + b


def _compose(f, g):
    """Composition of affine maps x -> m*x + c packed as m << 32 | c (mod 2**32 each):
    associative and not commutative, so a fold out of lane order shows."""
    m1, c1 = f >> 32, f & 0xFFFFFFFF
    m2, c2 = g >> 32, g & 0xFFFFFFFF
    return (((m2 * m1) & 0xFFFFFFFF) << 32) | ((m2 * c1 + c2) & 0xFFFFFFFF)


_compose.identity = 1 << 32          # x -> x
_compose_host = _compose             # the same arithmetic on Python ints


@flydsl.kernel(known_block_size=[64, 1, 1])
def _callable_kernel(a: fx.Tensor, o: fx.Tensor):
    i = fx.thread_idx.x
    v = a[i]
    o[0, i] = fx.coop.warp_reduce(v, _compose, width=8)
    o[1, i] = fx.coop.warp_inclusive_scan(v, _compose)
    o[2, i] = fx.coop.warp_exclusive_scan(v, _compose, width=16)
    scan = fx.coop.BlockScan[fx.Int64, 64]
    storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
    o[3, i] = scan.inclusive(v, _compose, storage=storage)


@flydsl.jit
def _callable_launch(a: fx.Tensor, o: fx.Tensor):
    _callable_kernel(a, o).launch(grid=(1, 1, 1), block=(64, 1, 1))


def test_a_function_op_is_folded_in_lane_order():
    rng = np.random.default_rng(5)
    a = ((rng.integers(1, 1 << 31, 64) << 32) | rng.integers(0, 1 << 31, 64)).astype(np.int64)
    o = np.zeros((4, 64), np.int64)
    _callable_launch(a, o)
    o = [[int(x) & ((1 << 64) - 1) for x in row] for row in o]

    def scan(xs):
        out, acc = [], None
        for x in xs:
            acc = x if acc is None else _compose_host(acc, x)
            out.append(acc)
        return out

    vals = [int(x) for x in a]
    groups8 = [scan(vals[g:g + 8])[-1] for g in range(0, 64, 8)]
    assert [x for x in o[0]] == [t for t in groups8 for _ in range(8)]
    assert [x for x in o[1]] == scan(vals[:32]) + scan(vals[32:])
    exc16 = []
    for g in range(0, 64, 16):
        exc16 += [1 << 32] + scan(vals[g:g + 16])[:-1]
    assert [x for x in o[2]] == exc16
    assert [x for x in o[3]] == scan(vals)


def test_block_scan_with_a_function_needs_its_identity():
    with pytest.raises(TypeError, match="needs its identity"):
        fx.coop.BlockScan[fx.Int32, 64].inclusive(1, _affine, storage=None)
