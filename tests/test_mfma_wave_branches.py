"""Raw MFMA calls under an ``if`` that whole waves take or skip (issue 31).

On a GPU an MFMA is one instruction of its wave, so ``if tid // 64 == k:`` around it is
legal (upstream FlyDSL's producer/consumer waves). The CPU emulates it with an exchange
through the wave's own scratch between barriers; those barriers are wave-scoped
(``flydsl.wave_exchange``), so the CPU runs such an ``if`` predicated, like a warp
shuffle's, instead of refusing it as a divergent block barrier. A condition that splits a
wave is a located error (LLVM declares ``llvm.amdgcn.mfma.*`` convergent: a wave's lanes
must reach it together). Inputs are small integers: every sum is exact in f32."""
import re

import mlir.ir as ir
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DivergentBarrierError, UnsupportedConstructError
from flydsl.expr import T
from flydsl.expr.typing import Vector as Vec
from flydsl.runtime.debug_checks import DeviceAssertError
from test_mma_raw_calls import traced_ir

WAVES = 4
#: per-wave flags the loaded condition reads
FLAGS = np.array([1, 0, 0, 1], np.int32)
#: trips of the loop whose trip i runs an MFMA in wave i % WAVES only
TRIPS = 6


def _lane_operands(A, B):
    """The 16x16x16 f16 MFMA's A and B values of the calling lane (gfx942's layouts)."""
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    a_tv, b_tv = atom.layout_A_tv, atom.layout_B_tv
    lane = fx.thread_idx.x % 64
    a = Vec.from_elements([fx.Float16(A[a_tv((lane, v)) % 16, a_tv((lane, v)) // 16])
                           for v in fx.range_constexpr(4)], fx.Float16)
    b = Vec.from_elements([fx.Float16(B[b_tv((lane, v)) % 16, b_tv((lane, v)) // 16])
                           for v in fx.range_constexpr(4)], fx.Float16)
    return a, b


def _store(C, wave, acc):
    """The lane's 4 accumulators to ``C[wave]`` (16 x 16); ``acc``: a vector value, or
    the MFMA op the ROCm backend returns."""
    c_tv = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16)).layout_C_tv
    lane = fx.thread_idx.x % 64
    vals = Vec(acc if isinstance(acc, ir.Value) else acc.result)
    for v in fx.range_constexpr(4):
        x = c_tv((lane, v))
        C[wave, x % 16, x // 16] = vals[v]


def _mfma(a, b, acc):
    return fx.rocdl.mfma_f32_16x16x16f16(T.vec(4, T.f32), [a, b, acc, 0, 0, 0])


@flydsl.kernel
def wave_roles(A: fx.Tensor, A2: fx.Tensor, B: fx.Tensor, C: fx.Tensor, F: fx.Tensor,
               n: fx.Int32):
    """Per wave ``w`` of 4: ``A @ B.T`` in the odd waves, 7 in the others (an ``if`` on
    the thread id, with an ``else``); then ``n`` trips of a loop, each a block barrier and
    ``A2 @ B.T`` added in wave ``i % 4`` only (the wave id through ``readfirstlane``); then ``A @ B.T`` added where ``F[w]`` (a
    loaded, wave-uniform condition); block barriers before and after."""
    a, b = _lane_operands(A, B)
    a2, _ = _lane_operands(A2, B)
    wave = fx.thread_idx.x // 64
    acc = Vec.filled(4, 0, fx.Float32)
    fx.barrier()
    if wave % 2 == 1:
        acc = _mfma(a, b, acc)
    else:
        acc = Vec.filled(4, 7, fx.Float32)
    for i in range(n):
        fx.barrier()
        if fx.rocdl.readfirstlane(T.i32, wave) == i % 4:    # FlyDSL's scalar wave id
            acc = _mfma(a2, b, acc)
    if F[wave] != 0:
        acc = _mfma(a, b, acc)
    fx.barrier()
    _store(C, wave, acc)


def _inputs():
    rng = np.random.default_rng(3)
    A, A2, B = (rng.integers(-3, 4, (16, 16)).astype(np.float32) for _ in range(3))
    return A, A2, B, np.full((WAVES, 16, 16), np.nan, np.float32)


def _expected(A, A2, B, n: int) -> np.ndarray:
    out = []
    for w in range(WAVES):
        x = A @ B.T if w % 2 else np.full((16, 16), 7, np.float32)
        x = x + sum(1 for i in range(n) if i % WAVES == w) * (A2 @ B.T)
        out.append(x + FLAGS[w] * (A @ B.T))
    return np.stack(out)


def test_mfmas_under_wave_uniform_ifs_run_on_the_cpu():
    """Was a DivergentBarrierError (the ``if`` on the thread id), and the loaded condition
    ran every wave with thread 0's flag (a wrong answer with a warning)."""
    A, A2, B, C = _inputs()
    wave_roles[1, 64 * WAVES](A, A2, B, C, FLAGS, TRIPS)
    np.testing.assert_array_equal(C, _expected(A, A2, B, TRIPS))


@flydsl.kernel
def split_wave(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, how: fx.Constexpr[str]):
    a, b = _lane_operands(A, B)
    tid = fx.thread_idx.x
    acc = Vec.filled(4, 0, fx.Float32)
    if fx.const_expr(how == "lane"):
        if tid % 64 < 32:
            acc = _mfma(a, b, acc)
    else:
        if (tid // 32) % 2 == 0:    # half waves: 32 is not a multiple of 64
            acc = _mfma(a, b, acc)
    _store(C, tid // 64, acc)


@pytest.mark.parametrize("how", ["lane", "half_waves"])
def test_an_mfma_under_an_if_that_splits_a_wave_is_a_located_error(how):
    """A GPU runs the MFMA with lanes off (undefined); the CPU would read the skipped
    lanes' stale scratch: refused at the call's line instead."""
    A, _, B, C = _inputs()
    with pytest.raises(DivergentBarrierError, match="differ between the lanes of a wave") \
            as caught:
        split_wave[1, 128](A, B, C, how)
    assert "fx.rocdl.mfma_f32_16x16x16f16(T.vec(4, T.f32)" in str(caught.value)
    assert re.search(r"test_mfma_wave_branches.py:\d+", str(caught.value))


def test_the_exchange_barriers_are_wave_scoped_and_no_more_than_before(monkeypatch):
    """Every barrier of the traced kernel that is not the kernel's own (fx.barrier(): 2 +
    1 per loop trip, traced once) is an MFMA's, marked with its wave's 64 lanes; each
    guarded call keeps its 2 (no call follows it in its block)."""
    wave_roles.cache_clear()        # traced again, not found in memory
    A, A2, B, C = _inputs()
    ir_text = traced_ir(monkeypatch, lambda: wave_roles[1, 64 * WAVES](A, A2, B, C, FLAGS,
                                                                         TRIPS))
    barriers = re.findall(r"gpu\.barrier.*", ir_text)
    wave = [x for x in barriers if "flydsl.wave_exchange = 64" in x]
    assert len(barriers) - len(wave) == 3 and len(wave) == 3 * 2, barriers


@pytest.mark.filterwarnings("ignore:flydsl. kernel .wave_guarded. is cached in memory only")
def test_a_wave_guarded_mfma_is_the_instruction_on_gfx942():
    """The GPU never sees the CPU's exchange: the ``if`` is an EXEC-masked branch around
    the real v_mfma."""
    A, _, B, C = _inputs()
    wave_guarded[1, 128](A, B, C)      # the CPU as well, with the branch-local store
    np.testing.assert_array_equal(C[1], A @ B.T)
    np.testing.assert_array_equal(C[0], np.full((16, 16), 7, np.float32))
    text = flydsl.compile(wave_guarded, A, B, C, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "v_mfma_f32_16x16x16_f16" in text and "s_and_saveexec_b64" in text


@flydsl.kernel
def wave_guarded(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """Wave 1 stores its MFMA's result inside the branch (on ROCm a raw call's result is
    the op, which a runtime ``if`` cannot carry out of its branch), wave 0 stores 7."""
    wave = fx.thread_idx.x // 64
    if wave == 1:
        a, b = _lane_operands(A, B)
        _store(C, wave, _mfma(a, b, Vec.filled(4, 0, fx.Float32)))
    else:
        _store(C, wave, Vec.filled(4, 7, fx.Float32))


@flydsl.kernel
def wave_gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """``fx.gemm`` on register fragments (one 16x16x16 f16 atom) in wave 1 only; wave 0
    keeps its accumulators (7)."""
    atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 16, fx.Float16))
    a_tv, b_tv, c_tv = atom.layout_A_tv, atom.layout_B_tv, atom.layout_C_tv
    lane = fx.thread_idx.x % 64
    wave = fx.thread_idx.x // 64
    fa = fx.make_rmem_tensor((4, 1, 1), fx.Float16)
    fb = fx.make_rmem_tensor((4, 1, 1), fx.Float16)
    fc = fx.make_rmem_tensor((4, 1, 1), fx.Float32)
    for v in fx.range_constexpr(4):
        fa[v, 0, 0] = fx.Float16(A[a_tv((lane, v)) % 16, a_tv((lane, v)) // 16])
        fb[v, 0, 0] = fx.Float16(B[b_tv((lane, v)) % 16, b_tv((lane, v)) // 16])
    fc.fill(7)
    if wave == 1:
        fx.gemm(atom, fc, fa, fb, fc)
    for v in fx.range_constexpr(4):
        x = c_tv((lane, v))
        C[wave, x % 16, x // 16] = fc[v, 0, 0]


def test_fx_gemm_under_a_wave_uniform_if_runs_on_the_cpu():
    """The tiled-MMA path (``fx.gemm``) exchanges through per-wave scratch too."""
    A, _, B, C = _inputs()
    wave_gemm[1, 128](A, B, C[:2])
    np.testing.assert_array_equal(C[1], A @ B.T + 7)
    np.testing.assert_array_equal(C[0], np.full((16, 16), 7, np.float32))


@flydsl.kernel
def lane_flagged(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, F: fx.Tensor):
    """An MFMA where the thread's own flag ``F[tid]`` is set (a loaded condition)."""
    a, b = _lane_operands(A, B)
    acc = Vec.filled(4, 0, fx.Float32)
    if F[fx.thread_idx.x] != 0:     # LANE-FLAG
        acc = _mfma(a, b, acc)
    _store(C, fx.thread_idx.x // 64, acc)


def test_debug_mode_reports_a_wave_whose_lanes_loaded_different_conditions(monkeypatch):
    """A loaded condition may be wave-uniform or not (only the run knows): without
    FLYDSL_DEBUG the CPU trusts it, with it each wave's lanes are checked to agree."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    A, _, B, C = _inputs()
    same = np.repeat(np.array([0, 1], np.int32), 64)
    lane_flagged[1, 128](A, B, C[:2], same)
    np.testing.assert_array_equal(C[0], np.zeros((16, 16), np.float32))
    np.testing.assert_array_equal(C[1], A @ B.T)
    split = same.copy()
    split[5] = 1
    with pytest.raises(DeviceAssertError, match="differs between the lanes of a wave") \
            as caught:
        lane_flagged[1, 128](A, B, C[:2], split)
    line = next(i for i, text in enumerate(open(__file__), 1) if "# LANE-FLAG" in text)
    assert f"{__file__}:{line}" in str(caught.value)


@flydsl.kernel
def wave_trips(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    a, b = _lane_operands(A, B)
    acc = Vec.filled(4, 0, fx.Float32)
    for _ in range(fx.thread_idx.x // 64):
        acc = _mfma(a, b, acc)
    _store(C, fx.thread_idx.x // 64, acc)


def test_an_mfma_in_a_loop_of_wave_dependent_trips_is_refused_by_name():
    """Not supported on the CPU (its thread loops run a block's waves alike): an error
    naming the MFMA and the loop, not a wrong value."""
    A, _, B, C = _inputs()
    with pytest.raises(UnsupportedConstructError,
                       match="an MFMA's operand exchange .* in divergent control flow .* "
                             "'scf.for' whose bounds depend on the thread id"):
        wave_trips[1, 128](A, B, C[:2])


@flydsl.kernel
def wave_ranges(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor):
    """Conditions comparing the thread index with a wave boundary: ``tid < 64`` (wave 0)
    and ``tid % 128 >= 64`` (waves 1 and 3)."""
    a, b = _lane_operands(A, B)
    acc = Vec.filled(4, 0, fx.Float32)
    if fx.thread_idx.x < 64:
        acc = _mfma(a, b, acc)
    if fx.thread_idx.x % 128 >= 64:
        acc = _mfma(a, b, acc)
    _store(C, fx.thread_idx.x // 64, acc)


def test_comparisons_of_the_thread_index_at_wave_boundaries_are_wave_uniform():
    A, _, B, C = _inputs()
    wave_ranges[1, 64 * WAVES](A, B, C)
    product = A @ B.T
    np.testing.assert_array_equal(C, np.stack([product, product, 0 * product, product]))
