"""The `flydsl` torch.compile backend: discovery, pointwise fusion, guards, fallbacks."""
import importlib.metadata
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings, strategies as st  # noqa: E402

import flydsl  # noqa: E402
from conftest import gpu_asm_or_skip  # noqa: E402
from flydsl.torch import dynamo_backend as db  # noqa: E402
from flydsl.torch import kernels  # noqa: E402
from flydsl.torch.pointwise import (decompositions, inline_decompositions,  # noqa: E402
                                    pointwise_ops)

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fuse_every_group(monkeypatch, fresh_dynamo):
    # These tests check the generated kernels on small tensors: fuse every group,
    # whether or not it pays (tests/test_torch_fusion.py checks the cost rule).
    monkeypatch.setattr(db, "COST_RULE", False)


def _delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def _stats() -> dict:
    return {**db.stats, **kernels.stats}


def _rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# -- registration ---------------------------------------------------------------------

def test_entry_point_and_dynamo_registry():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert eps["flydsl"].value == "flydsl.torch.dynamo_backend:flydsl_backend"
    assert "flydsl" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("flydsl") is db.flydsl_backend


def test_import_flydsl_does_not_import_torch():
    code = "import sys, flydsl, flydsl.expr; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_op_table_comes_from_the_schemas():
    table = pointwise_ops()
    for op in (aten.add.Tensor, aten.add.Scalar, aten.mul.Tensor, aten.where.self, aten.gelu.default,
               aten.sigmoid.default, torch.ops.prims.convert_element_type.default):
        assert op in table, op
    for op in (aten.add_.Tensor, aten.add.out, aten.sum.default, aten.mm.default,
               aten.igamma.default):          # in-place, out=, reductions, no emitter
        assert op not in table, op
    # prims ops (untagged) come from torch._refs decompositions
    assert all(torch.Tag.pointwise in op.tags or op.namespace == "prims" for op in table)
    add = table[aten.add.Tensor]
    assert [(a.name, a.kind) for a in add.args] == [("self", "tensor"), ("other", "tensor"),
                                                    ("alpha", "number")]
    # AOTAutograd decomposes only _to_copy; silu & co. are inlined only into kernels
    assert {op.name() for op in decompositions()} == {"aten::_to_copy", "aten::_to_copy.out"}
    inline = inline_decompositions()
    assert aten.silu.default in inline and aten.sigmoid_backward.default in inline
    assert aten.add.Tensor not in inline and aten._softmax.default not in inline


# -- fusion and correctness --------------------------------------------------------------

def chain(x, y):
    return torch.sigmoid((x * 2.0 + y).relu() - 0.5) * x


def test_chain_of_pointwise_ops_becomes_one_kernel():
    x, y = _rand(64, 33), _rand(33, seed=1)          # y broadcasts over rows
    before = _stats()
    out = torch.compile(chain, backend="flydsl", fullgraph=True)(x, y)
    torch.testing.assert_close(out, chain(x, y))
    d = _delta(before, _stats())
    assert d["fused_groups"] == 1 and d["fused_ops"] == 6
    assert d["launches"] == 1 and d["eager_fallbacks"] == 0


@pytest.mark.parametrize("fn", [torch.exp, torch.tanh, torch.sigmoid, torch.erf,
                                torch.nn.functional.gelu], ids=lambda f: f.__name__)
def test_float32_math_is_accurate(fn):
    """Single ops (min_group_size=1) over a wide range, infinities and NaN included."""
    special = torch.tensor([0.0, -0.0, 1e-30, -1e-6, 3e-4, 88.7, 88.8, -87.5, -104.0, 200.0,
                            -200.0, float("inf"), float("-inf"), float("nan")])
    atol = 1e-6
    if fn is torch.nn.functional.gelu:
        special = special[special.abs() != float("inf")]   # eager gives NaN for gelu(inf)
        atol = 2e-6    # eager's 1 + erf(x) cancels for x << 0; flydsl uses erfc there
    x = torch.cat([torch.linspace(-100, 100, 20001), _rand(5000) * 4, special])
    compiled = torch.compile(fn, backend="flydsl", options={"min_group_size": 1})
    before = _stats()
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-6, atol=atol, equal_nan=True)
    assert _delta(before, _stats())["launches"] == 1


@pytest.mark.parametrize("fn", [torch.erf, torch.nn.functional.gelu], ids=lambda f: f.__name__)
def test_float64_erf_and_gelu_fuse(fn):
    """erf and exact GELU are ``fx.erf`` (every float type, every backend), so float64
    groups holding them become kernels too, as accurate as eager's."""
    x = torch.cat([torch.linspace(-30, 30, 6001, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, 1e-300, float("nan")], dtype=torch.float64)])
    compiled = torch.compile(lambda a: fn(a * 1.5), backend="flydsl",
                             options={"cost_rule": False})
    before = _stats()
    torch.testing.assert_close(compiled(x), fn(x * 1.5), rtol=1e-14, atol=1e-15,
                               equal_nan=True)
    assert _delta(before, _stats())["launches"] == 1


def test_unknown_backend_options_are_rejected():
    with pytest.raises(Exception, match="min_group_size"):
        torch.compile(chain, backend="flydsl", options={"fuse_everything": True})(
            _rand(2), _rand(2))


UNARY = {
    "neg": torch.neg,
    "exp": lambda a: torch.exp(a.clamp(-10.0, 10.0)),
    "log": lambda a: torch.log(a.abs() + 1),
    "sqrt": lambda a: torch.sqrt(a.abs()),
    "rsqrt": lambda a: torch.rsqrt(a.abs() + 1),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda a: torch.nn.functional.gelu(a, approximate="tanh"),
    "scale": lambda a: a * 0.75 - 1,
    "half": lambda a: a.to(torch.float16).to(a.dtype),
}
BINARY = {
    "add": torch.add,
    "sub": lambda a, b: torch.sub(a, b, alpha=2),
    "mul": torch.mul,
    "div": lambda a, b: a / (b.abs() + 1),
    "where": lambda a, b: torch.where(a > b, a, b * 0.5),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}
SHAPES = [(4, 5), (5,), (4, 1), ()]


@st.composite
def programs(draw):
    steps = []
    for k in range(draw(st.integers(2, 6))):
        n_values = len(SHAPES) + k
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(sorted(UNARY))), draw(st.integers(0, n_values - 1))))
        else:
            steps.append((draw(st.sampled_from(sorted(BINARY))), draw(st.integers(0, n_values - 1)),
                          draw(st.integers(0, n_values - 1))))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return steps, dtype


def run_program(steps, inputs):
    values = list(inputs)
    for name, *operands in steps:
        fn = UNARY.get(name) or BINARY[name]
        values.append(fn(*(values[i] for i in operands)))
    return values[-1], values[len(inputs) + len(steps) // 2]   # two results


@settings(max_examples=25, deadline=None, derandomize=True)
@given(programs())
def test_random_pointwise_graphs_match_eager(program):
    steps, dtype = program
    from torch.fx.experimental.proxy_tensor import make_fx
    inputs = [_rand(*s, dtype=dtype, seed=i) for i, s in enumerate(SHAPES)]
    # the backend (AOTAutograd, fusion, kernels) on the program's ATen graph: dynamo's
    # tracing of run_program was over half of this test's time, and the other tests
    # here cover the backend under torch.compile
    graph = make_fx(lambda *xs: run_program(steps, xs))(*inputs)
    before = _stats()
    compiled = db.flydsl_backend(graph, inputs)
    for got, want in zip(compiled(*inputs), run_program(steps, inputs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3, equal_nan=True)
    d = _delta(before, _stats())
    assert d["eager_fallbacks"] == 0 and d["launches"] == d["fused_groups"]


def test_dtypes_casts_and_comparisons():
    def fn(h, b, i):
        m = (h.float() * 2 > b) & (i < 3)
        r = torch.where(m, h * 3, (b + i).to(torch.float16))
        return r, (b * i).to(torch.float64) / 7, (i * 2 + 1) // 2, (h + 1).to(torch.int32)
    h = _rand(6, 7, dtype=torch.float16)
    b = _rand(6, 7, dtype=torch.bfloat16, seed=1)
    i = torch.arange(42, dtype=torch.int32).reshape(6, 7) % 5
    got = torch.compile(fn, backend="flydsl")(h, b, i)
    for g, w in zip(got, fn(h, b, i)):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def _assert_same_as_eager(fn, *args, launches=1):
    """``fn`` compiled with every pointwise op fused (``launches`` kernels) gives
    eager's results exactly."""
    compiled = torch.compile(fn, backend="flydsl", options={"min_group_size": 1})
    before = _stats()
    got, want = compiled(*args), fn(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w) or (g.is_floating_point() and torch.equal(g.isnan(), w.isnan())
                                     and torch.equal(g.nan_to_num(), w.nan_to_num())), (g, w)
    d = _delta(before, _stats())
    assert d["launches"] == launches and d["eager_fallbacks"] == 0


def _near(values, dtype):
    """``values`` rounded to ``dtype`` with their neighbours in ``dtype``."""
    x = torch.tensor(values).to(dtype)
    return torch.cat([x, torch.nextafter(x, x + 1), torch.nextafter(x, x - 1)])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32],
                         ids=str)
def test_comparisons_with_literals_round_them_to_the_tensor_dtype(dtype):
    """Eager compares a half tensor with half(0.1), not with the float 0.1."""
    def fn(x):
        y = x + 0
        return (y == 0.1, y < 0.1, y <= 0.2, y > 0.2, y >= 0.3, y != 0.3,
                torch.where(y >= 0.2, 1.0, 0.0), y > -1e5)
    x = _near([0.1, 0.2, 0.3], dtype)
    assert fn(x)[0].any()          # the rounded literal is in x
    _assert_same_as_eager(fn, x)


def test_comparisons_with_runtime_scalars_and_0d_float64_tensors():
    """A symbolic float (a Float64 kernel parameter) or a 0-d float64 tensor does not
    promote the comparison: eager compares in the tensor's dtype."""
    def compare(y, s):
        return y == s, y < s, torch.where(y >= s, y, 0.0)

    def fn(x, s):
        return compare(x * 1.0, s)

    def with_tensors(x, t, tiny):   # 0-d float64s; logical_and converts to x's dtype too
        y = x * 1.0
        return compare(y, t) + (torch.logical_and(y, tiny),)
    for dtype in (torch.float32, torch.float16):
        x = _near([0.1, 0.2], dtype)
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="flydsl", dynamic=True,
                                 options={"min_group_size": 1})
        before = _stats()
        for s in (0.1, 0.2):
            assert fn(x, s)[0].any()
            for g, w in zip(compiled(x, s), fn(x, s)):
                assert torch.equal(g, w), (dtype, s, g, w)
        d = _delta(before, _stats())      # one graph: s is a runtime scalar
        assert d["graphs"] == 1 and d["launches"] >= 2 and d["eager_fallbacks"] == 0
        torch._dynamo.reset()
        t, tiny = torch.tensor(0.1, dtype=torch.float64), torch.tensor(1e-50, dtype=torch.float64)
        assert with_tensors(x, t, tiny)[0].any() and not with_tensors(x, t, tiny)[-1].any()
        _assert_same_as_eager(with_tensors, x, t, tiny)


def test_integer_comparisons_and_math_wrap_scalars_like_eager():
    """Eager converts an int scalar to the integer tensor's dtype (int8 > 200 compares
    with -56); a float scalar promotes to float; bools promote to the scalar's kind."""
    def fn(i8, i32, b):
        a, c, bb = i8 + 0, i32 * 1, torch.logical_or(b, b)   # one kernel per input
        return (a > 200, a < -129, a == 300, (a + 1000) * 2, a < 3.5, c < 2**40,
                c != -2**32, bb < 0.5, bb == 1)
    i8 = torch.tensor([0, 1, 44, -56, 100, -128, 127], dtype=torch.int8)
    i32 = torch.tensor([0, 1, -1, 2**31 - 1, -2**31, 7, 8], dtype=torch.int32)
    b = torch.tensor([True, False, True, False, True, True, False])
    _assert_same_as_eager(fn, i8, i32, b, launches=3)


def test_narrowing_casts_round_through_float32_like_eager():
    """torch converts float64 (and int64) to half/bfloat16 via float32 (rounding twice)."""
    def fn(d, i):
        e = d * 1
        return e.half(), e.bfloat16(), (i + 0).bfloat16()
    d = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 0.1], dtype=torch.float64)
    i = torch.tensor([2**31 + 2**23 + 1, 3, -5])
    _assert_same_as_eager(fn, d, i, launches=2)


def _floor_divide(a, b):
    c = a * 1
    return torch.div(c, b, rounding_mode="floor"), c // b


def test_float_floor_division_matches_eager():
    """torch's float floor division is Python's (fmod based): 1.0 // 0.1 == 9.0, not
    floor(1.0 / 0.1) == 10.0."""
    a = torch.tensor([1.0, -7.0, 0.5, 7.0, -0.5, 0.0, -1.0, 3.0, -3.0, 1e30])
    b = torch.tensor([0.1, 0.7, 0.1, -0.7, 0.1, -1.0, 0.1, float("inf"), float("inf"), 3.0])
    _assert_same_as_eager(_floor_divide, a, b)


def test_float_floor_division_by_zero_matches_eager():
    a = torch.tensor([5.0, -5.0, 0.0])
    b = torch.tensor([0.0, 0.0, 0.0])
    _assert_same_as_eager(_floor_divide, a, b)


def test_strided_and_broadcast_inputs():
    def fn(a, b, c, s):
        return torch.tanh(a * b + c) - s, (a - c).exp() * 2
    a = _rand(9, 6).t()                    # transposed
    b = _rand(6, 18)[:, ::2]               # strided slice
    c = _rand(1, 9).expand(6, 9)           # stride-0 view
    s = torch.tensor(0.25)                 # 0-dim tensor
    compiled = torch.compile(fn, backend="flydsl")
    got = compiled(a, b, c, s)
    for g, w in zip(got, fn(a, b, c, s)):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w)
    empty = [torch.empty(0, 9), torch.empty(0, 9), torch.empty(0, 9), s]
    assert compiled(*empty)[0].shape == (0, 9)


@pytest.mark.parametrize("backend,arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_generated_kernels_compile_for_gpus(backend, arch):
    """The generated source is plain flydsl: it also compiles for GPUs (no GPU needed)."""
    import inspect
    from torch.fx.experimental.proxy_tensor import make_fx
    from flydsl.expr.dtypes import TensorAnnotation
    gm = db.fuse_pointwise(make_fx(chain, tracing_mode="fake")(_rand(4, 8), _rand(8)), "cpu")
    fused = [m for m in gm.modules() if isinstance(m, kernels.FusedModule)]
    assert len(fused) == 1
    kernel = kernels.load_kernel(fused[0].pattern, 2)
    args = [torch.zeros((4, 4)) if isinstance(p.annotation, TensorAnnotation) else 4
            for p in inspect.signature(kernel.fn).parameters.values()]
    assert gpu_asm_or_skip(kernel, args, backend, arch)


# -- guards, recompilation, dynamic shapes ------------------------------------------------------

def test_guards_reuse_then_recompile_on_a_new_shape():
    counter = torch._dynamo.testing.CompileCounterWithBackend("flydsl")
    compiled = torch.compile(chain, backend=counter)
    x, y = _rand(8, 16), _rand(16, seed=1)
    before = _stats()
    for _ in range(3):
        torch.testing.assert_close(compiled(x, y), chain(x, y))
    assert counter.frame_count == 1
    assert _delta(before, _stats())["launches"] == 3
    x2, y2 = _rand(5, 16, seed=2), _rand(16, seed=3)     # new shape: a (dynamic) recompile
    torch.testing.assert_close(compiled(x2, y2), chain(x2, y2))
    assert counter.frame_count == 2
    x3, y3 = _rand(11, 16, seed=4), _rand(16, seed=5)    # covered by the dynamic graph
    torch.testing.assert_close(compiled(x3, y3), chain(x3, y3))
    assert counter.frame_count == 2


def test_dynamic_shapes_and_symbolic_scalars():
    def fn(x):
        return torch.relu(x * x.shape[0] - x.shape[1]) / 3
    counter = torch._dynamo.testing.CompileCounterWithBackend("flydsl")
    compiled = torch.compile(fn, backend=counter, dynamic=True)
    before = _stats()
    for shape in ((3, 4), (7, 2), (5, 9)):
        x = _rand(*shape)
        torch.testing.assert_close(compiled(x), fn(x))
    assert counter.frame_count == 1
    d = _delta(before, _stats())
    # mul and sub take the symbolic sizes as runtime scalars: all four ops are fused
    assert d["fused_groups"] == 1 and d["fused_ops"] == 4
    assert d["launches"] == 3 and d["eager_fallbacks"] == 0


def test_same_pattern_reuses_the_generated_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))

    def f1(a):
        return (a + 1.2345).sigmoid() * 6.789

    def f2(b):
        return (b + 1.2345).sigmoid() * 6.789
    before = _stats()
    x = _rand(10)
    torch.testing.assert_close(torch.compile(f1, backend="flydsl")(x), f1(x))
    torch.testing.assert_close(torch.compile(f2, backend="flydsl")(x), f1(x))
    d = _delta(before, _stats())
    assert d["kernels_generated"] == 1 and d["kernel_cache_hits"] >= 1
    files = list((tmp_path / "generated").glob("fused_*.py"))
    assert len(files) == 1 and "@flydsl.kernel" in files[0].read_text()


# -- fallbacks -----------------------------------------------------------------------------

def test_autograd_runs_forward_and_backward_graphs():
    w = _rand(16, seed=7).requires_grad_()
    x = _rand(4, 16)

    def loss(x):
        return (torch.tanh(x * w) * 3 + w).sigmoid().sum()
    before = _stats()
    compiled_loss = torch.compile(loss, backend="flydsl")
    compiled_loss(x).backward()
    got = w.grad.clone()
    w.grad = None
    loss(x).backward()
    torch.testing.assert_close(got, w.grad)
    d = _delta(before, _stats())
    assert d["aten_graphs"] == 2 and d["fused_groups"] >= 2     # forward and backward


def test_unsupported_ops_stay_eager():
    def fn(x, m, u):
        h = torch.softmax(x @ m, dim=-1)       # matmul, softmax: eager
        s = h.cumsum(0) * 2 + 1                 # cumsum eager, then a fused chain
        return s.sum(1), (u + 3) * 2, torch.special.erfinv(h * 0.5)
    x, m = _rand(5, 4), _rand(4, 6, seed=1)
    u = torch.arange(30, dtype=torch.uint8).reshape(5, 6)   # uint8: no flydsl dtype
    got = torch.compile(fn, backend="flydsl")(x, m, u)
    for g, w in zip(got, fn(x, m, u)):
        torch.testing.assert_close(g, w)


def test_partition_never_creates_cycles():
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x):
        a = x.exp() + 1
        b = a.median()          # not fusible (sum is: a row op), depends on a ...
        return (a * b).neg()    # ... and feeds the next pointwise op
    gm = make_fx(fn, tracing_mode="fake")(_rand(8))
    groups = db.partition(gm.graph, "cpu")
    names = [sorted(str(n.target) for n in g) for g in groups]
    assert names == [["aten.add.Tensor", "aten.exp.default"],
                     ["aten.mul.Tensor", "aten.neg.default"]]
    torch.testing.assert_close(torch.compile(fn, backend="flydsl")(_rand(8)), fn(_rand(8)))


def test_graph_on_another_device_runs_eager():
    before = _stats()
    x = torch.empty(4, 4, device="meta")
    out = torch.compile(chain, backend="flydsl")(x, x)
    assert out.device.type == "meta" and out.shape == (4, 4)
    assert _delta(before, _stats())["eager_graphs"] == 1


def test_kernel_build_failure_falls_back_to_eager(monkeypatch):
    def broken(pattern, rank):
        raise flydsl.CompilationError("simulated failure")
    monkeypatch.setattr(kernels, "load_kernel", broken)
    before = _stats()
    x, y = _rand(3, 4), _rand(4, seed=1)
    compiled = torch.compile(chain, backend="flydsl")
    for _ in range(2):
        torch.testing.assert_close(compiled(x, y), chain(x, y))
    d = _delta(before, _stats())
    assert d["eager_fallbacks"] == 2 and d["launches"] == 0


# -- where generated kernel sources go --------------------------------------------------

def _fused(x, y):
    return torch.relu(x * y + 1.5) * 0.5 - y


def test_generated_sources_live_in_the_private_cache_folder(tmp_path, monkeypatch):
    import os
    import stat
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "_KERNELS", {})
    x, y = _rand(300, seed=1), _rand(300, seed=2)
    torch.testing.assert_close(torch.compile(_fused, backend="flydsl")(x, y), _fused(x, y))
    folder = tmp_path / "cache" / "generated"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    files = [f for f in os.listdir(folder) if f.endswith(".py")]
    assert files and all(stat.S_IMODE(os.stat(folder / f).st_mode) == 0o600 for f in files)


def test_one_pattern_written_two_ways_gets_two_source_files(tmp_path, monkeypatch):
    """Processes of two flydsl versions share the cache folder: a pattern whose kernel
    text differs between them (same pattern key and kernel name) must not overwrite
    the other's file, which that process's tracer reads back with ``inspect``."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_KERNELS", {})
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = db.fuse_pointwise(make_fx(lambda a, b: (_fused(a, b),), tracing_mode="fake")(
        _rand(8), _rand(8)), "cpu", cost_rule=False)
    (mod,) = [m for m in gm.modules() if isinstance(m, kernels.FusedModule)]
    pattern = mod.pattern
    name, text = pattern.source(1)
    first = kernels.load_kernel(pattern, 1)
    kernels._KERNELS.clear()      # another process, whose flydsl adds a line to the kernel
    monkeypatch.setattr(type(pattern), "source",
                        lambda self, rank: (name, text + "# another flydsl version\n"))
    second = kernels.load_kernel(pattern, 1)
    files = sorted((tmp_path / "generated").glob(f"{name}*.py"))
    assert len(files) == 2
    assert sorted(f.read_text() for f in files) == sorted(
        [text, text + "# another flydsl version\n"])
    assert first is not second
    x, y = _rand(8, seed=1), _rand(8, seed=2)
    torch.testing.assert_close(mod(x, y)[0], _fused(x, y))


def test_generated_sources_stay_in_memory_when_the_cache_folder_is_untrusted(tmp_path,
                                                                             monkeypatch):
    """Never a shared TMPDIR path another user could plant code in."""
    import os
    import tempfile
    untrusted = tmp_path / "shared"
    untrusted.mkdir()
    os.chmod(untrusted, 0o777)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(untrusted))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(kernels, "_KERNELS", {})
    x, y = _rand(300, seed=3), _rand(300, seed=4)
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        out = torch.compile(_fused, backend="flydsl")(x, y)
    torch.testing.assert_close(out, _fused(x, y))
    assert kernels.stats["kernels_generated"] >= 1
    assert os.listdir(untrusted) == []
    leftovers = [p for p in (tmp_path / "tmp").rglob("*.py")]
    assert leftovers == []
