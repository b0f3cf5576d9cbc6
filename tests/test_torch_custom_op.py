"""flydsl.torch.custom_op: @flydsl.jit functions as torch.library ops (eager, compile, export)."""
import itertools

import pytest

torch = pytest.importorskip("torch")

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402
import flydsl.torch as ft  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402


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
    with pytest.raises(ValueError, match="declares no results"):
        ft.custom_op("flydsl_test::out_like_unused", scale_into,
                     schema="(Tensor x, float alpha, Tensor(a!) out) -> ()",
                     out_like=lambda x, alpha, out: torch.empty_like(x))


# --- multiple results, schema defaults, fake tensors -------------------------------------

@flydsl.kernel
def row_stats_kernel(x: fx.Tensor, mean: fx.Tensor, rstd: fx.Tensor, eps: fx.Float32):
    r = fx.block_idx.x
    n = x.shape[1]
    s = fx.Float32(0.0)
    for j in range(n):
        s += x[r, j]
    m = s / n
    v = fx.Float32(0.0)
    for j in range(n):
        v += (x[r, j] - m) * (x[r, j] - m)
    mean[r] = m
    rstd[r] = fx.rsqrt(v / n + eps)


@flydsl.jit
def row_stats(x, mean, rstd, eps):
    row_stats_kernel(x, mean, rstd, eps).launch(grid=(mean.shape[0], 1, 1), block=(1, 1, 1))


def _rows_out(x, eps):
    return x.new_empty(x.shape[0]), x.new_empty(x.shape[0])


row_stats_op = ft.custom_op(
    "flydsl_test::row_stats", row_stats,
    schema="(Tensor x, float eps=1e-5) -> (Tensor mean, Tensor rstd)",
    out_like=_rows_out, kernel_args=lambda x, eps, mean, rstd: (x, mean, rstd, eps))


def _row_stats_ref(x, eps=1e-5):
    return x.mean(1), torch.rsqrt(x.var(1, unbiased=False) + eps)


def test_two_results_with_a_schema_default():
    # torch passes only the arguments given; out_like/kernel_args always get all of them
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    for got, eps in ((row_stats_op(x), 1e-5), (row_stats_op(x, 0.5), 0.5)):
        for g, r in zip(got, _row_stats_ref(x, eps)):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    torch.library.opcheck(row_stats_op, (x,))
    torch.library.opcheck(row_stats_op, (x, 0.25))


@ft.custom_op("flydsl_test::scaled", schema="(Tensor x, *, float alpha=2.0) -> Tensor")
def scaled_op(x, out, *, alpha):          # keyword-only arguments stay keywords
    scale_into(x, alpha, out)


def test_keyword_only_arguments_and_their_defaults():
    a, _ = _ab(100)
    torch.testing.assert_close(scaled_op(a), a * 2.0)
    torch.testing.assert_close(scaled_op(a, alpha=-3.0), a * -3.0)

    def no_alpha(x, out):
        pass

    with pytest.raises(TypeError, match=r"no_alpha is called as no_alpha\(x, out, alpha=alpha\)"
                                        r".*unexpected keyword argument 'alpha'"):
        ft.custom_op("flydsl_test::no_alpha", no_alpha,
                     schema="(Tensor x, *, float alpha=2.0) -> Tensor")


def test_out_like_runs_on_meta_and_fake_tensors():
    mean, rstd = row_stats_op(torch.empty(7, 3, device="meta"))
    assert mean.device.type == rstd.device.type == "meta" and mean.shape == rstd.shape == (7,)
    with FakeTensorMode() as mode:
        mean, rstd = row_stats_op(mode.from_tensor(torch.randn(5, 2)), 0.1)
    assert mean.shape == (5,) and type(rstd).__name__ == "FakeTensor"


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_two_results_under_torch_compile(backend):
    torch._dynamo.reset()
    fn = torch.compile(lambda x: row_stats_op(x * 2 + 1)[1] - row_stats_op(x)[0].sum(),
                       backend=backend, fullgraph=True, dynamic=True)
    for rows in (3, 9):
        x = torch.randn(rows, 16, generator=torch.Generator().manual_seed(rows))
        mean, _ = _row_stats_ref(x)
        want = _row_stats_ref(x * 2 + 1)[1] - mean.sum()
        torch.testing.assert_close(fn(x), want, atol=1e-4, rtol=1e-4)


# --- autograd ------------------------------------------------------------------------------

@flydsl.kernel
def silu_kernel(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = x[i] / (1.0 + fx.exp(-x[i]))


@flydsl.kernel
def silu_grad_kernel(x: fx.Tensor, grad: fx.Tensor, dx: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        s = 1.0 / (1.0 + fx.exp(-x[i]))
        dx[i] = grad[i] * s * (1.0 + x[i] * (1.0 - s))


@ft.custom_op("flydsl_test::silu", schema="(Tensor x) -> Tensor")
def silu_op(x, y):
    silu_kernel[(x.numel() + 127) // 128, 128](x, y, x.numel())


@ft.custom_op("flydsl_test::silu_grad", schema="(Tensor x, Tensor grad) -> Tensor")
def silu_grad_op(x, grad, dx):
    silu_grad_kernel[(x.numel() + 127) // 128, 128](x, grad, dx, x.numel())


def _silu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad):
    x, = ctx.saved_tensors
    return silu_grad_op(x, grad)


silu_op.register_autograd(_silu_backward, setup_context=_silu_setup)


def test_register_autograd_on_the_returned_op_passes_gradcheck():
    x = torch.randn(37, dtype=torch.float64, generator=torch.Generator().manual_seed(3),
                    requires_grad=True)
    assert torch.autograd.gradcheck(silu_op, (x,))
    torch.library.opcheck(silu_op, (x,))          # includes the autograd registration


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_autograd_under_torch_compile(backend):
    torch._dynamo.reset()
    w = torch.randn(300, generator=torch.Generator().manual_seed(4))
    fn = torch.compile(lambda x: (silu_op(x * 2) * w).sum(), backend=backend, fullgraph=True)
    x = torch.randn(300, generator=torch.Generator().manual_seed(5), requires_grad=True)
    fn(x).backward()
    want = torch.func.grad(lambda t: (torch.nn.functional.silu(t * 2) * w).sum())(x.detach())
    torch.testing.assert_close(x.grad, want, atol=1e-5, rtol=1e-5)


# --- mistakes get errors that say what the op passes and expects ---------------------------

def test_out_like_with_the_wrong_signature_is_refused_at_registration():
    with pytest.raises(TypeError, match=r"out_like is called as out_like\(x, eps\) \(the op's "
                       r"arguments\), but it is defined as out_like\(x, eps, mean\)") as info:
        ft.custom_op("flydsl_test::bad_out_like_arity", row_stats,
                     schema="(Tensor x, float eps=1e-5) -> (Tensor mean, Tensor rstd)",
                     out_like=lambda x, eps, mean: (x, x))
    assert isinstance(info.value, flydsl.FlydslError)
    assert info.value.filename == __file__ and "lambda x, eps, mean" in info.value.source_line


def test_kernel_args_and_kernel_fn_signatures_are_checked_at_registration():
    with pytest.raises(TypeError, match=r"kernel_args is called as kernel_args\(a, b, out\) "
                       r"\(the op's arguments, then its outputs\)"):
        ft.custom_op("flydsl_test::bad_kernel_args", vadd, schema="(Tensor a, Tensor b) -> Tensor",
                     kernel_args=lambda a, b: (a, b))
    with pytest.raises(TypeError, match=r"vadd is called as vadd\(a, b, out\) .*missing a "
                       r"required argument: 'n'; pass kernel_args=lambda a, b, out: \(\.\.\.\)"):
        ft.custom_op("flydsl_test::no_kernel_args", vadd, schema="(Tensor a, Tensor b) -> Tensor")


_op_ids = itertools.count()


def _returns_input(x):
    return x


def _returns_twice(x):
    t = torch.empty_like(x)
    return t, t


@pytest.mark.parametrize("out_like, n_out, message", [
    (lambda x: None, 1, r"out_like returned None; it must return 1 new tensor \(out\) as the "
                        r"schema '\(Tensor x\) -> Tensor' declares"),
    (lambda x: torch.empty_like(x), 2, r"returned 1 tensor; it must return 2 new tensors "
                                       r"\(out0, out1\)"),
    (lambda x: (torch.empty_like(x), x.shape), 2, r"returned torch.Size\(\[5\]\) as "
                                                  r"result 1 \(out1\)"),
    (_returns_input, 1, r"returned input 'x' itself as result 0 \(out\)"),
    (_returns_twice, 2, r"returned an earlier result itself as result 1"),
    (lambda x: torch.empty(5, device="meta"), 1, r"returned result 0 \(out\) on meta while the "
                                                 r"inputs are on cpu"),
], ids=["None", "count", "non_tensor", "an_input", "one_tensor_twice", "device"])
def test_bad_out_like_results_are_reported(out_like, n_out, message):
    ret = "Tensor" if n_out == 1 else "(Tensor, Tensor)"
    op = ft.custom_op(f"flydsl_test::bad_out_like_{next(_op_ids)}", lambda *args: None,
                      schema=f"(Tensor x) -> {ret}", out_like=out_like)
    with pytest.raises(TypeError, match=message) as info:
        op(torch.ones(5))
    assert info.value.filename == __file__     # points at the out_like definition
    with FakeTensorMode() as mode, pytest.raises(TypeError, match=message):
        op(mode.from_tensor(torch.ones(5)))       # the fake implementation checks too



def test_kernel_errors_name_the_op_and_what_each_parameter_received():
    swapped = ft.custom_op(     # kernel_args puts an output where row_stats expects x
        "flydsl_test::row_stats_swapped", row_stats,
        schema="(Tensor x, float eps=1e-5) -> (Tensor mean, Tensor rstd)",
        out_like=_rows_out, kernel_args=lambda x, eps, mean, rstd: (mean, x, rstd, eps))
    with pytest.raises(flydsl.FlydslError, match="rank 1") as info:    # type kept
        swapped(torch.randn(4, 5))
    note = "\n".join(info.value.__notes__)
    assert "in flydsl.torch.custom_op 'flydsl_test::row_stats_swapped': row_stats received" in note
    assert "x = output 'mean': float32[4]\n" in note
    assert "mean = input 'x': float32[4, 5]\n" in note
    assert "eps = 1e-05\n" in note
    assert "kernel_args is called as kernel_args(x, eps, mean, rstd)" in note
