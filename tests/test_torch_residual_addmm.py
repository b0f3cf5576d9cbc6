"""flydsl.torch: a residual add left eager after a matmul becomes the matmul's addmm
(rewrites.fold_residual_adds): the BLAS call adds the residual as it writes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from flydsl.torch.rewrites import fold_residual_adds  # noqa: E402

aten = torch.ops.aten


def _graph(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 16, generator=g, dtype=dtype)
    h = torch.randn(16, 24, generator=g, dtype=dtype)
    w = torch.randn(16, 24, generator=g, dtype=dtype)
    return x, h, w


def _residual(x, h, w):
    return x + (h @ w.t()).view(2, 8, 16)


def _residual_swapped(x, h, w):
    return (h @ w.t()).view(2, 8, 16) + x


@pytest.mark.parametrize("fn", [_residual, _residual_swapped], ids=["r+p", "p+r"])
def test_residual_add_becomes_addmm(fn):
    args = _inputs()
    gm = _graph(fn, *args)
    assert aten.add.Tensor in _targets(gm)
    assert fold_residual_adds(gm.graph) == 1
    gm.graph.lint()
    gm.recompile()
    targets = _targets(gm)
    assert aten.addmm.default in targets
    assert aten.add.Tensor not in targets and aten.mm.default not in targets
    torch.testing.assert_close(gm(*args), fn(*args), rtol=1e-5, atol=1e-5)


def _mm_read_twice(x, h, w):
    p = h @ w.t()
    return x + p.view(2, 8, 16), p


def _broadcast_residual(x, h, w):
    return x[0, 0] + (h @ w.t()).view(2, 8, 16)


def _alpha(x, h, w):
    return torch.add(x, (h @ w.t()).view(2, 8, 16), alpha=2.0)


def _promoted(x, h, w):
    return x.double() + (h @ w.t()).view(2, 8, 16)


@pytest.mark.parametrize("fn", [_mm_read_twice, _broadcast_residual, _alpha, _promoted],
                         ids=["mm-read-twice", "broadcast", "alpha", "promoted"])
def test_other_adds_stay(fn):
    args = _inputs()
    gm = _graph(fn, *args)
    before = _targets(gm)
    assert fold_residual_adds(gm.graph) == 0
    assert _targets(gm) == before


def test_non_contiguous_residual_is_copied():
    """reshape, not view: a transposed residual still gives eager's values."""
    x, h, w = _inputs()
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)   # (2, 8, 16), not contiguous
    gm = _graph(_residual, xt, h, w)
    assert fold_residual_adds(gm.graph) == 1
    gm.recompile()
    torch.testing.assert_close(gm(xt, h, w), _residual(xt, h, w), rtol=1e-5, atol=1e-5)


def test_fused_graph_folds_its_residual():
    """fuse_pointwise (the backend's step for each ATen graph) folds the residual add
    left eager after its fused groups; nothing is launched (no kernel compile)."""
    from flydsl.torch import dynamo_backend

    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, generator=g)
    up, down = torch.randn(48, 32, generator=g), torch.randn(32, 48, generator=g)

    def ffn(x, up, down):
        return x + (torch.relu(x @ up.t()) * 0.5) @ down.t()
    gm = _graph(ffn, x, up, down)
    before = dynamo_backend.stats["residual_adds"]
    new = dynamo_backend.fuse_pointwise(gm, "cpu", cost_rule=False)
    assert new is not gm
    targets = _targets(new)
    assert aten.addmm.default in targets and aten.add.Tensor not in targets
    assert any(n.op == "call_module" for n in new.graph.nodes)     # the fused relu * 0.5
    assert dynamo_backend.stats["residual_adds"] == before + 1
