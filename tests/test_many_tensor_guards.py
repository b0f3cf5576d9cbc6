"""Launch guards of kernels with many tensors: overlap facts checked by one sort and
sweep (specialization.PairGuard) instead of a test per pair, prepared launches that
read pointers with C-level maps and compare runs of ints as one tuple, and
``prepare(fresh=...)`` for results the caller allocates anew each call. Each must
answer exactly as the per-pair / per-argument checks do."""
import random

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime.specialization import SWEEP_PAIRS, PairGuard, overlap, overlapping_hulls

torch = pytest.importorskip("torch")


def _brute(pairs, ranges):
    return all(overlap(ranges[i], ranges[j]) == o for i, j, o in pairs)


def _random_range(rng):
    lo = rng.randrange(0, 400, 4)
    if rng.random() < 0.1:
        return (lo, lo)                                    # empty
    if rng.random() < 0.3:                                 # a view with gaps of one step
        step, width = 16, rng.choice([4, 8])
        count = rng.randrange(1, 6)
        return (lo, lo + step * (count - 1) + width, step, width)
    return (lo, lo + rng.randrange(4, 120, 4))


def test_overlapping_hulls_finds_every_meeting_pair():
    rng = random.Random(1)
    for _ in range(300):
        ranges = [_random_range(rng) for _ in range(rng.randrange(1, 25))]
        want = {(a, b) for a in range(len(ranges)) for b in range(a + 1, len(ranges))
                if ranges[a][0] < ranges[b][1] and ranges[b][0] < ranges[a][1]}
        assert set(overlapping_hulls(ranges)) == want


def test_pair_guard_answers_as_testing_every_pair():
    """Pairs taken from one set of ranges (the specialization), then checked against
    others: the guard says True exactly when every pair keeps its fact. Each set is
    checked twice (the second answer may come from the guard's memory of accepted
    ranges)."""
    rng = random.Random(7)
    agreed = {True: 0, False: 0}
    for _ in range(200):
        n = rng.randrange(2, 20)
        written = set(rng.sample(range(n), rng.randrange(1, n + 1)))
        first = [_random_range(rng) for _ in range(n)]
        pairs = [(i, j, overlap(first[i], first[j])) for i in range(n) for j in range(i + 1, n)
                 if i in written or j in written]
        if not pairs:
            continue
        guard = PairGuard(pairs)
        for ranges in [first] + [[_random_range(rng) for _ in range(n)] for _ in range(5)]:
            # the guard takes the ranges of the tensors its pairs name, in order
            mine = tuple(ranges[k] for k in guard.positions)
            want = _brute(pairs, ranges)
            assert guard(mine) is want and guard(mine) is want
            agreed[want] += 1
    assert agreed[True] > 50 and agreed[False] > 50       # both answers were exercised


def test_pair_guard_keeps_must_overlap_facts():
    pairs = [(0, 1, True), (0, 2, False), (1, 2, False)]
    guard = PairGuard(pairs)
    assert guard(((0, 8), (4, 12), (12, 20)))
    assert not guard(((0, 8), (8, 12), (12, 20)))         # 0 and 1 no longer overlap
    assert not guard(((0, 8), (4, 12), (10, 20)))         # 1 and 2 now do
    assert guard(((0, 8), (4, 12), (12, 20)))             # remembered, still right


N_IN, N_OUT = 10, 4


@flydsl.kernel
def sums(a0: fx.Tensor, a1: fx.Tensor, a2: fx.Tensor, a3: fx.Tensor, a4: fx.Tensor,
         a5: fx.Tensor, a6: fx.Tensor, a7: fx.Tensor, a8: fx.Tensor, a9: fx.Tensor,
         o0: fx.Tensor, o1: fx.Tensor, o2: fx.Tensor, o3: fx.Tensor,
         n: fx.Int32, k0: fx.Int32, k1: fx.Int32, k2: fx.Int32, k3: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        s = a0[i] + a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i] + a8[i] + a9[i]
        o0[i] = s + fx.Float32(k0)
        o1[i] = s * 2.0 + fx.Float32(k1)
        o2[i] = a0[i] - a9[i] + fx.Float32(k2)
        o3[i] = a5[i] * fx.Float32(k3)


N = 256


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(N, generator=g) for _ in range(N_IN)]


def _expected(ins, ks):
    """What the kernel computes, element by element in order (an output that is
    also an input is read after earlier outputs of the same element were written)."""
    a = [t.numpy().copy() for t in ins]
    out = [np.zeros(N, np.float32) for _ in range(N_OUT)]
    for i in range(N):
        s = np.float32(0)
        for t in a:
            s = np.float32(s + t[i])
        out[0][i] = s + ks[0]
        out[1][i] = s * np.float32(2) + ks[1]
        out[2][i] = a[0][i] - a[9][i] + ks[2]
        out[3][i] = a[5][i] * ks[3]
    return out


def _args(ins, outs, ks=(1, 2, 3, 4)):
    return [*ins, *outs, N, *ks]


def _launch_checked(launch, ins) -> list:
    """New results of the prepared ``launch`` on ``ins``, checked against the rule."""
    new = [torch.empty(N) for _ in range(N_OUT)]
    assert launch(_args(ins, new))
    for got, want in zip(new, _expected(ins, (1, 2, 3, 4))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    return new


def test_many_pairs_use_one_sweep_in_the_python_warm_launch(monkeypatch):
    monkeypatch.setenv("FLYDSL_NATIVE_LAUNCH", "0")      # the generated Python launch
    sums.cache_clear()
    ins, outs = _inputs(), [torch.zeros(N) for _ in range(N_OUT)]
    sums[1, N](*_args(ins, outs))
    assert N_IN * N_OUT + N_OUT * (N_OUT - 1) // 2 >= SWEEP_PAIRS
    source = sums.warm_launch_source()
    assert "_pairs" in source and " < hi" not in source
    for got, want in zip(outs, _expected(ins, (1, 2, 3, 4))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    # warm: fresh disjoint tensors, then an output that is an input (in place)
    ins2, outs2 = _inputs(1), [torch.zeros(N) for _ in range(N_OUT)]
    sums[1, N](*_args(ins2, outs2))
    for got, want in zip(outs2, _expected(ins2, (1, 2, 3, 4))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    ins3 = _inputs(2)
    want = _expected(ins3, (1, 2, 3, 4))
    outs3 = [torch.zeros(N), torch.zeros(N), ins3[9], torch.zeros(N)]   # o2 is a9
    sums[1, N](*_args(ins3, outs3))
    for got, w in zip(outs3, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-6)


def test_a_prepared_launch_of_many_tensors_checks_what_the_usual_launch_would():
    sums.cache_clear()
    ins, outs = _inputs(), [torch.zeros(N) for _ in range(N_OUT)]
    args = _args(ins, outs)
    sums[1, N](*args)
    launch = sums.prepare(tuple(args), 1, N)
    src = launch.__flydsl_source__
    assert "map(_data_ptr" in src and "_pairs" in src and "tuple(args[14:19])" in src
    _launch_checked(launch, ins)
    untouched = torch.zeros(N)
    bad_cases = {
        "an output overlapping an input": _args(ins, [untouched, torch.zeros(N), ins[3],
                                                       torch.zeros(N)]),
        "two outputs sharing memory": _args(ins, [untouched, untouched, torch.zeros(N),
                                                   torch.zeros(N)]),
        "another int in the run": _args(ins, [untouched, *outs[1:]], ks=(1, 2, 3, 5)),
        "a bool for an int": _args(ins, [untouched, *outs[1:]], ks=(True, 2, 3, 4)),
        "a misaligned input": _args([*ins[:4], torch.zeros(N + 1)[1:], *ins[5:]],
                                    [untouched, *outs[1:]]),
    }
    for name, bad in bad_cases.items():
        assert launch(bad) is False, name
    assert not untouched.any()
    neg = torch._neg_view(torch.ones(N))         # torch's negative bit, same layout
    assert neg.is_neg()
    assert launch(_args([*ins[:4], neg, *ins[5:]], [untouched, *outs[1:]])) is False
    assert not untouched.any()


def test_fresh_results_are_not_checked_for_overlaps():
    sums.cache_clear()
    ins, outs = _inputs(), [torch.zeros(N) for _ in range(N_OUT)]
    args = _args(ins, outs)
    sums[1, N](*args)
    fresh = range(N_IN, N_IN + N_OUT)
    launch = sums.prepare(tuple(args), 1, N, fresh=fresh)
    assert "_pairs" not in launch.__flydsl_source__ and " < " not in launch.__flydsl_source__
    for seed in range(3):
        _launch_checked(launch, _inputs(seed))
    # the prepared specialization had no overlaps; an overlapping one stays checked
    sums.cache_clear()
    ins = _inputs()
    overlapping = _args(ins, [torch.zeros(N), torch.zeros(N), ins[9], torch.zeros(N)])
    sums[1, N](*overlapping)
    launch = sums.prepare(tuple(overlapping), 1, N, fresh=fresh)
    assert "_pairs" in launch.__flydsl_source__ or " < " in launch.__flydsl_source__


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_prepared_launch_without_overlap_checks_stores_pointers_in_one_call(monkeypatch,
                                                                            native):
    """No overlap left to check (fresh results): the native module's store_pointers
    checks and stores every pointer (FLYDSL_NATIVE_LAUNCH=0: the generated Python);
    both refuse what the usual launch refuses and launch the same."""
    from flydsl.runtime import native_launch
    monkeypatch.setenv("FLYDSL_NATIVE_LAUNCH", native)
    sums.cache_clear()
    ins, outs = _inputs(), [torch.zeros(N) for _ in range(N_OUT)]
    args = _args(ins, outs)
    sums[1, N](*args)
    launch = sums.prepare(tuple(args), 1, N, fresh=range(N_IN, N_IN + N_OUT))
    src = launch.__flydsl_source__
    module = native_launch.load() if native == "1" else None
    if module is not None and native_launch.torch_shim(module):
        assert "_store(args" in src and "data_ptr" not in src
    else:
        assert "map(_data_ptr" in src
    new = _launch_checked(launch, ins)
    untouched = torch.zeros(N)
    refused = {
        "torch's negative bit": _args([*ins[:4], torch._neg_view(torch.ones(N)), *ins[5:]],
                                      [untouched, *new[1:]]),
        "a misaligned input": _args([*ins[:4], torch.zeros(N + 1)[1:], *ins[5:]],
                                    [untouched, *new[1:]]),
        "a numpy array": _args([*ins[:4], np.zeros(N, np.float32), *ins[5:]],
                               [untouched, *new[1:]]),
        "another int": _args(ins, [untouched, *new[1:]], ks=(1, 2, 3, 5)),
    }
    for name, bad in refused.items():
        if name == "a numpy array" and "_store(args" not in src:
            continue     # the generated Python reads torch tensors only (the contract)
        assert launch(bad) is False, name
    assert not untouched.any()
