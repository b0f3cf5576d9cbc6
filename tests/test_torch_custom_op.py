"""flydsl.torch.custom_op: @flydsl.jit functions as torch.library ops (eager, compile, export)."""
import pytest

torch = pytest.importorskip("torch")

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402
import flydsl.torch as ft  # noqa: E402


@flydsl.kernel
def vadd_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.jit
def vadd(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int] = 256):
    vadd_kernel(a, b, c, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))


@flydsl.kernel
def scale_kernel(x: fx.Tensor, out: fx.Tensor, alpha: fx.Float32, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i] = x[i] * alpha


@flydsl.jit
def scale_into(x, alpha, out):
    n = x.numel()
    scale_kernel(x, out, alpha, n).launch(grid=((n + 127) // 128, 1, 1), block=(128, 1, 1))


@flydsl.kernel
def minmax_kernel(a: fx.Tensor, b: fx.Tensor, lo: fx.Tensor, hi: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        lo[i] = fx.min(a[i], b[i])
        hi[i] = fx.max(a[i], b[i])


vadd_op = ft.custom_op("flydsl_test::vadd", vadd, schema="(Tensor a, Tensor b) -> Tensor",
                       kernel_args=lambda a, b, c: (a, b, c, a.numel()))

# In-place form: writes its `out` argument, returns nothing.
scale_op = ft.custom_op("flydsl_test::scale_", scale_into,
                        schema="(Tensor x, float alpha, Tensor(a!) out) -> ()")


@ft.custom_op("flydsl_test::minmax", schema="(Tensor a, Tensor b) -> (Tensor, Tensor)",
              out_like=lambda a, b: (torch.empty_like(a), torch.empty_like(a)),
              kernel_args=lambda a, b, lo, hi: (a, b, lo, hi, a.numel()))
def minmax(a, b, lo, hi, n):
    minmax_kernel[(n + 63) // 64, 64](a, b, lo, hi, n)


def _ab(n=1000):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, generator=g), torch.randn(n, generator=g)


def test_eager_call_and_torch_ops_namespace():
    a, b = _ab()
    torch.testing.assert_close(vadd_op(a, b), a + b)
    torch.testing.assert_close(torch.ops.flydsl_test.vadd(a, b), a + b)
    lo, hi = torch.ops.flydsl_test.minmax(a, b)
    torch.testing.assert_close(lo, torch.minimum(a, b))
    torch.testing.assert_close(hi, torch.maximum(a, b))


def test_mutating_op_writes_its_argument():
    a, _ = _ab(300)
    out = torch.zeros_like(a)
    assert scale_op(a, 2.5, out) is None
    torch.testing.assert_close(out, a * 2.5)


def test_opcheck_schema_fake_and_dispatch():
    a, b = _ab(64)
    torch.library.opcheck(vadd_op, (a, b))
    torch.library.opcheck(torch.ops.flydsl_test.minmax.default, (a, b))


def test_fullgraph_compile_has_no_graph_break():
    torch._dynamo.reset()

    def fn(a, b):
        c = vadd_op(a * 2, b)
        out = torch.empty_like(c)
        scale_op(c, 0.5, out)
        return torch.relu(out) + 1

    a, b = _ab()
    explanation = torch._dynamo.explain(fn)(a, b)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
    compiled = torch.compile(fn, backend="flydsl", fullgraph=True)
    torch.testing.assert_close(compiled(a, b), torch.relu((a * 2 + b) * 0.5) + 1)


def test_dynamic_shapes_use_the_fake_implementation():
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda a, b: vadd_op(a, b) * 3, backend=counter,
                             fullgraph=True, dynamic=True)
    for n in (17, 300, 1025):
        a, b = _ab(n)
        torch.testing.assert_close(compiled(a, b), (a + b) * 3)
    assert counter.frame_count == 1


class AddThenMinMax(torch.nn.Module):
    def forward(self, a, b):
        s = vadd_op(a, b)
        lo, hi = torch.ops.flydsl_test.minmax(s, b)
        return hi - lo


def test_torch_export_keeps_the_custom_op():
    a, b = _ab(256)
    ep = torch.export.export(AddThenMinMax(), (a, b))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert torch.ops.flydsl_test.vadd.default in targets
    assert torch.ops.flydsl_test.minmax.default in targets
    a2, b2 = _ab(256)
    s = a2 + b2
    torch.testing.assert_close(ep.module()(a2, b2), (s - b2).abs())


def test_bad_registrations_are_reported():
    with pytest.raises(ValueError, match="namespace::op"):
        ft.custom_op("no_namespace", vadd, schema="(Tensor a) -> Tensor")
    with pytest.raises(ValueError, match="plain Tensors"):
        ft.custom_op("flydsl_test::bad_ret", vadd, schema="(Tensor a) -> int")
    with pytest.raises(TypeError, match="callable"):
        ft.custom_op("flydsl_test::not_callable", 3, schema="(Tensor a) -> Tensor")
    wrong = ft.custom_op("flydsl_test::wrong_count", vadd, schema="(Tensor a) -> (Tensor, Tensor)",
                         out_like=lambda a: torch.empty_like(a))
    with pytest.raises(TypeError, match="2 tensor"):
        wrong(torch.ones(3))
