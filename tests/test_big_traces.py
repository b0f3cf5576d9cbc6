"""Big traces: past FLYDSL_TRACE_OP_BUDGET a warning gives the compile time to expect,
past FLYDSL_TRACE_OP_LIMIT the kernel is refused at its unrolled loop, and compiles run
on a stack deep enough for LLVM's recursion on long chains."""
import os
import subprocess
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import CompileTimeWarning, DSLError

HERE = os.path.dirname(os.path.abspath(__file__))


@flydsl.kernel
def chain(x: fx.Tensor, out: fx.Tensor):
    acc = x[0]
    for i in fx.range_constexpr(100):
        acc = acc * 1.0001 + 0.5
    out[0] = acc


def _loop_line() -> int:
    lines = open(__file__).read().splitlines()
    return next(n for n, text in enumerate(lines, 1) if "range_constexpr(100)" in text)


def _args():
    return np.ones(4, np.float32), np.zeros(1, np.float32)


def test_a_trace_past_the_op_limit_is_refused_at_its_unrolled_loop(monkeypatch):
    monkeypatch.setenv("FLYDSL_TRACE_OP_LIMIT", "200")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    with pytest.raises(DSLError, match="FLYDSL_TRACE_OP_LIMIT") as caught:
        flydsl.compile(chain, *_args())
    e = caught.value
    assert (e.filename, e.lineno) == (__file__, _loop_line())
    assert e.kernel == "chain" and "fx.range(...)" in e.message
    assert "range_constexpr(100)" in e.source_line


def test_the_budget_warning_says_how_long_the_compile_may_take(monkeypatch):
    monkeypatch.setenv("FLYDSL_TRACE_OP_BUDGET", "200")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    chain.cache_clear()
    with pytest.warns(CompileTimeWarning, match=r"ms per op") as caught:
        flydsl.compile(chain, *_args())
    assert caught[0].lineno == _loop_line()


def test_a_compile_that_recurses_deeply_finishes_instead_of_crashing():
    """Native stack overflow kills the process: compiles run on a large stack."""
    env = dict(os.environ, FLYDSL_CACHE_DISABLE="1", FLYDSL_COMPILE_BACKEND="cpu")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "deep_stack_child.py")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "compiled"), proc.stderr[-2000:]
