"""FlyDSL's raw-MLIR and typed-arith layer: ``flydsl._mlir``, ``flydsl.expr.arith``,
``.math`` and ``.typing`` (``T``, ``Vector``, ``ReductionOp``), and the interop of
kernel values with raw ``ir.Value`` s. Cases modelled on upstream FlyDSL's
tests/unit/test_arith_ops.py and tests/language/test_arithmetic_types.py (in our own
words), run on the CPU against numpy, plus compile-only checks for sm_90 and gfx942."""
import subprocess
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError, DSLTypeError
from flydsl.expr import arith
from flydsl.expr import math as fmath
from flydsl.expr.typing import (Float32x4, ReductionOp, T, Vector, full, ones_like,
                                zeros_like)
from flydsl._mlir import ir
from flydsl._mlir.dialects import arith as raw_arith, vector as raw_vector

FAST = arith.FastMathFlags.fast
RNG = np.random.default_rng(31)


# -- importing -------------------------------------------------------------------------

def test_importing_flydsl_and_the_typing_module_loads_no_mlir():
    code = ("import sys, flydsl, flydsl.expr, flydsl.expr.typing, flydsl.expr.math;"
            "print(any(m == 'mlir' or m.startswith('mlir.') or m.startswith('flydsl._mlir')"
            " for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_fx_has_flydsls_typing_names_and_loads_arith_on_first_use():
    code = ("import sys, flydsl.expr as fx, flydsl.expr.typing as ty;"
            "ok = fx.Vector is ty.Vector and fx.Float32x4 is ty.Float32x4 and fx.T is ty.T;"
            "ok = ok and fx.ReductionOp.ADD and callable(fx.full) and callable(fx.math.exp2);"
            "before = 'mlir' in sys.modules;"
            "ok = ok and fx.FastMathFlags.fast == fx.arith.FastMathFlags.fast;"
            "print(ok, before, 'mlir' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]


def test_mlir_package_reexports_the_bindings():
    import mlir.ir
    from flydsl._mlir.dialects import gpu, llvm, math, memref, rocdl, scf  # noqa: F401
    from flydsl._mlir.extras import types
    assert ir.F32Type is mlir.ir.F32Type and ir.Context is mlir.ir.Context
    assert raw_arith.CmpFPredicate.OLT is arith.CmpFPredicate.OLT
    assert raw_vector.CombiningKind.ADD is not None and callable(types.f32)
    with ir.Context(), ir.Location.unknown():
        assert str(T.f32) == "f32" and str(T.i32) == "i32" and str(T.index) == "index"
        assert str(T.f32x4) == "vector<4xf32>" and str(T.vec(8, T.f16)) == "vector<8xf16>"
        assert str(T.bf16x8) == "vector<8xbf16>" and str(T.vec(2, fx.Int8)) == "vector<2xi8>"
        with pytest.raises(AttributeError, match="T has no type"):
            T.f33


def test_upstreams_own_dialects_import_and_say_they_are_not_there():
    from flydsl._mlir.dialects import fly, fly_rocdl
    for module in (fly, fly_rocdl):
        with pytest.raises(AttributeError, match="flydsl has no 'fly"):
            module.IntTupleType
    with pytest.raises(ImportError):
        from flydsl._mlir.dialects.fly import make_layout  # noqa: F401


def test_meta_decorators_for_upstream_helpers():
    from flydsl.expr.meta import dsl_loc_tracing, dsl_wrap_result, tracing_context, \
        tracing_option

    def helper(x):
        return x
    assert dsl_loc_tracing(helper) is helper
    assert dsl_wrap_result(helper)(3) == 3 and dsl_wrap_result(fx.Float32)(helper)(4) == 4
    with tracing_context(fast=True):
        with tracing_context(fast=None, other=1):
            assert tracing_option("fast", "d") is None and tracing_option("other") == 1
        assert tracing_option("fast") is True
    assert tracing_option("fast", "d") == "d"


# -- raw values and kernel values ------------------------------------------------------

@flydsl.kernel
def raw_interop(x: fx.Tensor, n: fx.Tensor, out: fx.Tensor, kinds: fx.Tensor):
    i = fx.thread_idx.x
    a = x[i]
    kinds[i, 0] = fx.Int32(isinstance(a, ir.Value))          # a kernel value is an ir.Value
    kinds[i, 1] = fx.Int32(str(a.type) == "f32")
    s = raw_arith.addf(a, a)                                # a raw builder takes it ...
    t = s * 2.0 + 1                                         # ... and gives a kernel value
    c = raw_arith.constant(T.f32, 0.5)                      # raw constant
    m = fx.max(c, t)                                        # fx functions take raw values
    k = raw_arith.addi(n[i], raw_arith.constant(T.i32, 3))  # i32 is Int32
    kinds[i, 2] = fx.Int32(k.dtype is fx.Int32)
    idx = arith.index_cast(T.index, fx.Int32(0))            # index values subscript
    out[i] = m + fx.Float32(k) + x[idx]


def test_raw_values_and_kernel_values_mix():
    x = RNG.standard_normal(16).astype(np.float32)
    n = np.arange(16, dtype=np.int32)
    out, kinds = np.zeros(16, np.float32), np.zeros((16, 3), np.int32)
    raw_interop[1, 16](x, n, out, kinds)
    assert (kinds == 1).all()
    np.testing.assert_allclose(out, np.maximum(0.5, 4 * x + 1) + n + 3 + x[0], rtol=1e-6)


@flydsl.kernel
def store_raw(out: fx.Tensor, threshold: fx.Int32):
    tid = fx.thread_idx.x
    val = fx.Float32(1.0)
    if tid < threshold:
        val = fx.Float32(2.0)
    out[tid] = val.ir_value()                                   # a raw value is stored
    fx.make_view(out, fx.make_layout(16, 1))[tid + 8] = raw_arith.addf(val.ir_value(), val)


def test_raw_values_are_stored_like_kernel_values():
    # FlyDSL's tests store v.ir_value() (it was "cannot store OpResult into tensor")
    out = np.zeros(16, np.float32)
    store_raw[1, 8](out, 3)
    np.testing.assert_array_equal(out, [2, 2, 2, 1, 1, 1, 1, 1, 4, 4, 4, 2, 2, 2, 2, 2])


# -- flydsl.expr.arith -----------------------------------------------------------------

@flydsl.kernel
def arith_helpers(x: fx.Tensor, y: fx.Tensor, f: fx.Tensor, i: fx.Tensor):
    t = fx.thread_idx.x
    a, b = x[t], y[t]
    f[t, 0] = arith.select(a > b, a, 0.25)
    f[t, 1] = arith.max(a, b, 0.0)
    f[t, 2] = arith.min(a, b, -0.5)
    f[t, 3] = arith.maxnumf(a, arith.constant(float("nan")))   # the non-NaN operand
    f[t, 4] = a.addf(b, fastmath=FAST) + arith.constant(2, type=T.f32)
    f[t, 5] = fx.Float32(arith.cmpf(arith.CmpFPredicate.OLT, a, 0.0))
    n = fx.Int32(t) - 5
    i[t, 0] = arith.ceildiv(n, 4)
    i[t, 1] = fx.Int32(arith.cmpi(arith.CmpIPredicate.slt, n, 0))
    i[t, 2] = arith.shrui(n, 28)
    i[t, 3] = arith.andi(n, 6) + arith.xori(n, 1) + arith.shli(n, 2)
    i[t, 4] = fx.Int32(arith.constant(7, type=T.i64)) + arith.unwrap(1, type=T.i32)
    i[t, 5] = (n > 0).select(n, 0)


def test_arith_helpers_match_numpy():
    x = RNG.standard_normal(16).astype(np.float32)
    y = RNG.standard_normal(16).astype(np.float32)
    f, i = np.zeros((16, 6), np.float32), np.zeros((16, 6), np.int32)
    arith_helpers[1, 16](x, y, f, i)
    np.testing.assert_array_equal(f[:, 0], np.where(x > y, x, np.float32(0.25)))
    np.testing.assert_array_equal(f[:, 1], np.maximum(np.maximum(x, y), 0))
    np.testing.assert_array_equal(f[:, 2], np.minimum(np.minimum(x, y), -0.5))
    np.testing.assert_array_equal(f[:, 3], x)
    np.testing.assert_allclose(f[:, 4], x + y + 2, rtol=1e-6)
    np.testing.assert_array_equal(f[:, 5], (x < 0).astype(np.float32))
    n = np.arange(16, dtype=np.int32) - 5
    np.testing.assert_array_equal(i[:, 0], -(-n // 4))
    np.testing.assert_array_equal(i[:, 1], (n < 0).astype(np.int32))
    np.testing.assert_array_equal(i[:, 2], (n.view(np.uint32) >> 28).view(np.int32))
    np.testing.assert_array_equal(i[:, 3], (n & 6) + (n ^ 1) + (n << 2))
    np.testing.assert_array_equal(i[:, 4], np.full(16, 8))
    np.testing.assert_array_equal(i[:, 5], np.maximum(n, 0))


# -- scalar value methods (upstream's ArithValue API) ---------------------------------

@flydsl.kernel
def value_methods(x: fx.Tensor, out: fx.Tensor, bits: fx.Tensor, ints: fx.Tensor):
    t = fx.thread_idx.x
    v = x[t]
    w = v
    for k in fx.range_constexpr(5):                 # a butterfly sum over 32 lanes
        w = w.addf(w.shuffle_xor(16 >> k, 32), fastmath=FAST)
    out[t, 0] = w
    out[t, 1] = (v * v + 1.0).rsqrt(fastmath=FAST)
    out[t, 2] = v.exp2(fastmath=FAST)
    out[t, 3] = v.to(fx.Float16).to(T.f32)
    out[t, 4] = (v < 0).select(-v, v)
    out[t, 5] = v.maximumf(0.0)
    bits[t] = v.bitcast(fx.UInt32) & 0x7FFFFFFF
    n = fx.Int32(t) - 16
    ints[t, 0] = n.trunci(T.i8).extsi(T.i32)                   # sign-extended low byte
    ints[t, 1] = n.trunci(T.i8).extui(T.i32)                   # zero-extended
    ints[t, 2] = v.truncf(T.bf16).extf(T.f32).bitcast(fx.Int32)
    ints[t, 3] = x[n.index_cast(T.index) + 16].bitcast(fx.Int32)


def test_scalar_value_methods():
    x = RNG.standard_normal(32).astype(np.float32)
    out, bits = np.zeros((32, 6), np.float32), np.zeros(32, np.uint32)
    ints = np.zeros((32, 4), np.int32)
    value_methods[1, 32](x, out, bits, ints)
    n = np.arange(32, dtype=np.int32) - 16
    np.testing.assert_array_equal(ints[:, 0], n.astype(np.int8).astype(np.int32))
    np.testing.assert_array_equal(ints[:, 1], n.astype(np.uint8).astype(np.int32))
    bf16 = ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) & 0xFFFF0000)
    np.testing.assert_array_equal(ints[:, 2], bf16.view(np.int32))
    np.testing.assert_array_equal(ints[:, 3], x.view(np.int32))
    np.testing.assert_allclose(out[:, 0], np.full(32, x.sum()), rtol=1e-5)
    np.testing.assert_allclose(out[:, 1], 1 / np.sqrt(x * x + 1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 2], np.exp2(x), rtol=1e-5)
    np.testing.assert_array_equal(out[:, 3], x.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(out[:, 4], np.abs(x))
    np.testing.assert_array_equal(out[:, 5], np.maximum(x, 0))
    np.testing.assert_array_equal(bits, np.abs(x).view(np.uint32))


# -- Vector ----------------------------------------------------------------------------

@flydsl.kernel
def vectors(x: fx.Tensor, out: fx.Tensor, red: fx.Tensor, flags: fx.Tensor):
    t = fx.thread_idx.x
    v = Vector([x[t, 0], x[t, 1], x[t, 2], x[t, 3]])
    flags[t, 0] = fx.Int32(isinstance(v, Vector) and isinstance(v, Float32x4))
    flags[t, 1] = fx.Int32(isinstance(x[t, 0], Vector))
    shifted = (v - v.reduce(ReductionOp.MAX)) * 1.4426950408889634
    e = fmath.exp2(shifted, fastmath=FAST)
    s = e.reduce(ReductionOp.ADD, fastmath=FAST)
    norm = e * (1.0 / s)
    mask = Vector.filled(4, 0x7FFFFFFF, fx.UInt32)
    absv = (v.bitcast(fx.UInt32) & mask).bitcast(fx.Float32)
    picked = (v > 0.0).select(v, zeros_like(v))
    half = v.to(fx.Float16).to(fx.Float32)
    for k in fx.range_constexpr(4):
        out[t, k, 0] = norm[k]
        out[t, k, 1] = absv[k]
        out[t, k, 2] = picked[k]
        out[t, k, 3] = half[k]
        out[t, k, 4] = (2.0 * v + ones_like(v) - full(4, 0.5, fx.Float32) / 2)[k]
    red[t, 0] = v.reduce(ReductionOp.MIN)
    red[t, 1] = v.reduce(ReductionOp.MUL)
    red[t, 2] = v.reduce(ReductionOp.ADD, 10.0)
    red[t, 3] = v[fx.Int32(t) % 4]                       # a dynamic lane
    iv = Vector.filled(4, fx.Int32(t), fx.Int32) * 3 - 7
    flags[t, 2] = (iv % 4).reduce(ReductionOp.ADD)
    flags[t, 3] = (iv // 4).reduce(ReductionOp.MAX) + (iv >> 1).reduce(ReductionOp.MIN)


def test_vectors_compute_like_numpy():
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    out, red = np.zeros((8, 4, 5), np.float32), np.zeros((8, 4), np.float32)
    flags = np.zeros((8, 4), np.int32)
    vectors[1, 8](x, out, red, flags)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out[:, :, 0], e / e.sum(axis=1, keepdims=True), rtol=2e-5)
    np.testing.assert_array_equal(out[:, :, 1], np.abs(x))
    np.testing.assert_array_equal(out[:, :, 2], np.where(x > 0, x, 0))
    np.testing.assert_array_equal(out[:, :, 3], x.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(out[:, :, 4], 2 * x + 1 - 0.25, rtol=1e-6)
    np.testing.assert_array_equal(red[:, 0], x.min(axis=1))
    np.testing.assert_allclose(red[:, 1], x.prod(axis=1), rtol=1e-5)
    np.testing.assert_allclose(red[:, 2], x.sum(axis=1) + 10, rtol=1e-5)
    np.testing.assert_array_equal(red[:, 3], x[np.arange(8), np.arange(8) % 4])
    assert (flags[:, 0] == 1).all() and (flags[:, 1] == 0).all()
    iv = np.arange(8) * 3 - 7
    np.testing.assert_array_equal(flags[:, 2], 4 * (iv % 4))
    np.testing.assert_array_equal(flags[:, 3], iv // 4 + (iv >> 1))


@flydsl.kernel
def vector_lane_mismatch(out: fx.Tensor):
    a = Vector.filled(4, 1.0, fx.Float32)
    b = Vector.filled(8, 1.0, fx.Float32)
    out[0] = (a + b)[0]


@flydsl.kernel
def vector_bad_bitcast(out: fx.Tensor):
    a = Vector.filled(3, 1, fx.Int8)
    out[0] = a.bitcast(fx.Int32)[0]


@flydsl.kernel
def math_cbrt(out: fx.Tensor):
    out[0] = fmath.cbrt(out[0])


@pytest.mark.parametrize("kernel,message", [
    (vector_lane_mismatch, "vectors of 8 and 4 lanes|4 and 8 lanes"),
    (vector_bad_bitcast, "cannot bitcast 3 x Int8"),
    (math_cbrt, "math.cbrt is not supported"),
])
def test_vector_and_math_errors_are_located(kernel, message):
    with pytest.raises(DSLError, match=message) as info:
        kernel[1, 1](np.zeros(4, np.float32))
    assert "test_flydsl_arith_typing.py" in str(info.value)


@flydsl.kernel
def fx_math_forms(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    v = Vector.filled(2, x[t], fx.Float32)
    out[t, 0] = fx.rsqrt(x[t] * x[t] + 1.0, fastmath=FAST)
    out[t, 1] = fx.fma(x[t], 2.0, 0.5, fastmath=FAST)
    out[t, 2] = fx.exp(v)[1] + fx.absf(-v)[0]
    out[t, 3] = fx.maxnumf(x[t], 0.0) + fx.clampf(x[t], -0.5, 0.5)


def test_fx_math_takes_fastmath_and_vectors():
    x = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros((8, 4), np.float32)
    fx_math_forms[1, 8](x, out)
    np.testing.assert_allclose(out[:, 0], 1 / np.sqrt(x * x + 1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 1], x * 2 + 0.5, rtol=1e-6)
    np.testing.assert_allclose(out[:, 2], np.exp(x) + np.abs(x), rtol=1e-5)
    np.testing.assert_allclose(out[:, 3], np.maximum(x, 0) + np.clip(x, -0.5, 0.5), rtol=1e-6)


@flydsl.kernel
def more_math_forms(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    v = full(4, x[t], fx.Float32)
    out[t, 0] = fx.log2(x[t] * x[t] + 1.0, fastmath=FAST)     # FlyDSL's softmax/norm form
    out[t, 1] = fx.exp2(v, fastmath=FAST).reduce(ReductionOp.ADD)
    out[t, 2] = fx.log1p(fx.absf(x[t]), fastmath=FAST)


def test_the_rest_of_fx_math_takes_fastmath_and_vectors_too():
    x = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros((8, 3), np.float32)
    more_math_forms[1, 8](x, out)
    np.testing.assert_allclose(out[:, 0], np.log2(x * x + 1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 1], 4 * np.exp2(x), rtol=1e-5)
    np.testing.assert_allclose(out[:, 2], np.log1p(np.abs(x)), rtol=1e-5)


# -- functions defined inside a kernel (FlyDSL's kernels define their helpers so) ---------

@flydsl.kernel
def nested_helpers(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    scale = 3.0

    def wave_sum(v, width=32):
        w = v
        for k in fx.range_constexpr(5):
            if width > (1 << k):                       # a compile-time default
                w = w.addf(w.shuffle_xor(1 << k, 32), fastmath=FAST)
        return w

    def scaled(v, *, by):
        local = v * scale                             # reads the kernel's variable
        return local * by

    out[t, 0] = wave_sum(x[t])
    out[t, 1] = scaled(x[t], by=2.0)
    out[t, 2] = wave_sum(x[t], width=2)


def test_functions_defined_inside_a_kernel_are_traced_in_place():
    x = RNG.standard_normal(32).astype(np.float32)
    out = np.zeros((32, 3), np.float32)
    nested_helpers[1, 32](x, out)
    np.testing.assert_allclose(out[:, 0], np.full(32, x.sum()), rtol=1e-5)
    np.testing.assert_allclose(out[:, 1], 6 * x, rtol=1e-6)
    np.testing.assert_allclose(out[:, 2], x + x[np.arange(32) ^ 1], rtol=1e-6)


@flydsl.kernel
def nested_decorated(out: fx.Tensor):
    @staticmethod
    def helper(v):
        return v
    out[0] = helper(1.0)


def test_a_decorated_function_inside_a_kernel_is_a_located_error():
    with pytest.raises(DSLError, match="decorated functions cannot be defined inside a "
                                       "kernel") as info:
        nested_decorated[1, 1](np.zeros(1, np.float32))
    assert "test_flydsl_arith_typing.py" in str(info.value)


# -- an upstream-style softmax row (the norm kernels' arith/typing layer) ------------

def block_reduce(val, mode, red, lane, wave, block, warp):
    """A block-wide max or sum: a butterfly in each warp, then over the warps' totals."""
    w = val
    for sh in fx.range_constexpr(5):
        peer = w.shuffle_xor(warp >> (sh + 1), warp)
        w = fx.max(w, peer) if mode == "max" else w.addf(peer, fastmath=FAST)
    if lane == 0:
        red[wave] = w
    fx.barrier()
    total = red[0]
    for k in fx.range_constexpr(1, block // warp):
        total = fx.max(total, red[k]) if mode == "max" else total + red[k]
    fx.barrier()
    return total


def build_softmax(n_cols: int, block: int = 64, warp: int = 32):
    vec = 4
    tiles = n_cols // (block * vec)

    @flydsl.kernel
    def softmax_rows(a: fx.Tensor, c: fx.Tensor):
        row, tid = fx.block_idx.x, fx.thread_idx.x
        red = fx.shared_array(block // warp, fx.Float32)
        lane, wave = tid % warp, tid // warp
        rows = []
        m = fx.Float32(float("-inf"))
        for k in fx.range_constexpr(tiles):
            base = (tid + k * block) * vec
            v = Vector([a[row, base + j] for j in range(vec)])
            rows.append(v)
            m = fx.max(m, v.reduce(ReductionOp.MAX))
        gmax = block_reduce(m, "max", red, lane, wave, block, warp)
        s = fx.Float32(0.0)
        for k in fx.range_constexpr(tiles):
            e = fmath.exp2((rows[k] - gmax) * 1.4426950408889634, fastmath=FAST)
            rows[k] = e
            s = s + e.reduce(ReductionOp.ADD, fastmath=FAST)
        inv = 1.0 / block_reduce(s, "sum", red, lane, wave, block, warp)
        for k in fx.range_constexpr(tiles):
            base = (tid + k * block) * vec
            out = (rows[k] * inv).to(fx.Float16)
            for j in fx.range_constexpr(vec):
                c[row, base + j] = out[j]

    return softmax_rows


def test_upstream_style_softmax_runs_on_the_cpu():
    a = (RNG.standard_normal((3, 512)) * 4).astype(np.float32)
    c = np.zeros((3, 512), np.float16)
    build_softmax(512)[3, 64](a, c)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(c.astype(np.float32), e / e.sum(axis=1, keepdims=True),
                               rtol=2e-3, atol=1e-6)


@pytest.mark.parametrize("backend,arch,stage,needles", [
    ("cuda", "sm_90", "ptx", ("shfl.sync.bfly", "ex2.approx", "cvt.rn.f16x2.f32")),
    ("rocm", "gfx942", "amdgcn", ("v_exp_f32", "v_cvt_f16_f32")),
])
def test_vector_kernels_compile_for_gpus(backend, arch, stage, needles):
    a, c = np.zeros((3, 512), np.float32), np.zeros((3, 512), np.float16)
    asm = flydsl.compile(build_softmax(512), a, c, backend=backend, arch=arch).asm
    text = asm[stage]
    for needle in needles:
        assert needle in text, needle


# -- `with` over trace-time context managers (FlyDSL's softmax_bwd: `with fx.fastmath(...)`)

_ENTERED = []


class _Recorder:
    def __enter__(self):
        _ENTERED.append("enter")
        return 3.0

    def __exit__(self, *exc):
        _ENTERED.append("exit")
        return False


@flydsl.kernel
def with_blocks(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    with fx.fastmath(FAST):
        out[t, 0] = x[t] * 2.0
    with _Recorder() as k, fx.fastmath(FAST):
        if x[t] > 0.0:                           # runtime control flow inside the block
            out[t, 1] = x[t] * k
        else:
            out[t, 1] = -1.0


def test_with_blocks_run_their_trace_time_context_managers():
    _ENTERED.clear()
    x = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    out = np.zeros((4, 2), np.float32)
    with_blocks[1, 4](x, out)
    np.testing.assert_array_equal(out[:, 0], x * 2)
    np.testing.assert_array_equal(out[:, 1], np.where(x > 0, x * 3, -1))
    assert _ENTERED == ["enter", "exit"]          # once, while tracing


def test_with_needs_a_context_manager_and_no_return():
    @flydsl.kernel
    def not_a_manager(x: fx.Tensor):
        with x[0]:
            x[0] = 1.0

    @flydsl.kernel
    def returns_inside(x: fx.Tensor):
        with fx.fastmath(FAST):
            return

    with pytest.raises(DSLTypeError, match="needs a context manager"):
        not_a_manager[1, 1](np.zeros(1, np.float32))
    with pytest.raises(DSLError, match="inside a `with` block"):
        returns_inside[1, 1](np.zeros(1, np.float32))


# -- imports inside a kernel body (FlyDSL's attention kernels import their helpers there) --

@flydsl.kernel
def imports_inside(x: fx.Tensor, out: fx.Tensor):
    import math
    import os.path
    from flydsl.expr import math as fmath2
    from flydsl.expr.typing import ReductionOp as Red
    t = fx.thread_idx.x
    v = full(4, x[t], fx.Float32)
    out[t, 0] = fmath2.exp2(x[t]) * math.pi
    out[t, 1] = v.reduce(Red.ADD) + len(os.path.basename("/a/bc"))


def test_imports_inside_a_kernel_run_while_tracing_and_are_dependencies():
    from flydsl.compiler.dependencies import step_value
    import flydsl.expr.math as expected
    x = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    out = np.zeros((4, 2), np.float32)
    imports_inside[1, 4](x, out)
    np.testing.assert_allclose(out[:, 0], np.exp2(x) * np.pi, rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], 4 * x + 2, rtol=1e-6)
    # the path a later process resolves to find the module again
    assert step_value(None, ("M", "flydsl.expr.math")) is expected

    @flydsl.kernel
    def bad_import(x: fx.Tensor):
        from no_such_package_here import thing  # noqa: F401
        x[0] = 1.0

    with pytest.raises(DSLError, match="no_such_package_here"):
        bad_import[1, 1](np.zeros(1, np.float32))


@flydsl.kernel
def vector_shuffles(x: fx.Tensor, out: fx.Tensor):
    lanes = Vector.from_elements([x[k] for k in fx.range_constexpr(8)], fx.Float32)
    lo = lanes.shuffle(lanes, [0, 1, 2, 3])         # FlyDSL's rmsnorm quant halves
    hi = lanes.shuffle(lanes, [4, 5, 6, 7])
    mix = lo.shuffle(hi, [0, 4, 1, 5])
    for k in fx.range_constexpr(4):
        out[k] = lo[k]
        out[4 + k] = hi[k]
        out[8 + k] = mix[k]


def test_vector_shuffle_picks_lanes_of_the_concatenation():
    x = np.arange(10, 18, dtype=np.float32)
    out = np.zeros(12, np.float32)
    vector_shuffles[1, 1](x, out)
    np.testing.assert_array_equal(out, [10, 11, 12, 13, 14, 15, 16, 17, 10, 14, 11, 15])


def test_typing_reexports_the_numeric_types_and_layout_names():
    from flydsl.expr.typing import BFloat16, Float4E2M1FN, Int32, Pointer
    assert (Int32, BFloat16, Float4E2M1FN, Pointer) == (fx.Int32, fx.BFloat16,
                                                        fx.Float4E2M1FN, fx.Pointer)
    with pytest.raises(ImportError):
        from flydsl.expr.typing import NoSuchName  # noqa: F401


@flydsl.kernel
def scalar_flag_picks_a_vector(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    lo = Vector([x[t, 0], x[t, 1]])
    hi = Vector([x[t, 2], x[t, 3]])
    first_half = t < 4                      # one Bool per thread: FlyDSL's rope kernel
    picked = first_half.select(lo, hi)
    mixed = fx.select(first_half, 0.5, hi)  # a scalar side is broadcast to the lanes
    for k in fx.range_constexpr(2):
        out[t, k] = picked[k]
        out[t, 2 + k] = mixed[k]


def test_a_scalar_condition_selects_between_whole_vectors():
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    out = np.zeros((8, 4), np.float32)
    scalar_flag_picks_a_vector[1, 8](x, out)
    first = (np.arange(8) < 4)[:, None]
    np.testing.assert_array_equal(out[:, :2], np.where(first, x[:, :2], x[:, 2:]))
    np.testing.assert_array_equal(out[:, 2:], np.where(first, np.float32(0.5), x[:, 2:]))


# -- FlyDSL's flydsl.expr.utils.arith path (upstream kernels import from it) --------------

from flydsl.expr.utils.arith import ArithValue as UtilsArithValue  # noqa: E402
from flydsl.expr.utils.arith import _to_raw as utils_to_raw  # noqa: E402
from flydsl.expr.utils.arith import current_fastmath, resolve_fastmath  # noqa: E402


@flydsl.kernel
def through_utils_arith(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    raw = utils_to_raw(x[t] * 2.0)            # a plain ir.Value, as upstream's _raw gives
    typed = UtilsArithValue(raw)              # typed again
    out[t, 0] = typed + 1.0
    out[t, 1] = fx.Float32(isinstance(typed, UtilsArithValue) and
                           not isinstance(raw, UtilsArithValue))


def test_flydsl_expr_utils_arith_is_the_arith_module_under_upstreams_path():
    import flydsl.expr.arith as ours
    assert UtilsArithValue is ours.ArithValue and utils_to_raw is ours._to_raw
    assert current_fastmath() is None
    assert resolve_fastmath(ours.FastMathFlags.fast) is ours.FastMathFlags.fast
    x = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros((8, 2), np.float32)
    through_utils_arith[1, 8](x, out)
    np.testing.assert_array_equal(out[:, 0], x * 2 + 1)
    assert (out[:, 1] == 1).all()
