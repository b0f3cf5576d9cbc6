"""Bad input never crashes the interpreter: random and malformed kernels, and garbage
arguments, always end in a flydsl exception (or a correct compile)."""
import importlib.util
import itertools
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import flydsl
import flydsl.expr as fx

ATOMS = ["i", "n", "x[i]", "x[0]", "y[i]", "1", "2.5", "True", "fx.thread_idx.x",
         "x.shape[0]", "undefined_var", "'text'", "None", "[1, 2]", "(1, 2)", "x", "fx",
         "x[i, i]", "x[1.5]", "fx.exp(x[i])", "fx.exp()", "fx.max(i)", "fx.cast(x[i], fx.Int32)",
         "fx.cast(x[i], 3)", "fx.shared_array((4,), fx.Float32)", "fx.shared_array(-1, fx.Int32)",
         "fx.shuffle_xor(x[i], 1)", "fx.atomic_add(y, i, 1.0)", "fx.atomic_add(i, i, 1)",
         "x.shape[5]", "x.nope", "1 // 0", "2 ** 100", "i ** 0.5", "fx.warp_size()",
         "(lambda q: q + 1)(i)", "[k for k in range(3)]", "x[-1]", "y", "fx.sqrt(i)",
         "fx.select(i < n, 1.0, 2)", "min(i, n)", "abs(x[i])", "float(i)", "int(x[i])", "v",
         "x.shape", "fx.block_idx.w", "fx.Float16(x[i])", "len(x.shape)", "x[i] if i < n else v"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "and", "or", "<", "==",
       "!=", ">="]


def expr(depth=0):
    atom = st.sampled_from(ATOMS)
    if depth >= 2:
        return atom
    sub = expr(depth + 1)
    return st.one_of(
        atom,
        st.tuples(sub, st.sampled_from(OPS), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "not ", "~"]), sub).map(lambda t: f"({t[0]}{t[1]})"),
    )


def block(stmts, indent):
    return "\n".join(textwrap.indent(s, " " * indent) for s in stmts) or " " * indent + "pass"


def stmt(depth=0):
    e = expr()
    simple = st.one_of(
        e.map(lambda v: f"v = {v}"),
        e.map(lambda v: f"v += {v}"),
        e.map(lambda v: f"y[i] = {v}"),
        st.tuples(e, e).map(lambda t: f"y[{t[0]}] = {t[1]}"),
        e.map(lambda v: f"return {v}"),
        st.sampled_from(["return", "fx.barrier()", "pass", "del v", "global g", "break",
                         "continue", "import os", "raise ValueError('boom')", "v = yield 1",
                         "print(i)", "x.shape[0] = 3", "v: fx.Float32 = 1", "a, b = 1",
                         "a, b = (1, 2)", "i = i + 1", "assert i", "assert 1 == 2, 'no'",
                         "nonlocal_thing = 1", "async_x = 1"]),
        e.map(lambda v: f"assert {v}"),
    )
    if depth >= 2:
        return simple
    body = st.lists(stmt(depth + 1), min_size=1, max_size=3)
    return st.one_of(
        simple,
        st.tuples(e, body, body).map(lambda t: f"if {t[0]}:\n{block(t[1], 4)}\nelse:\n"
                                               f"{block(t[2], 4)}"),
        st.tuples(e, body).map(lambda t: f"for k in range({t[0]}):\n{block(t[1], 4)}"),
        st.tuples(e, body).map(lambda t: f"for k in fx.range({t[0]}):\n{block(t[1], 4)}"),
        body.map(lambda b: f"while i < n:\n    i = i + 1\n{block(b, 4)}"),
        body.map(lambda b: f"with open('f'):\n{block(b, 4)}"),
        body.map(lambda b: f"try:\n{block(b, 4)}\nexcept Exception:\n    pass"),
        body.map(lambda b: f"def inner():\n{block(b, 4)}"),
    )


_counter = itertools.count()
_lock = threading.Lock()


def make_kernel(tmp_dir, body_stmts):
    src = ("import flydsl\nimport flydsl.expr as fx\n\n\n@flydsl.kernel\n"
           "def fuzz(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):\n"
           "    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x\n"
           "    v = 0.0\n" + block(body_stmts, 4) + "\n")
    with _lock:
        path = tmp_dir / f"fuzz_{next(_counter)}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError:
        return None, src   # not Python at all: nothing for flydsl to do
    return module.fuzz, src


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(st.lists(stmt(), min_size=1, max_size=4))
def test_random_kernels_compile_or_raise_flydsl_errors(tmp_path, monkeypatch, body):
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    kern, src = make_kernel(tmp_path, body)
    if kern is None:
        return
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    try:
        flydsl.compile(kern, x, y, 8, backend="cpu")
    except flydsl.FlydslError as e:
        assert str(e), src
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{type(e).__name__} escaped for kernel:\n{src}\n{e!r}")


@flydsl.kernel
def simple(x: fx.Tensor, n: fx.Int32):
    x[fx.thread_idx.x] = n


GARBAGE = [None, "text", b"bytes", {"a": 1}, [1, 2], (1,), 1 + 2j, 2 ** 80, -(2 ** 80), 1.5,
           object(), np.array([1, 2], dtype=object), np.array(["a"]), np.float128(1) if
           hasattr(np, "float128") else 1e400, np.zeros((2, 2), np.complex64), lambda: 0,
           np.int64(2 ** 40), float("nan"), np.zeros(3, np.uint16), type, np, Ellipsis]


@pytest.mark.parametrize("bad", GARBAGE, ids=lambda g: type(g).__name__)
def test_garbage_arguments_raise_flydsl_errors(bad):
    x = np.zeros(4, np.int32)
    for args in ((bad, 1), (x, bad), (bad, bad)):
        try:
            simple[1, 4](*args)
        except flydsl.FlydslError:
            continue
        # the only legitimate success: a value that is a valid Int32 or a valid tensor
        assert args[1] is not bad or isinstance(bad, (int, np.integer, float))


@pytest.mark.parametrize("grid, block", [(None, 1), ("a", 1), (1, [1, 2, 3, 4]),
                                         ((1, 2.5), 1), (1, -3), (1, (0, 1)), (1, 1025),
                                         (True, 1), (np.True_, 1), (1, (7, True))])
def test_garbage_launch_configs_raise_launch_errors(grid, block):
    with pytest.raises(flydsl.LaunchError):
        simple[grid, block](np.zeros(4, np.int32), 1)


@pytest.mark.parametrize("twin, bad", [((1, 1), (True, 1)), ((1, (7, 1)), (1, (7, True))),
                                       ((1, 1), (1, np.True_)), (((2, 1), 1), ((2, True), 1))])
def test_a_bool_config_is_refused_after_its_int_twin_launched(twin, bad):
    """True == 1: the memo of launch configs must not answer for the bool spelling."""
    simple[twin](np.zeros(8, np.int32), 1)
    with pytest.raises(flydsl.LaunchError, match="not bools"):
        simple[bad](np.zeros(8, np.int32), 1)


@pytest.mark.parametrize("twin, bad", [((2, 1), (2.0, 1)), ((1, 4), (1, np.float32(4))),
                                       (((2, 1), 1), ((2, 1.0), 1))])
def test_a_float_config_is_refused_after_its_int_twin_launched(twin, bad):
    """2.0 == 2 and hashes alike: the memos of launch configs (kernel[...] and
    .launch(grid=)) must not answer for the float spelling."""
    simple[twin](np.zeros(8, np.int32), 1)
    with pytest.raises(flydsl.LaunchError, match="must be an int"):
        simple[bad](np.zeros(8, np.int32), 1)
    simple(np.zeros(8, np.int32), 1).launch(grid=twin[0], block=twin[1])
    with pytest.raises(flydsl.LaunchError, match="must be an int"):
        simple(np.zeros(8, np.int32), 1).launch(grid=bad[0], block=bad[1])


def test_malformed_kernel_definitions():
    with pytest.raises(flydsl.FlydslError):
        @flydsl.kernel
        def star(*args):
            pass
    compiled = {}

    def varargs_free():
        pass
    k = flydsl.kernel(varargs_free)
    k[1, 1]()          # an empty kernel is fine
    compiled["ok"] = True
    assert compiled


def test_concurrent_compiles_of_distinct_kernels_from_threads(monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")

    @flydsl.kernel
    def offset(x: fx.Tensor, y: fx.Tensor, K: fx.Constexpr[int]):
        i = fx.thread_idx.x
        y[i] = x[i] * K + K

    errors = []
    x = np.arange(16, dtype=np.float32)

    def work(k):
        try:
            y = np.zeros(16, np.float32)
            offset[1, 16](x, y, k)
            if not np.array_equal(y, x * k + k):
                errors.append(f"wrong result for K={k}")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(offset._compiled) == 8


@flydsl.kernel
def writes_one(y: fx.Tensor):
    y[0] = 1.0


#: Arguments each fx function is tried with outside a kernel.
HOST_ARGS = [(), (1,), (2.5,), (1, 2), ("y",), ("y", 0, 1.0), (fx.Float32,), (1.0, fx.Float16),
             ((4,), fx.Float32)]


def test_kernel_builtins_outside_a_kernel_raise_the_same_error_after_a_launch():
    y = np.zeros(4, np.float32)
    writes_one[1, 1](y)                  # the front end is loaded now
    # fx.Int32(5) outside a kernel is a typed host number (FlyDSL passes it as an argument)
    assert fx.Int32(5) == 5 and fx.Int32(5).dtype is fx.Int32
    for what in (lambda: fx.thread_idx.x, lambda: fx.exp(1.0),
                 lambda: fx.shared_array(4, fx.Float32), lambda: fx.barrier(),
                 lambda: fx.cast(1, fx.Float16), lambda: fx.atomic_add(y, 0, 1.0)):
        with pytest.raises(flydsl.errors.DSLError, match="inside a @flydsl.kernel body"):
            what()
    for name in sorted(fx.__all__):      # no MLIR exception reaches the user
        fn = getattr(fx, name)
        if not callable(fn):
            continue
        for args in HOST_ARGS:
            try:
                fn(*(y if a == "y" else a for a in args))
            except flydsl.errors.FlydslError:
                pass
            except Exception as e:  # noqa: BLE001 - what matters is which
                assert not type(e).__module__.startswith("mlir"), (name, args, e)
                assert "MLIR" not in str(e) and "Context" not in str(e), (name, args, e)
