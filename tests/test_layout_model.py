"""The layout programming model end to end: views, fragments, tiled copies and MMA atoms.

Everything runs on the CPU backend (checked against numpy/torch); the GPU codegen of
the same kernels is compiled for sm_90 and gfx942 and the instructions that matter
are asserted in the assembly (the CPU twins of GPU runs)."""
import mmap
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import mma_layouts

GPU_TARGETS = [("cuda", "sm_90", "ptx"), ("rocm", "gfx942", "amdgcn")]


def test_flyc_is_flydsl():
    assert flyc.kernel is flydsl.kernel and flyc.jit is flydsl.jit


# -- the tutorial examples ----------------------------------------------------------------

def test_vector_add_2d_example():
    import vector_add_2d
    vector_add_2d.main()


def test_tiled_copy_example():
    import tiled_copy
    tiled_copy.main()


def test_tiled_mma_example():
    import tiled_mma
    tiled_mma.main()


@pytest.mark.parametrize("atom", ["mfma", "mma"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_matches_torch_matmul(atom, dtype):
    torch = pytest.importorskip("torch")
    from layout_gemm import gemm
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    # multiples of the 64 x 64 x 32 tile and not, K a multiple of 8 (128-bit copies) and not
    for M, N, K in [(64, 64, 32), (100, 72, 40), (65, 33, 17), (1, 130, 7)]:
        A, B = torch.randn(M, K, dtype=tdt), torch.randn(N, K, dtype=tdt)
        C = torch.full((M, N), float("nan"))
        gemm(A, B, C, atom=atom)
        torch.testing.assert_close(C, torch.matmul(A.float(), B.float().T), rtol=1e-4, atol=1e-4)


# -- GPU codegen (no GPU needed) -------------------------------------------------------------

def _asm(fn, args, backend, arch, stage):
    return flydsl.compile(fn, *args, backend=backend, arch=arch).asm[stage]


@pytest.mark.parametrize("backend,arch,stage", GPU_TARGETS)
def test_128_bit_copies_are_one_vector_instruction(backend, arch, stage):
    from vector_add_2d import vector_add
    A = np.zeros((100, 1000), np.float32)
    text = _asm(vector_add, (A, A, A), backend, arch, stage)
    if backend == "cuda":
        assert re.search(r"ld\.global\.v4\.(b|f)32", text)
        assert re.search(r"st\.global\.v4\.(b|f)32", text)
    else:
        assert "global_load_dwordx4" in text and "global_store_dwordx4" in text


def test_buffer_copies_on_gfx942():
    from tiled_copy import tiled_copy
    X = np.zeros((24, 120), np.float32)
    text = _asm(tiled_copy, (X, X), "rocm", "gfx942", "amdgcn")
    assert "buffer_load_dwordx4" in text and "buffer_store_dwordx4" in text


@pytest.mark.parametrize("backend,arch,stage", GPU_TARGETS)
def test_gemm_uses_matrix_cores(backend, arch, stage):
    torch = pytest.importorskip("torch")
    from layout_gemm import gemm
    a, c = torch.zeros(256, 256, dtype=torch.float16), torch.zeros(256, 256)
    text = _asm(gemm, (a, a, c), backend, arch, stage)
    if backend == "cuda":
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in text
        assert re.search(r"ld\.global\.v4\.(b|f)32", text)
    else:
        assert "v_mfma_f32_16x16x16_f16" in text or "v_mfma_f32_16x16x16f16" in text
        assert "global_load_dwordx4" in text


def test_f32_mfma_of_the_tiled_mma_example():
    from tiled_mma import tiled_mma
    A = np.zeros((64, 8), np.float32)
    C = np.zeros((64, 64), np.float32)
    text = _asm(tiled_mma, (A, A, C), "rocm", "gfx942", "amdgcn")
    assert "v_mfma_f32_16x16x4" in text


def test_an_atom_the_target_lacks_is_an_error_naming_the_arches_that_have_it():
    @flydsl.kernel
    def uses_mfma(A: fx.Tensor):
        atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))   # built: no error
        ab = fx.make_rmem_tensor(1, fx.Float32)
        c = fx.make_rmem_tensor(4, fx.Float32)
        fx.gemm(atom, c, ab, ab, c)                                     # used: refused

    with pytest.raises(flydsl.DSLError) as e:
        flydsl.compile(uses_mfma, np.zeros(4, np.float32), backend="cuda", arch="sm_90")
    assert "gfx942" in str(e.value) and "test_layout_model.py" in str(e.value)
    assert "fx.gemm" in e.value.source_line


def test_unknown_mma_shape_lists_the_shapes_that_exist():
    with pytest.raises(flydsl.DSLError, match="16x16x4"):
        fx.make_mma_atom(fx.rocdl.MFMA(8, 8, 8, fx.Float32))


# -- every MMA atom on the CPU has its hardware's per-lane semantics -------------------------

ATOMS = {
    "mfma_f32_16x16x4f32": lambda: fx.rocdl.MFMA(16, 16, 4, fx.Float32),
    "mfma_f32_32x32x2f32": lambda: fx.rocdl.MFMA(32, 32, 2, fx.Float32),
    "mfma_f32_32x32x8f16": lambda: fx.rocdl.MFMA(32, 32, 8, fx.Float16),
    "mfma_f32_16x16x16f16": lambda: fx.rocdl.MFMA(16, 16, 16, fx.Float16),
    "mfma_f32_16x16x16bf16_1k": lambda: fx.rocdl.MFMA(16, 16, 16, fx.BFloat16),
    "wmma_f32_16x16x16_f16_gfx11": lambda: fx.rocdl.WMMA(16, 16, 16, fx.Float16),
    "mma_m16n8k16_f32_f16": lambda: fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16),
    "mma_m16n8k16_f32_bf16": lambda: fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.BFloat16),
    "mma_m16n8k8_f32_tf32": lambda: fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"),
}


@flydsl.kernel
def one_atom(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, op: fx.Constexpr):
    """Each lane loads exactly the A/B values the atom's table gives it, runs the atom,
    and stores its accumulators where the table says they belong."""
    lane = fx.thread_idx.x
    atom = fx.make_mma_atom(op)
    a_tv, b_tv, c_tv = atom.layout_A_tv, atom.layout_B_tv, atom.layout_C_tv
    m, n, k = atom.shape_mnk.unpack()
    fa = fx.make_rmem_tensor(fx.size(a_tv[1]), atom.ab_dtype)
    fb = fx.make_rmem_tensor(fx.size(b_tv[1]), atom.ab_dtype)
    fc = fx.make_rmem_tensor(fx.size(c_tv[1]), fx.Float32)
    for v in fx.range_constexpr(fx.size(a_tv[1])):
        i = a_tv((lane, v))
        fa[v] = A[i % m, i // m]
    for v in fx.range_constexpr(fx.size(b_tv[1])):
        i = b_tv((lane, v))
        fb[v] = B[i % n, i // n]
    fc.fill(0.0)
    fx.gemm(atom, fc, fa, fb, fc)
    for v in fx.range_constexpr(fx.size(c_tv[1])):
        i = c_tv((lane, v))
        C[i % m, i // m] = fc[v]


@pytest.mark.parametrize("name", sorted(ATOMS))
def test_cpu_runs_each_atom_with_its_lane_layout(name):
    spec = mma_layouts.SPECS[name]
    rng = np.random.default_rng(1)
    npdt = {"f32": np.float32, "tf32": np.float32, "f16": np.float16, "bf16": np.float32}
    A = rng.integers(-4, 5, (spec.m, spec.k)).astype(npdt[spec.ab_dtype])
    B = rng.integers(-4, 5, (spec.n, spec.k)).astype(npdt[spec.ab_dtype])
    if spec.ab_dtype == "bf16":
        torch = pytest.importorskip("torch")
        A, B = torch.from_numpy(A).bfloat16(), torch.from_numpy(B).bfloat16()
        ref = (A.float() @ B.float().T).numpy()
    else:
        ref = A.astype(np.float32) @ B.astype(np.float32).T
    C = np.full((spec.m, spec.n), np.nan, np.float32)
    one_atom[1, spec.lanes](A, B, C, ATOMS[name]())
    np.testing.assert_array_equal(C, ref)


def test_tf32_inputs_keep_ten_mantissa_bits_on_the_cpu():
    x = np.float32(1 + 2**-12)              # below tf32 precision: truncated to 1
    A = np.full((16, 8), x, np.float32)
    B = np.zeros((8, 8), np.float32)
    B[:, 0] = 1
    C = np.zeros((16, 8), np.float32)
    one_atom[1, 32](A, B, C, fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"))
    assert C[0, 0] == 1.0


# -- copies: predicates and alignment ----------------------------------------------------------

_GUARDED = textwrap.dedent("""
    import mmap, ctypes, sys
    import numpy as np
    sys.path.insert(0, {path!r})
    from vector_add_2d import vector_add
    PAGE = mmap.PAGESIZE

    def guarded(shape, shift):
        # the array ends where a PROT_NONE page begins: one element past it faults
        nbytes = int(np.prod(shape)) * 4
        pages = (nbytes + shift + PAGE - 1) // PAGE + 1
        buf = mmap.mmap(-1, (pages + 1) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(base + pages * PAGE, PAGE, 0) == 0
        start = pages * PAGE - nbytes
        arr = np.frombuffer(buf, np.float32, count=nbytes // 4, offset=start).reshape(shape)
        KEEP.append(buf)
        return arr

    KEEP = []
    M, N = 100, 1000
    A, B, C = guarded((M, N), 0), guarded((M, N), 0), guarded((M, N), 0)
    A[:] = np.arange(M * N, dtype=np.float32).reshape(M, N)
    B[:] = 1
    vector_add(A, B, C)
    assert (C == A + 1).all()
    print("OK")
""")


def test_predicated_off_vectors_never_touch_memory_past_the_tensor(tmp_path):
    """The grid covers 104 rows of a 100-row tensor whose last byte is followed by an
    inaccessible page: a vector read or written past the predicate would fault."""
    import os
    script = tmp_path / "guarded.py"
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "layout")
    script.write_text(_GUARDED.format(path=here))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


def test_misaligned_views_copy_exactly():
    """A tensor starting 4 bytes past a 16-byte boundary: the CPU loads unaligned
    vectors; the results are exact."""
    from vector_add_2d import vector_add
    A = np.arange(100 * 1000, dtype=np.float32).reshape(100, 1000)
    A2 = np.zeros(100 * 1000 + 1, np.float32)[1:].reshape(100, 1000)   # base off by 4 bytes
    A2[:] = A
    assert A2.ctypes.data % 16 != 0
    B = np.ones((100, 1000), np.float32)
    C = np.zeros((100, 1000), np.float32)
    vector_add(A2, B, C)
    np.testing.assert_array_equal(C, A + 1)


def test_cuda_vector_copies_are_guarded_by_a_run_time_alignment_check():
    """On NVIDIA GPUs a misaligned vector access faults: a misaligned address takes a
    per-element path, so the scalar fallback is in the code next to the vector one.
    (On gfx942, which accepts dword-aligned vector accesses, LLVM merges the fallback
    back into a dwordx4.) Rows 4004 bytes apart are not specialized as aligned; rows
    4000 bytes apart are, and there the check folds away, leaving the vector path."""
    from vector_add_2d import vector_add
    A = np.zeros((100, 1001), np.float32)
    text = _asm(vector_add, (A, A, A), "cuda", "sm_90", "ptx")
    assert re.search(r"ld\.global\.(b|f)32", text)
    assert re.search(r"ld\.global\.v4\.(b|f)32", text)
    A = np.zeros((100, 1000), np.float32)
    assert A.ctypes.data % 16 == 0
    text = _asm(vector_add, (A, A, A), "cuda", "sm_90", "ptx")
    assert not re.search(r"ld\.global\.(b|f)32", text)
    assert re.search(r"ld\.global\.v4\.(b|f)32", text)


def test_fx_copy_rejects_mismatched_views():
    @flydsl.kernel
    def bad(A: fx.Tensor, B: fx.Tensor):
        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        src = fx.flat_divide(A, (8,))[None, 0]
        dst = fx.flat_divide(B, (4,))[None, 0]
        fx.copy(atom, src, dst)

    with pytest.raises(flydsl.DSLError, match="source has 8 elements"):
        bad[1, 1](np.zeros(8, np.float32), np.zeros(8, np.float32))


# -- fragments and the algebra inside kernels ---------------------------------------------------

@flydsl.kernel
def fragments(X: fx.Tensor, Y: fx.Tensor):
    i = fx.block_idx.x
    row = fx.slice(fx.zipped_divide(X, (1, 8)), (None, (i, 0)))    # row i: a 1 x 8 tile
    frag = fx.make_fragment_like(row)
    atom = fx.make_copy_atom(fx.UniversalCopy64b(), fx.Float32)
    fx.copy(atom, row, frag)
    twice = frag.load() * 2 + 1
    out = fx.make_fragment_like(frag)
    out.store(twice)
    fx.copy(atom, out, fx.slice(fx.zipped_divide(Y, (1, 8)), (None, (i, 0))))


def test_fragment_load_store_arithmetic():
    X = np.arange(24, dtype=np.float32).reshape(3, 8)
    Y = np.zeros_like(X)
    fragments[3, 1](X, Y)
    np.testing.assert_array_equal(Y, X * 2 + 1)


@flydsl.kernel
def dynamic_algebra(out: fx.Tensor, M: fx.Int32, N: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < M * N:
        L = fx.make_layout((M, N), (N, 1))                     # row-major, runtime shape
        m, n = fx.idx2crd(i, L.shape)                           # column-major coordinate
        tiled = fx.zipped_divide(L, (2, 4))                    # ((2,4),(M/2,N/4))
        out[i] = fx.crd2idx((m, n), L) * 1000 + fx.size(tiled[1])


def test_layout_algebra_with_runtime_shapes_inside_a_kernel():
    M, N = 6, 8
    out = np.zeros(M * N, np.int32)
    dynamic_algebra[1, 64](out, M, N)
    i = np.arange(M * N)
    m, n = i % M, i // M
    np.testing.assert_array_equal(out, (m * N + n) * 1000 + (M // 2) * (N // 4))


def test_static_algebra_in_plain_python():
    L = fx.make_layout((8, 16), (1, 8))
    assert L.shape == (8, 16) and L.stride == (1, 8)
    assert L((3, 5)) == 43 and fx.crd2idx((3, 5), L) == 43
    assert fx.size(L) == 128 and fx.cosize(L) == 128 and fx.rank(L) == 2
    tiler, tv = fx.make_layout_tv(fx.make_ordered_layout((8, 16), order=(1, 0)),
                                  fx.make_ordered_layout((1, 4), order=(0, 1)))
    assert tuple(tiler) == (8, 64) and fx.size(tv) == 512


@flydsl.kernel
def permuted_k_round_trip(x: fx.Tensor, out: fx.Tensor):
    """A tile loaded by a 128-bit copy into a K-permuted MMA fragment (retile), then
    written back through the MMA's own partition: out == x when retile puts every
    copied value in the register the MMA reads it from (FlyDSL's preshuffle GEMM)."""
    tid = fx.thread_idx.x
    mma = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)),
                            fx.make_layout((1, 1, 1), (0, 0, 0)),
                            fx.make_tile(None, None, fx.make_layout((4, 4, 2), (1, 8, 4))))
    A = fx.make_view(x, fx.make_layout((32, 64), (64, 1)))     # two M repeats
    O = fx.make_view(out, fx.make_layout((32, 64), (64, 1)))
    thr_mma = mma.thr_slice(tid)
    frag = thr_mma.make_fragment_A(A)
    s2r = fx.make_tiled_copy_A(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16),
                               mma).get_slice(tid)
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float16), s2r.partition_S(A),
            s2r.retile(frag))
    fx.copy(fx.make_copy_atom(fx.UniversalCopy16b(), fx.Float16), frag,
            thr_mma.partition_A(O))


def test_retile_regroups_a_k_permuted_fragment_in_copy_order():
    x = np.arange(32 * 64).astype(np.float16)
    out = np.zeros_like(x)
    permuted_k_round_trip[1, 64](x, out)
    np.testing.assert_array_equal(out, x)


def test_retile_refuses_a_fragment_of_another_tiled_mma():
    """A copy made from one tiled MMA lists values in that MMA's order: a fragment of
    a differently laid-out MMA would be filled silently wrong."""
    @flydsl.kernel
    def mismatch(A: fx.Tensor):
        tid = fx.thread_idx.x
        mma = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
        mine = fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (1, 2, 0)))
        other = fx.make_tiled_mma(mma, fx.make_layout((2, 2, 1), (2, 1, 0)))
        bA = fx.slice(fx.zipped_divide(A, (64, 8)), (None, 0))
        frag = mine.thr_slice(tid).make_fragment_A(bA)
        atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
        copy = fx.make_tiled_copy_A(atom, other).get_slice(tid)
        copy.retile(frag)

    with pytest.raises(flydsl.DSLError, match="another tiled MMA"):
        mismatch[1, 256](np.zeros((64, 8), np.float32))


def test_flydsl_spelling_of_mfma_input_types():
    assert fx.rocdl.MFMA(16, 16, 16, fx.Float32, elem_ty_ab=fx.Float16) == \
        fx.rocdl.MFMA(16, 16, 16, fx.Float16)
    assert fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float32, ab_dtype=fx.BFloat16)) \
        .spec.name == "mfma_f32_16x16x16bf16_1k"


@pytest.mark.parametrize("backend,arch,make_op,instruction", [
    ("rocm", "gfx942", lambda: fx.rocdl.MFMA(16, 16, 16, fx.BFloat16), "v_mfma_f32_16x16x16_bf16"),
    ("rocm", "gfx942", lambda: fx.rocdl.MFMA(32, 32, 8, fx.Float16), "v_mfma_f32_32x32x8_f16"),
    ("rocm", "gfx1100", lambda: fx.rocdl.WMMA(16, 16, 16, fx.Float16), "v_wmma_f32_16x16x16_f16"),
    ("rocm", "gfx1100", lambda: fx.rocdl.WMMA(16, 16, 16, fx.BFloat16), "v_wmma_f32_16x16x16_bf16"),
    ("rocm", "gfx1201", lambda: fx.rocdl.WMMA(16, 16, 16, fx.Float16), "v_wmma_f32_16x16x16_f16"),
    ("cuda", "sm_90", lambda: fx.nvvm.MMA(16, 8, 8, fx.Float32, ab_dtype="tf32"),
     "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("cuda", "sm_90", lambda: fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.BFloat16),
     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
])
def test_each_atom_family_emits_its_instruction(backend, arch, make_op, instruction):
    A, C = np.zeros((32, 16), np.float32), np.zeros((32, 32), np.float32)
    text = _asm(one_atom, (A, A, C, make_op()), backend, arch,
                "amdgcn" if backend == "rocm" else "ptx")
    assert instruction in text
