"""Python control flow in kernels: dynamic -> scf ops, constexpr -> folded at trace time."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError, UnsupportedConstructError


@flydsl.kernel
def branches(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    if i >= n:
        return
    v = x[i]
    if v < -1.0:
        r = -1
    elif v < 0.0:
        r = 0
    elif v < 1.0:
        r = 1
    else:
        r = 2
    y[i] = r


def test_if_elif_else_and_early_return():
    x = np.array([-3, -0.5, 0.5, 4, 9, 9], np.float32)
    y = np.full(6, 7, np.int32)
    branches[1, 6](x, y, 4)
    np.testing.assert_array_equal(y, [-1, 0, 1, 2, 7, 7])


@flydsl.kernel
def loops(out: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    acc = 0                      # literal int, loop-carried
    for k in range(n):
        acc += k * i
    s = 0.0                      # reverse range with a constant negative step
    for k in range(n, 0, -2):
        s = s + k
    j = 0
    w = 1
    while j < n:                 # dynamic while with two carried values
        j += 1
        w = w * 2
    t = 0
    for k in range(3, n, 2):     # start/stop/step
        t += 1
    out[i, 0] = acc
    out[i, 1] = s
    out[i, 2] = w
    out[i, 3] = t


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_dynamic_loops(n):
    out = np.zeros((4, 4), np.float64)
    loops[1, 4](out, n)
    for i in range(4):
        assert out[i, 0] == sum(k * i for k in range(n))
        assert out[i, 1] == sum(range(n, 0, -2))
        assert out[i, 2] == 2 ** n
        assert out[i, 3] == len(range(3, n, 2))


@flydsl.kernel
def constexpr_folding(out: fx.Tensor, MODE: fx.Constexpr[str], N: fx.Constexpr[int]):
    total = 0
    for k in fx.range_constexpr(N):   # unrolled
        if k % 2 == 0:                # folded
            total += k
    if MODE == "double":
        total = total * 2
    out[0] = total


def test_constexpr_branches_are_folded_and_loops_unrolled():
    out = np.zeros(1, np.int32)
    constexpr_folding[1, 1](out, "double", 6)
    assert out[0] == 2 * (0 + 2 + 4)
    constexpr_folding[1, 1](out, "single", 5)
    assert out[0] == 0 + 2 + 4
    prog = flydsl.compile(constexpr_folding, out, "single", 5)
    ir_text = prog.asm["mlir"]
    assert "scf.if" not in ir_text and "scf.for" not in ir_text


@flydsl.kernel
def constant_range(out: fx.Tensor, N: fx.Constexpr[int]):
    total = 0
    for k in range(N):           # a constant bound: still a runtime loop
        if k % 2 == 0:
            total += k
    out[0] = total


def test_a_plain_range_with_constant_bounds_is_a_runtime_loop():
    out = np.zeros(1, np.int32)
    constant_range[1, 1](out, 6)
    assert out[0] == 0 + 2 + 4
    ir_text = flydsl.compile(constant_range, out, 6).asm["mlir"]
    assert "scf.for" in ir_text and "scf.if" in ir_text


@flydsl.kernel
def runtime_range(out: fx.Tensor, N: fx.Constexpr[int]):
    total = 0
    for k in fx.range(N):        # a real loop even with a constant bound
        total += k
    out[0] = total


def test_fx_range_keeps_the_loop():
    out = np.zeros(1, np.int32)
    runtime_range[1, 1](out, 10)
    assert out[0] == 45
    assert "scf.for" in flydsl.compile(runtime_range, out, 10).asm["mlir"]


@flydsl.kernel
def short_circuit(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    # `and` must not evaluate x[i] when i >= n (it would read out of bounds)
    if i < n and x[i] > 0.0:
        y[i] = 1
    v = 1 if i < 2 or i > 5 else 0     # conditional expression on a dynamic value
    y[i + 8] = v


def test_short_circuit_and_ifexp():
    x = np.array([1, -1, 1, -1], np.float32)
    y = np.zeros(16, np.int32)
    short_circuit[1, 8](x, y, 4)
    np.testing.assert_array_equal(y[:8], [1, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(y[8:], [1, 1, 0, 0, 0, 0, 1, 1])


def clamp(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@flydsl.kernel
def uses_helper(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = clamp(x[i], -1.0, 1.0)


def test_plain_python_helpers_are_traced_inline():
    x = np.array([-5, -0.5, 0.25, 3], np.float32)
    y = np.zeros(4, np.float32)
    uses_helper[1, 4](x, y)
    np.testing.assert_array_equal(y, np.clip(x, -1, 1))


@flydsl.kernel
def typed_accumulator(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    acc = fx.Float64(0)
    for k in range(n):
        acc += x[k]
    out[0] = acc


def test_literal_and_typed_loop_carried_values():
    x = np.arange(10, dtype=np.float64) / 3
    out = np.zeros(1, np.float64)
    typed_accumulator[1, 1](x, out, 10)
    assert out[0] == pytest.approx(x.sum(), rel=1e-15)


@flydsl.kernel
def bad_construct(x: fx.Tensor):
    y = x
    del y


def test_unsupported_construct_names_kernel_and_line():
    with pytest.raises(UnsupportedConstructError) as e:
        bad_construct[1, 1](np.zeros(1, np.float32))
    msg = str(e.value)
    assert "bad_construct" in msg and "test_control_flow.py" in msg and "Delete" in msg
    assert e.value.lineno > 0


@flydsl.kernel
def undefined_name(x: fx.Tensor):
    x[0] = not_defined_anywhere  # noqa: F821


def test_undefined_name():
    with pytest.raises(DSLError, match="not_defined_anywhere"):
        undefined_name[1, 1](np.zeros(1, np.float32))


@flydsl.kernel
def literal_widths(n: fx.Int32, big: fx.Tensor, out: fx.Tensor):
    out[0] = n < 3000000000                 # the literal does not fit Int32: compare in Int64
    out[1] = n + 3000000000
    out[2] = int(big[0]) // 2               # int() of a Float64 is an Int64
    out[3] = float(big[1]) - 1.0            # float() of a Float64 keeps 64 bits


def test_wide_literals_and_python_conversions_keep_precision():
    out = np.zeros(4, np.float64)
    big = np.array([5e9, 1 + 2 ** -40])
    literal_widths[1, 1](5, big, out)
    assert out[0] == 1 and out[1] == 3000000005
    assert out[2] == 2_500_000_000 and out[3] == 2 ** -40


@flydsl.kernel
def literal_widths_int(big: fx.Tensor, out: fx.Tensor):
    out[0] = int(big[0]) // 2


def test_int_of_int64_keeps_64_bits():
    out = np.zeros(1, np.int64)
    literal_widths_int[1, 1](np.array([5_000_000_000], np.int64), out)
    assert out[0] == 2_500_000_000


@flydsl.kernel
def bare_constexpr(out: fx.Tensor, N: fx.Constexpr = 4):
    buf = fx.shared_array(N, fx.Int32)      # needs N at compile time
    total = 0
    for k in range(N):
        buf[k] = k
        total += buf[k]
    out[0] = total


def test_bare_constexpr_annotation_is_a_constexpr():
    out = np.zeros(1, np.int32)
    bare_constexpr[1, 1](out)
    assert out[0] == 6
    bare_constexpr[1, 1](out, 5)
    assert out[0] == 10


def test_unresolvable_string_annotation_is_an_error():
    def k(x: "NoSuchType"):  # noqa: F821
        pass
    with pytest.raises(DSLError, match="NoSuchType"):
        flydsl.kernel(k)


@flydsl.kernel
def runtime_step(out: fx.Tensor, start: fx.Int32, stop: fx.Int32, step: fx.Int32):
    count = 0
    total = 0
    for k in range(start, stop, step):
        count += 1
        total += k
    out[0] = count
    out[1] = total


@pytest.mark.parametrize("start, stop, step", [(4, -1, -1), (0, 10, 3), (10, 0, -3), (0, 5, -1),
                                               (5, 0, 1), (3, 3, 2), (-5, 5, 4), (7, 2, 0)])
def test_runtime_step_of_either_sign(start, stop, step):
    out = np.zeros(2, np.int64)
    runtime_step[1, 1](out, start, stop, step)
    expected = range(start, stop, step) if step else range(0)
    assert list(out) == [len(expected), sum(expected)]


@flydsl.kernel
def return_in_unrolled_loop(a: fx.Tensor, out: fx.Tensor):
    for k in range(4):
        if a[k] < 0.0:
            return
        out[k] = 1


@flydsl.kernel
def static_return_in_unrolled_loop(out: fx.Tensor, STOP: fx.Constexpr[int]):
    for k in range(4):
        if k == STOP:
            return
        out[k] = 1


def test_return_inside_unrolled_loops():
    out = np.zeros(4, np.int32)
    with pytest.raises(UnsupportedConstructError, match="compile-time"):
        return_in_unrolled_loop[1, 1](np.array([1, 1, -1, 1], np.float32), out)
    static_return_in_unrolled_loop[1, 1](out, 2)       # a compile-time return is fine
    assert list(out) == [1, 1, 0, 0]


def test_string_annotations_of_a_local_fx_import_are_read_by_name(tmp_path):
    import importlib.util
    path = tmp_path / "local_fx.py"
    path.write_text(
        "from __future__ import annotations\n"
        "import flydsl\n\n\n"
        "def make():\n"
        "    import flydsl.expr as fx\n\n"
        "    @flydsl.kernel\n"
        "    def k(x: fx.Tensor[fx.Float32, 1], n: fx.Int32, C: fx.Constexpr[int]):\n"
        "        x[0] = n + C\n"
        "    return k\n")
    spec = importlib.util.spec_from_file_location("local_fx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    k = module.make()
    assert [p.kind for p in k.params] == ["tensor", "scalar", "constexpr"]
    x = np.zeros(1, np.float32)
    k[1, 1](x, 2, 3)
    assert x[0] == 5
