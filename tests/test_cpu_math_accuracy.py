"""Accuracy of the CPU backend's f32 math (``flydsl.passes.math_approx``) over the whole
float range, against the float64 result (numpy; erf: math.erf) rounded to float32, and
proof that it vectorizes (no scalar libm call left in the assembly). The other math
functions, in every float type and on every backend: ``test_math_matrix.py``."""
import math
import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from conftest import host_has_cpu_feature
from ulps import ulp_error, worst

_erf = np.frompyfunc(math.erf, 1, 1)

#: fx function, float64 reference, max error in float32 ulps (the README's table).
FUNCTIONS = {
    "exp": (fx.exp, np.exp, 1),
    "exp2": (fx.exp2, np.exp2, 1),
    "log": (fx.log, np.log, 1),
    "log2": (fx.log2, np.log2, 1),
    "log10": (fx.log10, np.log10, 1),
    "sin": (fx.sin, np.sin, 1),
    "cos": (fx.cos, np.cos, 1),
    "tanh": (fx.tanh, np.tanh, 2),
    "erf": (fx.erf, lambda v: _erf(v).astype(np.float64), 1),
    # flydsl.passes._ieee_math's, in f64
    "expm1": (fx.expm1, np.expm1, 1),
    "log1p": (fx.log1p, np.log1p, 1),
}
NAMES = tuple(FUNCTIONS)


@flydsl.kernel
def all_math(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        for k in fx.range_constexpr(len(NAMES)):
            y[k, i] = FUNCTIONS[NAMES[k]][0](x[i])


@flydsl.kernel
def exp_sin_kernel(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = fx.exp(x[i]) * a + fx.sin(x[i])


@flydsl.jit
def exp_sin(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    exp_sin_kernel(x, y, a, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))


@flydsl.jit
def all_math_jit(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    all_math(x, y, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))


def run_all(x):
    """Every function of FUNCTIONS on ``x`` (numpy array or torch tensor): one row each."""
    y = np.empty((len(NAMES), x.shape[0]), x.dtype) if isinstance(x, np.ndarray) else \
        x.new_empty((len(NAMES), x.shape[0]))
    all_math[(x.shape[0] + 255) // 256, 256](x, y, x.shape[0])
    return y


def reference(name: str, x: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The float64 result rounded to ``dtype``."""
    with np.errstate(all="ignore"):
        return FUNCTIONS[name][1](x.astype(np.float64)).astype(dtype)


# -- float32: every binade, special values ----------------------------------------------

def _binade_sample(per_binade: int = 600) -> np.ndarray:
    """Random mantissas in every exponent (denormals included), both signs."""
    rng = np.random.default_rng(1234)
    exps = np.repeat(np.arange(255, dtype=np.uint32), per_binade)
    bits = (exps << 23) | rng.integers(0, 1 << 23, exps.size, dtype=np.uint32)
    pos = bits.view(np.float32)
    # and the ranges where the functions do not just saturate, densely
    dense = np.concatenate([rng.uniform(-104, 90, 100_000), rng.uniform(-10, 10, 50_000)])
    return np.concatenate([pos, -pos, dense.astype(np.float32)])


_F32 = np.finfo(np.float32)
_TINY = float(_F32.smallest_subnormal)
SPECIAL = np.array([
    0.0, -0.0, _TINY, -_TINY, 3 * _TINY, 1e-40, -1e-40, float(_F32.smallest_normal) * 0.9999,
    float(_F32.smallest_normal), -float(_F32.smallest_normal), float(_F32.max),
    -float(_F32.max), np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 10.0, 1e-7, -1e-7,
    # exp/exp2 overflow and underflow thresholds, and around them
    88.72283, 88.722839, 88.7228394, -87.33654, -87.336548, -103.27892, -103.278931,
    -103.972076, -103.97208, -104.0, -110.0, 89.0, 100.0, 128.0, 127.99999, -126.0,
    -149.0, -149.5, -150.0, -151.0, 129.0,
    # log near 1
    1.0000001, 0.99999994, 1.0000119, 0.9999881,
    # tanh / erf switch points and saturation
    0.625, 0.62499994, -0.625, 0.9999999, 1.0000001, 3.92, 4.0, 9.0, 9.02, 20.0, 44.0,
    # sin / cos: the float nearest a multiple of pi/2, small and huge
    1.5707964, 3.1415927, 4.712389, 6.2831855, 0.7853982, 0.78539807, 102940.15,
    8192.0, 8193.0, 16777216.0, 1e10, 1e20, 1e30, 2.0 ** 100, 3.4e38, 1.0633823e37,
], dtype=np.float32)


def _near_multiples_of_half_pi() -> np.ndarray:
    """Floats next to k pi/2 for k from 1 to 2^100 (small remainders, wrong with a
    reduction that is not exact for huge arguments)."""
    ks = [float(2 ** j + d) for j in range(1, 101, 3) for d in (-1, 0, 1)]
    near = np.array([k * (np.pi / 2) for k in ks], np.float32)
    return np.concatenate([near, np.nextafter(near, np.float32(np.inf)),
                           np.nextafter(near, np.float32(-np.inf))])


@pytest.fixture(scope="module")
def f32_results():
    x = np.concatenate([_binade_sample(), SPECIAL, _near_multiples_of_half_pi()])
    x = np.concatenate([x, -x])
    return x, run_all(x)


@pytest.mark.parametrize("name", NAMES)
def test_float32_accuracy(name, f32_results):
    x, y = f32_results
    got = y[NAMES.index(name)]
    want = reference(name, x)
    err = ulp_error(got, want)
    assert err.max() <= FUNCTIONS[name][2], worst(name, x, got, want, err)


@pytest.mark.parametrize("name", NAMES)
def test_float32_signed_zeros(name, f32_results):
    """A zero result has the reference's sign (sin(-0) = -0, exp(-inf) = +0...)."""
    x, y = f32_results
    got = y[NAMES.index(name)]
    want = reference(name, x)
    zero = (want == 0) & (got == 0)
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), name


def test_fast_math_leaves_the_expansions_exact(monkeypatch):
    """FLYDSL_FAST_MATH=1 (``fast`` on the kernel's float ops) must not reach the
    expansions: reassociation and no-inf would break them, even for finite inputs
    (exp(88.6) became NaN, log1p was millions of ulps wrong)."""
    monkeypatch.setenv("FLYDSL_FAST_MATH", "1")
    x = np.concatenate([_binade_sample(50), SPECIAL])
    x = np.concatenate([x, -x])
    y = run_all(x)
    for k, name in enumerate(NAMES):
        want = reference(name, x)
        err = ulp_error(y[k], want)
        assert err.max() <= FUNCTIONS[name][2], worst(name, x, y[k], want, err)


# -- float16 / bfloat16: computed in f32 and rounded once, all values -------------------

def test_float16_all_values():
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    y = run_all(x)
    for k, name in enumerate(NAMES):
        want = reference(name, x, np.float16)
        err = ulp_error(y[k], want)
        assert err.max() <= 1, worst(name, x, y[k], want, err)


def test_bfloat16_all_values():
    torch = pytest.importorskip("torch")
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16)
    y = run_all(x)
    x32 = x.float().numpy()   # exact

    def as_f32(t):
        return t.float().numpy()
    for k, name in enumerate(NAMES):
        exact = reference(name, x32, np.float64)
        want, got = as_f32(torch.from_numpy(exact).to(torch.bfloat16)), as_f32(y[k])
        err = ulp_error(got, want) / 2 ** 16   # bf16 is f32's top half
        # AVX512-BF16's f32 -> bf16 conversion (vcvtneps2bf16) flushes denormals to 0
        err[(np.abs(exact) < np.finfo(np.float32).smallest_normal) & (got == 0)] = 0
        assert err.max() <= 1, worst(name, x32, got, want, err)


# -- vectorized code, no libm -----------------------------------------------------------

_LIBM_F32 = r"\b(expf|exp2f|logf|log2f|log10f|sinf|cosf|tanhf|erff|expm1f|log1pf)\b"


def _has_avx() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and host_has_cpu_feature("avx")


def _assembly(prog) -> str:
    return prog.backend.assembly(prog.asm)


@pytest.mark.skipif(not _has_avx(), reason="packed ymm/zmm code needs an x86 host with AVX")
def test_exp_sin_kernel_is_vectorized():
    x = np.linspace(-5, 5, 1000, dtype=np.float32)
    y = np.empty_like(x)
    prog = flydsl.compile(exp_sin, x, y, 0.5, x.size)
    asm = _assembly(prog)
    assert re.search(r"\bvfmadd\w*ps\s.*%[yz]mm", asm), "no packed f32 fma in the assembly"
    assert not re.search(_LIBM_F32, asm), re.search(_LIBM_F32, asm)
    prog(x, y, 0.5, x.size)
    want = np.exp(x.astype(np.float64)) * 0.5 + np.sin(x.astype(np.float64))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_no_libm_calls_for_float32_only_for_float64():
    """f32 math is inline code; f64 keeps libm (LLVM's exp/sin intrinsics), but for
    erf, expm1 and log1p (and the others of math_approx.IEEE_OPS)."""
    x32 = np.ones(4, np.float32)
    llir32 = flydsl.compile(all_math_jit, x32, np.empty((len(NAMES), 4), np.float32), 4)
    assert not re.search(_LIBM_F32 + r"|@llvm\.(exp|exp2|log|log2|log10|sin|cos)\.f32",
                         llir32.asm["llir"])
    x64 = np.ones(4, np.float64)
    llir64 = flydsl.compile(all_math_jit, x64, np.empty((len(NAMES), 4)), 4).asm["llir"]
    assert "@llvm.exp.f64" in llir64 and "@llvm.sin.f64" in llir64
    assert not re.search(r"@(erf|expm1|log1p)\(", llir64)


def test_pass_rewrites_f32_scalars_and_vectors_only():
    """Vectors of f32 get the same code (splat constants); f64 ops are left to libm but
    for those of IEEE_OPS (erf)."""
    import mlir.ir as ir
    from mlir.passmanager import PassManager

    from flydsl.passes import math_approx
    ops = [name.removeprefix("math.") for name in math_approx.APPROXIMATIONS]
    lines = [f"%v{k} = math.{op} %a : vector<4xf32>\n%s{k} = math.{op} %b : f32\n"
             f"%d{k} = math.{op} %c : f64" for k, op in enumerate(ops)]
    last = len(ops) - 1
    src = ("func.func @f(%a: vector<4xf32>, %b: f32, %c: f64) -> (vector<4xf32>, f32, f64) {\n"
           + "\n".join(lines) + f"\nreturn %v{last}, %s{last}, %d{last} : "
           "vector<4xf32>, f32, f64\n}")
    with ir.Context():
        module = ir.Module.parse(src)
        math_approx.run(module)
        assert module.operation.verify()
        left = [m for m in re.findall(r"math\.(\w+) %\w+ : (\S+)", str(module)) if m[0] in ops]
        assert sorted(left) == sorted((op, "f64") for op in ops
                                      if ("math." + op, 64) not in math_approx.CPU_TABLE)
        assert ("erf", "f64") not in left
        PassManager.parse("builtin.module(convert-math-to-llvm,convert-math-to-libm,"
                          "convert-to-llvm,reconcile-unrealized-casts)").run(module.operation)


# -- sin, cos, tan: out of line, vector versions with a short reduction ----------------

@flydsl.kernel
def trig(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[0, i] = fx.sin(x[i])
        y[1, i] = fx.cos(x[i])
        y[2, i] = fx.tan(x[i])


@flydsl.jit
def trig_jit(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    trig(x, y, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))


def _trig_inputs() -> np.ndarray:
    """Values of every size below the short reduction's 2^20, and the float32 values
    nearest to multiples of pi/2 (the remainders that lose the most)."""
    rng = np.random.default_rng(3)
    wide = rng.standard_normal(768) * 10.0 ** rng.integers(-8, 6, 768)
    k = rng.integers(1, 600_000, 256)
    return np.concatenate([wide, k * (np.pi / 2)]).astype(np.float32)


def test_trig_gives_a_value_the_same_result_beside_any_other():
    """A vector of lanes all below 6432 takes sin/cos's f32 code; one of lanes all below
    2^20, the f64 short reduction; one lane of 1e30 sends its whole vector through
    Payne-Hanek; a tail runs the scalar function. A value must get bitwise the same
    result in each (and within 1 ulp of float64)."""
    vals = _trig_inputs()
    mixed = vals.copy()
    mixed[::8] = np.float32(1e30)   # in every vector of 8 or 16 lanes, however aligned
    small = np.flatnonzero(np.abs(vals) < 6432)
    assert 0 < small.size < vals.size
    x = np.concatenate([vals, mixed, vals[:7], vals[small]])
    y = np.empty((3, x.size), np.float32)
    trig_jit(x, y, x.size)
    n, keep = vals.size, np.arange(vals.size) % 8 != 0
    for row, ref in zip(y, (np.sin, np.cos, np.tan)):
        pure, beside = row[:n], row[n:2 * n]
        np.testing.assert_array_equal(pure[keep], beside[keep])
        np.testing.assert_array_equal(pure[:7], row[2 * n:2 * n + 7])
        np.testing.assert_array_equal(pure[small], row[2 * n + 7:])
        assert ulp_error(pure, ref(vals.astype(np.float64)).astype(np.float32)).max() <= 1


def test_sin_cos_dense_every_64th_float_below_6432():
    """sin and cos's f32 code (|x| < 6432): every 64th float32 from 2^-4 to 6432 and
    its negative, within 1 ulp, and the worst error (against float64) below 0.75 ulp.
    An exhaustive run over every float32 in [0, 6432] gives at most 0.73
    (docs/cpu-performance.md)."""
    lo, hi = (int(np.float32(v).view(np.int32)) for v in (2.0 ** -4, 6432.0))
    x = np.arange(lo, hi, 64, dtype=np.int32).view(np.float32)
    x = np.concatenate([x, -x])
    y = np.empty((3, x.size), np.float32)
    trig_jit(x, y, x.size)
    x64 = x.astype(np.float64)
    for row, ref in ((y[0], np.sin(x64)), (y[1], np.cos(x64))):
        assert ulp_error(row, ref.astype(np.float32)).max() <= 1
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        assert (np.abs(row - ref) / ulp).max() < 0.75


@pytest.mark.skipif(not _has_avx(), reason="packed ymm/zmm code needs an x86 host with AVX")
def test_trig_loops_call_the_vector_versions():
    """The vectorized thread loop calls sin/cos/tan's vector versions (LLVM's
    vector-function ABI), which branch once per vector to the short reduction."""
    x = _trig_inputs()
    y = np.empty((3, x.size), np.float32)
    asm = _assembly(flydsl.compile(trig_jit, x, y, x.size))
    for name in ("sinf", "cosf", "tanf"):
        assert re.search(rf"call\w*\s+_flydsl_math_{name}_v(8|16)\b", asm), name


# -- erf: dense around its two pieces, and cheap enough to fuse ----------------------------

def test_erf_dense_every_16th_float_from_half_to_six():
    """Every 16th float32 in [0.5, 6] and its negative, where erf switches from x T(x^2)
    to 1 - e^log(erfc|x|) (at 1) and saturates (3.83): within 1 ulp. An exhaustive run
    over every float32 in [2^-12, 6] gives 1 ulp too (docs/cpu-performance.md)."""
    lo, hi = (int(np.float32(v).view(np.uint32)) for v in (0.5, 6.0))
    x = np.arange(lo, hi + 1, 16, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, -x])
    y = np.empty_like(x)
    erf_jit(x, y, x.size)
    want = _erf(x.astype(np.float64)).astype(np.float64).astype(np.float32)
    err = ulp_error(y, want)
    assert err.max() <= 1, worst("erf", x, y, want, err)


@flydsl.kernel
def erf_kernel(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = fx.erf(x[i])


@flydsl.jit
def erf_jit(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    erf_kernel(x, y, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))


def test_erf_expansion_is_short_and_division_free():
    """f32 erf (torch's F.gelu) is a handful of fma chains: no division (it was 8/|x|,
    a slow vdivps per vector) and at most 36 arithmetic ops (was 61), so that a fused
    GELU costs little more than ATen's cheaper, less accurate F.gelu."""
    import mlir.ir as ir

    from flydsl.passes import math_approx
    src = ("func.func @f(%a: vector<8xf32>) -> vector<8xf32> {\n"
           "%r = math.erf %a : vector<8xf32>\nreturn %r : vector<8xf32>\n}")
    with ir.Context():
        module = ir.Module.parse(src)
        math_approx.run(module)
        assert module.operation.verify()
        body = str(module)
    assert "divf" not in body
    ops = re.findall(r"= (arith|math)\.(\w+)", body)
    arithmetic = [op for d, op in ops if op not in ("constant", "bitcast")]   # bitcasts are free
    assert len(arithmetic) <= 36, arithmetic
