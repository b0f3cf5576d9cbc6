"""Sums of select_backward/slice_backward pieces become one stack or cat
(flydsl.torch.scatter_sums): the backward of ``q, k, v = qkv`` and of slicing."""
import pytest

torch = pytest.importorskip("torch")

from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch.scatter_sums import merge_scatter_sums  # noqa: E402

aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _merged(fn, *args):
    """(number of merged trees, ATen targets after the rewrite, result, eager result)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(fn, tracing_mode="fake")(*args)
    count = merge_scatter_sums(gm.graph)
    gm.graph.lint()
    gm.recompile()
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    return count, targets, gm(*args)[0], fn(*args)[0]


def test_unpacked_pieces_become_one_stack():
    def f(g0, g1, g2):
        shape = [3, 4, 5]
        s = aten.select_backward(g2, shape, 0, 2) + aten.select_backward(g0, shape, 0, 0)
        return (s + aten.select_backward(g1, shape, 0, -2),)
    count, targets, got, want = _merged(f, _rand(4, 5), _rand(4, 5, seed=1), _rand(4, 5, seed=2))
    assert count == 1
    assert aten.select_backward.default not in targets and aten.add.Tensor not in targets
    assert targets == [aten.stack.default]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_permute_and_contiguous_clone_of_the_sum_are_folded_in():
    """How ``qkv.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)`` unpacking differentiates:
    the pieces are written once, already in the layout the clone makes."""
    def f(g0, g1, g2):
        shape = [3, 2, 4, 5]
        s0, s1, s2 = (aten.select_backward(g, shape, 0, i) for i, g in enumerate((g0, g1, g2)))
        s = s0 + (s1 + s2)
        return (aten.clone(s.permute(1, 2, 0, 3), memory_format=torch.contiguous_format),)
    g1 = _rand(2, 5, 4, seed=1).transpose(1, 2)           # a strided piece
    count, targets, got, want = _merged(f, _rand(2, 4, 5), g1, _rand(2, 4, 5, seed=2))
    assert count == 1
    assert aten.clone.default not in targets and targets.count(aten.stack.default) == 1
    assert got.is_contiguous() and got.shape == (2, 4, 3, 5)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_slices_with_gaps_and_open_ends_become_a_cat_with_zeros():
    def f(a, b, c):
        shape = [4, 16]
        s = aten.slice_backward(a, shape, -1, 0, 4, 1) \
            + aten.slice_backward(b, shape, 1, 6, 9223372036854775807, 1)
        return (s + aten.select_backward(c, shape, 1, 4),)
    count, targets, got, want = _merged(f, _rand(4, 4), _rand(4, 10, seed=1), _rand(4, seed=2))
    assert count == 1 and aten.cat.default in targets and aten.new_zeros.default in targets
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_overlapping_pieces_and_shared_ones_stay_sums():
    def overlapping(a, b):
        shape = [4, 8]
        return (aten.slice_backward(a, shape, 1, 0, 5, 1)
                + aten.slice_backward(b, shape, 1, 3, 8, 1),)

    def shared(a, b):
        shape = [2, 3]
        x = aten.select_backward(a, shape, 0, 0)
        return (x + aten.select_backward(b, shape, 0, 1), x)

    def strided(a, b):
        shape = [4, 8]
        return (aten.slice_backward(a, shape, 1, 0, 8, 2)
                + aten.slice_backward(b, shape, 1, 1, 8, 2),)
    for fn, args in ((overlapping, (_rand(4, 5), _rand(4, 5, seed=1))),
                     (shared, (_rand(3), _rand(3, seed=1))),
                     (strided, (_rand(4, 4), _rand(4, 4, seed=1)))):
        count, targets, got, want = _merged(fn, *args)
        assert count == 0 and aten.add.Tensor in targets, fn.__name__
        torch.testing.assert_close(got, want)


def _attention_like(x):
    b, t, d = x.shape
    q, k, v = x.view(b, t, 3, 2, d // 6).permute(2, 0, 3, 1, 4)
    return ((q * k.sin()).softmax(-1) * v).square().sum()


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_training_gets_eager_gradients_and_one_cat(dynamic):
    x = _rand(2, 8, 24).requires_grad_()
    (want,) = torch.autograd.grad(_attention_like(x), x)
    before = db.stats["scatter_sums"]
    fn = torch.compile(_attention_like, backend="flydsl", dynamic=dynamic,
                       options={"cost_rule": False})
    for seed in range(2):
        x = _rand(2, 8, 24, seed=seed).requires_grad_()
        (want,) = torch.autograd.grad(_attention_like(x), x)
        (got,) = torch.autograd.grad(fn(x), x)
        torch.testing.assert_close(got, want)
    if not dynamic:   # a symbolic piece count keeps the sum (still right)
        assert db.stats["scatter_sums"] == before + 1
