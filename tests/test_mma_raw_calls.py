"""The CPU's raw MFMA calls (``fx.rocdl.mfma_*(result_type, [a, b, c, 0, 0, 0])``): what
a call costs in traced operations and barriers, what it computes, and that consecutive
calls, which alternate between two scratch arrays instead of ending with a barrier each,
are race-free.

Upstream's flash attention makes 128 such calls per kernel; through register fragments
each was 347 traced operations and two barriers (the kernel was past
FLYDSL_TRACE_OP_LIMIT). Inputs are small integers: every sum is exact in f32, so any
order of the products gives the reference bit for bit."""
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.frontend import builder
from flydsl.compiler.frontend import ops as frontend_ops
from flydsl.errors import DSLError
from flydsl.expr import T
from flydsl.expr.typing import Vector as Vec
from flydsl.runtime.debug_checks import SharedMemoryRaceError

#: name: (its atom, operand type, accumulator type): one run of 4 accumulators
#: (16x16), four runs (32x32), integer accumulators
CALLS = {
    "mfma_f32_16x16x16f16": (lambda: fx.rocdl.MFMA(16, 16, 16, fx.Float16), fx.Float16,
                             fx.Float32),
    "mfma_f32_32x32x8bf16_1k": (lambda: fx.rocdl.MFMA(32, 32, 8, fx.BFloat16), fx.BFloat16,
                                fx.Float32),
    "mfma_i32_16x16x32_i8": (lambda: fx.rocdl.MFMA(16, 16, 32, fx.Int8, fx.Int32), fx.Int8,
                             fx.Int32),
}


@flydsl.kernel
def mfma_calls(A: fx.Tensor, A2: fx.Tensor, B: fx.Tensor, C: fx.Tensor, n: fx.Int32,
               name: fx.Constexpr[str], straight: fx.Constexpr[int]):
    """C = the sum of A @ B.T and A2 @ B.T (``_expected``) by raw calls: ``straight`` in a
    row (A, A2, A, ...), one in a runtime loop of ``n`` trips (A), one under a runtime
    ``if`` (A2), one after (A). Every wave of the block computes the same sum (each its
    own scratch)."""
    op, ab, acc_t = CALLS[name][0](), CALLS[name][1], CALLS[name][2]
    mfma = getattr(fx.rocdl, name)
    atom = fx.make_mma_atom(op)
    a_tv, b_tv, c_tv = atom.layout_A_tv, atom.layout_B_tv, atom.layout_C_tv
    m, nn, k = atom.shape_mnk.unpack()
    na, nb, nc = fx.size(a_tv[1]), fx.size(b_tv[1]), fx.size(c_tv[1])
    lane = fx.thread_idx.x % 64
    a = Vec.from_elements([ab(A[a_tv((lane, v)) % m, a_tv((lane, v)) // m])
                           for v in fx.range_constexpr(na)], ab)
    a2 = Vec.from_elements([ab(A2[a_tv((lane, v)) % m, a_tv((lane, v)) // m])
                            for v in fx.range_constexpr(na)], ab)
    b = Vec.from_elements([ab(B[b_tv((lane, v)) % nn, b_tv((lane, v)) // nn])
                           for v in fx.range_constexpr(nb)], ab)
    if fx.const_expr(ab == fx.BFloat16):
        a, a2, b = a.bitcast(fx.Int16), a2.bitcast(fx.Int16), b.bitcast(fx.Int16)
    rtype = T.vec(nc, T.i32 if acc_t == fx.Int32 else T.f32)
    acc = Vec.filled(nc, 0, acc_t)
    for i in fx.range_constexpr(straight):
        acc = mfma(rtype, [a if i % 2 == 0 else a2, b, acc, 0, 0, 0])
    for _ in range(n):
        acc = mfma(rtype, [a, b, acc, 0, 0, 0])
    if n > 1:
        acc = mfma(rtype, [a2, b, acc, 0, 0, 0])
    acc = mfma(rtype, [a, b, acc, 0, 0, 0])
    if fx.thread_idx.x < 64:
        for v in fx.range_constexpr(nc):
            x = c_tv((lane, v))
            C[x % m, x // m] = Vec(acc)[v]


def _inputs(name: str):
    op = CALLS[name][0]()
    m, n, k = (int(x) for x in fx.make_mma_atom(op).shape_mnk.unpack())
    rng = np.random.default_rng(5)
    A, A2 = (rng.integers(-3, 4, (m, k)).astype(np.float32) for _ in "aa")
    B = rng.integers(-3, 4, (n, k)).astype(np.float32)
    integer = CALLS[name][2] == fx.Int32
    C = np.full((m, n), -1 if integer else np.nan, np.int32 if integer else np.float32)
    return A, A2, B, C


def _expected(A, A2, B, n: int, straight: int):
    ones = (straight + 1) // 2 + n + 1               # calls with A; the rest with A2
    twos = straight // 2 + (n > 1)
    return ones * (A @ B.T) + twos * (A2 @ B.T)


@pytest.mark.parametrize("name", ["mfma_f32_32x32x8bf16_1k", "mfma_i32_16x16x32_i8"])
def test_consecutive_raw_calls_compute_the_product(name):
    """(16x16x16 f16: in the race-check test.)"""
    A, A2, B, C = _inputs(name)
    mfma_calls[1, 128](A, A2, B, C, 3, name, 2)
    np.testing.assert_array_equal(C, _expected(A, A2, B, 3, 2))


def _traced_ops(monkeypatch, name: str, straight: int) -> int:
    """The kernel's traced operation count (refused past a limit of 1: nothing compiles)."""
    monkeypatch.setenv("FLYDSL_TRACE_OP_LIMIT", "1")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    A, A2, B, C = _inputs(name)
    with pytest.raises(DSLError, match="FLYDSL_TRACE_OP_LIMIT") as caught:
        mfma_calls[1, 128](A, A2, B, C, 1, name, straight)
    return int(re.search(r"tracing produced (\d+) operations", str(caught.value)).group(1))


def test_a_raw_call_is_a_few_dozen_operations(monkeypatch):
    """32x32x8 bf16: 8 operand stores, a K loop of four 4-wide vector fmas and the
    accumulator's slices (was 347 operations through register fragments)."""
    name = "mfma_f32_32x32x8bf16_1k"
    per_call = (_traced_ops(monkeypatch, name, 5) - _traced_ops(monkeypatch, name, 1)) / 4
    assert per_call <= 75, per_call


def traced_ir(monkeypatch, launch) -> str:
    """The IR of the kernel ``launch()`` traces (nothing compiles, nothing is cached)."""
    traced = []

    def stop(tctx, func_op):
        traced.append(str(func_op))
        raise DSLError("traced")
    monkeypatch.setattr(builder, "check_trace_size", stop)
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    with pytest.raises(DSLError, match="traced"):
        launch()
    return traced[0]


def test_calls_in_a_row_share_their_barriers(monkeypatch):
    """N calls in a row: N + 1 barriers (a call's trailing barrier goes where the next
    call follows in the same block), alternating between two scratch arrays; calls in
    other blocks keep theirs."""
    A, A2, B, C = _inputs("mfma_f32_16x16x16f16")
    mlir = traced_ir(monkeypatch, lambda: mfma_calls[1, 128](A, A2, B, C, 1,
                                                            "mfma_f32_16x16x16f16", 4))
    # 4 in a row (one group): 1 + 1; the loop's, the if's and the last call: 2 each
    # (was 2 * 7)
    assert mlir.count("gpu.barrier") == 2 + 2 + 2 + 2, mlir.count("gpu.barrier")
    # the group's 4 arrays (32 KiB each: GROUP_SCRATCH_BYTES holds two sets of 4); each
    # later call follows a call in another block, ended by its barrier: the first array
    assert len(re.findall(r"memref<\d+xf32, #gpu.address_space<workgroup>>", mlir.split(
        "kernel attributes")[0])) == 4


@pytest.mark.usefixtures("debug_build_o0")
def test_alternating_scratch_arrays_are_race_free(monkeypatch):
    """The race checker, shown the MMA scratch (flydsl's own arrays are otherwise not
    checked), finds no write of a call's scratch while another lane still reads the
    previous call's: in a row, around a loop's back edge, into and out of an ``if``."""
    monkeypatch.setattr(frontend_ops, "name_shared_array", lambda *a, **k: None)
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    name = "mfma_f32_16x16x16f16"
    A, A2, B, C = _inputs(name)
    try:
        mfma_calls[1, 128](A, A2, B, C, 3, name, 3)
    except SharedMemoryRaceError as e:     # pragma: no cover - the failure's message
        pytest.fail(f"race on the MMA scratch: {e}")
    np.testing.assert_array_equal(C, _expected(A, A2, B, 3, 3))


def test_the_same_kernel_compiles_for_gfx942_with_a_call_under_a_runtime_if():
    """On ROCm a raw call gives its result value as on the CPU: an accumulator that a
    runtime ``if`` assigns, then ``Vec(acc)``, compile (the call gave the operation, so
    the ``if`` could not merge ``acc``); each call is its instruction."""
    A, A2, B, C = _inputs("mfma_f32_32x32x8bf16_1k")
    prog = flydsl.compile(mfma_calls, A, A2, B, C, 2, "mfma_f32_32x32x8bf16_1k", 2,
                          backend="rocm", arch="gfx942")
    # 2 in a row, 1 in the loop, 1 under the if, 1 after
    assert len(re.findall(r"\bv_mfma_f32_32x32x8_bf16\b", prog.asm["amdgcn"])) == 5
