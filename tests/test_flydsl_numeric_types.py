"""FlyDSL's numeric types (flydsl.expr.numeric): classes with .width and __name__, the
narrow floats as storage and conversion types (exact against torch over every code and
random floats), Index, and the GPU instructions the FP8 conversions use."""
import pickle

import numpy as np
import pytest
import torch

import flydsl
import flydsl.expr as fx
from flydsl.expr import numeric

TORCH_FP8 = {
    "Float8E4M3FN": torch.float8_e4m3fn, "Float8E4M3FNUZ": torch.float8_e4m3fnuz,
    "Float8E5M2": torch.float8_e5m2, "Float8E5M2FNUZ": torch.float8_e5m2fnuz,
    "Float8E8M0FNU": torch.float8_e8m0fnu,
}


# -- the types --------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "Int4", "Int8", "Int16", "Int32", "Int64", "Int128", "Uint8", "Uint16", "Uint32",
    "Uint64", "Uint128", "Float16", "BFloat16", "Float32", "Float64", "Float8E5M2",
    "Float8E4M3FN", "Float8E4M3FNUZ", "Float8E4M3B11FNUZ", "Float8E4M3", "Float6E2M3FN",
    "Float6E3M2FN", "Float8E8M0FNU", "Float4E2M1FN", "Boolean", "Index"])
def test_types_are_classes_in_fx_and_numeric(name):
    t = getattr(fx, name)
    assert t is getattr(numeric, name)
    assert isinstance(t, type) and issubclass(t, numeric.Numeric)
    assert isinstance(t, fx.DType) and isinstance(t.width, int)
    assert pickle.loads(pickle.dumps(t)) is t


def test_type_attributes():
    assert fx.Float8E4M3FN.__name__ == "Float8E4M3FN" and fx.Float8E4M3FN.width == 8
    assert fx.Float4E2M1FN.width == 4 and fx.Float6E3M2FN.width == 6
    assert fx.Boolean.width == 1 and fx.Int4.width == 4 and fx.Uint128.width == 128
    assert fx.Uint8 is fx.UInt8 and fx.Uint32 is fx.UInt32
    assert issubclass(fx.Float8E5M2, numeric.Float) and issubclass(fx.Uint16, numeric.Integer)
    assert fx.Float8E4M3FN.storage_only and not fx.Float32.storage_only
    assert fx.Float8E4M3FN.format.max_value == 448.0
    assert fx.Float8E4M3FNUZ.format.max_value == 240.0
    assert fx.Float8E5M2.format.max_value == 57344.0
    assert fx.Float6E2M3FN.format.max_value == 7.5 and fx.Float6E3M2FN.format.max_value == 28
    assert fx.Float4E2M1FN.format.max_value == 6.0
    assert numeric.NumericMeta is fx.DType
    assert fx.Float32.zero == 0.0 and isinstance(fx.Float32.zero, float) and fx.Int8.zero == 0
    assert fx.Float32.log_width == 5 and fx.Float6E2M3FN.log_width == 3
    assert fx.dtypes.dtype_from_torch(torch.float8_e5m2fnuz) is fx.Float8E5M2FNUZ


# -- kernels ----------------------------------------------------------------------------

@flydsl.kernel
def _to_f32(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i] = fx.Float32(x[i])


def _make_encoder(dtype):
    @flydsl.kernel
    def encode(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        if i < n:
            out[i] = fx.cast(x[i], dtype)
    return encode


def _make_quantizer(dtype):
    """Float32 -> dtype -> Float32 (what the FP6/FP4 types are checked with)."""
    @flydsl.kernel
    def quantize(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        if i < n:
            out[i] = fx.Float32(dtype(x[i]))
    return quantize


def _launch(k, x, out):
    n = x.numel() if hasattr(x, "numel") else x.size
    k[(n + 255) // 256, 256](x, out, n)
    return out


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _probe_floats(td) -> torch.Tensor:
    """Every value of ``td``, the midpoints between neighbours (the ties), values just
    around them, specials, and random floats over a wide range."""
    vals = torch.arange(256, dtype=torch.uint8).view(td).float()
    vals = vals[~vals.isnan()].unique()
    mids = (vals[1:] + vals[:-1]) / 2
    around = torch.cat([mids, torch.nextafter(mids, torch.tensor(np.inf)),
                        torch.nextafter(mids, torch.tensor(-np.inf))])
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(4000, generator=g) * torch.exp2(torch.randint(-30, 30, (4000,), generator=g).float())
    special = torch.tensor([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e38, -1e38, 1e-45,
                            -1e-45, 2.0 ** -127, 1.5 * 2.0 ** -127, 2.0 ** -128, 3e38])
    x = torch.cat([vals, -vals, around, -around, rand, special]).float()
    return x


@pytest.mark.parametrize("name", sorted(TORCH_FP8))
def test_fp8_load_all_codes_exact(name):
    td = TORCH_FP8[name]
    x = torch.arange(256, dtype=torch.uint8).view(td)
    out = _launch(_to_f32, x, torch.zeros(256))
    ref = x.float()
    assert torch.equal(out.isnan(), ref.isnan())
    keep = ~ref.isnan()
    assert torch.equal(out[keep].view(torch.int32), ref[keep].view(torch.int32))


@pytest.mark.parametrize("name", sorted(TORCH_FP8))
def test_fp8_store_from_float32_matches_torch(name):
    td = TORCH_FP8[name]
    x = _probe_floats(td)
    out = _launch(_make_encoder(getattr(fx, name)), x, torch.zeros(x.numel(), dtype=td))
    ref = x.to(td)
    bad = (out.view(torch.uint8) != ref.view(torch.uint8)).nonzero().flatten()
    assert bad.numel() == 0, [(x[i].item(), out.view(torch.uint8)[i].item(),
                               ref.view(torch.uint8)[i].item()) for i in bad[:8]]


@pytest.mark.parametrize("src", [torch.float16, torch.bfloat16])
def test_fp8_from_half_types_matches_torch(src):
    x = _probe_floats(torch.float8_e4m3fn).clamp(-6e4, 6e4).to(src)
    for name in ("Float8E4M3FN", "Float8E5M2"):
        td = TORCH_FP8[name]
        out = _launch(_make_encoder(getattr(fx, name)), x, torch.zeros(x.numel(), dtype=td))
        assert _same_bits(out, x.float().to(td))


def test_fp8_to_fp8_and_to_half_types():
    x = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = _launch(_make_encoder(fx.Float8E5M2), x, torch.zeros(256, dtype=torch.float8_e5m2))
    assert _same_bits(out, x.float().to(torch.float8_e5m2))
    h = _launch(_make_encoder(fx.BFloat16), x, torch.zeros(256, dtype=torch.bfloat16))
    ref = x.float().to(torch.bfloat16)
    assert torch.equal(h.isnan(), ref.isnan()) and torch.equal(h[~ref.isnan()], ref[~ref.isnan()])


def _reference_quantize(x: np.ndarray, exp_bits: int, man_bits: int, bias: int) -> np.ndarray:
    """Round to the nearest value of a format without inf/NaN (the OCP MX FP6/FP4 and
    other saturating formats), ties to an even mantissa, saturating; NaN -> +max."""
    values = sorted({(1 + m / 2 ** man_bits) * 2.0 ** (e - bias) if e else m * 2.0 ** (1 - bias - man_bits)
                     for e in range(2 ** exp_bits) for m in range(2 ** man_bits)})
    values = np.array(values)
    out = np.empty_like(x)
    for k, v in enumerate(x):
        if np.isnan(v):
            out[k] = values[-1]
            continue
        a = min(abs(float(v)), values[-1])
        j = np.searchsorted(values, a)
        if j < len(values) and values[j] == a:
            q = values[j]
        else:
            lo, hi = values[j - 1], values[j]
            if a - lo != hi - a:
                q = lo if a - lo < hi - a else hi
            else:   # the even code: an even index in the sorted list
                q = lo if (j - 1) % 2 == 0 else hi
        out[k] = np.copysign(q, v)
    return out


@pytest.mark.parametrize("name,e,m,bias", [
    ("Float6E2M3FN", 2, 3, 1), ("Float6E3M2FN", 3, 2, 3), ("Float4E2M1FN", 2, 1, 1)])
def test_fp6_fp4_quantize(name, e, m, bias):
    g = np.random.default_rng(1)
    top = fx.dtypes._BY_NAME[name].format.max_value
    grid = np.linspace(-1.2 * top, 1.2 * top, 2001, dtype=np.float32)
    x = np.concatenate([grid, g.standard_normal(2000).astype(np.float32) * top / 3,
                        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)])
    out = np.zeros_like(x)
    _launch(_make_quantizer(getattr(fx, name)), x, out)
    ref = _reference_quantize(x, e, m, bias).astype(np.float32)
    assert np.array_equal(out.view(np.int32), ref.view(np.int32))


def test_fp8_e4m3_ieee_and_b11_quantize():
    # Float8E4M3 (IEEE-like: inf on overflow) and Float8E4M3B11FNUZ (bias 11, NaN 0x80)
    x = np.array([1.0, 1.0625, 1.125, 1.1875, 240.0, 247.9, 248.0, 1e6, -1e6, 2.0 ** -9,
                  2.0 ** -10, 30.0, 31.0, np.nan], np.float32)
    out = np.zeros_like(x)
    _launch(_make_quantizer(fx.Float8E4M3), x, out)
    assert out.tolist()[:10] == [1.0, 1.0, 1.125, 1.25, 240.0, 240.0, np.inf, np.inf, -np.inf,
                                 2.0 ** -9]
    assert out[10] == 0.0 and np.isnan(out[13])
    _launch(_make_quantizer(fx.Float8E4M3B11FNUZ), x, out)
    assert out[11] == 30.0 and np.isnan(out[12]) and np.isnan(out[4])
    assert out[9] == 2.0 ** -9 and out[10] == 2.0 ** -10


@flydsl.kernel
def _constants(out: fx.Tensor):
    out[0] = fx.Float8E4M3FN(1.3)
    out[1] = fx.Float8E4M3FN(-1000.0)
    out[2] = fx.Float8E4M3FN(0.001)
    out[3] = fx.Float8E4M3FN(3)


def test_fp8_constants():
    out = torch.zeros(4, dtype=torch.float8_e4m3fn)
    _constants[1, 1](out)
    ref = torch.tensor([1.3, -1000.0, 0.001, 3.0]).to(torch.float8_e4m3fn)
    assert _same_bits(out, ref)


@flydsl.kernel
def _index_round_trip(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    k = fx.Index(x[i])
    out[i] = fx.Int32(k) + 1


def test_index_casts():
    x = np.array([0, 5, -7, 123456], np.int32)
    out = np.zeros(4, np.int32)
    _index_round_trip[1, 4](x, out)
    assert out.tolist() == [1, 6, -6, 123457]


# -- GPU instructions (compile only) ----------------------------------------------------

@flydsl.kernel
def _encode_pair(x: fx.Tensor, a: fx.Tensor, b: fx.Tensor):
    i = fx.thread_idx.x
    a[i] = fx.cast(x[i], a.dtype)
    b[i] = fx.cast(x[i], b.dtype)


def test_sm90_uses_satfinite_cvt():
    x = torch.zeros(32)
    prog = flydsl.compile(_encode_pair, x, torch.zeros(32, dtype=torch.float8_e4m3fn),
                          torch.zeros(32, dtype=torch.float8_e4m3fn), backend="cuda", arch="sm_90")
    assert "cvt.rn.satfinite.e4m3x2.f32" in prog.asm["ptx"]


def test_gfx942_uses_pk_fp8_cvt():
    x = torch.zeros(32)
    prog = flydsl.compile(_encode_pair, x, torch.zeros(32, dtype=torch.float8_e4m3fnuz),
                          torch.zeros(32, dtype=torch.float8_e5m2fnuz), backend="rocm",
                          arch="gfx942")
    asm = prog.asm["amdgcn"]
    assert "v_cvt_pk_fp8_f32" in asm and "v_cvt_pk_bf8_f32" in asm
