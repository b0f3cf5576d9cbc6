"""The narrow-float conversions, densely: every bfloat16 value (so every tie of every
format with at most 7 mantissa bits) and its two float32 neighbours, and every float16
value converted directly, against torch's ``.to()`` for the FP8 types it has
and against the formats' definitions for the others (round to nearest, ties to the even
code; FP6/FP4 saturate and give +max for NaN; Float8E4M3 overflows to inf;
Float8E4M3B11FNUZ to its NaN 0x80, with no negative zero); every code of every format
decodes to its value. And what the GPU instructions give: sm_90's cvt.rn.satfinite
writes 0x7F for every NaN, so the sign of a negative NaN is put back as torch and the CPU
keep it (compiled only: no GPU here)."""
import numpy as np
import pytest
import torch

import flydsl
import flydsl.expr as fx

TORCH_FP8 = {"Float8E4M3FN": torch.float8_e4m3fn, "Float8E4M3FNUZ": torch.float8_e4m3fnuz,
             "Float8E5M2": torch.float8_e5m2, "Float8E5M2FNUZ": torch.float8_e5m2fnuz,
             "Float8E8M0FNU": torch.float8_e8m0fnu}
#: name: (exponent bits, mantissa bits, bias, specials, overflow)
DEFINED = {"Float6E2M3FN": (2, 3, 1, "none", "saturate"),
           "Float6E3M2FN": (3, 2, 3, "none", "saturate"),
           "Float4E2M1FN": (2, 1, 1, "none", "saturate"),
           "Float8E4M3": (4, 3, 7, "ieee", "inf"),
           "Float8E4M3B11FNUZ": (4, 3, 11, "fnuz", "nan")}
NAMES = sorted(TORCH_FP8) + sorted(DEFINED)


def _decode(code: int, e: int, m: int, bias: int, specials: str) -> float:
    bits = 1 + e + m
    neg, mag = code >> (e + m), code & ((1 << (e + m)) - 1)
    exp, man = mag >> m, mag & ((1 << m) - 1)
    if specials == "fnuz" and code == 1 << (bits - 1):
        return float("nan")
    if specials == "ieee" and exp == (1 << e) - 1:
        return float("nan") if man else (-1.0) ** neg * float("inf")
    v = man * 2.0 ** (1 - bias - m) if exp == 0 else (1 + man / 2 ** m) * 2.0 ** (exp - bias)
    return -v if neg else v


def _encode(x: np.ndarray, e: int, m: int, bias: int, specials: str, overflow: str):
    """The codes of float32 ``x`` in the format (the definition, vectorized)."""
    bits = 1 + e + m
    mags = np.array([c for c in range(1 << (e + m))
                     if np.isfinite(_decode(c, e, m, bias, specials))])
    vals = np.array([_decode(int(c), e, m, bias, specials) for c in mags])
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
        j = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
        lo, hi = vals[j - 1], vals[j]
        up = (a - lo > hi - a) | ((a - lo == hi - a) & (mags[j] % 2 == 0))
        code = np.where(up, mags[j], mags[j - 1])
        half = (vals[-1] - vals[-2]) / 2
        over = (a > vals[-1] + half) | ((a == vals[-1] + half) & (mags[-1] % 2 == 1))
    sign = np.where(np.signbit(x), 1 << (bits - 1), 0)
    if overflow == "saturate":
        out = np.where(a >= vals[-1], mags[-1], code) | sign
    elif overflow == "inf":
        out = np.where(over, mags[-1] + 1, code) | sign
    else:                                       # FNUZ: NaN on overflow, no -0
        out = np.where(over, 1 << (bits - 1), np.where(code == 0, 0, code | sign))
    nan = {"none": mags[-1], "fnuz": 1 << (bits - 1)}.get(specials)
    nan = nan if nan is not None else sign | ((1 << (bits - 1)) - 1)
    return np.where(np.isnan(x), nan, out).astype(np.uint8)


TYPES = [getattr(fx, name) for name in NAMES]
FP8_TYPES = [getattr(fx, name) for name in sorted(TORCH_FP8)]


def _as(dtype, t, first, n):
    """Elements ``first .. first + n - 1`` of the UInt8 tensor ``t`` as ``dtype`` codes."""
    p = fx.recast_iter(dtype, fx.get_iter(t))
    return fx.make_view(fx.add_offset(p, first), fx.make_layout(n, 1))


@flydsl.kernel
def _convert(x: fx.Tensor, h: fx.Tensor, c: fx.Tensor, codes: fx.Tensor, back: fx.Tensor,
             n: fx.Int32, m: fx.Int32):
    """Row k of codes: the n float32 x in TYPES[k], then (FP8 only) the m float16 h;
    back[k, j]: code c[j] = j of TYPES[k] decoded."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    row = n + m
    k = 0
    for dtype in TYPES:
        if i < n:
            _as(dtype, codes, k * row, n)[i] = fx.cast(x[i], dtype)
        if i < 256:
            back[k, i] = fx.Float32(_as(dtype, c, 0, 256)[i])
        k += 1
    k = 0
    for dtype in FP8_TYPES:
        if i < m:
            _as(dtype, codes, k * row + n, m)[i] = fx.cast(h[i], dtype)
        k += 1


def _inputs() -> np.ndarray:
    """Every bfloat16 value as float32, and its float32 neighbours above and below."""
    bf = np.arange(1 << 16, dtype=np.uint32) << 16
    return np.concatenate([bf, bf + 1, bf - 1]).view(np.float32)


@pytest.fixture(scope="module")
def converted():
    x = _inputs()
    n, m = x.size, 1 << 16
    h = torch.arange(m, dtype=torch.int32).to(torch.int16).view(torch.float16)
    codes = np.zeros((len(NAMES), n + m), np.uint8)
    back = np.zeros((len(NAMES), 256), np.float32)
    _convert[(n + 255) // 256, 256](x, h, np.arange(256, dtype=np.uint8), codes, back, n, m)
    return x, h, codes, back


def _bad(got: np.ndarray, want: np.ndarray, x) -> list:
    bad = np.flatnonzero(got != want)
    return [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:6]]


@pytest.mark.parametrize("name", sorted(TORCH_FP8))
def test_fp8_matches_torch(name, converted):
    x, h, codes, back = converted
    k, td, n, m = NAMES.index(name), TORCH_FP8[name], x.size, h.numel()
    row = codes[k]
    want = torch.from_numpy(x).to(td).view(torch.uint8).numpy()
    assert not _bad(row[:n], want, x), _bad(row[:n], want, x)
    want = h.to(td).view(torch.uint8).numpy()
    assert not _bad(row[n:], want, h.float().numpy()), _bad(row[n:], want, h.float().numpy())
    ref = torch.arange(256, dtype=torch.uint8).view(td).float().numpy()
    assert np.array_equal(back[k].view(np.int32)[~np.isnan(ref)],
                          ref.view(np.int32)[~np.isnan(ref)])
    assert np.array_equal(np.isnan(back[k]), np.isnan(ref))


@pytest.mark.parametrize("name", sorted(DEFINED))
def test_other_formats_match_their_definition(name, converted):
    x, _, codes, back = converted
    e, m, bias, specials, overflow = DEFINED[name]
    k, n = NAMES.index(name), x.size
    want = _encode(x, e, m, bias, specials, overflow)
    assert not _bad(codes[k][:n], want, x), _bad(codes[k][:n], want, x)
    ncodes = 1 << (1 + e + m)
    ref = np.array([_decode(c, e, m, bias, specials) for c in range(ncodes)], np.float32)
    got = back[k][:ncodes]
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    keep = ~np.isnan(ref)
    assert np.array_equal(got[keep].view(np.int32), ref[keep].view(np.int32))


@flydsl.kernel
def _to_e4m3(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    out[i] = fx.cast(x[i], fx.Float8E4M3FN)


def test_sm90_negative_nan_keeps_its_sign():
    """cvt.rn.satfinite.e4m3x2.f32 gives 0x7F for every NaN; the code ORs the sign bit
    back for a float32 above -inf's bits (a negative NaN): setp on 0xFF800000."""
    ptx = flydsl.compile(_to_e4m3, torch.zeros(32), torch.zeros(32, dtype=torch.float8_e4m3fn),
                         backend="cuda", arch="sm_90").asm["ptx"]
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "setp.gt.u32" in ptx and "-8388608" in ptx, ptx


def test_gfx942_cvt_pk_fp8_does_not_saturate():
    """v_cvt_pk_{fp8,bf8}_f32 saturate only with the clamp modifier or MODE.FP16_OVFL set
    (ROCm's hip_fp8 clamps with v_med3 before it for its saturating conversion); without
    either they give 0x80 for out-of-range values, as torch's FNUZ rules and the CPU."""
    asm = flydsl.compile(_to_fnuz_pair, torch.zeros(32),
                         torch.zeros(32, dtype=torch.float8_e4m3fnuz),
                         torch.zeros(32, dtype=torch.float8_e5m2fnuz),
                         backend="rocm", arch="gfx942").asm["amdgcn"]
    cvts = [line for line in asm.splitlines() if "v_cvt_pk_" in line]
    assert {c.split()[0] for c in cvts} == {"v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32"}, cvts
    assert not any("clamp" in c for c in cvts), cvts
    assert ".amdhsa_fp16_overflow 0" in asm


def test_gfx942_negative_values_rounding_to_zero_give_zero():
    """On MI300 hardware v_cvt_pk_fp8_f32 keeps the sign of a negative value that
    rounds to zero, giving 0x80, FNUZ's NaN (upstream FlyDSL's qk_norm_rope_quant clamps
    (-2**-8, 0) to +0 before it for that reason); torch and the CPU give 0. Each
    conversion's code is replaced by 0 where it is 0x80 for an input under 1 in
    magnitude (compiled only: no GPU here)."""
    import re
    asm = flydsl.compile(_to_fnuz_pair, torch.zeros(32),
                         torch.zeros(32, dtype=torch.float8_e4m3fnuz),
                         torch.zeros(32, dtype=torch.float8_e5m2fnuz),
                         backend="rocm", arch="gfx942").asm["amdgcn"]
    body = asm[asm.index("v_cvt_pk_"):asm.index("s_endpgm")]
    assert re.search(r"v_cmp_\w+_f32\w*\s+[^\n]*\|v\d+\|, 1\.0", body), body
    assert body.count("v_cndmask_b32") >= 2, body


@flydsl.kernel
def _to_fnuz_pair(x: fx.Tensor, a: fx.Tensor, b: fx.Tensor):
    i = fx.thread_idx.x
    a[i] = fx.cast(x[i], fx.Float8E4M3FNUZ)
    b[i] = fx.cast(x[i], fx.Float8E5M2FNUZ)


@flydsl.kernel
def _pk_fp8(x: fx.Tensor, out: fx.Tensor, arch: fx.Constexpr):
    """(``arch``: one specialization per FLYDSL_GPU_ARCH.)"""
    i = fx.thread_idx.x
    out[i] = fx.rocdl.cvt_pk_fp8_f32(fx.Int32, x[2 * i], x[2 * i + 1], 0, False)


PK_INPUTS = [448.0, 464.0, 464.5, 500.0, float("inf"), -float("inf"), -1e6, float("nan"),
             240.0, 247.0, 248.0, -0.0]


@pytest.mark.parametrize("arch,codes", [
    (None, [0x80] * 8 + [0x7F, 0x7F, 0x80, 0x00]),
    ("gfx950", [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFF, 0xFF, 0x7F, 0x77, 0x77, 0x78, 0x80])])
def test_rocdl_cvt_pk_fp8_f32_does_not_saturate(monkeypatch, arch, codes):
    """fx.rocdl.cvt_pk_fp8_f32 is the instruction, which (without clamp or FP16_OVFL)
    gives NaN past the largest value: gfx942's FNUZ 0x80 (as torch), gfx950's OCP E4M3 NaN
    with the sign (above 464, the tie to 448, and inf), where torch's float8_e4m3fn and
    fx.cast saturate to 448 (0x7E)."""
    if arch:
        monkeypatch.setenv("FLYDSL_GPU_ARCH", arch)
    out = np.zeros(len(PK_INPUTS) // 2, np.int32)
    _pk_fp8[1, out.size](np.array(PK_INPUTS, np.float32), out, arch)
    got = [(int(w) >> s) & 0xFF for w in out for s in (0, 8)]
    assert got == codes, ([hex(c) for c in got], [hex(c) for c in codes])


@flydsl.kernel
def _narrow_scalars(s: fx.Float8E4M3FN, t: fx.Float8E5M2FNUZ, u: fx.Float4E2M1FN,
                    w: fx.Float8E8M0FNU, out: fx.Tensor):
    out[0] = fx.Float32(s)
    out[1] = fx.Float32(t)
    out[2] = fx.Float32(u)
    out[3] = fx.Float32(w)


def test_scalar_arguments_of_narrow_types_are_their_codes():
    """A Python number passed for a narrow-float parameter arrives as that type's code
    (what fx.cast gives), on the cold and the warm launch; it was packed as bfloat16
    bits, whose low byte the kernel read (1.3 arrived as -0.21875)."""
    out = np.zeros(4, np.float32)
    for args in [(1.3, 1.3, 1.3, 3.0), (1000.0, 1e6, 7.0, 0.3), (-0.0, -1e-9, -2.5, 1e39),
                 (float("nan"), float("-inf"), float("nan"), 0.0)] * 2:
        _narrow_scalars[1, 1](*args, out)
        want = [float(torch.tensor([v]).to(td).float()) for v, td in
                zip([args[0], args[1], args[3]], [torch.float8_e4m3fn, torch.float8_e5m2fnuz,
                                                  torch.float8_e8m0fnu])]
        want.insert(2, fx.Float4E2M1FN.format.decode(fx.Float4E2M1FN.format.encode(args[2])))
        np.testing.assert_array_equal(out, np.array(want, np.float32), str(args))
