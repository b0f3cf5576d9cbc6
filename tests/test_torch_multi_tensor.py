"""Independent fused groups of one pattern (an optimizer step over a parameter list)
run as one multi-tensor launch (flydsl.torch.multi_tensor)."""
import pytest

torch = pytest.importorskip("torch")

from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch import kernels, multi_tensor as mt  # noqa: E402


def _step(p, g, m):
    """Three pointwise ops per parameter, two results (a momentum step)."""
    m = m * 0.9 + g
    return p - 0.01 * m.sqrt(), m


def _params(shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.rand(s, generator=gen) for _ in range(3)) for s in shapes]


def _fused(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return db.fuse_pointwise(gm, "cpu", cost_rule=False)


#: a segment of more than one block (CHUNK elements), one of a partial block, a 2-D one
SHAPES = [(mt.CHUNK + 37,), (5,), (3, 7)]


def _all_steps(*flat):
    out = []
    for k in range(0, len(flat), 3):
        out += _step(*flat[k:k + 3])
    return tuple(out)


@pytest.fixture(scope="module")
def merged():
    flat = [t for ps in _params(SHAPES) for t in ps]
    return _fused(_all_steps, *flat)


def test_independent_groups_of_one_pattern_run_as_one_launch(merged):
    multis = [m for m in merged.modules() if isinstance(m, mt.MultiTensorModule)]
    assert len(multis) == 1 and len(multis[0].groups) == len(SHAPES)
    assert not [m for m in merged.modules() if isinstance(m, kernels.FusedModule)]
    flat = [t for ps in _params(SHAPES, seed=1) for t in ps]
    before = dict(mt.stats)
    for _ in range(2):      # the first launch, then the prepared one
        got = merged(*flat)
        torch.testing.assert_close(got, _all_steps(*flat), rtol=1e-6, atol=1e-6)
    assert mt.stats["multi_launches"] - before["multi_launches"] == 2
    assert mt.stats["per_group_calls"] == before["per_group_calls"]
    # results are disjoint views with the eager results' shapes and strides
    for g, w in zip(got, _all_steps(*flat)):
        assert g.shape == w.shape and g.stride() == w.stride()
    got[0].fill_(7.0)
    assert all(not (t == 7.0).all() for t in got[1:])


def test_strided_operands_run_the_groups_one_by_one(merged):
    flat = [t for ps in _params(SHAPES, seed=2) for t in ps]
    flat[-1] = torch.rand(7, 3).t()          # the last group's m: transposed
    before = mt.stats["per_group_calls"]
    torch.testing.assert_close(merged(*flat), _all_steps(*flat), rtol=1e-6, atol=1e-6)
    assert mt.stats["per_group_calls"] == before + 1


def test_dependent_groups_are_not_merged():
    """A group reading another's result cannot share its launch (the order would be
    wrong): of three groups of one pattern, the one that reads another's result
    (through an op that is not fused) keeps its own launch."""
    def two_steps(p0, g0, m0, p1, g1, m1):
        a = _step(p0, g0, m0) + _step(p1, g1, m1)
        return a + _step(a[0].flip(0), g0, m0)
    flat = [t for ps in _params([(6,), (9,)]) for t in ps]
    gm = _fused(two_steps, *flat)
    multis = [m for m in gm.modules() if isinstance(m, mt.MultiTensorModule)]
    assert [len(m.groups) for m in multis] == [2]
    gm.graph.lint()      # every node after its inputs (running it would compile two kernels)
    (call,) = [n for n in gm.graph.nodes if n.op == "call_module" and "multi" in n.target]
    (lone,) = [n for n in gm.graph.nodes if n.op == "call_module" and n is not call]
    seen, todo = set(), [lone]
    while todo:                       # the lone group reads the merged call's result
        todo += [a for a in todo.pop().all_input_nodes if a not in seen]
        seen.update(todo)
    assert call in seen

def test_multi_kernel_source_names_each_segments_operands():
    pattern = kernels.FusedPattern((("tensor", torch.float32), ("scalar", "Float64")),
                                   ("v0 = fx.cast((x0 * x1), fx.Float32)",),
                                   (("v0", torch.float32), ("x0", torch.float32)))
    name, src = mt.multi_kernel_source(pattern, 2)
    assert name.endswith("_s2")
    assert "v0_1 = fx.cast((x0_1 * x1_1), fx.Float32)" in src
    assert "x1_0: fx.Float64" in src and "o1_1: fx.Tensor[fx.Float32, 1]" in src
    # each result of each segment is its own tensor
    assert "o1_1[j_1] = fx.cast(x0_1, fx.Float32)" in src
