"""The `flydsl` torch.compile backend on model patterns: the cost rule, decompositions
only into kernels, matmul epilogues, row reductions and norms (forward and backward,
half types, strided inputs, dynamic shapes), warm-call overhead and the log."""
import operator
import time

import pytest

torch = pytest.importorskip("torch")

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402
from flydsl.torch import _math as fm  # noqa: E402
from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch import kernels, row_kernels  # noqa: E402
from flydsl.torch.fusion_cost import worth_fusing  # noqa: E402
from conftest import gpu_asm_or_skip  # noqa: E402

F = torch.nn.functional
aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(autouse=True)
def _one_host_thread(monkeypatch):
    """The cost rule counts the host threads each side runs on: pin one for torch
    and flydsl, so what fuses does not depend on the machine's cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "1")
    yield
    torch.set_num_threads(threads)


def _rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _fake_graph(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn, tracing_mode="fake")(*args)


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _fused_modules(gm, kind=kernels.FusedModule) -> list:
    return [m for m in gm.modules() if isinstance(m, kind)]


# -- the cost rule ----------------------------------------------------------------------

def _add_mul(x, y):
    return ((x + y) * y,)


def test_cost_rule_fuses_where_it_pays():
    """Two ops on 64 elements stay eager (a kernel call costs more than they do);
    on 2^20 elements they fuse (one pass over memory instead of two)."""
    small = db.fuse_pointwise(_fake_graph(_add_mul, _rand(64), _rand(64)), "cpu")
    big_args = (_rand(1 << 20), _rand(1 << 20))
    big = db.fuse_pointwise(_fake_graph(_add_mul, *big_args), "cpu")
    assert not _fused_modules(small) and len(_fused_modules(big)) == 1
    groups = db.partition(_fake_graph(_add_mul, _rand(64), _rand(64)).graph, "cpu")
    assert len(groups) == 1 and not worth_fusing(groups[0])
    torch.testing.assert_close(big(*big_args)[0], _add_mul(*big_args)[0])


def test_cost_rule_counts_each_sides_host_threads(monkeypatch):
    """2^19 elements, 4 torch threads: ATen splits each op over all 4. A kernel its
    driver would run on one thread (a 1 ms hand-off, helper threads) no longer pays;
    one that gets 4 threads too (an OpenMP team, 2 us hand-off) still does. Half as
    many elements fit one ATen chunk: ATen's threads do not help, and it fuses."""
    from flydsl.runtime.drivers import cpu
    from flydsl.runtime.drivers.openmp import TEAMS
    graph = _fake_graph(_add_mul, _rand(1 << 19), _rand(1 << 19))
    (group,) = db.partition(graph.graph, "cpu")
    assert worth_fusing(group)
    torch.set_num_threads(4)
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "4")
    for attr in ("handoff_ns", "worker_ns", "serial_ns"):
        monkeypatch.setattr(cpu.SPLIT, attr, getattr(cpu.SPLIT, attr))
    cpu.SPLIT.set_handoff(1e6)
    monkeypatch.setenv("FLYDSL_CPU_OPENMP", "0")
    assert not worth_fusing(group)
    (small,) = db.partition(_fake_graph(_add_mul, _rand(1 << 15), _rand(1 << 15)).graph, "cpu")
    assert worth_fusing(small)
    monkeypatch.delenv("FLYDSL_CPU_OPENMP")
    if TEAMS.find() is not None:     # torch's libgomp
        monkeypatch.setattr(TEAMS, "handoff_ns", 2_000.0)
        assert worth_fusing(group)


class TrialClock:
    """The trials' clock, with an hour added by each call of a side made slow: that
    side provably loses however loaded the machine is (no real sleep, no timing)."""

    def __init__(self):
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.skipped

    def slowed(self, fn, when=lambda *args: True):
        """``fn``, an hour slower on this clock when ``when(*args)`` holds."""
        def slow(*args, **kwargs):
            if when(*args):
                self.skipped += 3600.0
            return fn(*args, **kwargs)
        return slow


@pytest.fixture
def trial_clock(monkeypatch):
    from flydsl.torch import trials
    clock = TrialClock()
    monkeypatch.setattr(trials, "clock", clock)
    return clock


@pytest.mark.parametrize("slow_side", ["kernel", "eager"])
def test_first_calls_time_the_kernel_against_eager_and_keep_the_faster(monkeypatch, trial_clock,
                                                                      slow_side):
    """The cost rule fuses the group; its first calls (one untimed launch, then
    TRIALS timed calls of each side) measure it: a kernel made an hour slower runs
    eagerly from then on, one that beats its (slowed) eager ops is kept. Every
    call's result is right."""
    from flydsl.torch import trials
    args = (_rand(1 << 20), _rand(1 << 20, seed=1))
    gm = db.fuse_pointwise(_fake_graph(_add_mul, *args), "cpu")
    (fused,) = _fused_modules(gm)
    if slow_side == "kernel":
        monkeypatch.setattr(fused, "_fused", trial_clock.slowed(fused._fused))
    else:
        monkeypatch.setattr(fused.eager, "forward", trial_clock.slowed(fused.eager.forward))
    before = dict(kernels.stats)
    for _ in range(1 + 2 * trials.TRIALS):
        torch.testing.assert_close(gm(*args)[0], _add_mul(*args)[0])
    (plan,) = fused.plans.values()
    won = slow_side == "eager"
    assert kernels.stats["measured_fused"] - before["measured_fused"] == int(won)
    assert kernels.stats["measured_eager"] - before["measured_eager"] == int(not won)
    assert (plan is None) is not won
    launches = kernels.stats["launches"]
    gm(*args)
    assert kernels.stats["launches"] - launches == int(won)


@pytest.mark.parametrize("threads", [1, 2])
def test_trials_time_the_work_not_the_wait_where_one_thread_does_it(monkeypatch, threads):
    """With torch and flydsl's launches on one host thread each, a trial times a call
    by that thread's CPU time: a side that waits 20 ms for nothing (as a call
    preempted on a loaded machine does) beats one that works 2 ms. With more
    threads, CPU time is not a call's duration: the wall clock, and the waiting side
    loses."""
    from flydsl.torch import trials
    monkeypatch.setenv("FLYDSL_CPU_THREADS", str(threads))
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)

    def work():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.002:
            pass
        return ("work",)

    trial = trials.Trial()
    while trial.verdict is None:
        trial.run(work, lambda: time.sleep(0.02) or ("wait",))
    assert trial.verdict is (threads == 1), trial.summary()


def test_graph_trial_settles_its_groups_then_keeps_the_faster_graph(trial_clock):
    from flydsl.torch.trials import TRIALS, GraphTrial
    calls, verdicts, ready = [], [], [False]
    slow_o = trial_clock.slowed(lambda x: calls.append("o") or x + 1)   # not a close call
    trial = GraphTrial(lambda x: calls.append("f") or x + 1, slow_o,
                       lambda: ready[0], settle=3, on_verdict=verdicts.append)
    assert [trial(k) for k in range(2)] == [1, 2] and calls == ["f", "f"]
    ready[0] = True                       # the groups decided: the graphs alternate
    for _ in range(2 * TRIALS):
        trial(0)
    assert calls[2:] == ["o", "f"] * TRIALS and len(verdicts) == 1
    assert verdicts[0].verdict is True
    trial(0)
    assert calls[-1] == "f"
    never = GraphTrial(lambda x: calls.append("F"), lambda x: calls.append("O"), lambda: False,
                       settle=2, on_verdict=verdicts.append)
    for _ in range(3):
        never(torch.zeros(2))             # groups never settle: timed after `settle` calls
    assert calls[-3:] == ["F", "F", "O"]
    for n in range(3, 3 + 2 * TRIALS):    # a new size at every call: no verdict
        never(torch.zeros(n))
    assert len(verdicts) == 1 and never.chosen is None
    assert len(never.trial.eager) + len(never.trial.fused) == 1


def test_a_fused_graph_slower_than_its_aten_graph_gives_way_to_it(monkeypatch, trial_clock):
    """Each group wins its own trial (its eager ops are slowed during it), but the
    kernel is an hour slower outside trials: the whole-graph trial sees it and the ATen
    graph runs from then on, launching nothing; every result is right."""
    from flydsl.torch import trials
    monkeypatch.setattr(db, "fuse_pointwise", _spy_modules(db.fuse_pointwise, seen := []))
    fn = torch.compile(lambda x, y: (x + y) * y, backend="flydsl")
    args = (_rand(1 << 20), _rand(1 << 20, seed=1))
    torch.testing.assert_close(fn(*args), (args[0] + args[1]) * args[1])    # compiles
    (fused,) = seen
    monkeypatch.setattr(fused.eager, "forward", trial_clock.slowed(fused.eager.forward))
    monkeypatch.setattr(fused, "_fused", trial_clock.slowed(
        fused._fused, when=lambda key, plan, a: plan.trial is None))
    before = dict(db.stats)
    for _ in range(4 * trials.TRIALS + 4):
        torch.testing.assert_close(fn(*args), (args[0] + args[1]) * args[1])
    assert db.stats["graphs_back_to_aten"] - before["graphs_back_to_aten"] == 1
    launches = kernels.stats["launches"]
    fn(*args)
    assert kernels.stats["launches"] == launches


def test_an_inference_graph_is_timed_against_dynamos_graph_once_its_fusions_decided():
    """No grad: after the groups' and the fused graph's trials, the AOTAutograd graph
    is timed against dynamo's captured graph (no wrapper) once; with grad, never
    (the backward is not in the forward's time). Every result is right."""
    from flydsl.torch import trials
    fn = torch.compile(lambda x, y: ((x + y) * y).relu(), backend="flydsl")
    args = (_rand(1 << 20), _rand(1 << 20, seed=1))
    want = ((args[0] + args[1]) * args[1]).relu()
    before = dict(db.stats)
    calls = 2 * trials.TRIALS + 4 * trials.MAX_TRIALS + 8   # close graph trials go on
    with torch.no_grad():
        for _ in range(calls):
            torch.testing.assert_close(fn(*args), want)
    decided = {k: db.stats[k] - before[k] for k in ("graphs_kept_aot", "graphs_back_to_dynamo")}
    assert sum(decided.values()) == 1, decided
    x = args[0].clone().requires_grad_()
    for _ in range(calls):
        torch.testing.assert_close(fn(x, args[1]), want)
    assert db.stats["graphs_kept_aot"] + db.stats["graphs_back_to_dynamo"] \
        == before["graphs_kept_aot"] + before["graphs_back_to_dynamo"] + 1


def _spy_modules(fuse, seen: list):
    def spy(*a, **k):
        gm = fuse(*a, **k)
        seen.extend(_fused_modules(gm))
        return gm
    return spy


def test_a_close_graph_trial_takes_more_calls_before_it_decides(monkeypatch):
    """Best calls within CLOSE of each other (a few percent: what a loaded machine
    misses by over milliseconds) do not decide a graph trial: it goes on, and decides
    when the calls part, or by the best call after MAX_TRIALS a side."""
    from flydsl.torch import trials
    now = [0.0]
    monkeypatch.setattr(trials, "clock", lambda: now[0])

    def side(durations):
        left = iter(durations)

        def call(x):
            now[0] += next(left)
            return x
        return call
    n, most = trials.TRIALS, trials.MAX_TRIALS
    verdicts: list = []
    fused = side([1.02] * n + [0.8] * (most - n))    # 2% slower at first, then 20% faster
    trial = trials.GraphTrial(fused, side([1.0] * most), lambda: True, settle=0,
                              on_verdict=verdicts.append)
    for _ in range(2 * n):
        assert trial(0) == 0
    assert not verdicts and trial.chosen is None     # a close call: no verdict yet
    while not verdicts:
        trial(0)
    assert verdicts[0].verdict is True and trial.chosen is fused
    assert len(verdicts[0].fused) == len(verdicts[0].eager) == n + 1
    original = side([1.0] * most)
    trial = trials.GraphTrial(side([1.01] * most), original, lambda: True, settle=0,
                              on_verdict=verdicts.append)
    for _ in range(2 * most):                         # close to the end: the best call
        trial(0)
    assert verdicts[1].verdict is False and trial.chosen is original
    assert len(verdicts[1].fused) == most


def test_trial_alternates_sides_and_decides_by_the_best_call():
    from flydsl.torch.trials import TRIALS, Trial
    trial, order = Trial(), []
    for _ in range(2 * TRIALS - 1):
        trial.run(lambda: order.append("e"), lambda: order.append("f"))
        assert trial.verdict is None
    trial.run(lambda: order.append("e"), lambda: order.append("f"))
    assert order == ["e", "f"] * TRIALS and trial.verdict is not None
    trial = Trial()
    trial.eager, trial.fused = [5.0] * TRIALS, [9.0, 4.0]
    trial.run(lambda: 0, lambda: 1)
    assert trial.verdict is True        # 4 < 5: the best calls decide


def test_graph_with_nothing_worth_fusing_runs_dynamos_graph():
    """No AOTAutograd wrapper, no fused module: the captured graph's own forward."""
    seen = {}

    def capture(gm, example_inputs):
        seen["gm"] = gm
        seen["compiled"] = db.flydsl_backend(gm, example_inputs)
        return seen["compiled"]
    fn = torch.compile(lambda x: torch.softmax(x * 2, -1) + 1, backend=capture)
    x = _rand(4, 8)
    torch.testing.assert_close(fn(x), torch.softmax(x * 2, -1) + 1)
    assert getattr(seen["compiled"], "__self__", None) is seen["gm"]   # gm.forward


def test_lone_row_op_stays_aten_but_its_neighbours_fuse():
    """layer_norm over many short rows is faster in ATen (fused with its prologue:
    1.29x eager over 16384 rows of 32): the group it would join is rejected, and the
    pointwise ops before it fuse among themselves."""
    def fn(x, r, w, b):
        h = (x + r) * 2
        return (F.layer_norm(h, (32,), w, b),)
    args = (_rand(16384, 32), _rand(16384, 32, seed=1), _rand(32, seed=2), _rand(32, seed=3))
    gm = db.fuse_pointwise(_fake_graph(fn, *args), "cpu")
    assert aten.native_layer_norm.default in _targets(gm)
    assert not _fused_modules(gm, row_kernels.RowModule) and len(_fused_modules(gm)) == 1
    torch.testing.assert_close(gm(*args)[0], fn(*args)[0])


# -- rewrites: decompositions and matmul epilogues, kept only inside kernels --------------

def _silu_mul(x, y):
    return (F.silu(x) * y,)


def test_silu_is_decomposed_only_into_a_kernel():
    small = _fake_graph(_silu_mul, _rand(8), _rand(8))
    assert db.fuse_pointwise(small, "cpu") is small           # silu kept, nothing fused
    assert aten.silu.default in _targets(small)
    args = (_rand(1 << 20), _rand(1 << 20, seed=1))
    big = db.fuse_pointwise(_fake_graph(_silu_mul, *args), "cpu")
    assert aten.silu.default not in _targets(big) and len(_fused_modules(big)) == 1
    torch.testing.assert_close(big(*args)[0], _silu_mul(*args)[0])


class _LinearGeluResidual(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        return x + F.gelu(self.fc(x), approximate="tanh")


def test_matmul_bias_activation_and_residual_fuse_after_the_matmul():
    torch.manual_seed(0)
    model = _LinearGeluResidual(256).eval()
    x = _rand(16, 64, 256)
    graphs = []
    orig = db.fuse_pointwise

    def spy(gm, *a, **k):
        out = orig(gm, *a, **k)
        graphs.append(out)
        return out
    db.fuse_pointwise = spy
    try:
        with torch.no_grad():
            got = torch.compile(model, backend="flydsl")(x)
            torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    finally:
        db.fuse_pointwise = orig
    (gm,) = graphs
    targets = _targets(gm)
    assert aten.mm.default in targets and aten.addmm.default not in targets
    (fused,) = _fused_modules(gm)
    assert len(fused.pattern.body) == 3          # bias add, gelu, residual add
    # too small to pay: the rewrite is undone, addmm stays

    def fn(x, w, b):
        return (x + F.gelu(F.linear(x, w, b), approximate="tanh"),)
    small = db.fuse_pointwise(_fake_graph(fn, _rand(1, 2, 64), _rand(64, 64), _rand(64)), "cpu")
    assert aten.addmm.default in _targets(small) and not _fused_modules(small)


# -- row reductions and norms -------------------------------------------------------------------

def _rows(x, r, mask, w, b):
    h = x + r                                             # residual add + layer_norm
    ln = F.layer_norm(h, (x.shape[-1],), w, b)
    sm = (x * 0.5 + mask).softmax(-1)                     # scaled, masked softmax
    lsm = torch.log_softmax(x * 2, -1)
    rms = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    y = x * 3
    return ln, sm, lsm, rms, y.sum(-1), y.amax(-1, keepdim=True), y.amin(-1), y.mean(-1), \
        y.var(-1)


def _row_inputs(dtype, n=70):
    x = _rand(33, 6, n, dtype=dtype).transpose(0, 1)                 # permuted
    r = _rand(6, 33, 2 * n, dtype=dtype, seed=1)[..., ::2]             # strided columns
    return (x, r, _rand(33, n, dtype=dtype, seed=2), _rand(n, dtype=dtype, seed=3),
            _rand(n, dtype=dtype, seed=4))


def _row_stats():
    return {**db.stats, **kernels.stats}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_row_kernels_match_eager(dtype):
    """Every row pattern in one graph (each fused, cost rule off); narrow types are
    computed in float32 and rounded as ATen does."""
    args = _row_inputs(dtype)
    assert not args[0].is_contiguous() and not args[1].is_contiguous()
    graphs = []
    orig = db.fuse_pointwise

    def spy(gm, device_type, *a, **k):
        out = orig(gm, device_type, cost_rule=False)
        graphs.append(out)
        return out
    db.fuse_pointwise = spy
    try:
        before = _row_stats()
        got = torch.compile(_rows, backend="flydsl")(*args)
    finally:
        db.fuse_pointwise = orig
    want = _rows(*args)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    from flydsl.torch.reductions import row_input
    assert _fused_modules(graphs[0], row_kernels.RowModule)
    assert not [n for n in graphs[0].graph.nodes if row_input(n) is not None]   # all fused
    d = {k: v - before.get(k, 0) for k, v in _row_stats().items()}
    assert d["eager_fallbacks"] == 0 and d["launches"] == len(_fused_modules(graphs[0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_softmax_row_kernel_keeps_its_exp_in_the_output_between_loops(dtype):
    """The sum loop stores exp(x - max) into the (float32/float64) output and the last
    loop scales it there: one exp per element. A float16 output cannot hold it without
    rounding, so that kernel computes exp twice and rounds once, as ATen does."""
    def f(x, m):
        return (torch.softmax(x * 0.5 + m, -1),)
    x, m = _rand(16, 50, dtype=dtype), _rand(50, dtype=dtype, seed=1)
    gm = db.fuse_pointwise(_fake_graph(f, x, m), "cpu", cost_rule=False)
    (mod,) = _fused_modules(gm, row_kernels.RowModule)
    _, source = mod.pattern.source(2)
    loops = source.split("for j in range(tid, ncols, BLOCK):")
    assert len(loops) == 4                    # max, sum, store
    if dtype is torch.float16:
        assert source.count("fm.exp(") == 2
    else:
        assert source.count("fm.exp(") == 1 and "fm.exp(" in loops[2]
        assert "o0[i0, j] = v" in loops[2] and " = o0[i0, j]" in loops[3]
    tol = 2e-3 if dtype is torch.float16 else 1e-6
    torch.testing.assert_close(gm(x, m)[0], f(x, m)[0], rtol=tol, atol=tol)


def _smoothed_loss(logits, target):
    """Cross entropy with label smoothing, written out (benchmarks/torch_models.py)."""
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, target[:, None]).squeeze(-1)
    return (((0.9 * nll - 0.1 * logp.mean(dim=-1))).mean(),)


def test_independent_row_reductions_share_one_loop_and_tree():
    """Cross entropy's row: logsumexp (a max, then a sum of exps that needs it) and the
    mean of the logits (needs neither). The mean joins the sum's loop and tree: two
    column loops, not three; results as eager's on edge rows (a masked class, huge
    and tiny logits, a NaN, all equal)."""
    x = _rand(8, 100)
    x[1, 3] = float("-inf")
    x[2] *= 1e4
    x[3] *= 1e-30
    x[4, 7] = float("nan")
    x[5] = 3.0
    x[6, :50] = float("-inf")
    target = torch.arange(8) * 7 % 100
    gm = db.fuse_pointwise(_fake_graph(_smoothed_loss, x, target), "cpu", cost_rule=False)
    row = [m for m in _fused_modules(gm, row_kernels.RowModule)
           if "fm.exp(" in m.pattern.source(2)[1]]
    assert len(row) == 1
    source = row[0].pattern.source(2)[1]
    loops = source.split("for j in range(tid, ncols, BLOCK):")
    assert len(loops) == 3, source            # max; sum of exps and sum of logits
    assert source.count("fx.barrier()") == 4  # two trees: one after each loop
    for rows in (slice(None), slice(0, 4), slice(5, 8)):   # with and without the NaN
        got, want = gm(x[rows], target[rows])[0], _smoothed_loss(x[rows], target[rows])[0]
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


@flydsl.kernel
def _fold_all(x: fx.Tensor, out: fx.Tensor, N: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    red = fx.shared_array((16,), fx.Float32)
    if tid < N:
        red[tid] = x[tid]
    fx.barrier()
    out[tid, 0] = fm.fold(red, N, "sum")
    out[tid, 1] = fm.fold(red, N, "max")
    out[tid, 2] = fm.fold(red, N, "min")


@pytest.mark.parametrize("n", [1, 5, 16])
def test_row_reductions_end_with_every_thread_folding_the_partials(n):
    """A row reduction's shared-memory tree stops at 16 partials, which ``fm.fold``
    combines in every thread (on the CPU: once per block)."""
    import numpy as np
    x = np.random.default_rng(n).standard_normal(16).astype(np.float32)
    out = np.zeros((16, 3), np.float32)
    _fold_all[1, 16](x, out, n)
    want = [x[:n].astype(np.float64).sum(), x[:n].max(), x[:n].min()]
    np.testing.assert_allclose(out, np.tile(want, (16, 1)), rtol=1e-6)
    _, source = row_kernels.RowPattern(
        (("tensor", torch.float32, "full"),),
        (("reduce", "v0", ("sum", "x0"), torch.float32),), (("v0", torch.float32, "row"),)
    ).source(2)
    assert "while s >= 16:" in source and "fm.fold(red0, min(BLOCK, 16), 'sum')" in source


def test_row_kernels_with_dynamic_shapes(monkeypatch):
    counter = torch._dynamo.testing.CompileCounterWithBackend("flydsl")
    compiled = torch.compile(_rows, backend=counter, dynamic=True)
    before = _row_stats()
    monkeypatch.setattr(db, "COST_RULE", False)
    for n in (70, 90, 127):       # one BLOCK (64 threads per row): one build per kernel
        args = _row_inputs(torch.float32, n)
        for g, w in zip(compiled(*args), _rows(*args)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1
    d = {k: v - before.get(k, 0) for k, v in _row_stats().items()}
    assert d["eager_fallbacks"] == 0 and d["launches"] >= 3 * 2


def test_fused_forward_and_backward_give_eager_gradients(monkeypatch):
    """Training: layer_norm after a residual add, softmax after a scale, a bias-GELU
    epilogue; the backward graph fuses too (softmax backward, gelu_backward)."""
    monkeypatch.setattr(db, "COST_RULE", False)
    torch.manual_seed(0)
    fc = torch.nn.Linear(48, 48)
    ln = torch.nn.LayerNorm(48)

    def step(x, r):
        h = x + r
        a = ln(h)
        s = (a @ a.transpose(-2, -1) * 0.3).softmax(-1)
        return (s @ F.gelu(fc(a), approximate="tanh")).square().mean()
    x = _rand(4, 16, 48).requires_grad_()
    r = _rand(4, 16, 48, seed=1)
    params = [x, *fc.parameters(), *ln.parameters()]
    before = _row_stats()
    torch.compile(step, backend="flydsl")(x, r).backward()
    got = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    step(x, r).backward()
    for g, p in zip(got, params):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
    d = {k: v - before.get(k, 0) for k, v in _row_stats().items()}
    assert d["aten_graphs"] == 2 and d["eager_fallbacks"] == 0 and d["fused_groups"] >= 4


def test_training_graph_is_compiled_only_when_its_fusions_beat_aotautograd():
    """A matmul-bound step whose fusions save little runs as dynamo captured it
    (eager autograd); a pointwise-bound one runs fused, backward included."""
    torch.manual_seed(0)
    fc = torch.nn.Linear(2048, 512)

    def matmul_bound(x):
        return (fc(x) + 1).square().mean()

    def pointwise_bound(x):
        return (torch.tanh(x * 2 + 1) * x - x.sigmoid()).square().mean()
    for fn, x, aot in ((matmul_bound, _rand(512, 2048), False),
                       (pointwise_bound, _rand(1 << 20), True)):
        torch._dynamo.reset()
        x.requires_grad_()
        before = _row_stats()
        torch.compile(fn, backend="flydsl")(x).backward()
        got, x.grad = x.grad, None
        fn(x).backward()
        torch.testing.assert_close(got, x.grad, rtol=1e-5, atol=1e-7)
        d = {k: v - before.get(k, 0) for k, v in _row_stats().items()}
        assert d["not_worth_aot"] == (0 if aot else 1), fn.__name__
        assert (d["launches"] > 0) == aot and d["eager_fallbacks"] == 0


@pytest.mark.parametrize("backend,arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_row_kernels_compile_for_gpus(backend, arch):
    """A row kernel (shared memory, barriers) is plain flydsl: it compiles for GPUs."""
    import inspect
    from flydsl.expr.dtypes import TensorAnnotation

    def fn(x, mask, w):
        return (F.layer_norm((x * 0.5 + mask).softmax(-1), (8,), w, None),)
    gm = db.fuse_pointwise(_fake_graph(fn, _rand(4, 8), _rand(8), _rand(8)), "cpu",
                           cost_rule=False)
    (fused,) = _fused_modules(gm, row_kernels.RowModule)
    kernel = kernels.load_kernel(fused.pattern, 2)
    args = []
    for p in inspect.signature(kernel.fn).parameters.values():
        ann = p.annotation
        args.append(torch.zeros((4, 8)) if isinstance(ann, TensorAnnotation)
                    else 64 if p.name == "BLOCK" else 8)
    text = gpu_asm_or_skip(kernel, args, backend, arch)
    assert ("bar.sync" in text or "barrier" in text) if backend == "cuda" else "s_barrier" in text


def test_merge_spaces():
    from flydsl.torch.partition import merge_spaces
    assert merge_spaces((4, 8), (4, 8)) == (4, 8)
    assert merge_spaces((4, 1), (4, 8)) == (4, 8) == merge_spaces((4, 8), (4, 1))
    assert merge_spaces((4, 8), (8,)) is None and merge_spaces((2, 8), (4, 8)) is None


# -- the warm call and the log ---------------------------------------------------------------

def test_warm_calls_reuse_the_launch_plan(monkeypatch):
    """Shapes and strides are worked out once per input signature (the warm call
    allocates, views and launches)."""
    gm = db.fuse_pointwise(_fake_graph(_add_mul, _rand(1), _rand(1)), "cpu", cost_rule=False)
    (fused,) = _fused_modules(gm)
    calls = []
    plan = fused._plan
    monkeypatch.setattr(fused, "_plan", lambda *a: calls.append(1) or plan(*a))
    a, b = _rand(1), _rand(1, seed=1)
    for _ in range(3):
        torch.testing.assert_close(gm(a, b)[0], (a + b) * b)
    assert len(calls) == 1
    (p,) = fused.plans.values()
    assert p.views == (None, None, None)     # 1-D operands: no views to make


def test_warm_calls_store_only_data_pointers_and_misaligned_ones_launch_the_usual_way(
        monkeypatch):
    """After its first launch a plan holds a prepared launch (runtime.prepared): later
    calls skip the kernel's guarded warm path. A view 4 bytes past an aligned pointer
    (same shape and strides, so the same plan) does not fit the aligned
    specialization: it takes the usual launch, and both stay right."""
    gm = db.fuse_pointwise(_fake_graph(_add_mul, _rand(64), _rand(64)), "cpu", cost_rule=False)
    (fused,) = _fused_modules(gm)
    a, b = _rand(64), _rand(64, seed=1)
    gm(a, b)
    (plan,) = fused.plans.values()
    assert plan.prepared is not None
    usual = []
    launch = plan.launch
    monkeypatch.setattr(plan, "launch", lambda *x: usual.append(1) or launch(*x))
    for seed in range(3):
        a = _rand(64, seed=seed)
        torch.testing.assert_close(gm(a, b)[0], (a + b) * b)
    assert usual == []
    shifted = _rand(65, seed=7)[1:]
    assert shifted.data_ptr() % 16 and shifted.stride() == a.stride()
    torch.testing.assert_close(gm(shifted, b)[0], (shifted + b) * b)
    assert usual == [1] and len(fused.plans) == 1


def test_warm_prepared_calls_make_no_views(monkeypatch):
    """2-D operands coalesce to a 1-D kernel: the first launch takes 1-D views; a
    prepared launch reads only data pointers (a view's is its tensor's), so warm
    calls pass the tensors as they are."""
    gm = db.fuse_pointwise(_fake_graph(_add_mul, _rand(4, 16), _rand(4, 16)), "cpu",
                           cost_rule=False)
    (fused,) = _fused_modules(gm)
    a, b = _rand(4, 16), _rand(4, 16, seed=1)
    gm(a, b)
    (plan,) = fused.plans.values()
    assert plan.prepared is not None and not plan.direct
    views = []
    as_strided = torch.as_strided
    monkeypatch.setattr(torch, "as_strided", lambda *x: views.append(1) or as_strided(*x))
    for seed in range(2):
        a = _rand(4, 16, seed=seed + 2)
        torch.testing.assert_close(gm(a, b)[0], (a + b) * b)
    assert views == []


def test_flydsl_torch_log_shows_fused_groups_and_kernels(monkeypatch, capfd):
    monkeypatch.setenv("FLYDSL_TORCH_LOG", "1")
    monkeypatch.setattr(kernels, "_KERNELS", {})
    monkeypatch.setattr(db.log, "handlers", [])
    monkeypatch.setattr(db.log, "propagate", True)
    monkeypatch.setattr(db.configure_logging, "done", None, raising=False)
    x = _rand(1 << 18)
    torch.compile(lambda t: (t * 2 + 1).relu(), backend="flydsl")(x)
    err = capfd.readouterr().err
    assert "[flydsl.torch] fused 3 ops ['mul.Tensor', 'add.Tensor', 'relu.default']" in err
    assert "[flydsl.torch] generated kernel fused_" in err


def test_getitem_of_a_row_op_joins_its_group():
    def fn(x, w, b):
        out, mean, rstd = aten.native_layer_norm(x * 2, [8], w, b, 1e-5)
        return out, mean, rstd
    args = (_rand(4, 8), _rand(8), _rand(8))
    groups = db.partition(_fake_graph(fn, *args).graph, "cpu")
    (g,) = groups
    assert sum(n.target is operator.getitem for n in g) == 3
    gm = db.fuse_pointwise(_fake_graph(fn, *args), "cpu", cost_rule=False)
    for got, want in zip(gm(*args), fn(*args)):
        torch.testing.assert_close(got, want)


def test_row_reductions_propagate_nan_and_inf(monkeypatch):
    monkeypatch.setattr(db, "COST_RULE", False)
    x = _rand(4, 8)
    x[1, 3], x[2, 5] = float("nan"), float("inf")

    def fn(x):
        return (x * 1).amax(-1), (x * 2).amin(-1), (x * 3).sum(-1), (x * 4).softmax(-1)
    before = _row_stats()
    for got, want in zip(torch.compile(fn, backend="flydsl")(x), fn(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
    d = {k: v - before.get(k, 0) for k, v in _row_stats().items()}
    assert d["fused_groups"] == d["launches"] == 4 and d["eager_fallbacks"] == 0


def test_plan_key_is_shapes_then_strides_then_devices_of_the_tensor_arguments():
    a, b = _rand(4, 3), _rand(3, 4).t()
    key = kernels.signature_key([0, 2])
    assert key((a, 2.0, b)) == (a.shape, b.shape, a.stride(), b.stride(), a.device, b.device)
    assert key((a, 2.0, b)) != key((a, 2.0, b.contiguous()))
    assert kernels.signature_key([])((1.0,)) == ()
