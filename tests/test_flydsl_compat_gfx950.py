"""gfx950 (CDNA4) atoms that upstream FlyDSL's kernels take on ``gfx95x``
(``FLYDSL_GPU_ARCH=gfx950``): the block-scaled MFMA
``fx.rocdl.cdna4.MFMA_Scale`` (``v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4``), used
by upstream's conv3d fp8, MXFP4 MoE and FP8/FP4 GEMM kernels as
``fx.gemm(atom, acc, a_i32xN, b_i32xN, acc, scale_a=..., scale_b=...)``.

On the CPU each lane's packed registers are decoded exactly (OCP fp8/fp6/fp4) and scaled
by its E8M0 byte; checked here against a NumPy model built from the instruction's lane
layouts. On gfx950 it is the instruction (checked in the AMDGCN).
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError
from flydsl.expr import dtypes as dt
from flydsl.expr.mma_layouts import lane_value_coords
from conftest import gpu_asm_or_skip

_KERNELS: dict = {}


def _kernel(m: int, fa, fb, scaled: bool, opsel_a: int = 0, opsel_b: int = 0):
    key = (m, fa.name, fb.name, scaled, opsel_a, opsel_b)
    if key in _KERNELS:
        return _KERNELS[key]
    k = 128 if m == 16 else 64
    atom = fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(m, m, k, fa, fb, opsel_a=opsel_a,
                                                      opsel_b=opsel_b))
    wa, wb, nc = fa.bits, fb.bits, m * m // 64

    @flydsl.kernel
    def scaled_mfma(a: fx.Tensor, b: fx.Tensor, sa: fx.Tensor, sb: fx.Tensor, out: fx.Tensor):
        t = fx.thread_idx.x
        ra = fx.make_rmem_tensor(wa, fx.Int32)
        rb = fx.make_rmem_tensor(wb, fx.Int32)
        acc = fx.make_rmem_tensor(nc, fx.Float32)
        for i in fx.range_constexpr(wa):
            ra[i] = a[t * wa + i]
        for i in fx.range_constexpr(wb):
            rb[i] = b[t * wb + i]
        for i in fx.range_constexpr(nc):
            acc[i] = out[t * nc + i]
        if fx.const_expr(scaled):
            fx.gemm(atom, acc, ra, rb, acc, scale_a=sa[t], scale_b=sb[t])
        else:
            fx.gemm(atom, acc, ra, rb, acc)
        for i in fx.range_constexpr(nc):
            out[t * nc + i] = acc[i]

    _KERNELS[key] = (scaled_mfma, atom)
    return _KERNELS[key]


def _codes(rng, fmt, shape):
    """Random finite codes of ``fmt`` and their values."""
    n = 1 << fmt.bits
    table = np.array([fmt.format.decode(c) for c in range(n)])
    codes = rng.integers(0, n, size=shape)
    codes[~np.isfinite(table[codes])] = 0
    return codes, table[codes]


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Per lane, 32 codes of ``bits`` bits packed from bit 0 into ``bits`` int32 words."""
    out = np.zeros((codes.shape[0], bits), np.uint64)
    for j in range(32):
        bit = bits * j
        w, lo = divmod(bit, 32)
        v = codes[:, j].astype(np.uint64)
        out[:, w] |= (v << np.uint64(lo)) & np.uint64(0xFFFFFFFF)
        if lo + bits > 32:
            out[:, w + 1] |= v >> np.uint64(32 - lo)
    return out.astype(np.uint32).view(np.int32).reshape(-1)


def _run(m, fa, fb, scaled, opsel_a=0, opsel_b=0, seed=0, bytes_a=(122, 133),
         bytes_b=(122, 133)):
    rng = np.random.default_rng(seed)
    kern, atom = _kernel(m, fa, fb, scaled, opsel_a, opsel_b)
    spec = atom.spec
    k = spec.k
    ca, va = _codes(rng, fa, (64, 32))      # lane, value (register order)
    cb, vb = _codes(rng, fb, (64, 32))
    sbytes_a = rng.integers(*bytes_a, size=(64, 4))
    sbytes_b = rng.integers(*bytes_b, size=(64, 4))
    sa = (sbytes_a.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(1).astype(np.uint32)
    sb = (sbytes_b.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(1).astype(np.uint32)
    fac_a = 2.0 ** (sbytes_a[:, opsel_a] - 127) if scaled else np.ones(64)
    fac_b = 2.0 ** (sbytes_b[:, opsel_b] - 127) if scaled else np.ones(64)
    A, B = np.zeros((m, k)), np.zeros((m, k))
    for lane, coords in enumerate(lane_value_coords(spec, "a")):
        for v, (r, kk) in enumerate(coords):
            A[r, kk] = va[lane, v] * fac_a[lane]
    for lane, coords in enumerate(lane_value_coords(spec, "b")):
        for v, (r, kk) in enumerate(coords):
            B[r, kk] = vb[lane, v] * fac_b[lane]
    nc = m * m // 64
    c0 = rng.standard_normal((64, nc)).astype(np.float32)
    want = A @ B.T
    # the CPU sums in Float64 (rounded to Float32 once): allow Float32 rounding
    tol = 4e-7 * (np.abs(A) @ np.abs(B).T) + 1e-6
    out = c0.copy().reshape(-1)
    kern[1, 64](_pack(ca, fa.bits), _pack(cb, fb.bits), sa.view(np.int32),
                sb.view(np.int32), out)
    got = out.reshape(64, nc)
    for lane, coords in enumerate(lane_value_coords(spec, "c")):
        for i, (r, n) in enumerate(coords):
            want_v = want[r, n] + c0[lane, i]
            assert abs(got[lane, i] - want_v) <= tol[r, n], (lane, i, r, n, got[lane, i], want_v)


def test_scaled_mfma_16x16x128_fp4_by_fp6_on_the_cpu_matches_the_lane_layouts():
    _run(16, dt.Float4E2M1FN, dt.Float6E2M3FN, scaled=True, opsel_a=1, opsel_b=2)


@pytest.mark.parametrize("fa,fb", [(dt.Float8E4M3FN, dt.Float8E5M2),
                                   (dt.Float4E2M1FN, dt.Float8E4M3FN)])
def test_scales_at_the_ends_of_e8m0_scale_the_product_not_each_operand(fa, fb):
    """``2^127`` on A's side and ``2^-125`` on B's: each scaled operand alone (448 *
    2^127 for E4M3) is past Float32's range, or near its bottom, but the products are
    not; the instruction scales the dot product, so the result is finite and exact to
    Float32 rounding. (Scaling each operand in Float32 gave inf and NaN.)"""
    _run(16, fa, fb, scaled=True, bytes_a=(250, 255), bytes_b=(0, 5))
    _run(32, fb, fa, scaled=True, bytes_a=(0, 5), bytes_b=(250, 255), seed=1)


def test_scaled_mfma_32x32x64_without_scales_is_the_unscaled_product():
    # fp8 E4M3 by fp6 E3M2 (E5M2 decodes as the other narrow floats, tested with them)
    _run(32, dt.Float8E4M3FN, dt.Float6E3M2FN, scaled=False)


def test_scaled_mfma_is_the_gfx950_instruction():
    kern, _ = _kernel(16, dt.Float4E2M1FN, dt.Float6E2M3FN, True, 1, 2)
    z = np.zeros(64 * 6, np.int32)
    asm = gpu_asm_or_skip(kern, (z, z, z[:64], z[:64], np.zeros(256, np.float32)),
                          "rocm", "gfx950")
    assert "v_mfma_scale_f32_16x16x128_f8f6f4" in asm
    assert "cbsz:4" in asm and "blgp:2" in asm


def test_scaled_mfma_without_scales_is_the_unscaled_gfx950_instruction():
    kern, _ = _kernel(32, dt.Float8E4M3FN, dt.Float6E3M2FN, False)
    z = np.zeros(64 * 8, np.int32)
    asm = gpu_asm_or_skip(kern, (z, z[:64 * 6], z[:64], z[:64], np.zeros(1024, np.float32)),
                          "rocm", "gfx950")
    assert "v_mfma_f32_32x32x64_f8f6f4" in asm and "v_mfma_scale" not in asm


def test_scaled_mfma_on_gfx942_is_an_error_naming_gfx950():
    kern, _ = _kernel(32, dt.Float8E4M3FN, dt.Float6E3M2FN, False)
    z = np.zeros(64 * 8, np.int32)
    with pytest.raises(DSLTypeError, match="gfx950"):
        flydsl.compile(kern, z, z[:64 * 6], z[:64], z[:64], np.zeros(1024, np.float32),
                       backend="rocm", arch="gfx942")


def test_scaled_mfma_rejects_shapes_formats_and_wrong_fragments():
    with pytest.raises(DSLTypeError, match="16x16x128 and 32x32x64"):
        fx.rocdl.cdna4.MFMA_Scale(16, 16, 64, fx.Float8E4M3FN)
    with pytest.raises(DSLTypeError, match="Float4E2M1FN"):
        fx.rocdl.cdna4.MFMA_Scale(16, 16, 128, fx.Float16)

    atom = fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(16, 16, 128, fx.Float8E4M3FN))

    @flydsl.kernel
    def short_a(out: fx.Tensor):
        ra = fx.make_rmem_tensor(4, fx.Int32)     # fp8 needs 8 registers
        acc = fx.make_rmem_tensor(4, fx.Float32)
        fx.gemm(atom, acc, ra, ra, acc)

    with pytest.raises(DSLTypeError, match="8 32-bit registers"):
        short_a[1, 64](np.zeros(4, np.float32))


# ---------------------------------------------------------------------------
# one atom through a one-element view (upstream's conv3d fp8 transpose kernel):
# fx.copy(BufferCopy128b of u8, fx.slice(flat_div, (None, i)), regs16) moves the 16
# contiguous bytes from element i

@flydsl.kernel
def copy_16_bytes_at(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    src = fx.logical_divide(fx.rocdl.make_buffer_tensor(x), fx.make_layout(1, 1))
    regs = fx.make_rmem_tensor(16, fx.Uint8)
    fx.copy(fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Uint8),
            fx.slice(src, (None, t * 16 + 8)), regs)
    dst = fx.logical_divide(out, fx.make_layout(1, 1))
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Uint8), regs,
            fx.slice(dst, (None, t * 16)))


def test_a_copy_atom_through_a_one_element_view_moves_the_atoms_width_from_there():
    x = (np.arange(80) % 251).astype(np.uint8)
    out = np.zeros(64, np.uint8)
    copy_16_bytes_at[1, 4](x, out)
    want = np.concatenate([x[t * 16 + 8:t * 16 + 24] for t in range(4)])
    np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------------------
# AMD inline assembly on the CPU (upstream's conv3d transpose kernels wait and barrier
# with llvm.InlineAsmOp(None, [], "s_waitcnt lgkmcnt(0)\n\ts_barrier", ...)): LLVM's CPU
# streamer aborted the process on it

@flydsl.kernel
def reverse_through_shared(x: fx.Tensor, out: fx.Tensor):
    from flydsl._mlir.dialects import llvm
    t = fx.thread_idx.x
    buf = fx.shared_array((64,), fx.Float32)
    buf[t] = x[t]
    llvm.InlineAsmOp(None, [], "s_waitcnt lgkmcnt(0)\n\ts_barrier", "", has_side_effects=True)
    out[t] = buf[63 - t]


def test_amd_wait_and_barrier_inline_asm_runs_on_the_cpu_as_a_barrier():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    reverse_through_shared[1, 64](x, out)
    np.testing.assert_array_equal(out, x[::-1])


def test_other_inline_asm_on_the_cpu_is_a_located_error():
    from flydsl.errors import UnsupportedConstructError

    @flydsl.kernel
    def raw_mov(out: fx.Tensor):
        from flydsl._mlir.dialects import llvm
        llvm.InlineAsmOp(None, [], "v_mov_b32 v0, 0", "", has_side_effects=True)
        out[0] = 1.0

    with pytest.raises(UnsupportedConstructError, match="v_mov_b32 v0, 0.*cannot run"):
        raw_mov[1, 1](np.zeros(1, np.float32))


# ---------------------------------------------------------------------------
# make_copy_atom(BufferCopyLDS128b(), 128): one 128-bit element per call between views
# of narrow elements (upstream's fp8 G2S loaders: a one-element fp8 slice of the buffer
# to a one-element view of LDS moves 16 bytes)

@flydsl.kernel
def lds_dma_16_bytes(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    lds = fx.shared_array((16,), fx.Uint8)
    src = fx.logical_divide(fx.rocdl.make_buffer_tensor(x), fx.make_layout(1, 1))
    dst = fx.logical_divide(lds, fx.make_layout(1, 1))
    if t == 0:
        fx.copy(fx.make_copy_atom(fx.rocdl.BufferCopyLDS128b(), 128),
                fx.slice(src, (None, 5)), fx.slice(dst, (None, 0)))
    fx.barrier()
    out[t] = lds[t]


def test_a_128_bit_element_copy_atom_moves_16_bytes_between_one_element_views():
    x = np.arange(40, dtype=np.uint8)
    out = np.zeros(16, np.uint8)
    lds_dma_16_bytes[1, 16](x, out)
    np.testing.assert_array_equal(out, x[5:21])


def test_a_pointer_type_of_an_mlir_narrow_float_type():
    """Upstream's fp8 buffer views: fx.PointerType.get(elem_ty=<f8E4M3FN MLIR type>, ...)."""
    from mlir import ir
    with ir.Context():
        p = fx.PointerType.get(elem_ty=ir.Type.parse("f8E4M3FN"),
                               address_space=fx.AddressSpace.Global)
        assert p.dtype is fx.Float8E4M3FN
        assert fx.PointerType.get(elem_ty=ir.Type.parse("f4E2M1FN"),
                                  address_space=fx.AddressSpace.Global).dtype is fx.Float4E2M1FN


@flydsl.kernel
def shifts(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    v = x[t]
    out[2 * t] = v.shrui(fx.Int32(4)) & fx.Int32(0xFF)
    out[2 * t + 1] = v.shli(3)


def test_integer_values_have_flydsl_shrui_and_shli():
    """Upstream's a16w4 MoE unpacks bytes with ``packed_i32.shrui(shift) & 0xFF``."""
    x = np.array([-1, 0x12345678, 7, -256], np.int32)
    out = np.zeros(8, np.int32)
    shifts[1, 4](x, out)
    u = x.view(np.uint32)
    np.testing.assert_array_equal(out[0::2], ((u >> 4) & 0xFF).astype(np.int32))
    np.testing.assert_array_equal(out[1::2], (u << 3).astype(np.uint32).view(np.int32))


def test_a_kernel_local_class_holds_constants():
    """Upstream's conv3d bf16 transpose kernel: ``class BF16Ty: ir_type = elem_ty.ir_type``."""
    scale = 3.0

    @flydsl.kernel
    def scaled(x: fx.Tensor, out: fx.Tensor):
        class Consts:
            factor = scale * 2
            dtype = fx.Float32

        t = fx.thread_idx.x
        out[t] = x[t] * fx.cast(Consts.factor, Consts.dtype)

    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    scaled[1, 4](x, out)
    np.testing.assert_array_equal(out, x * 6)
