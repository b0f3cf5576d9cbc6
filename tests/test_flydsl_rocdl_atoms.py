"""fx.rocdl's AMD atoms under FlyDSL's names (issue 31 item 6, issue 32 item 4): buffer
copies of every width, buffer loads straight to LDS, buffer atomics, scheduling hints,
s_waitcnt, s_setprio and readfirstlane. Each runs exactly on the CPU (checked against
numpy), emits its instruction on gfx942 and a portable equivalent on sm_90."""
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.expr.rocdl import cdna3, cdna4, sched
from conftest import marked_line


def _asm(kernel, args, backend, arch, stage):
    return flydsl.compile(kernel, *args, backend=backend, arch=arch).asm[stage]


# -- names -----------------------------------------------------------------------------------

def test_flydsl_names_exist_under_their_module_paths():
    import flydsl.expr.rocdl.cdna3 as c3
    import flydsl.expr.rocdl.cdna4 as c4
    assert c3 is fx.rocdl.cdna3 and c4 is fx.rocdl.cdna4
    for name in ("BufferCopy", "BufferCopy8b", "BufferCopy16b", "BufferCopy32b",
                 "BufferCopy64b", "BufferCopy128b", "BufferCopyLDS", "BufferCopyLDS32b",
                 "BufferCopyLDS64b", "BufferCopyLDS128b", "BufferAtomic", "BufferAtomicAdd",
                 "BufferAtomicMax", "BufferAtomicMin", "BufferAtomicPkAdd", "MFMA", "WMMA",
                 "make_buffer_tensor", "sched_barrier", "sched_group_barrier", "sched_mfma",
                 "sched_vmem", "sched_dsrd", "sched_dswr", "s_waitcnt", "s_setprio",
                 "readfirstlane"):
        assert callable(getattr(fx.rocdl, name)), name
    assert fx.rocdl.BufferCopy(16) == fx.rocdl.BufferCopy16b() == fx.BufferCopy(16)
    assert fx.rocdl.BufferCopy128b(cache_modifier=2).bits == 128
    assert fx.rocdl.BufferCopyLDS32b() != fx.rocdl.BufferCopy32b()


def test_invalid_atoms_are_errors():
    with pytest.raises(flydsl.DSLError, match="8-byte"):
        fx.rocdl.BufferCopyLDS64b()
    with pytest.raises(flydsl.DSLError, match="bit_size"):
        fx.rocdl.BufferCopyLDS(64)
    with pytest.raises(flydsl.DSLError, match="bit_size"):
        fx.rocdl.BufferCopy(24)
    with pytest.raises(flydsl.DSLError, match="op must be"):
        fx.rocdl.BufferAtomic("xor", fx.Int32)
    with pytest.raises(flydsl.DSLError, match="Float16 or"):
        fx.rocdl.BufferAtomicPkAdd(fx.Float32)
    with pytest.raises(flydsl.DSLError, match="gfx950-only"):
        cdna4.MFMA_Scale(16, 16, 128, fx.Float32)


def test_gfx9_waitcnt_encoding():
    # vmcnt low bits [3:0], high bits [15:14]; expcnt [6:4]; lgkmcnt [11:8]
    assert sched.gfx9_waitcnt() == 0xCF7F
    assert sched.gfx9_waitcnt(vmcnt=0) == 0x0F70
    assert sched.gfx9_waitcnt(lgkmcnt=0) == 0xC07F
    assert sched.gfx9_waitcnt(vmcnt=35, lgkmcnt=2, expcnt=1) == (3 | (2 << 14) | (1 << 4) | (2 << 8))


def test_flydsl_positional_mfma_order_is_input_then_accumulator():
    a = fx.rocdl.MFMA(16, 16, 16, fx.Float16, fx.Float32)
    b = fx.rocdl.MFMA(16, 16, 16, fx.Float32, ab_dtype=fx.Float16)
    c = fx.rocdl.MFMA(16, 16, 16, fx.Float16, elem_ty_acc=fx.Float32)
    assert a == b == c and a.ab_dtype is fx.Float16 and a.acc_dtype is fx.Float32


# -- hints: no-ops on the CPU, instructions on gfx942 ------------------------------------------

@flydsl.kernel
def hinted_copy(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    fx.rocdl.sched_barrier(0)
    fx.rocdl.s_setprio(2)
    v = x[i]
    fx.rocdl.s_waitcnt(vmcnt=0)
    fx.rocdl.cdna3.s_waitcnt(lgkmcnt=0)
    fx.rocdl.s_waitcnt(0)
    fx.rocdl.sched_group_barrier(fx.rocdl.mask_mfma, 1, 0)
    fx.rocdl.sched_group_barrier("ds_read|ds_write", 2, 0)
    fx.rocdl.sched_mfma(1)
    fx.rocdl.sched_vmem(1)
    fx.rocdl.sched_dsrd(1)
    fx.rocdl.sched_dswr(1)
    fx.rocdl.s_setprio(0)
    y[i] = v * 2.0


def test_hints_are_no_ops_on_the_cpu():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    hinted_copy[1, 64](x, y)
    np.testing.assert_array_equal(y, 2 * x)


def test_hints_emit_their_gfx942_instructions():
    x = np.zeros(64, np.float32)
    prog = flydsl.compile(hinted_copy, x, x, backend="rocm", arch="gfx942")
    text, llir = prog.asm["amdgcn"], prog.asm["llir"]
    assert re.search(r"s_setprio 2", text) and re.search(r"s_setprio 0", text)
    assert re.search(r"s_waitcnt vmcnt\(0\)", text)
    assert re.search(r"s_waitcnt lgkmcnt\(0\)", text)
    # scheduling directives: no instruction, only the intrinsics the scheduler reads
    assert "call void @llvm.amdgcn.sched.barrier(i32 0)" in llir
    assert "call void @llvm.amdgcn.sched.group.barrier(i32 8, i32 1, i32 0)" in llir
    assert "call void @llvm.amdgcn.sched.group.barrier(i32 768, i32 2, i32 0)" in llir
    for mask in (32, 256, 512):
        assert f"call void @llvm.amdgcn.sched.group.barrier(i32 {mask}, i32 1, i32 0)" in llir
    ptx = _asm(hinted_copy, (x, x), "cuda", "sm_90", "ptx")
    assert "setprio" not in ptx and "sched" not in ptx


def test_hint_arguments_are_compile_time_ints():
    @flydsl.kernel
    def bad(x: fx.Tensor):
        fx.rocdl.s_setprio(x[0])  # mark: setprio

    with pytest.raises(flydsl.DSLError, match="compile-time int") as e:
        bad[1, 1](np.zeros(1, np.float32))
    assert f"test_flydsl_rocdl_atoms.py:{marked_line(__file__, 'mark: setprio')}:" in str(e.value)

    @flydsl.kernel
    def bad_range(x: fx.Tensor):
        fx.rocdl.s_waitcnt(vmcnt=64)

    with pytest.raises(flydsl.DSLError, match=r"vmcnt must be in \[0, 63\]"):
        bad_range[1, 1](np.zeros(1, np.float32))


# -- readfirstlane -------------------------------------------------------------------------

@flydsl.kernel
def first_lane(x: fx.Tensor, y: fx.Tensor, z: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = fx.rocdl.readfirstlane(x[i])
    if i % 8 >= 3:                      # lanes 0-2 of every 8 inactive
        z[i] = fx.rocdl.readfirstlane(fx.Int32, x[i] * 10)


def test_readfirstlane_is_the_first_active_lanes_value():
    x = np.arange(100, 164, dtype=np.int32)
    y = np.zeros_like(x)
    z = np.full_like(x, -1)
    first_lane[1, 64](x, y, z)
    warp = 32                             # the CPU's warp
    lanes = np.arange(64)
    np.testing.assert_array_equal(y, x[lanes // warp * warp])
    active = lanes % 8 >= 3
    np.testing.assert_array_equal(z[~active], -1)
    np.testing.assert_array_equal(z[active], 10 * x[lanes[active] // warp * warp + 3])


def test_readfirstlane_instructions():
    x = np.zeros(64, np.int32)
    text = _asm(first_lane, (x, x, x), "rocm", "gfx942", "amdgcn")
    assert "v_readfirstlane_b32" in text
    ptx = _asm(first_lane, (x, x, x), "cuda", "sm_90", "ptx")
    assert "shfl.sync.idx.b32" in ptx and "activemask.b32" in ptx


# -- buffer copies of 8 and 16 bits --------------------------------------------------------

@flydsl.kernel
def narrow_buffer_copy(x: fx.Tensor, y: fx.Tensor, atom: fx.Constexpr):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (1,))[None, i]
    dst = fx.flat_divide(fx.rocdl.make_buffer_tensor(y), (1,))[None, i]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs)
    fx.copy(atom, regs, dst)


@pytest.mark.parametrize("make,dtype,npdt", [
    (fx.rocdl.BufferCopy16b, fx.Float16, np.float16),
    (fx.rocdl.BufferCopy8b, fx.Int8, np.int8),
])
def test_narrow_buffer_copies_run_on_the_cpu_and_are_buffer_instructions(make, dtype, npdt):
    x = np.arange(100).astype(npdt)
    y = np.zeros(100, npdt)
    narrow_buffer_copy[2, 64](x, y, fx.make_copy_atom(make(), dtype))   # 128 threads: 28 past
    np.testing.assert_array_equal(y, x)
    text = _asm(narrow_buffer_copy, (x, y, fx.make_copy_atom(make(), dtype)), "rocm",
                "gfx942", "amdgcn")
    load, store = ("buffer_load_ushort", "buffer_store_short") if npdt is np.float16 else \
        ("buffer_load_ubyte", "buffer_store_byte")
    assert load in text and store in text


# -- buffer loads straight to LDS -----------------------------------------------------------

@flydsl.kernel
def lds_dma(x: fx.Tensor, y: fx.Tensor, base: fx.Int32):
    """Each wave loads 64 dwords of x (from element `base + 64 * wave`) to its LDS slice,
    then every lane reads back the element of a neighbouring lane."""
    tid = fx.thread_idx.x
    wave = tid // 64
    lane = tid % 64
    tile = fx.shared_array((128,), fx.Float32)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float32)
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (1,))[None, base + wave * 64 + lane]
    # the wave's destination: its first element, the same on all its lanes
    dst = fx.flat_divide(tile, (1,))[None, fx.rocdl.readfirstlane(wave * 64)]
    fx.copy(atom, src, dst)
    fx.rocdl.s_waitcnt(vmcnt=0)
    fx.barrier()
    y[tid] = tile[(tid + 1) % 128]


def test_buffer_load_to_lds_on_the_cpu_reads_zero_past_the_buffer():
    x = np.arange(1, 101, dtype=np.float32)
    y = np.zeros(128, np.float32)
    lds_dma[1, 128](x, y, 0)
    want = np.concatenate([x, np.zeros(28, np.float32)])     # reads past x give 0
    np.testing.assert_array_equal(y, np.roll(want, -1))
    lds_dma[1, 128](x, y, 50)
    want = np.concatenate([x[50:], np.zeros(78, np.float32)])
    np.testing.assert_array_equal(y, np.roll(want, -1))


def test_buffer_load_to_lds_is_buffer_load_dword_lds_on_gfx942():
    x = np.zeros(100, np.float32)
    y = np.zeros(128, np.float32)
    text = _asm(lds_dma, (x, y, 0), "rocm", "gfx942", "amdgcn")
    assert re.search(r"buffer_load_dword\s.*\blds\b", text), text[:3000]
    assert "s_mov_b32 m0" in text or re.search(r"s_\w+\s+m0,", text)
    ptx = _asm(lds_dma, (x, y, 0), "cuda", "sm_90", "ptx")
    assert "st.shared.f32" in ptx or "st.shared.b32" in ptx


def test_a_128_bit_load_to_lds_is_an_error_on_gfx942():
    @flydsl.kernel
    def wide(x: fx.Tensor):
        tile = fx.shared_array((256,), fx.Float32)
        atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS128b(), fx.Float32)
        src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (4,))[None, fx.thread_idx.x]
        fx.copy(atom, src, fx.flat_divide(tile, (4,))[None, 0])  # mark: wide lds

    with pytest.raises(flydsl.DSLError, match="gfx950") as e:
        _asm(wide, (np.zeros(256, np.float32),), "rocm", "gfx942", "amdgcn")
    assert f"test_flydsl_rocdl_atoms.py:{marked_line(__file__, 'mark: wide lds')}:" in str(e.value)


def test_buffer_load_to_lds_needs_a_buffer_source_and_a_shared_destination():
    @flydsl.kernel
    def plain(x: fx.Tensor, y: fx.Tensor):
        atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float32)
        fx.copy(atom, fx.flat_divide(x, (1,))[None, 0], fx.flat_divide(y, (1,))[None, 0])

    with pytest.raises(flydsl.DSLError, match="buffer tensor"):
        plain[1, 1](np.zeros(4, np.float32), np.zeros(4, np.float32))


# -- buffer atomics ------------------------------------------------------------------------

@flydsl.kernel
def atomic_sums(vals: fx.Tensor, out: fx.Tensor, atom: fx.Constexpr):
    """Thread t adds vals[t] into out[t % 8 + 4]; out's buffer covers elements 0..n-1 of
    `out`, so the adds of slots >= n are dropped."""
    t = fx.thread_idx.x
    src = fx.flat_divide(vals, (1,))[None, t]
    regs = fx.make_fragment_like(src)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), vals.dtype), src, regs)
    dst = fx.flat_divide(fx.rocdl.make_buffer_tensor(out), (1,))[None, t % 8 + 4]
    fx.copy(atom, regs, dst)


@pytest.mark.parametrize("op,npdt,dtype", [
    ("add", np.float32, fx.Float32), ("add", np.int32, fx.Int32),
    ("max", np.float32, fx.Float32), ("min", np.int32, fx.Int32),
])
def test_buffer_atomics_on_the_cpu_drop_updates_past_the_buffer(op, npdt, dtype):
    rng = np.random.default_rng(3)
    vals = rng.integers(-50, 50, 64).astype(npdt)
    out = np.full(10, 7, npdt)        # slots 4..11 addressed; 10 and 11 are past the end
    atom = fx.make_copy_atom(fx.rocdl.BufferAtomic(op, dtype), dtype)
    atomic_sums[1, 64](vals, out, atom)
    want = np.full(12, 7, npdt)
    reduce = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]
    for t in range(64):
        want[t % 8 + 4] = reduce(want[t % 8 + 4], vals[t])
    np.testing.assert_array_equal(out, want[:10])


def test_buffer_atomic_add_is_the_buffer_instruction_on_gfx942():
    vals = np.zeros(64, np.float32)
    out = np.zeros(10, np.float32)
    atom = fx.make_copy_atom(fx.rocdl.BufferAtomicAdd(fx.Float32), fx.Float32)
    text = _asm(atomic_sums, (vals, out, atom), "rocm", "gfx942", "amdgcn")
    assert "buffer_atomic_add_f32" in text
    ptx = _asm(atomic_sums, (vals, out, atom), "cuda", "sm_90", "ptx")
    assert re.search(r"(red|atom)\.global\.add\.f32", ptx)


# -- fp8/bf8 MFMA ---------------------------------------------------------------------------

FP8_ATOMS = {
    "mfma_f32_16x16x32_fp8_fp8": (16, 32, fx.Float8E4M3FNUZ),
    "mfma_f32_16x16x32_bf8_bf8": (16, 32, fx.Float8E5M2FNUZ),
    "mfma_f32_32x32x16_fp8_fp8": (32, 16, fx.Float8E4M3FNUZ),
    "mfma_f32_32x32x16_bf8_bf8": (32, 16, fx.Float8E5M2FNUZ),
}


@flydsl.kernel
def fp8_atom(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, op: fx.Constexpr):
    """Each lane converts exactly the A/B values the atom's table gives it to fp8, runs
    the atom and stores its accumulators where the table says they belong."""
    lane = fx.thread_idx.x
    atom = fx.make_mma_atom(op)
    a_tv, b_tv, c_tv = atom.layout_A_tv, atom.layout_B_tv, atom.layout_C_tv
    m, n, k = atom.shape_mnk.unpack()
    fa = fx.make_rmem_tensor(fx.size(a_tv[1]), atom.ab_dtype)
    fb = fx.make_rmem_tensor(fx.size(b_tv[1]), atom.ab_dtype)
    fc = fx.make_rmem_tensor(fx.size(c_tv[1]), fx.Float32)
    for v in fx.range_constexpr(fx.size(a_tv[1])):
        i = a_tv((lane, v))
        fa[v] = atom.ab_dtype(A[i % m, i // m])
    for v in fx.range_constexpr(fx.size(b_tv[1])):
        i = b_tv((lane, v))
        fb[v] = atom.ab_dtype(B[i % n, i // n])
    fc.fill(1.0)
    fx.gemm(atom, fc, fa, fb, fc)
    for v in fx.range_constexpr(fx.size(c_tv[1])):
        i = c_tv((lane, v))
        C[i % m, i // m] = fc[v]


@pytest.mark.parametrize("name", sorted(FP8_ATOMS))
def test_fp8_mfma_runs_on_the_cpu_with_its_lane_layout(name):
    mn, k, dtype = FP8_ATOMS[name]
    rng = np.random.default_rng(5)
    # fp8 inputs: the values round to the format (0.3 -> 0.3125 in E4M3FNUZ), products
    # and sums of these are exact in f32
    A = rng.choice([-3.0, -1.5, -0.5, 0.0, 0.3, 1.0, 2.0, 7.0], (mn, k)).astype(np.float32)
    B = rng.choice([-2.0, -0.75, 0.0, 0.5, 1.0, 3.0], (mn, k)).astype(np.float32)
    from flydsl.expr import mma_layouts
    spec = mma_layouts.SPECS[name]
    q = np.vectorize(lambda x: mma_layouts.quantize(x, spec.ab_dtype))
    ref = q(A) @ q(B).T + 1.0
    C = np.full((mn, mn), np.nan, np.float32)
    op = fx.rocdl.MFMA(mn, mn, k, dtype)
    fp8_atom[1, 64](A, B, C, op)
    np.testing.assert_array_equal(C, ref.astype(np.float32))


@pytest.mark.parametrize("name", sorted(FP8_ATOMS))
def test_fp8_mfma_is_the_gfx942_instruction(name):
    mn, k, dtype = FP8_ATOMS[name]
    A = np.zeros((mn, k), np.float32)
    C = np.zeros((mn, mn), np.float32)
    text = _asm(fp8_atom, (A, A, C, fx.rocdl.MFMA(mn, mn, k, dtype)), "rocm", "gfx942",
                "amdgcn")
    assert "v_" + name in text


def test_fp8_mfma_is_an_error_on_sm_90_naming_gfx942():
    A = np.zeros((16, 32), np.float32)
    C = np.zeros((16, 16), np.float32)
    with pytest.raises(flydsl.DSLError, match="gfx942"):
        _asm(fp8_atom, (A, A, C, fx.rocdl.MFMA(16, 16, 32, fx.Float8E4M3FNUZ)), "cuda",
             "sm_90", "ptx")


# -- FlyDSL's direct ROCDL wrappers ---------------------------------------------------------

@flydsl.kernel
def wrappers(x: fx.Tensor, i: fx.Tensor, out_f: fx.Tensor, out_i: fx.Tensor,
             masks: fx.Tensor):
    t = fx.thread_idx.x
    out_f[0, t] = fx.rocdl.exp2(fx.Float32, x[t])
    out_f[1, t] = fx.rocdl.rcp(fx.Float32, x[t])
    fx.rocdl.s_barrier()
    out_i[0, t] = fx.rocdl.ds_bpermute(fx.Int32, (t ^ 1) * 4, i[t])
    out_i[1, t] = fx.rocdl.readlane(fx.Int32, i[t], 5)
    lo = fx.rocdl.cvt_pk_fp8_f32(fx.Int32, x[t], 1.0, 0, False)
    out_i[2, t] = fx.rocdl.cvt_pk_fp8_f32(fx.Int32, -2.0, x[t], lo, True)
    masks[t] = fx.rocdl.ballot(fx.Int64, i[t] > 3)


def test_direct_wrappers_run_on_the_cpu():
    x = np.linspace(-3, 3, 64).astype(np.float32)
    iv = np.arange(64, dtype=np.int32) % 7
    out_f = np.zeros((2, 64), np.float32)
    out_i = np.zeros((3, 64), np.int32)
    masks = np.zeros(64, np.int64)
    wrappers[1, 64](x, iv, out_f, out_i, masks)
    np.testing.assert_allclose(out_f[0], np.exp2(x), rtol=2e-7)
    np.testing.assert_allclose(out_f[1], 1 / x, rtol=2e-7)
    lanes = np.arange(64)
    np.testing.assert_array_equal(out_i[0], iv[lanes ^ 1])
    np.testing.assert_array_equal(out_i[1], iv[lanes // 32 * 32 + 5])   # the 32-lane warp
    from flydsl.expr.mma_layouts import fp8_value, quantize
    code = {fp8_value(c, "e4m3fnuz"): c for c in range(256) if c != 0x80}

    def q(v):       # the E4M3FNUZ code of v, rounded to nearest even
        return code[quantize(float(v), "e4m3fnuz")]
    want = [q(v) | (q(1.0) << 8) | (q(-2.0) << 16) | (q(v) << 24) for v in x]
    np.testing.assert_array_equal(out_i[2].view(np.uint32), np.array(want, np.uint32))
    bits = (iv > 3).astype(np.int64)
    want_masks = [sum(int(bits[w * 32 + l]) << l for l in range(32)) for w in (0, 1)]
    np.testing.assert_array_equal(masks, np.repeat(want_masks, 32))


def test_direct_wrappers_are_their_instructions():
    x = np.zeros(64, np.float32)
    iv = np.zeros(64, np.int32)
    args = (x, iv, np.zeros((2, 64), np.float32), np.zeros((3, 64), np.int32),
            np.zeros(64, np.int64))
    text = _asm(wrappers, args, "rocm", "gfx942", "amdgcn")
    for insn in ("v_exp_f32", "v_rcp_f32", "s_barrier", "ds_bpermute_b32", "v_readlane_b32",
                 "v_cvt_pk_fp8_f32"):
        assert insn in text, insn
    ptx = _asm(wrappers, args, "cuda", "sm_90", "ptx")
    assert "bar.sync" in ptx and "shfl.sync.idx.b32" in ptx


# -- together: an fp8 MFMA tile fed by buffer loads straight to LDS (issue 32, gfx942) -------

@flydsl.kernel
def fp8_tile(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """C = A @ B.T for one 16x32 fp8 tile: A and B go global -> LDS with buffer-to-LDS
    loads (4 fp8 per lane and call), each lane reads its MFMA fragments from LDS."""
    tid = fx.thread_idx.x
    sa = fx.shared_array((512,), fx.Float8E4M3FNUZ)
    sb = fx.shared_array((512,), fx.Float8E4M3FNUZ)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float8E4M3FNUZ)
    ga = fx.flat_divide(fx.rocdl.make_buffer_tensor(fx.make_view(A, fx.make_layout(512))), (4,))
    gb = fx.flat_divide(fx.rocdl.make_buffer_tensor(fx.make_view(B, fx.make_layout(512))), (4,))
    for c in fx.range_constexpr(2):
        dst0 = fx.rocdl.readfirstlane(c * 256)
        fx.copy(atom, ga[None, c * 64 + tid], fx.flat_divide(sa, (4,))[None, dst0 // 4])
        fx.copy(atom, gb[None, c * 64 + tid], fx.flat_divide(sb, (4,))[None, dst0 // 4])
    fx.rocdl.s_waitcnt(vmcnt=0)
    fx.barrier()
    mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 32, fx.Float8E4M3FNUZ))
    a_tv, b_tv, c_tv = mma.layout_A_tv, mma.layout_B_tv, mma.layout_C_tv
    fa = fx.make_rmem_tensor(8, fx.Float8E4M3FNUZ)
    fb = fx.make_rmem_tensor(8, fx.Float8E4M3FNUZ)
    fc = fx.make_rmem_tensor(4, fx.Float32)
    for v in fx.range_constexpr(8):
        i = a_tv((tid, v))                  # m + 16 k; A is row-major 16 x 32
        fa[v] = sa[(i % 16) * 32 + i // 16]
        j = b_tv((tid, v))
        fb[v] = sb[(j % 16) * 32 + j // 16]
    fc.fill(0.0)
    fx.rocdl.sched_dsrd(2)
    fx.rocdl.sched_mfma(1)
    fx.gemm(mma, fc, fa, fb, fc)
    for v in fx.range_constexpr(4):
        i = c_tv((tid, v))
        C[i % 16, i // 16] = fc[v]


def test_fp8_mfma_tile_fed_through_lds_dma_runs_on_the_cpu_and_compiles_for_gfx942():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    A = torch.from_numpy(rng.choice([-2., -1., -0.5, 0., 0.5, 1., 3.], (16, 32))
                         .astype(np.float32)).to(torch.float8_e4m3fnuz)
    B = torch.from_numpy(rng.choice([-1., 0., 0.25, 1., 2.], (16, 32))
                         .astype(np.float32)).to(torch.float8_e4m3fnuz)
    C = torch.zeros(16, 16)
    fp8_tile[1, 64](A, B, C)
    assert torch.equal(C, A.float() @ B.float().T)
    text = _asm(fp8_tile, (A, B, C), "rocm", "gfx942", "amdgcn")
    assert len(re.findall(r"buffer_load_dword\s.*\blds\b", text)) == 4
    assert "v_mfma_f32_16x16x32_fp8_fp8" in text and "s_waitcnt vmcnt(0)" in text


# -- FlyDSL's raw MFMA calls: rocdl.mfma_*(result_type, [a, b, c, cbsz, abid, blgp]) ----------
# (operands built with raw MLIR, as FlyDSL kernels do)

import mlir.ir as ir                                        # noqa: E402
from mlir.dialects import arith, vector                     # noqa: E402
from flydsl.compiler.frontend.values import Value           # noqa: E402


def _pack(vals):
    """Kernel values -> one vector operand (f16/f32 lanes)."""
    raw = [v.v for v in vals]
    return vector.from_elements(ir.VectorType.get([len(raw)], raw[0].type), raw)


def _pack_fp8(vals):
    """8 fp8 kernel values -> the i64 the fp8 MFMA takes (value 0 in the lowest byte)."""
    i8, i64 = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(64)
    word = arith.constant(i64, 0)
    for j, v in enumerate(vals):
        byte = arith.extui(i64, arith.bitcast(i8, v.v))
        word = arith.ori(word, arith.shli(byte, arith.constant(i64, 8 * j)))
    return word


def _unpack(vec, n):
    return [Value(vector.extract(vec, [], [j]), fx.Float32) for j in range(n)]


@flydsl.kernel
def raw_mfma(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, fp8: fx.Constexpr):
    """16x16 output; K = 16 (f16, 4 per lane) or 32 (fp8, 8 per lane)."""
    lane = fx.thread_idx.x
    kpl = 8 if fp8 else 4
    dtype = fx.Float8E4M3FNUZ if fp8 else fx.Float16
    a = [dtype(A[lane % 16, (lane // 16) * kpl + v]) for v in fx.range_constexpr(kpl)]
    b = [dtype(B[lane % 16, (lane // 16) * kpl + v]) for v in fx.range_constexpr(kpl)]
    acc = _pack([fx.Float32(1.0)] * 4)
    if fp8:
        out = fx.rocdl.mfma_f32_16x16x32_fp8_fp8(None, [_pack_fp8(a), _pack_fp8(b), acc, 0, 0, 0])
    else:
        out = fx.rocdl.mfma_f32_16x16x16f16(None, [_pack(a), _pack(b), acc, 0, 0, 0])
    vals = _unpack(out, 4)
    for v in fx.range_constexpr(4):
        C[4 * (lane // 16) + v, lane % 16] = vals[v]


@pytest.mark.filterwarnings("ignore:flydsl. kernel .raw_mfma. is cached in memory only")
@pytest.mark.parametrize("fp8", [False, True])
def test_raw_mfma_calls_run_on_the_cpu_and_are_the_instruction_on_gfx942(fp8):
    k = 32 if fp8 else 16
    rng = np.random.default_rng(7)
    A = rng.integers(-3, 4, (16, k)).astype(np.float32)
    B = rng.integers(-3, 4, (16, k)).astype(np.float32)
    C = np.zeros((16, 16), np.float32)
    raw_mfma[1, 64](A, B, C, fp8)
    np.testing.assert_array_equal(C, A @ B.T + 1)
    text = _asm(raw_mfma, (A, B, C, fp8), "rocm", "gfx942", "amdgcn")
    assert ("v_mfma_f32_16x16x32_fp8_fp8" if fp8 else "v_mfma_f32_16x16x16") in text
    with pytest.raises(flydsl.DSLError, match="gfx942"):
        _asm(raw_mfma, (A, B, C, fp8), "cuda", "sm_90", "ptx")


def test_other_rocdl_operations_are_the_raw_op_on_rocm_and_a_located_error_elsewhere():
    @flydsl.kernel
    def sleepy(x: fx.Tensor):
        fx.rocdl.s_sleep(2)  # mark: raw op
        x[0] = 1.0

    x = np.zeros(1, np.float32)
    assert "s_sleep 2" in _asm(sleepy, (x,), "rocm", "gfx942", "amdgcn")
    with pytest.raises(flydsl.DSLError, match="raw ROCDL operation") as e:
        sleepy[1, 1](x)
    assert f"test_flydsl_rocdl_atoms.py:{marked_line(__file__, 'mark: raw op')}:" in str(e.value)
    with pytest.raises(AttributeError):
        fx.rocdl.no_such_operation


@flydsl.kernel
def ragged_rows(x: fx.Tensor, y: fx.Tensor, rows: fx.Int32):
    """Copy a 4 x 8 tile whose buffer covers only `rows` rows (FlyDSL's num_records_bytes)."""
    i = fx.thread_idx.x
    src = fx.rocdl.make_buffer_tensor(x, max_size=False,
                                      num_records_bytes=fx.Int64(rows) * 8 * 4)
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
    regs = fx.make_fragment_like(fx.flat_divide(src, (1,))[None, i])
    fx.copy(atom, fx.flat_divide(src, (1,))[None, i], regs)
    y[i] = regs[0]


def test_num_records_bytes_bounds_the_buffer():
    x = np.arange(1, 33, dtype=np.float32)
    y = np.zeros(32, np.float32)
    ragged_rows[1, 32](x, y, 3)
    np.testing.assert_array_equal(y, np.where(np.arange(32) < 24, x, 0))
    assert "buffer_load_dword" in _asm(ragged_rows, (x, y, 3), "rocm", "gfx942", "amdgcn")


def _i32_type():
    return ir.IntegerType.get_signless(32)


@flydsl.kernel
def first_lane_flydsl_form(x: fx.Tensor, y: fx.Tensor):
    """FlyDSL's spelling: readfirstlane(T.i32, raw MLIR value)."""
    i = fx.thread_idx.x
    y[i] = fx.rocdl.readfirstlane(_i32_type(), (x[i] * 3).v)


@pytest.mark.filterwarnings("ignore:flydsl. kernel .first_lane_flydsl_form. is cached in memory")
def test_readfirstlane_takes_flydsls_result_type_and_raw_values():
    x = np.arange(64, dtype=np.int32) + 5
    y = np.zeros_like(x)
    first_lane_flydsl_form[1, 64](x, y)
    np.testing.assert_array_equal(y, 3 * x[np.arange(64) // 32 * 32])


# -- buffer copies into swizzled shared memory --------------------------------------------

#: Swizzle<1, 5, 1>: bit 6 of an offset is XORed into bit 5 (offset 64 -> 96).
_SW = (1, 5, 1)


def _swz(x: int) -> int:
    b, m, s = _SW
    return x ^ (((x >> (m + s)) & ((1 << b) - 1)) << m)


@flydsl.kernel
def lds_dma_swizzled(x: fx.Tensor, raw: fx.Tensor):
    """Each wave's buffer load to LDS through a swizzled view of the tile: the hardware
    puts lane k at the wave's LDS address + 4k bytes, linearly, so only the wave's base
    goes through the swizzle."""
    tid = fx.thread_idx.x
    wave, lane = tid // 64, tid % 64
    tile = fx.shared_array((256,), fx.Float32)
    tile[tid] = 0.0
    tile[128 + tid] = 0.0
    fx.barrier()
    sw = fx.make_view(tile, fx.make_composed_layout(fx.Swizzle(*_SW), fx.make_layout(256, 1)))
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float32)
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (1,))[None, wave * 64 + lane]
    dst = fx.flat_divide(sw, (1,))[None, fx.rocdl.readfirstlane(wave * 64)]
    fx.copy(atom, src, dst)
    fx.rocdl.s_waitcnt(vmcnt=0)
    fx.barrier()
    raw[tid] = tile[tid]
    raw[128 + tid] = tile[128 + tid]


def test_buffer_load_to_a_swizzled_lds_view_places_the_wave_base_through_the_swizzle():
    x = np.arange(1, 129, dtype=np.float32)
    tile = np.zeros(256, np.float32)
    lds_dma_swizzled[1, 128](x, tile)
    want = np.zeros(256, np.float32)
    for wave in range(2):
        base = _swz(wave * 64)                      # 0 and 96
        want[base:base + 64] = x[wave * 64:(wave + 1) * 64]
    np.testing.assert_array_equal(tile, want)
