"""The shift of a fused softmax, log_softmax and logsumexp (flydsl.torch.reductions):
its max is one compare-select per element ("fmax", NaNs left to the row's sum) and its
exp is ``fm.exp(y, shifted=True)``, a cheaper Float32 exp for ``y = x - max <= 0``."""
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402
from flydsl.torch import _math as fm  # noqa: E402
from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch import row_kernels  # noqa: E402


@flydsl.kernel
def _shifted_exp(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i] = fm.exp(x[i], shifted=True)


def test_shifted_exp_is_eagers_exp_where_a_softmax_needs_it():
    """Within an ulp of e^y (float64, rounded) over [-87, 88.3]: the shifted logits of
    every row whose sum is finite; 0 below -87 (e^y < 1.7e-38, where eager gives a
    subnormal or 0), +inf from 88.4 on (e^y > 2.6e38) and at +inf, NaN for NaN."""
    dense = np.concatenate([np.linspace(-87.0, 0.0, 6000), np.linspace(0.0, 88.3, 1000),
                            -np.logspace(-30, 1.9, 500)]).astype(np.float32)
    edge = np.array([0.0, -0.0, 1e-30, -87.0, -86.99, -87.01, -100.0, -1e30, -np.inf,
                     88.5, 89.0, 1e30, np.inf, np.nan], np.float32)
    x = np.concatenate([dense, edge])
    out = np.empty_like(x)
    _shifted_exp[(x.size + 255) // 256, 256](x, out, x.size)
    want = np.exp(dense.astype(np.float64)).astype(np.float32)
    got = out[:dense.size]
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32))
    assert ulps.max() <= 1, (dense[ulps.argmax()], got[ulps.argmax()], want[ulps.argmax()])
    e = dict(zip(["0", "-0", "tiny", "-87", "-86.99", "-87.01", "-100", "-1e30", "-inf",
                  "88.5", "89", "1e30", "inf"], out[dense.size:-1].tolist()))
    assert e["0"] == e["-0"] == 1.0 and e["tiny"] == 1.0
    assert e["-87"] == np.float32(math.exp(-87.0)) and e["-86.99"] > e["-87"]
    assert e["-87.01"] == e["-100"] == e["-1e30"] == e["-inf"] == 0.0
    assert e["88.5"] == e["89"] == e["1e30"] == e["inf"] == math.inf
    assert np.isnan(out[-1])
    assert fm.exp(-1.0, shifted=True) == math.exp(-1.0)      # Python numbers: math's


def _rows() -> torch.Tensor:
    """Rows with the values a shift must get right: NaN, +-inf, all -inf, huge and tiny
    logits, signed zeros, a logit 100 below the max (a subnormal probability)."""
    x = torch.randn(10, 40, generator=torch.Generator().manual_seed(0))
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    x[3] = float("-inf")
    x[4, :20] = float("-inf")
    x[5] *= 1e4
    x[6] *= 1e-30
    x[7] = 0.0
    x[7, ::2] = -0.0
    x[8, 0] = 100.0
    x[9] = float("nan")
    return x


def _ops(x):
    """The three ops apart, and summed: the sum makes them one row kernel."""
    a, b, c = torch.softmax(x, -1), torch.log_softmax(x, -1), torch.logsumexp(x, -1, True)
    return (a, b, c, a + b + c)


def test_softmax_log_softmax_logsumexp_match_eager_with_the_cheap_shift():
    from torch.fx.experimental.proxy_tensor import make_fx
    x = _rows()
    gm = db.fuse_pointwise(make_fx(_ops, tracing_mode="fake")(x), "cpu", min_group_size=1,
                           cost_rule=False)
    (mod,) = [m for m in gm.modules() if isinstance(m, row_kernels.RowModule)]
    source = mod.pattern.source(2)[1]
    shifts = re.findall(r"(acc\d+) = float\('-inf'\)", source)
    assert len(shifts) == 3, source             # one max per op
    for acc in shifts:   # one compare-select per element, not fx.max's NaN handling
        assert f"{acc} = (fx.select(x0 > {acc}, x0, {acc}) + 0.0)" in source, source
    assert "fx.max(" not in source
    exps = re.findall(r"fm\.exp\([^\n]*", source)
    assert exps and all(e.endswith(", shifted=True)") for e in exps), exps
    for got, want in zip(gm(x), _ops(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
