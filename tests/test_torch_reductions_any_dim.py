"""Reductions along any dimension fused with their pointwise neighbours by the
`flydsl` torch.compile backend (flydsl/torch/reductions.py, row_kernels.py,
partition.py): sum, mean, amax, amin, var, std, prod, argmax, argmin, any, all,
logsumexp and cumsum, keepdim or not, against eager on edge values (nan, inf,
ties, empty dims, int/bool/half inputs).

Kernels are few and shared: one graph computes every reduction of a dim set,
and the edge-value inputs reuse its kernel (same shapes)."""
import pytest

torch = pytest.importorskip("torch")

from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch.partition import partition  # noqa: E402
from flydsl.torch.row_kernels import RowModule  # noqa: E402
from conftest import gpu_asm_or_skip  # noqa: E402

aten = torch.ops.aten
pytestmark = pytest.mark.usefixtures("fresh_dynamo")

_REDUCTIONS = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.amax.default,
               aten.amin.default, aten.var.correction, aten.std.correction, aten.prod.dim_int,
               aten.argmax.default, aten.argmin.default, aten.any.dim, aten.any.dims,
               aten.all.dim, aten.all.dims, aten.logsumexp.default, aten.cumsum.default}


def _graph(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn, tracing_mode="fake")(*args)


def _fused(fn, *args):
    """``fn``'s ATen graph with its groups fused (cost rule off); asserts that every
    reduction landed in a row kernel."""
    gm = db.fuse_pointwise(_graph(fn, *args), "cpu", cost_rule=False)
    left = [n.target for n in gm.graph.nodes if n.op == "call_function"
            and n.target in _REDUCTIONS]
    assert not left, f"reductions left eager: {left}"
    assert any(isinstance(m, RowModule) for m in gm.modules())
    return gm


def _check(gm, fn, *args):
    got, want = gm(*args), fn(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-4, atol=1e-5)
        else:
            assert torch.equal(g, w), (g, w)


def _edge_inputs(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    ties = torch.randint(-2, 3, shape, generator=g).float()   # many equal values
    specials = x.clone().flatten()
    specials[::7] = float("nan")
    specials[1::5] = float("inf")
    specials[2::5] = -float("inf")
    neg_inf = torch.full(shape, -float("inf"))                  # logsumexp's shift case
    mixed = ties.clone().flatten()
    mixed[3::11] = float("nan")
    return [x, ties, specials.view(shape), neg_inf, mixed.view(shape), torch.zeros(shape)]


def _one_dim_ops(d, keep):
    def fn(x):
        y = x * 2.0                                    # a prologue in every kernel
        return (torch.sum(y, d, keepdim=keep) + 1.0,   # and epilogues
                torch.mean(y, d, keepdim=keep) * 3.0,
                torch.amax(y, d, keepdim=keep) - 1.0,
                torch.amin(y, d, keepdim=keep),
                torch.var(y, d, keepdim=keep),
                torch.std(y, d, keepdim=keep, correction=0) + 0.5,
                torch.prod(y, d, keepdim=keep),
                torch.argmax(y, d, keepdim=keep),
                torch.argmin(y, d, keepdim=keep),
                torch.any(y > 1.0, d, keepdim=keep),
                torch.all(y != 0, d, keepdim=keep),
                torch.logsumexp(y, d, keepdim=keep) * 0.5)
    return fn


@pytest.mark.parametrize("d,keep", [(0, False), (1, True)])
def test_every_reduction_along_one_dim_matches_eager_on_edge_values(d, keep):
    shape = (5, 37, 6)
    fn = _one_dim_ops(d, keep)
    gm = _fused(fn, torch.zeros(shape))
    for x in _edge_inputs(shape):
        _check(gm, fn, x)


def test_several_dims_and_all_dims_match_eager():
    def fn(x):
        y = x + 1.0
        return (torch.sum(y, (0, 2)) * 2.0, torch.mean(y, (0, 2), keepdim=True) - y,
                torch.amax(y, (0, 2)), torch.var(y, (0, 2), keepdim=True) + 1.0,
                torch.logsumexp(y, (0, 2)), torch.any(y > 0, (0, 2)),
                torch.all(y, (0, 2)), torch.any(y - 1.0, (0, 2)))   # nan is true
    shape = (3, 4, 40)
    gm = _fused(fn, torch.zeros(shape))
    for x in _edge_inputs(shape)[:3]:
        _check(gm, fn, x)

    def everything(x):       # dim None: one row; argmax of the flattened input
        y = x * 3.0
        return torch.sum(y) + 1.0, torch.argmax(y), torch.amin(y, (0, 1, 2)) * 2.0
    gm = _fused(everything, torch.zeros(shape))
    for x in _edge_inputs(shape)[:3]:
        _check(gm, everything, x)


def test_cumsum_along_any_dim_fuses_its_prologue():
    def fn(x, y):
        return (torch.cumsum(x * y, 0), torch.cumsum(x + 1.0, -1),
                torch.cumsum(torch.where(x > 0, 2, -1), 1))
    x = _edge_inputs((6, 50))[2]
    y = torch.randn(6, 50)
    gm = _fused(fn, x, y)
    _check(gm, fn, x, y)
    _check(gm, fn, torch.randn(6, 50), y)


def test_a_user_of_cumsum_stays_out_of_its_kernel():
    """A scan's result exists only in memory: its users go to another kernel."""
    def fn(x):
        c = torch.cumsum(x * 2.0, 1)
        return (c * c,)
    gm = _graph(fn, torch.zeros(4, 32))
    groups = partition(gm.graph, "cpu", min_group_size=1)
    cumsum = next(n for n in gm.graph.nodes if n.target is aten.cumsum.default)
    mine = next(g for g in groups if cumsum in g)
    assert not any(u in mine for u in cumsum.users)
    fused = db.fuse_pointwise(gm, "cpu", cost_rule=False)
    x = torch.randn(4, 32)
    _check(fused, fn, x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_inputs(dtype):
    def fn(x):
        y = x * 3
        return (torch.sum(y, 0), torch.prod(y, 0, keepdim=True), torch.amax(y, 0) + 1,
                torch.amin(y, 0), torch.argmax(y, 0), torch.argmin(y, 0, keepdim=True),
                torch.any(y, 0), torch.all(y, 0), torch.cumsum(y, 0))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-3, 4, (33, 5), generator=g, dtype=dtype)
    gm = _fused(fn, x)
    _check(gm, fn, x)
    info = torch.iinfo(dtype)
    extreme = torch.full((33, 5), info.min, dtype=dtype)    # the identities of max/min
    _check(gm, fn, extreme // 3)
    _check(gm, fn, torch.full((33, 5), info.max // 3, dtype=dtype))


def test_bool_and_half_inputs():
    def fn(m, h):
        return (torch.any(m & (h > 0), 0), torch.all(m | (h > 1), 0, keepdim=True),
                torch.sum(h * 2.0, 0), torch.amax(h + 1.0, 0), torch.mean(h * h, 0),
                torch.argmax(h - 1.0, 0), torch.logsumexp(h * 1.5, 0))
    g = torch.Generator().manual_seed(2)
    h = torch.randn(40, 7, generator=g).half()
    h[3, 2] = float("nan")
    h[5, 1] = float("inf")
    m = torch.rand(40, 7, generator=g) > 0.3
    gm = _fused(fn, m, h)
    got, want = gm(m, h), fn(m, h)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, equal_nan=True, rtol=2e-3, atol=2e-3)


def test_reduced_shape_epilogue_takes_only_inputs_that_broadcast_alike():
    """``sum(x, 1) * w`` broadcasts ``w`` against the reduced shape: a ``w`` of
    shape (C,) aligns the same in the full shape and joins the kernel; one of
    shape (A, 1) would align differently and stays out (still correct)."""
    def fn(x, w):
        return (torch.sum(x * 2.0, 1) * w,)
    x = torch.randn(4, 6, 8)
    for w, joins in ((torch.randn(8), True), (torch.randn(4, 1), False)):
        gm = _graph(fn, x, w)
        groups = partition(gm.graph, "cpu", min_group_size=1)
        mul = [n for n in gm.graph.nodes if n.target is aten.mul.Tensor][-1]
        row = next(g for g in groups if any(n.target is aten.sum.dim_IntList for n in g))
        assert (mul in row) == joins
        _check(db.fuse_pointwise(gm, "cpu", cost_rule=False), fn, x, w)


def test_strided_and_empty_inputs():
    """A transposed input walks its reduced dim with a stride; reduced dims that
    cannot be viewed as one column, and empty tensors, run the eager graph."""
    def fn(x):
        return (torch.sum(x * 2.0, 0), torch.amax(x + 1.0, 0, keepdim=True))
    gm = _fused(fn, torch.zeros(9, 40))
    x = torch.randn(40, 9).t()
    _check(gm, fn, x)

    def two(x):
        return (torch.sum(x * 2.0, (0, 1)),)
    gm = _fused(two, torch.zeros(3, 4, 5))
    _check(gm, two, torch.randn(3, 4, 5))
    _check(gm, two, torch.randn(5, 4, 3).permute(2, 1, 0))    # falls back to eager
    def total(x):
        return (torch.sum(x * 2.0, 0) + 1.0,)
    empty = _fused(total, torch.zeros(0, 40))
    got = empty(torch.zeros(0, 40))
    assert got[0].shape == (40,) and torch.equal(got[0], torch.ones(40))


def test_torch_compile_fuses_a_reduction_over_dim_0():
    torch._dynamo.reset()
    db.stats["fused_groups"] = before = db.stats["fused_groups"]

    def f(x):
        return torch.softmax(x * 0.5, dim=0) + 1.0
    x = torch.randn(64, 16)
    out = torch.compile(f, backend="flydsl", options={"cost_rule": False})(x)
    torch.testing.assert_close(out, f(x))
    assert db.stats["fused_groups"] > before


@pytest.mark.parametrize("backend,arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_argmax_and_scan_kernels_compile_for_gpus(backend, arch):
    """(value, index) trees in shared memory and thread 0's scan are plain flydsl."""
    from flydsl.torch import kernels

    def fn(x):
        y = x * 2.0
        return torch.argmax(y, 0), torch.cumsum(y, 0), torch.prod(y, 0)
    gm = _fused(fn, torch.zeros(8, 4))
    (fused,) = [m for m in gm.modules() if isinstance(m, RowModule)]
    kernel = kernels.load_kernel(fused.pattern, 2)
    p = fused.pattern
    args = [torch.zeros((4, 8), dtype=d) for _, d, _ in p.inputs] \
        + [torch.zeros((4, 8), dtype=d) for _, d, _ in p.outputs] + [8, 64]
    text = gpu_asm_or_skip(kernel, args, backend, arch)
    assert ("bar.sync" in text or "barrier" in text) if backend == "cuda" else "s_barrier" in text


def test_label_smoothed_cross_entropy_never_stores_log_softmax():
    """log_softmax read by a gather and a mean over its dim becomes logsumexp and
    the mean of the logits, both in one row kernel (rewrites.split_log_softmax)."""
    def fn(logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        nll = -logp.gather(-1, target[:, None]).squeeze(-1)
        return ((0.9 * nll - 0.1 * logp.mean(dim=-1)).mean(), logp.sum(-1, keepdim=True))
    logits = torch.randn(16, 100)
    logits[3, 5] = -float("inf")
    target = torch.randint(0, 100, (16,))
    gm = db.fuse_pointwise(_graph(fn, logits, target), "cpu", cost_rule=False)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten._log_softmax.default not in targets and aten.gather.default in targets
    _check(gm, fn, logits, target)
