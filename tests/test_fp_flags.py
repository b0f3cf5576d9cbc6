"""Float flags (``passes/fp_flags.py``): ``a * b + c`` contracts to an FMA by default on
every backend, ``FLYDSL_FP_CONTRACT=0`` keeps two roundings, ``FLYDSL_FAST_MATH=1``
puts ``fast`` on every float op."""
from __future__ import annotations

import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from conftest import host_has_cpu_feature
from flydsl.compiler.options import CompileOptions


@flydsl.kernel
def mad_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = a[i] * b[i] + c[i]


@flydsl.jit
def mad(a, b, c, y, n):
    mad_kernel(a, b, c, y, n).launch(grid=((n + 63) // 64,), block=(64,))


def _inputs(n=256):
    # a*b = 1 + 2^-11 + 2^-24 exactly: rounded alone it is 1 + 2^-11 (a tie to even),
    # so a*b + c is 0 with two roundings and 2^-24 when fused
    a = np.full(n, 1 + 2.0 ** -12, np.float32)
    c = np.full(n, -(1 + 2.0 ** -11), np.float32)
    return a, a.copy(), c, np.empty(n, np.float32)


def test_multiply_add_is_fused_by_default_on_the_cpu():
    a, b, c, y = _inputs()
    mad(a, b, c, y, len(a))
    assert (y == np.float32(2.0 ** -24)).all(), y[:4]
    prog = flydsl.compile(mad, a, b, c, y, len(a))
    assert re.search(r"vfmadd\w*ps", prog.backend.assembly(prog.asm))


def test_fp_contract_off_rounds_twice(monkeypatch):
    monkeypatch.setenv("FLYDSL_FP_CONTRACT", "0")
    a, b, c, y = _inputs()
    mad(a, b, c, y, len(a))
    assert (y == 0).all(), y[:4]
    np.testing.assert_array_equal(y, a * b + c)     # numpy's two roundings
    prog = flydsl.compile(mad, a, b, c, y, len(a))
    assert "vfmadd" not in prog.backend.assembly(prog.asm)


def test_gpu_backends_emit_fma():
    a, b, c, y = _inputs()
    ptx = flydsl.compile(mad, a, b, c, y, len(a), backend="cuda", arch="sm_90").asm["ptx"]
    assert "fma.rn.f32" in ptx and "mul.rn.f32" not in ptx


def test_gpu_backends_keep_mul_and_add_without_contraction(monkeypatch):
    monkeypatch.setenv("FLYDSL_FP_CONTRACT", "0")
    a, b, c, y = _inputs()
    ptx = flydsl.compile(mad, a, b, c, y, len(a), backend="cuda", arch="sm_90").asm["ptx"]
    assert "fma.rn.f32" not in ptx and re.search(r"mul(\.rn)?\.f32", ptx)


def test_rocm_emits_fma():
    a, b, c, y = _inputs()
    try:
        prog = flydsl.compile(mad, a, b, c, y, len(a), backend="rocm", arch="gfx942")
    except flydsl.FlydslError as e:   # no ld.lld for the hsaco stage
        pytest.skip(f"rocm compile unavailable here: {e}")
    assert re.search(r"v_fmac?_f32", prog.asm["amdgcn"])


@pytest.mark.parametrize("env,flag", [(None, "contract"), ("1", "fast")])
def test_llvm_ir_carries_the_flags(monkeypatch, env, flag):
    if env:
        monkeypatch.setenv("FLYDSL_FAST_MATH", env)
    a, b, c, y = _inputs()
    llir = flydsl.compile(mad, a, b, c, y, len(a)).asm["llir"]
    assert re.search(rf"fmul {flag} float", llir), llir[:2000]


def test_options_from_env(monkeypatch):
    assert CompileOptions.from_env().fp_contract is True
    for off in ("0", "false", "off", "no"):
        monkeypatch.setenv("FLYDSL_FP_CONTRACT", off)
        assert CompileOptions.from_env().fp_contract is False
    monkeypatch.setenv("FLYDSL_FP_CONTRACT", "1")
    assert CompileOptions.from_env().fp_contract is True
    with pytest.raises(TypeError):
        CompileOptions(fp_contract="yes")


@flydsl.kernel
def sqrt_kernel(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = fx.sqrt(x[i])


def test_cuda_sqrt_is_correctly_rounded_unless_fast_math(monkeypatch):
    """libdevice's __nv_sqrtf would give sqrt.approx.f32 (passes/nvvm_sqrt.py)."""
    x = np.ones(32, np.float32)
    ptx = flydsl.compile(sqrt_kernel, x, x, backend="cuda", arch="sm_90").asm["ptx"]
    assert "sqrt.rn.f32" in ptx and "sqrt.approx" not in ptx
    x64 = np.ones(32, np.float64)
    ptx = flydsl.compile(sqrt_kernel, x64, x64, backend="cuda", arch="sm_90").asm["ptx"]
    assert "sqrt.rn.f64" in ptx
    monkeypatch.setenv("FLYDSL_FAST_MATH", "1")
    ptx = flydsl.compile(sqrt_kernel, x, x, backend="cuda", arch="sm_90").asm["ptx"]
    assert "sqrt.approx.f32" in ptx


@pytest.mark.skipif(not host_has_cpu_feature("avx512f"), reason="the host has no AVX-512")
def test_cpu_kernels_use_the_full_avx512_width():
    """LLVM's Intel tuning prefers 256-bit vectors; kernels get the 512-bit ones (zmm),
    twice the lanes for compute-bound loops (vector math) as ATen's AVX-512 code has."""
    a, b, c, y = _inputs(1024)
    prog = flydsl.compile(mad, a, b, c, y, len(a))
    asm = prog.backend.assembly(prog.asm)
    assert re.search(r"vfmadd\w*ps\s+[^\n]*zmm", asm), "no 512-bit FMA in the thread loop"
    mad(a, b, c, y, len(a))
    assert (y == np.float32(2.0 ** -24)).all()
