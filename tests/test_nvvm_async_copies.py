"""fx.nvvm.CpAsync / LdMatrix copy atoms and cp.async groups: the exact per-lane
semantics on the CPU backend, the PTX on sm_90, and the cp.async + ldmatrix + mma.sync
GEMM of examples/gemm_cp_async.py (CPU against torch, sm_90 PTX and ptxas)."""
import re
import pathlib

import numpy as np
import pytest
import torch

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.compiler.toolchain import find_ptxas
from flydsl.errors import DSLTypeError
from flydsl.expr import mma_layouts
from conftest import load_script

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")


def _example():
    return load_script("examples/gemm_cp_async.py")


# -- ldmatrix ------------------------------------------------------------------------

@flyc.kernel
def _ldsm_kernel(X: fx.Tensor, Out: fx.Tensor, Rows: fx.Tensor, num: fx.Constexpr[int],
                 trans: fx.Constexpr[bool]):
    lane = fx.thread_idx.x
    s = fx.shared_array((32 * 8,), fx.Float16)
    sv = fx.make_view(s, fx.make_layout((32, 8), (8, 1)))
    for i in fx.range_constexpr(8):
        sv[lane, i] = X[lane, i]
    fx.barrier()
    frag = fx.make_rmem_tensor((2 * num,), fx.Float16)
    fx.copy(fx.make_copy_atom(fx.nvvm.LdMatrix(num, trans), fx.Float16),
            sv[Rows[lane], None], frag)
    for v in fx.range_constexpr(2 * num):
        Out[lane, v] = frag[v]


@flyc.jit
def _ldsm(X: fx.Tensor, Out: fx.Tensor, Rows: fx.Tensor, num: fx.Constexpr[int],
          trans: fx.Constexpr[bool]):
    _ldsm_kernel(X, Out, Rows, num, trans).launch(grid=(1, 1, 1), block=(32, 1, 1))


def _ldsm_reference(X: np.ndarray, rows: np.ndarray, num: int, trans: bool) -> np.ndarray:
    """PTX's ldmatrix: lane i addresses row i % 8 of matrix i // 8; lane L receives
    (row L//4, cols 2(L%4)+{0,1}) of each matrix (transposed with .trans)."""
    out = np.zeros((32, 2 * num), np.float32)
    for j in range(num):
        mat = np.stack([X[rows[8 * j + r]] for r in range(8)])
        if trans:
            mat = mat.T
        for lane in range(32):
            out[lane, 2 * j:2 * j + 2] = mat[lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2]
    return out


@pytest.mark.parametrize("num,trans", [(4, False), (4, True), (2, False), (1, True)])
def test_ldmatrix_gives_each_lane_its_fragment_on_the_cpu(num, trans):
    X = torch.arange(256, dtype=torch.float16).reshape(32, 8)
    rows = torch.randperm(32, generator=torch.Generator().manual_seed(num)).to(torch.int32)
    out = torch.zeros(32, 2 * num, dtype=torch.float16)
    _ldsm(X, out, rows, num, trans)
    np.testing.assert_array_equal(out.float().numpy(),
                                  _ldsm_reference(X.float().numpy(), rows.numpy(), num, trans))


def test_ldmatrix_x4_is_the_mma_sync_m16n8k16_a_fragment():
    """A 16 x 16 tile stored row-major; lane i addresses row (i%8) + 8*((i//8)%2) at
    column 8*(i//16): every lane then holds exactly its mma.sync A values."""
    tile = np.arange(256, dtype=np.float32).reshape(16, 16)
    X = torch.tensor(tile.reshape(32, 8), dtype=torch.float16)      # row r, half h -> 2r+h
    rows = torch.tensor([2 * ((i % 8) + 8 * ((i // 8) % 2)) + i // 16 for i in range(32)],
                        dtype=torch.int32)
    out = torch.zeros(32, 8, dtype=torch.float16)
    _ldsm(X, out, rows, 4, False)
    spec = fx.make_mma_atom(fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16)).spec
    want = [[tile[m, k] for (m, k) in lane] for lane in mma_layouts.lane_value_coords(spec, "a")]
    np.testing.assert_array_equal(out.float().numpy(), np.array(want))


@flyc.kernel
def _stsm_kernel(Out: fx.Tensor, Rows: fx.Tensor, num: fx.Constexpr[int],
                 trans: fx.Constexpr[bool]):
    lane = fx.thread_idx.x
    s = fx.shared_array((32 * 8,), fx.Float16)
    sv = fx.make_view(s, fx.make_layout((32, 8), (8, 1)))
    for i in fx.range_constexpr(8):
        sv[lane, i] = -1.0
    fx.barrier()
    frag = fx.make_rmem_tensor((2 * num,), fx.Float16)
    for v in fx.range_constexpr(2 * num):
        frag[v] = fx.Float32(lane * 8 + v)
    fx.copy(fx.make_copy_atom(fx.nvvm.StMatrix(num, trans), fx.Float16), frag,
            sv[Rows[lane], None])
    fx.barrier()
    for i in fx.range_constexpr(8):
        Out[lane, i] = sv[lane, i]


@flyc.jit
def _stsm(Out: fx.Tensor, Rows: fx.Tensor, num: fx.Constexpr[int], trans: fx.Constexpr[bool]):
    _stsm_kernel(Out, Rows, num, trans).launch(grid=(1, 1, 1), block=(32, 1, 1))


@pytest.mark.parametrize("num,trans", [(4, False), (2, True)])
def test_stmatrix_writes_each_lanes_fragment_to_the_addressed_rows_on_the_cpu(num, trans):
    rows = torch.randperm(32, generator=torch.Generator().manual_seed(7)).to(torch.int32)
    out = torch.zeros(32, 8, dtype=torch.float16)
    _stsm(out, rows, num, trans)
    want = np.full((32, 8), -1.0, np.float32)
    for j in range(num):
        mat = np.zeros((8, 8), np.float32)
        for lane in range(32):
            for e in range(2):
                r, c = lane // 4, 2 * (lane % 4) + e
                mat[(c, r) if trans else (r, c)] = lane * 8 + 2 * j + e
        for r in range(8):
            want[rows[8 * j + r].item()] = mat[r]
    np.testing.assert_array_equal(out.float().numpy(), want)


@flyc.kernel
def _ldsm_rows_kernel(Out: fx.Tensor, swizzle: fx.Constexpr[bool]):
    """ldmatrix.x4 of rows 0..31 (chunk 0) of a 32 x 64 half tile: 128-byte rows put
    the 8 rows of a matrix in one bank group unless the chunks are swizzled."""
    lane = fx.thread_idx.x
    s = fx.shared_array((32 * 64,), fx.Float16)
    rows = fx.make_layout((32, 64), (64, 1))
    if fx.const_expr(swizzle):
        rows = fx.make_composed_layout(fx.Swizzle(3, 3, 3), rows)
    sv = fx.make_view(s, rows)
    for i in fx.range_constexpr(64):
        sv[lane, i] = fx.Float32(lane)
    fx.barrier()
    frag = fx.make_rmem_tensor((8,), fx.Float16)
    row = fx.flat_divide(sv, (1, 8))[0, None, lane, 0]
    fx.copy(fx.make_copy_atom(fx.nvvm.LdMatrix(4), fx.Float16), row, frag)  # the ldmatrix line
    for v in fx.range_constexpr(8):
        Out[lane, v] = frag[v]


@flyc.jit
def _ldsm_rows(Out: fx.Tensor, swizzle: fx.Constexpr[bool]):
    _ldsm_rows_kernel(Out, swizzle).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_memory_profiler_sees_ldmatrix_bank_conflicts_and_the_swizzle_removing_them():
    text = pathlib.Path(__file__).read_text().splitlines()
    line = next(i + 1 for i, t in enumerate(text) if t.endswith("# the ldmatrix line"))
    out = torch.zeros(32, 8, dtype=torch.float16)
    with flydsl.profile("memory", arch="sm_90") as report:
        _ldsm_rows(out, False)
        _ldsm_rows(out, True)
    want = [[8 * (v // 2) + lane // 4 for v in range(8)] for lane in range(32)]
    np.testing.assert_array_equal(out.float().numpy(), np.array(want))
    plain = report.find(line, kernel="_ldsm_rows_kernel[swizzle=False]", space="shared")
    swizzled = report.find(line, kernel="_ldsm_rows_kernel[swizzle=True]", space="shared")
    assert plain.ways == 8.0 and swizzled.ways == 1.0


# -- cp.async ------------------------------------------------------------------------

@flyc.kernel
def _cp_kernel(X: fx.Tensor, Out: fx.Tensor, n: fx.Int32, bits: fx.Constexpr[int],
               cache: fx.Constexpr[str]):
    tid = fx.thread_idx.x
    vec = bits // 16
    s = fx.shared_array((64,), fx.Float16)
    atom = fx.make_copy_atom(fx.nvvm.CpAsync(bits, cache), fx.Float16)
    src = fx.flat_divide(X, (vec,))[None, tid]
    dst = fx.flat_divide(s, (vec,))[None, tid]
    pred = fx.make_rmem_tensor((1,), fx.Boolean)
    pred[0] = tid * vec < n
    fx.copy(atom, src, dst, pred=pred)
    fx.nvvm.cp_async_commit_group()
    fx.nvvm.cp_async_wait_group(0)
    fx.barrier()
    for i in fx.range_constexpr(vec):
        Out[tid * vec + i] = s[tid * vec + i]


@flyc.jit
def _cp(X: fx.Tensor, Out: fx.Tensor, n: fx.Int32, bits: fx.Constexpr[int],
        cache: fx.Constexpr[str]):
    _cp_kernel(X, Out, n, bits, cache).launch(grid=(1, 1, 1), block=(64 * 16 // bits, 1, 1))


@pytest.mark.parametrize("bits,cache", [(128, "cg"), (32, "ca")])
def test_cp_async_copies_and_zero_fills_predicated_off_calls_on_the_cpu(bits, cache):
    X = torch.arange(1, 65, dtype=torch.float16)
    out = torch.full((64,), -1.0, dtype=torch.float16)
    _cp(X, out, 40, bits, cache)
    want = np.where(np.arange(64) < 40, np.arange(1, 65), 0)
    np.testing.assert_array_equal(out.float().numpy(), want)


def test_cp_async_atom_arguments_are_checked():
    with pytest.raises(DSLTypeError, match="16 bytes"):
        fx.nvvm.CpAsync(64, "cg")
    with pytest.raises(DSLTypeError, match="32, 64 or 128"):
        fx.nvvm.CpAsync(16)
    with pytest.raises(DSLTypeError, match="1, 2 or 4"):
        fx.nvvm.LdMatrix(3)
    assert repr(fx.make_copy_atom(fx.nvvm.CpAsync(128, "cg"), fx.BFloat16)) == \
        "CopyAtom(CpAsync128b, BFloat16)"


@flyc.kernel
def _cp_to_global_kernel(X: fx.Tensor, Out: fx.Tensor):
    fx.copy(fx.make_copy_atom(fx.nvvm.CpAsync(32), fx.Float16),
            fx.flat_divide(X, (2,))[None, 0], fx.flat_divide(Out, (2,))[None, 0])


@flyc.jit
def _cp_to_global(X: fx.Tensor, Out: fx.Tensor):
    _cp_to_global_kernel(X, Out).launch(grid=(1, 1, 1), block=(1, 1, 1))


def test_cp_async_into_global_memory_is_a_located_error():
    X = torch.zeros(4, dtype=torch.float16)
    with pytest.raises(DSLTypeError, match="destination must be shared memory"):
        _cp_to_global(X, X.clone())


def test_cp_async_on_rocm_names_the_amd_alternative():
    X, out = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float16)
    with pytest.raises(DSLTypeError, match="BufferCopyLDS"):
        flydsl.compile(_cp, X, out, 64, 128, "cg", backend="rocm", arch="gfx942")


@needs_ptxas
def test_cp_async_and_ldmatrix_ptx_on_sm90():
    X, out = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float16)
    ptx = flydsl.compile(_cp, X, out, 40, 64, "ca", backend="cuda", arch="sm_90").asm["ptx"]
    assert "cp.async.ca.shared.global" in ptx
    assert re.search(r"cp\.async\.wait_group\s+0;", ptx)
    assert "cp.async.commit_group" in ptx
    Y = torch.zeros(32, 8, dtype=torch.float16)
    rows = torch.zeros(32, dtype=torch.int32)
    ptx = flydsl.compile(_ldsm, Y, torch.zeros(32, 4, dtype=torch.float16), rows, 2, True,
                         backend="cuda", arch="sm_90").asm["ptx"]
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    ptx = flydsl.compile(_stsm, torch.zeros(32, 8, dtype=torch.float16), rows, 4, False,
                         backend="cuda", arch="sm_90").asm["ptx"]
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    with pytest.raises(DSLTypeError, match="sm_90 or later"):
        flydsl.compile(_stsm, torch.zeros(32, 8, dtype=torch.float16), rows, 4, False,
                       backend="cuda", arch="sm_80")


# -- the GEMM --------------------------------------------------------------------------

def test_cp_async_gemm_matches_torch_on_the_cpu(monkeypatch):
    """Edges in M, N and K (K = 40: one full K tile and a 8-wide tail)."""
    # -O0: the same results, a quarter of the compile (LLVM -O3: ~27 s of CPU)
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")
    g = _example()
    torch.manual_seed(0)
    A = torch.randn(72, 40, dtype=torch.float16)
    B = torch.randn(80, 40, dtype=torch.float16)
    C = torch.zeros(72, 80, dtype=torch.float32)
    g.gemm(A, B, C)
    torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)


@needs_ptxas
@pytest.mark.parametrize("K,copy", [(64, "cp.async.cg.shared.global"),
                                    (36, "cp.async.ca.shared.global")])
def test_cp_async_gemm_ptx_on_sm90_has_the_pipeline_and_no_spills(K, copy):
    g = _example()
    A = torch.zeros(128, K, dtype=torch.bfloat16)
    B = torch.zeros(128, K, dtype=torch.bfloat16)
    C = torch.zeros(128, 128, dtype=torch.float32)
    prog = flydsl.compile(g.gemm, A, B, C, backend="cuda", arch="sm_90")
    ptx = prog.asm["ptx"]
    lines = ptx.splitlines()

    def count(s):
        return sum(s in line for line in lines)
    # per thread: 2 prologue stages + 1 in the loop, 2 calls each for A and B (K = 64)
    assert count(copy) == (12 if K == 64 else 24)
    assert count("cp.async.commit_group") == 3
    assert count("cp.async.wait_group") == 2
    assert count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 8
    assert count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16
    assert count("ld.global") == 0 and count("st.shared") == 0      # all through cp.async
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0
    assert 0 < meta.registers <= 128
    assert meta.shared_bytes == 2 * g.STAGES * g.BM * g.BK * 2
