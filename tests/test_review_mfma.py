"""Review of the CPU's raw MFMA calls (``fx.rocdl.mfma_*``) against the CDNA3/CDNA4 ISA.

Every MFMA name ``fx.rocdl`` exports runs on random, non-symmetric data into a nonzero
accumulator, checked against a numpy reference built from the ISA's lane layouts written
out here (not read from flydsl's tables): lane ``l`` holds row (column) ``l % MN`` of A
(B) and ``kpl`` consecutive K values from ``kpl * (l // MN)``; accumulator value ``i``
of lane ``l`` is column ``l % MN``, row ``4 * (l // 16) + i`` (16x16) or
``8 * (i // 4) + 4 * (l // 32) + i % 4`` (32x32). fp8/bf8 codes are decoded here from
the FNUZ formats (gfx942, the CPU's choice for the ambiguous ``*_fp8_fp8`` names), int8
products accumulate exactly into i32.

Plausible bugs these catch: a transposed or shifted lane layout, the bytes of a packed
fp8/i8 operand in the wrong order, the OCP decoding of fp8 codes, an accumulator
ignored, a nonzero cbsz/abid/blgp silently dropped, barrier elision letting a call read
operands another call or a loop trip wrote.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError
from flydsl.expr import T
from flydsl.expr.typing import Vector as Vec
from flydsl.expr.mma_layouts import SPECS

NAMES = sorted(n for n in fx.rocdl.__all__ if n.startswith("mfma_"))

#: values are the point: LLVM -O0 (conftest.llvm_o0), a shorter compile
pytestmark = pytest.mark.usefixtures("llvm_o0")


def _spec(name: str):
    """The first table entry of a raw name (the one the CPU runs)."""
    return next(s for s in SPECS.values() if s.family == "mfma"
                and s.extra["rocdl_op"][len("rocdl."):].replace(".", "_") == name)


def _shape(name: str):
    s = _spec(name)
    return s.m, s.k, s.ab_dtype, s.acc_dtype


# -- the ISA's lane layouts and element formats, written out independently ---------------

def _ab_coords(mn: int, k: int, lane: int, i: int):
    kpl = mn * k // 64
    return lane % mn, kpl * (lane // mn) + i


def _c_coords(mn: int, lane: int, i: int):
    if mn == 16:
        return 4 * (lane // 16) + i, lane % 16
    return 8 * (i // 4) + 4 * (lane // 32) + i % 4, lane % 32


def _fnuz(code: int, exp_bits: int, man_bits: int) -> float:
    """An FNUZ fp8 code's value (bias 2^(e-1), 0x80 NaN, no infinity, no -0)."""
    bias = 1 << (exp_bits - 1)
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> man_bits) & ((1 << exp_bits) - 1), code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)


def _random_elements(ab: str, rng, shape):
    """(values as float64/int64, their bit patterns as uint) of random elements."""
    if ab == "f32":
        v = rng.standard_normal(shape).astype(np.float32)
        return v.astype(np.float64), v.view(np.uint32)
    if ab == "f16":
        v = (rng.standard_normal(shape) * 3).astype(np.float16)
        return v.astype(np.float64), v.view(np.uint16)
    if ab == "bf16":
        bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16)
        bits = bits.astype(np.uint16)
        vals = (bits.astype(np.uint32) << 16).view(np.float32)
        return vals.astype(np.float64), bits
    if ab == "i8":
        v = rng.integers(-128, 128, shape).astype(np.int8)
        return v.astype(np.int64), v.view(np.uint8)
    if ab in ("e4m3fnuz", "e5m2fnuz"):
        codes = rng.integers(0, 256, shape).astype(np.uint8)
        codes[codes == 0x80] = 0x81               # NaN is not data
        eb, mb = (4, 3) if ab == "e4m3fnuz" else (5, 2)
        return np.vectorize(lambda c: _fnuz(int(c), eb, mb))(codes), codes
    if ab in ("e4m3fn", "e5m2"):                  # OCP (gfx950): IEEE-like biases
        codes = rng.integers(0, 256, shape).astype(np.uint8)
        eb, mb = (4, 3) if ab == "e4m3fn" else (5, 2)
        top = (codes & 0x7F) >> mb == (1 << eb) - 1
        nan = (codes & 0x7F) == 0x7F if ab == "e4m3fn" else top
        codes[nan] &= 0xF0                        # no NaN/inf codes as data
        return np.vectorize(lambda c: _ocp(int(c), eb, mb))(codes), codes
    raise AssertionError(ab)


def _ocp(code: int, exp_bits: int, man_bits: int) -> float:
    """An OCP fp8 code's value (bias 2^(e-1) - 1, subnormals, signed zero)."""
    bias = (1 << (exp_bits - 1)) - 1
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> man_bits) & ((1 << exp_bits) - 1), code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)


def _lane_words(name: str, bits: np.ndarray) -> np.ndarray:
    """An (MN, K) operand tile's bits as each lane's registers: (64, 4) uint32 words,
    value 0 in the lowest bits of the first word."""
    mn, k, _, _ = _shape(name)
    kpl = mn * k // 64
    out = np.zeros((64, 4), np.uint32)
    width = bits.dtype.itemsize * 8
    for lane in range(64):
        packed = 0
        for i in range(kpl):
            r, kk = _ab_coords(mn, k, lane, i)
            packed |= int(bits[r, kk]) << (width * i)
        for w in range(4):
            out[lane, w] = (packed >> (32 * w)) & 0xFFFFFFFF
    return out


def _case(name: str, seed: int, ab=None):
    """(words (2, 64, 4), c per lane (64, 16), expected d per lane (64, 16)); ``ab``: the
    element format (default the name's first table entry's)."""
    mn, k, ab_first, acc = _shape(name)
    ab = ab or ab_first
    rng = np.random.default_rng(seed)
    a, a_bits = _random_elements(ab, rng, (mn, k))
    b, b_bits = _random_elements(ab, rng, (mn, k))
    nc = mn * mn // 64
    integer = acc == "i32"
    if integer:
        c_tile = rng.integers(-2**30, 2**30, (mn, mn)).astype(np.int64)
        d_tile = a @ b.T + c_tile                 # |products| <= 32 * 2^14: no overflow
    else:
        c_tile = (rng.standard_normal((mn, mn)) * 4).astype(np.float32).astype(np.float64)
        d_tile = a @ b.T + c_tile
    scale = np.abs(a) @ np.abs(b).T + np.abs(c_tile)
    c_lane = np.zeros((64, 16), np.int64 if integer else np.float64)
    d_lane, s_lane = np.zeros_like(c_lane), np.zeros((64, 16))
    for lane in range(64):
        for i in range(nc):
            r, col = _c_coords(mn, lane, i)
            c_lane[lane, i], d_lane[lane, i] = c_tile[r, col], d_tile[r, col]
            s_lane[lane, i] = scale[r, col]
    words = np.stack([_lane_words(name, a_bits), _lane_words(name, b_bits)])
    return words, c_lane, d_lane, s_lane


# -- the kernel: every raw name, one call each, in one compile -----------------------------

def _operand(words: list, ab: str):
    vec = Vec.from_elements(words, fx.Int32)
    if ab == "f32":
        return words[0].bitcast(fx.Float32)
    if ab == "f16":
        return vec.bitcast(fx.Float16)
    if ab == "bf16":
        return vec.bitcast(fx.Int16)
    return vec                                     # 8 bytes: <2 x i32>, the i64's bits


@flydsl.kernel
def all_raw_mfmas(W: fx.Tensor, CF: fx.Tensor, CI: fx.Tensor, DF: fx.Tensor, DI: fx.Tensor,
                  names: fx.Constexpr):
    """For name ``j``: lane ``l``'s A/B registers are ``W[j, 0/1, l, :]``, its
    accumulators ``CF``/``CI[j, l, :]``; the result to ``DF``/``DI[j, l, :]``."""
    lane = fx.thread_idx.x % 64
    for j in fx.range_constexpr(len(names)):
        name = names[j]
        mn, k, ab, acc_t = _shape(name)
        words_per = max(1, mn * k // 64 * {"f32": 4, "f16": 2, "bf16": 2}.get(ab, 1) // 4)
        ops_ = [_operand([W[((j * 2 + o) * 64 + lane) * 4 + w]
                          for w in fx.range_constexpr(words_per)], ab) for o in (0, 1)]
        nc = mn * mn // 64
        integer = acc_t == "i32"
        src = CI if fx.const_expr(integer) else CF
        c = Vec.from_elements([src[(j * 64 + lane) * 16 + v] for v in fx.range_constexpr(nc)],
                              fx.Int32 if integer else fx.Float32)
        rtype = T.vec(nc, T.i32 if integer else T.f32)
        d = getattr(fx.rocdl, name)(rtype, [ops_[0], ops_[1], c, 0, 0, 0])
        dst = DI if fx.const_expr(integer) else DF
        if fx.thread_idx.x < 64:
            for v in fx.range_constexpr(nc):
                dst[(j * 64 + lane) * 16 + v] = Vec(d)[v]


def _run_names(names, formats=None):
    """Runs ``names`` once (one compile), returns (expected, got, scale) per name."""
    NAMES = names
    n = len(NAMES)
    W = np.zeros((n, 2, 64, 4), np.uint32)
    CF, CI = np.zeros((n, 64, 16), np.float32), np.zeros((n, 64, 16), np.int32)
    expect, scales = {}, {}
    for j, name in enumerate(NAMES):
        words, c, d, s = _case(name, 100 + j, (formats or {}).get(name))
        W[j] = words
        if _shape(name)[3] == "i32":
            CI[j] = c
        else:
            CF[j] = c
        expect[name], scales[name] = d, s
    DF, DI = np.full_like(CF, np.nan), np.full_like(CI, -7)
    all_raw_mfmas[1, 64](W.view(np.int32).ravel(), CF.ravel(), CI.ravel(), DF.reshape(-1),
                         DI.reshape(-1), tuple(NAMES))
    return {name: (expect[name], (DI if _shape(name)[3] == "i32" else DF)[j], scales[name])
            for j, name in enumerate(NAMES)}


@pytest.fixture(scope="module")
def all_names_run():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLYDSL_OPT_LEVEL", "0")      # conftest.llvm_o0, for a module fixture
        return _run_names(NAMES)


def _check(name: str, want, got, scale) -> None:
    mn = _shape(name)[0]
    nc = mn * mn // 64
    want, got, scale = want[:, :nc], got[:, :nc], scale[:, :nc]
    if _shape(name)[3] == "i32":
        np.testing.assert_array_equal(got.astype(np.int64), want)
    else:
        # f32 sums of exact products, in some order: within K rounding errors of the sum
        # of the magnitudes
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= 4e-6 * scale + 1e-30), (name, float(np.max(err / scale)))


@pytest.mark.parametrize("name", NAMES)
def test_a_raw_mfma_matches_the_isa_layout_reference(all_names_run, name):
    _check(name, *all_names_run[name])


def test_fp8_raw_mfmas_read_ocp_codes_when_the_arch_is_gfx950(monkeypatch):
    """FLYDSL_GPU_ARCH=gfx950 (get_rocm_arch(): FlyDSL kernels take their gfx950 path,
    OCP fp8): the ``*_fp8_fp8``/``*_bf8_bf8`` calls decode E4M3FN/E5M2, not gfx942's FNUZ
    codes (a factor of 2 to 4 per product, silently, before)."""
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx950")
    names = ("mfma_f32_16x16x32_fp8_fp8", "mfma_f32_32x32x16_bf8_bf8")
    got = _run_names(names, {names[0]: "e4m3fn", names[1]: "e5m2"})
    for name in names:
        _check(name, *got[name])


@flydsl.kernel
def one_mfma_with_flags(A: fx.Tensor, D: fx.Tensor, cbsz: fx.Constexpr[int],
                        abid: fx.Constexpr[int], blgp: fx.Constexpr[int]):
    a = A[fx.thread_idx.x]
    acc = Vec.filled(4, 0.0, fx.Float32)
    d = fx.rocdl.mfma_f32_16x16x4f32(T.vec(4, T.f32), [a, a, acc, cbsz, abid, blgp])
    D[fx.thread_idx.x] = Vec(d)[0]


@pytest.mark.parametrize("flags", [(1, 0, 0), (0, 2, 0), (0, 0, 3)])
def test_nonzero_cbsz_abid_blgp_are_located_errors(flags):
    """The broadcast controls change the result on the GPU: never silently dropped."""
    x = np.ones(64, np.float32)
    with pytest.raises(DSLError, match="cbsz = abid = blgp = 0") as caught:
        one_mfma_with_flags[1, 64](x, x.copy(), *flags)
    assert "test_review_mfma.py" in str(caught.value) and "one_mfma_with_flags" in \
        str(caught.value)


# -- barrier elision: state between calls ---------------------------------------------------

@flydsl.kernel
def elision_cases(A: fx.Tensor, B: fx.Tensor, D: fx.Tensor, n: fx.Int32, flag: fx.Int32):
    """16x16x16 f16 calls whose operands come from the previous call's result, from shared
    memory another lane wrote between the calls, from either branch of a runtime ``if``
    and from a runtime loop of two calls: results D1..D5 (``_elision_reference``), every
    wave of the 128-thread block the same."""
    t = fx.thread_idx.x
    lane = t % 64
    other = (lane + 16) % 64 + (t - lane)   # the next 16-lane group's K block
    mfma = fx.rocdl.mfma_f32_16x16x16f16
    rtype = T.vec(4, T.f32)
    a = Vec.from_elements([A[(lane % 16) * 16 + 4 * (lane // 16) + i]
                           for i in fx.range_constexpr(4)], fx.Float16)
    b = Vec.from_elements([B[(lane % 16) * 16 + 4 * (lane // 16) + i]
                           for i in fx.range_constexpr(4)], fx.Float16)
    d1 = mfma(rtype, [a, b, Vec.filled(4, 0.0, fx.Float32), 0, 0, 0])
    a2 = Vec(d1).to(fx.Float16)              # lane's D1 values: A2 = D1^T
    d2 = mfma(rtype, [a2, b, d1, 0, 0, 0])
    s = fx.shared_array((128 * 4,), fx.Float16)
    for i in fx.range_constexpr(4):
        s[t * 4 + i] = a2[i]
    fx.barrier()
    a3 = Vec.from_elements([s[other * 4 + i] for i in fx.range_constexpr(4)], fx.Float16)
    d3 = mfma(rtype, [a3, b, d2, 0, 0, 0])
    d4 = d3
    if flag != 0:
        d4 = mfma(rtype, [a, b, d3, 0, 0, 0])
    else:
        d4 = mfma(rtype, [a2, b, d3, 0, 0, 0])
    d5 = d4
    for _ in range(n):
        d5 = mfma(rtype, [a3, b, d5, 0, 0, 0])
        d5 = mfma(rtype, [a, b, d5, 0, 0, 0])
    for j, d in enumerate((d1, d2, d3, d4, d5)):
        for i in fx.range_constexpr(4):
            D[(j * 128 + t) * 4 + i] = Vec(d)[i]


def _elision_reference(A, B, n: int, flag: int) -> list:
    d1 = A @ B.T
    a2 = d1.T
    d2 = a2 @ B.T + d1
    a3 = np.concatenate([a2[:, 4:], a2[:, :4]], axis=1)
    d3 = a3 @ B.T + d2
    d4 = (A if flag else a2) @ B.T + d3
    d5 = d4 + n * (a3 @ B.T + A @ B.T)
    return [d1, d2, d3, d4, d5]


@pytest.mark.parametrize("n,flag", [(0, 1), (3, 0), (2, 1)])
def test_calls_sharing_barriers_read_what_was_written_between_them(n, flag):
    """Plausible bugs: a grouped call's operand stores moved before the barrier that
    orders another lane's shared-memory write (a3), a call in one branch joining the
    group of a call outside the ``if``, a loop's second call reading the first's scratch.
    Small integers: every value is exact, so any barrier missing shows as a wrong one."""
    rng = np.random.default_rng(n + 10 * flag)
    A = rng.integers(-2, 3, (16, 16)).astype(np.float16)
    B = rng.integers(-2, 3, (16, 16)).astype(np.float16)
    D = np.full(5 * 128 * 4, np.nan, np.float32)
    elision_cases[1, 128](A.ravel(), B.ravel(), D, n, flag)
    want = _elision_reference(A.astype(np.float64), B.astype(np.float64), n, flag)
    got = D.reshape(5, 128, 4)
    for j, w in enumerate(want):
        for t in range(128):
            lane = t % 64
            rows = [4 * (lane // 16) + i for i in range(4)]
            np.testing.assert_array_equal(got[j, t], w[rows, lane % 16], err_msg=f"D{j + 1}")


# -- perm_b32: every class of selector byte -------------------------------------------------

def _v_perm_b32(src0: int, src1: int, sel: int) -> int:
    """V_PERM_B32 (CDNA3 ISA): result byte i = BYTE_PERMUTE({src0, src1}, sel byte i):
    0-7 that byte of the pair (src1 the low word), 8/9/10/11 0xFF if the top bit of byte
    1/3/5/7 is set else 0, 12 0x00, 13-255 0xFF."""
    data = [((src0 << 32 | src1) >> 8 * j) & 0xFF for j in range(8)]
    out = 0
    for i in range(4):
        s = (sel >> 8 * i) & 0xFF
        byte = data[s] if s < 8 else 0xFF * (data[2 * (s - 8) + 1] >> 7) if s < 12 \
            else 0 if s == 12 else 0xFF
        out |= byte << 8 * i
    return out


def _selectors(count: int) -> tuple:
    """Random selectors whose bytes draw from every class (0-7, 8-11, 12, 13-255)."""
    rng = np.random.default_rng(44)
    classes = [lambda: int(rng.integers(0, 8)), lambda: int(rng.integers(8, 12)),
               lambda: 12, lambda: int(rng.integers(13, 256))]
    out = []
    for _ in range(count):
        out.append(sum(classes[int(rng.integers(0, 4 if rng.random() < .5 else 1))]() << 8 * i
                       for i in range(4)))
    return tuple(out)


PERM_SELECTORS = _selectors(24) + (0x07060302, 0x0C0D0B08, 0x0E0C0A09, 0x04030201)


@flydsl.kernel
def perms(a: fx.Tensor, b: fx.Tensor, sel: fx.Tensor, out: fx.Tensor, sels: fx.Constexpr):
    """Row k of out: perm_b32 with the constant sels[k]; row len(sels) + k: with the same
    selector read at run time (the general path)."""
    t = fx.thread_idx.x
    n = len(sels)
    for k in fx.range_constexpr(n):
        out[k * 32 + t] = fx.rocdl.perm_b32(a[t], b[t], sels[k])
        out[(n + k) * 32 + t] = fx.rocdl.perm_b32(a[t], b[t], sel[k])


def test_perm_b32_matches_the_isa_for_every_selector_class():
    """Plausible bugs: a sign byte taken from the wrong source byte, a constant run's
    shift masking a neighbour's byte in or out, 13+ read as an index."""
    rng = np.random.default_rng(7)
    a, b = (rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32) for _ in "ab")
    a[:4] = (0x80FF7F01, 0x00000000, 0xFFFFFFFF, 0x7F80807F)
    b[:4] = (0x7F8001FF, 0xFFFFFFFF, 0x00000000, 0x80807F7F)
    sel = np.array(PERM_SELECTORS, np.uint32)
    out = np.zeros(2 * len(sel) * 32, np.uint32)
    perms[1, 32](a.view(np.int32), b.view(np.int32), sel.view(np.int32), out.view(np.int32),
                 PERM_SELECTORS)
    want = [_v_perm_b32(int(x), int(y), s) for s in PERM_SELECTORS for x, y in zip(a, b)]
    got = out.reshape(2, -1)
    np.testing.assert_array_equal(got[0], np.array(want, np.uint32), err_msg="constant")
    np.testing.assert_array_equal(got[1], np.array(want, np.uint32), err_msg="run time")


@flydsl.kernel
def retraced_loop(A: fx.Tensor, D: fx.Tensor, S: fx.Tensor, n: fx.Int32):
    """A call, a runtime loop of two calls whose body is traced twice (``x`` starts as a
    Python int and becomes a float in it: the first trace is discarded with the barriers
    and blocks the calls remembered), a call: D = (2 + 2n) A A^T."""
    t = fx.thread_idx.x
    lane = t % 64
    mfma = fx.rocdl.mfma_f32_16x16x16f16
    rt = T.vec(4, T.f32)
    a = Vec.from_elements([A[(lane % 16) * 16 + 4 * (lane // 16) + i]
                           for i in fx.range_constexpr(4)], fx.Float16)
    d = mfma(rt, [a, a, Vec.filled(4, 0.0, fx.Float32), 0, 0, 0])
    x = 0
    for _ in range(n):
        d = mfma(rt, [a, a, d, 0, 0, 0])
        x = x + 0.5
        d = mfma(rt, [a, a, d, 0, 0, 0])
    d = mfma(rt, [a, a, d, 0, 0, 0])
    for i in fx.range_constexpr(4):
        D[t * 4 + i] = Vec(d)[i]
    S[t] = x


@pytest.mark.parametrize("n", [0, 3])
def test_calls_in_a_loop_traced_again_keep_their_barriers(n):
    """Plausible bug (e70d33d's abort, or worse): the retrace erasing a barrier of the
    live trace that the discarded one's state named."""
    A = np.random.default_rng(n).integers(-2, 3, (16, 16)).astype(np.float16)
    D, S = np.full(128 * 4, np.nan, np.float32), np.zeros(128, np.float32)
    retraced_loop[1, 128](A.ravel(), D, S, n)
    ref = (2 + 2 * n) * (A.astype(np.float64) @ A.astype(np.float64).T)
    got = D.reshape(128, 4)
    for t in range(128):
        rows = [4 * ((t % 64) // 16) + i for i in range(4)]
        np.testing.assert_array_equal(got[t], ref[rows, t % 16])
    assert (S == 0.5 * n).all()


@flydsl.kernel
def fp8_pack(x: fx.Tensor, out: fx.Tensor, arch: fx.Constexpr):
    """(``arch``: a specialization per arch: a process keeps a kernel compiled under
    another FLYDSL_GPU_ARCH in memory, whatever its trace read.)"""
    out[0] = fx.rocdl.cvt_pk_fp8_f32(fx.Int32, x[0], x[1], 0, False)


@pytest.mark.parametrize("arch,words", [(None, (0xC840, 0x4240)), ("gfx950", (0xC038, 0x3A38))])
def test_cvt_pk_fp8_f32_packs_the_codes_the_arch_converts_to(monkeypatch, arch, words):
    """1.0 and -2.0: FNUZ 0x40/0xC8 on gfx942 (the default), OCP E4M3 0x38/0xC0 on gfx950
    (its v_cvt_pk_fp8_f32 emits OCP codes): the codes its fp8 MFMAs then read. 1.0625 and
    1.1875, halfway between codes, round to the even one: 1.0 and 1.25."""
    if arch:
        monkeypatch.setenv("FLYDSL_GPU_ARCH", arch)
    for pair, word in zip(([1.0, -2.0], [1.0625, 1.1875]), words):
        out = np.zeros(1, np.int32)
        fp8_pack[1, 1](np.array(pair, np.float32), out, arch)
        assert int(out[0]) & 0xFFFFFFFF == word, (pair, hex(int(out[0])))
