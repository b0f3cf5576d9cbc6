"""fx.pipeline: the multistage loop over tiles with cp.async groups, LDS DMA waits and
TMA + mbarrier stages: results on the CPU backend (where a missing wait or barrier
gives wrong sums: a thread reads another thread's elements of a stage the next load
overwrites), the instructions on sm_80/sm_90a/gfx942, and the argument checks."""
import re

import pytest
import torch

import flydsl
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.compiler.toolchain import find_ptxas
from flydsl.errors import DSLError

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas (CUDA toolkit) not found")
W = 64          # elements per tile; 32 threads load 2 each


@flyc.kernel
def _stream_kernel(X: fx.Tensor, Out: fx.Tensor, KT: fx.Int32, stages: fx.Constexpr[int],
                   sync: fx.Constexpr[str], split: fx.Constexpr[bool]):
    """Out[t] = sum over tiles of the 2 elements thread t + 1 loaded: every read of a
    stage crosses threads, so it needs the pipeline's wait and barrier."""
    t = fx.thread_idx.x
    s = fx.make_view(fx.shared_array((stages * W,), fx.Float16),
                     fx.make_layout((W, stages), (1, W)))
    atom = fx.make_copy_atom(fx.nvvm.CpAsync(32, "ca"), fx.Float16)

    def load_tile(kt, stage):
        if sync == "cp_async":
            fx.copy(atom, fx.flat_divide(X, (1, 2))[0, None, kt, t],
                    fx.flat_divide(s, (2, 1))[None, 0, t, stage])
        else:
            for i in fx.range_constexpr(2):
                s[2 * t + i, stage] = X[kt, 2 * t + i]

    acc = fx.make_rmem_tensor((1,), fx.Float32)
    acc[0] = 0.0
    pipe = fx.pipeline(load_tile, stages=stages, tiles=KT, sync=sync)
    j = (t + 1) % 32
    for kt in range(KT):
        if split:
            stage = pipe.wait(kt)
            pipe.prefetch(kt)
        else:
            stage = pipe.acquire(kt)
        acc[0] = acc[0] + fx.cast(s[2 * j, stage], fx.Float32) + fx.cast(s[2 * j + 1, stage],
                                                                          fx.Float32)
    pipe.finish()
    Out[t] = acc[0]


@flyc.jit
def _stream(X: fx.Tensor, Out: fx.Tensor, KT: fx.Int32, stages: fx.Constexpr[int],
            sync: fx.Constexpr[str], split: fx.Constexpr[bool] = False):
    _stream_kernel(X, Out, KT, stages, sync, split).launch(grid=(1, 1, 1), block=(32, 1, 1))


def _stream_reference(X: torch.Tensor) -> torch.Tensor:
    pairs = X.float().reshape(X.shape[0], 32, 2).sum(2).sum(0)
    return pairs.roll(-1)


@pytest.mark.parametrize("sync", ["cp_async", "lds_dma"])
@pytest.mark.parametrize("stages,KT", [(2, 1), (2, 7), (3, 1), (3, 2), (4, 9), (3, 0)])
def test_pipeline_streams_every_tile_once_on_the_cpu(sync, stages, KT):
    X = torch.randint(-8, 9, (max(KT, 1), W)).to(torch.float16)
    out = torch.full((32,), -1.0)
    _stream(X, out, KT, stages, sync)
    want = _stream_reference(X[:KT]) if KT else torch.zeros(32)
    torch.testing.assert_close(out, want)


def test_wait_then_prefetch_is_the_same_loop_on_the_cpu():
    X = torch.randint(-8, 9, (6, W)).to(torch.float16)
    out = torch.zeros(32)
    _stream(X, out, 6, 3, "cp_async", True)
    torch.testing.assert_close(out, _stream_reference(X))


@needs_ptxas
def test_cp_async_pipeline_ptx_on_sm80():
    prog = flydsl.compile(_stream, torch.zeros(5, W, dtype=torch.float16), torch.zeros(32),
                          5, 3, "cp_async", backend="cuda", arch="sm_80")
    ptx = prog.asm["ptx"]
    # 2 prologue tiles + 1 per iteration, each one commit group; one wait in the loop
    # and the final wait_group 0
    assert ptx.count("cp.async.ca.shared.global") == 3
    assert ptx.count("cp.async.commit_group") == 3
    assert re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx) == ["1", "0"]
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0


def test_lds_dma_pipeline_waits_for_vmem_then_barriers_on_gfx942():
    prog = flydsl.compile(_stream, torch.zeros(5, W, dtype=torch.float16), torch.zeros(32),
                          5, 2, "lds_dma", backend="rocm", arch="gfx942")
    text = prog.asm["amdgcn"]
    # the loop's wait: every vector memory access landed, then the block barrier
    assert re.search(r"s_waitcnt vmcnt\(0\)[^\n]*\n\s*s_barrier", text)


# -- TMA + mbarrier --------------------------------------------------------------------

@flyc.kernel
def _tma_kernel(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, KT: fx.Int32,
                stages: fx.Constexpr[int]):
    """C (64 x 32) = A (64 x 64 KT) B^T with wgmma: thread 0 keeps stages - 1 tiles in
    flight through the pipeline's mbarriers."""
    t = fx.thread_idx.x
    N = 32
    op = fx.nvvm.WGMMA(N, fx.BFloat16, swizzle=128)
    sa0 = fx.get_iter(fx.SharedAllocator().allocate(
        fx.Array[fx.BFloat16, stages * 64 * 64, 1024]).peek().view(
            fx.make_layout(stages * 64 * 64, 1)))
    sb0 = fx.get_iter(fx.SharedAllocator().allocate(
        fx.Array[fx.BFloat16, stages * N * 64, 1024]).peek().view(
            fx.make_layout(stages * N * 64, 1)))

    def load_tile(kt, stage, bar):
        fx.nvvm.tma_load(DA, sa0 + stage * 64 * 64, bar, (0, kt * 64))
        fx.nvvm.tma_load(DB, sb0 + stage * N * 64, bar, (0, kt * 64))

    acc = fx.make_rmem_tensor((N // 2,), fx.Float32)
    for i in fx.range_constexpr(N // 2):
        acc[i] = 0.0
    pipe = fx.pipeline(load_tile, stages=stages, tiles=KT, sync="tma",
                       tx_bytes=(64 + N) * 64 * 2)
    for kt in range(KT):
        s = pipe.acquire(kt)
        fx.nvvm.wgmma_fence()
        for kk in fx.range_constexpr(4):
            fx.nvvm.wgmma(op, acc, sa0 + s * 64 * 64 + 16 * kk, sb0 + s * N * 64 + 16 * kk)
        fx.nvvm.wgmma_commit_group()
        fx.nvvm.wgmma_wait_group(0)
    pipe.finish()
    for i in fx.range_constexpr(N // 2):
        r, c = op.acc_coord(t, i)
        if t < 128:
            Out[r, c] = acc[i]


@flyc.jit
def _tma(DA: fx.Tensor, DB: fx.Tensor, Out: fx.Tensor, KT: fx.Int32,
         stages: fx.Constexpr[int]):
    _tma_kernel(DA, DB, Out, KT, stages).launch(grid=(1, 1, 1), block=(128, 1, 1))


def _descriptors(A, B):
    return (fx.nvvm.make_tma_descriptor(A, (64, 64), swizzle=128),
            fx.nvvm.make_tma_descriptor(B, (32, 64), swizzle=128))


@pytest.mark.parametrize("stages,KT", [(3, 5), (3, 1), (4, 2)])
def test_tma_pipeline_matches_torch_on_the_cpu(monkeypatch, stages, KT):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")        # a stuck phase would raise
    g = torch.Generator().manual_seed(stages * 10 + KT)
    A = torch.randint(-3, 4, (64, 64 * KT), generator=g).to(torch.bfloat16)
    B = torch.randint(-3, 4, (32, 64 * KT), generator=g).to(torch.bfloat16)
    C = torch.zeros(64, 32)
    _tma(*_descriptors(A, B), C, KT, stages)
    assert torch.equal(C, A.float() @ B.float().T)


@needs_ptxas
def test_tma_pipeline_ptx_on_sm90a():
    A, B = torch.zeros(64, 320, dtype=torch.bfloat16), torch.zeros(32, 320, dtype=torch.bfloat16)
    prog = flydsl.compile(_tma, *_descriptors(A, B), torch.zeros(64, 32), 5, 3,
                          backend="cuda", arch="sm_90a")
    ptx = prog.asm["ptx"]
    # 2 prologue tiles + 1 per iteration, A and B each; one arm per tile
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier") == 6
    assert ptx.count("mbarrier.arrive.expect_tx") == 3
    assert ptx.count("mbarrier.init.shared") == 3
    assert "mbarrier.try_wait.parity" in ptx
    meta = prog.kernels[0].metadata
    assert meta.spill_bytes == 0 and meta.local_bytes == 0


# -- checks ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(stages=1, tiles=4, sync="cp_async"), "stages must be an int >= 2"),
    (dict(stages=2, tiles=4, sync="async"), "sync must be one of"),
    (dict(stages=2, tiles=4, sync="tma"), "tx_bytes"),
    (dict(stages=2, tiles=4, sync="cp_async", tx_bytes=64), "tx_bytes"),
])
def test_pipeline_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fx.pipeline(lambda kt, stage: None, **kwargs)


@flyc.kernel
def _prefetch_first_kernel(X: fx.Tensor, KT: fx.Int32):
    pipe = fx.pipeline(lambda kt, stage: None, stages=2, tiles=KT, sync="cp_async")
    for kt in range(KT):
        pipe.prefetch(kt)


@flyc.jit
def _prefetch_first(X: fx.Tensor, KT: fx.Int32):
    _prefetch_first_kernel(X, KT).launch(grid=(1, 1, 1), block=(32, 1, 1))


def test_prefetch_before_wait_is_a_located_error():
    with pytest.raises(DSLError, match="prefetch\\(kt\\) must follow wait\\(kt\\)") as e:
        _prefetch_first(torch.zeros(4), 3)
    assert "_prefetch_first_kernel" in str(e.value)
