"""A warm ``@flydsl.jit`` call builds host views only where its body uses them
(flydsl.jit_views): a body that only passes its tensors on to kernels (the README's
``vadd``) gets them as they are, without re-reading its signature; any other use keeps
FlyDSL's host view (``A.shape.unpack()``)."""
from __future__ import annotations

import importlib
import inspect
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
jit_views = importlib.import_module("flydsl.jit_views")
from flydsl.runtime.host_args import TensorArgument

torch = pytest.importorskip("torch")
jit_module = importlib.import_module("flydsl.jit")


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cpu")


@flydsl.kernel
def add_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.jit
def vadd(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int] = 64):
    add_kernel(a, b, c, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1))


@flydsl.jit
def vadd_indexed(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    add_kernel[(n + 63) // 64, 64](a, b, c, n)


def _counting(monkeypatch) -> dict:
    """Count TensorArgument constructions, signature reads and view plans."""
    counts = {"views": 0, "signature": 0, "plans": 0}
    init, signature, plan = TensorArgument.__init__, inspect.signature, jit_views.view_plan

    def counted_init(self, *args, **kwargs):
        counts["views"] += 1
        init(self, *args, **kwargs)

    def counted_signature(*args, **kwargs):
        counts["signature"] += 1
        return signature(*args, **kwargs)

    def counted_plan(fn):
        counts["plans"] += 1
        return plan(fn)

    monkeypatch.setattr(TensorArgument, "__init__", counted_init)
    monkeypatch.setattr(inspect, "signature", counted_signature)
    monkeypatch.setattr(jit_module, "view_plan", counted_plan)
    return counts


@pytest.mark.parametrize("fn", [vadd, vadd_indexed], ids=["launch", "indexed"])
def test_warm_call_builds_no_views_and_reads_no_signature(monkeypatch, fn):
    a, b = torch.arange(100.0), torch.ones(100)
    c = torch.zeros(100)
    fn(a, b, c, 100)   # cold: compiles and plans
    counts = _counting(monkeypatch)
    for _ in range(3):
        c.zero_()
        fn(a, b, c, 100)
        assert torch.equal(c, a + b)
    assert counts == {"views": 0, "signature": 0, "plans": 0}
    # by keyword too, and on numpy arrays
    x = np.ones(5, np.float32)
    y = np.zeros_like(x)
    fn(x, x, c=y, n=5)
    assert np.array_equal(y, 2 * x) and counts["views"] == 0


def test_a_body_that_reads_the_tensor_still_sees_a_host_view(monkeypatch):
    seen = []

    @flydsl.jit
    def shaped(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor):
        (n,) = a.shape.unpack()
        seen.append(type(a))
        add_kernel(a, b, c, n).launch(grid=(1, 1, 1), block=(64, 1, 1))

    a, c = torch.ones(8), torch.zeros(8)
    shaped(a, a, c)
    counts = _counting(monkeypatch)
    shaped(a, a, c)
    assert seen == [TensorArgument, TensorArgument] and torch.equal(c, 2 * a)
    assert counts["views"] == 1 and counts["plans"] == 0   # only a: b, c are passed on


def helper(t):
    return t


@pytest.mark.parametrize("body", ["helper", "attribute", "rebound", "starred", "locals"])
def test_any_other_use_keeps_the_view(body):
    seen = []
    if body == "helper":
        def f(a: fx.Tensor):
            seen.append(type(helper(a)))
    elif body == "attribute":
        def f(a: fx.Tensor):
            seen.append(a.element_type)
    elif body == "rebound":
        def f(a: fx.Tensor):
            a = a
            seen.append(type(a))
    elif body == "starred":
        def f(a: fx.Tensor):
            seen.append(type(helper(*(a,))))
    else:
        def f(a: fx.Tensor):
            seen.append(type(locals()["a"]))
    flydsl.jit(f)(torch.ones(2))
    assert seen[0] in (TensorArgument, fx.Float32)


def test_a_kernel_name_rebound_to_something_else_gets_views_again(monkeypatch):
    a, c = torch.ones(4), torch.zeros(4)
    vadd(a, a, c, 4)
    seen = []
    monkeypatch.setattr(sys.modules[__name__], "add_kernel", _Recorder(seen), raising=True)
    vadd(a, a, c, 4)
    assert seen and all(type(x) is TensorArgument for x in seen[0][:3])
    monkeypatch.undo()
    c.zero_()
    vadd(a, a, c, 4)   # the kernel again: back to passing tensors on
    assert torch.equal(c, 2 * a) and vadd._views.views is False


class _Recorder:
    """Stands in for add_kernel: records what the body passes it."""

    def __init__(self, seen: list):
        self.seen = seen

    def __call__(self, *args):
        self.seen.append(args)
        return self

    def launch(self, **_):
        pass


def test_a_kernel_in_a_closure_is_recognised():
    @flydsl.kernel
    def fill(c: fx.Tensor, v: fx.Float32):
        c[fx.thread_idx.x] = v

    @flydsl.jit
    def run(c: fx.Tensor):
        fill(c, 3.0).launch(grid=(1, 1, 1), block=(4, 1, 1))

    c = torch.zeros(4)
    run(c)
    assert torch.equal(c, torch.full((4,), 3.0)) and run._views.views is False


def test_a_kernel_name_shadowed_by_a_local_is_not_a_kernel():
    seen = []

    def record(t, *_):
        seen.append(type(t))
        return _Recorder([])

    @flydsl.jit
    def shadowed(a: fx.Tensor, add_kernel=record):
        add_kernel(a).launch()

    @flydsl.jit
    def assigned(a: fx.Tensor):
        add_kernel = record   # noqa: F841 - the global kernel's name, rebound here
        add_kernel(a).launch()

    shadowed(torch.ones(2))
    assigned(torch.ones(2))
    assert seen == [TensorArgument, TensorArgument]
