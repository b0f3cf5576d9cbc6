"""What variables hold after runtime control flow: Python's meaning on every backend.

A runtime loop's variable keeps its last value; a variable first bound inside a
loop or one branch of an ``if`` is usable after it (undefined where no path
assigned it, as in numba, and reported in debug mode); tuples, lists, dicts and
fragments flow through runtime ``if``s and loops; ``a or b`` and ``a and b`` give
an operand, as in Python; ``for x in tensor`` walks the first dimension.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError
from flydsl.runtime.debug_checks import DeviceAssertError


# -- the loop variable after a runtime loop ----------------------------------------

@flydsl.kernel
def last_index(out: fx.Tensor, n: fx.Int32, step: fx.Int32):
    i = 999
    for i in range(n):
        pass
    out[0] = i
    j = -5
    for j in range(n - 1, -1, step):    # a runtime step: the normalized loop
        pass
    out[1] = j
    for k in range(2, n):               # not bound before: defined when the loop ran
        pass
    if n > 2:
        out[2] = k


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
def test_a_loop_variable_keeps_its_last_value_after_a_runtime_loop(n):
    out = np.full(3, -1, np.int32)
    last_index[1, 1](out, n, -1)
    assert out[0] == (n - 1 if n > 0 else 999)      # unchanged when the loop ran no iteration
    assert out[1] == (0 if n > 0 else -5)
    assert out[2] == (n - 1 if n > 2 else -1)


@flydsl.kernel
def rebinds_its_variable(out: fx.Tensor, n: fx.Int32):
    for i in range(n):
        i = i * 10
    out[0] = i


def test_a_loop_variable_rebound_in_the_body_keeps_the_last_rebinding():
    out = np.zeros(1, np.int32)
    rebinds_its_variable[1, 1](out, 4)
    assert out[0] == 30


@flydsl.kernel
def breaks_early(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    for i in range(n):
        if x[i] < 0.0:
            break
    out[0] = i


def test_a_loop_variable_after_a_break_is_where_the_loop_stopped():
    out = np.zeros(1, np.int32)
    breaks_early[1, 1](np.array([1, 2, -3, 4], np.float32), out, 4)
    assert out[0] == 2


# -- variables first bound inside a loop or one branch --------------------------------

@flydsl.kernel
def bound_in_a_loop(y: fx.Tensor):
    sm = fx.shared_array((4, 4), fx.Float32)
    ty = fx.thread_idx.y
    for _ in range(2):
        tx = fx.thread_idx.x
    sm[tx, ty] = fx.Float32(tx * 4 + ty)
    fx.barrier()
    y[tx, ty] = sm[tx, ty]


def test_a_variable_first_bound_in_a_runtime_loop_is_usable_after_it():
    y = np.zeros((4, 4), np.float32)
    bound_in_a_loop[1, (4, 4)](y)
    np.testing.assert_array_equal(y, np.arange(16, dtype=np.float32).reshape(4, 4))


@flydsl.kernel
def bound_when_taken(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    for k in range(n):
        if x[k] > 0.0:
            last_positive = x[k]
    y[i] = last_positive * 2.0    # READ-UNASSIGNED


def test_a_variable_bound_in_one_branch_inside_a_loop_keeps_its_last_assignment():
    y = np.zeros(2, np.float32)
    bound_when_taken[1, 2](np.array([3, -1, 5, -2], np.float32), y, 4)
    np.testing.assert_array_equal(y, [10, 10])


def test_debug_mode_reports_a_read_of_a_variable_no_path_assigned(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    y = np.zeros(2, np.float32)
    bound_when_taken[1, 2](np.array([3, -1], np.float32), y, 2)      # assigned: no report
    assert list(y) == [6, 6]
    with pytest.raises(DeviceAssertError) as info:
        bound_when_taken[1, 2](np.array([-3, -1], np.float32), y, 2)
    e = info.value
    assert "'last_positive'" in e.assert_message and "never assigned" in e.assert_message
    assert e.source_line.strip() == "y[i] = last_positive * 2.0    # READ-UNASSIGNED"
    with pytest.raises(DeviceAssertError):
        bound_when_taken[1, 2](np.array([3.0], np.float32), y, 0)    # no iteration ran


@flydsl.kernel
def branch_only_name(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    if x[i] > 0.0:
        only_here = x[i] + 1.0
    if x[i] > 0.0:
        y[i] = only_here


def test_a_variable_bound_in_one_branch_is_usable_where_that_branch_ran(monkeypatch):
    x = np.array([1, -1, 2, -2], np.float32)
    y = np.zeros(4, np.float32)
    branch_only_name[1, 4](x, y)
    np.testing.assert_array_equal(y, [2, 0, 3, 0])
    monkeypatch.setenv("FLYDSL_DEBUG", "1")         # no read of the unassigned value
    branch_only_name[1, 4](x, y)


# -- structures through runtime control flow -----------------------------------------

@flydsl.kernel
def structures_in_branches(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    if x[i] > 0.0:
        pair = (x[i], 1.0)
        d = {"scale": 2.0, "rows": [x[i], x[i]]}
    else:
        pair = (0.0, 2.0)
        d = {"scale": -1.0, "rows": [x[i], 0.0]}
    y[i] = pair[0] + pair[1] + d["scale"] * (d["rows"][0] + d["rows"][1])


def test_tuples_lists_and_dicts_assigned_in_both_branches_of_a_runtime_if():
    x = np.array([1, -1, 2, -2], np.float32)
    y = np.zeros(4, np.float32)
    structures_in_branches[1, 4](x, y)
    expected = [xi + 1 + 2 * (2 * xi) if xi > 0 else 2 - xi for xi in x]
    np.testing.assert_array_equal(y, expected)


@flydsl.kernel
def structures_in_a_loop(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    acc = (0.0, 0)
    stats = {"lo": x[0], "hi": x[0]}
    frag = fx.make_fragment_like(fx.make_view(y, fx.make_layout(4)))
    frag.fill(0.0)
    v = frag.load()
    for k in range(n):
        acc = (acc[0] + x[k], acc[1] + 1)
        stats = {"lo": fx.min(stats["lo"], x[k]), "hi": fx.max(stats["hi"], x[k])}
        v = v + x[k]
    y[0] = acc[0]
    y[1] = fx.Float32(acc[1])
    y[2] = stats["lo"]
    y[3] = stats["hi"]
    y[4] = v[0] + v[3]


def test_tuples_dicts_and_fragments_are_carried_by_a_runtime_loop():
    x = np.array([3, -1, 5, -2, 7], np.float32)
    y = np.zeros(5, np.float32)
    structures_in_a_loop[1, 1](x, y, 4)
    np.testing.assert_array_equal(y, [5, 4, -2, 5, 10])


@flydsl.kernel
def structure_differs(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    if x[i] > 0.0:
        t = (x[i], 1.0)
    else:
        t = (x[i], 1.0, 2.0)
    y[i] = t[0]


@flydsl.kernel
def structure_changes_in_loop(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    t = (0.0, 0.0)
    for k in range(n):
        t = (t[0] + x[k],)
    y[0] = t[0]


def test_a_structure_that_differs_between_paths_is_a_located_error():
    x, y = np.ones(2, np.float32), np.zeros(2, np.float32)
    with pytest.raises(DSLTypeError, match=r"'t' is a tuple of 2 in one branch .* a tuple "
                                           r"of 3 in the other") as info:
        structure_differs[1, 2](x, y)
    assert info.value.lineno is not None and "if x[i] > 0.0" in info.value.source_line
    with pytest.raises(DSLTypeError, match=r"'t' is a tuple of 2 before the loop and a "
                                           r"tuple of 1 after its body"):
        structure_changes_in_loop[1, 1](x, y, 2)


# -- `and` / `or` give an operand ------------------------------------------------------

@flydsl.kernel
def operands(a: fx.Tensor, c: fx.Tensor, d: fx.Tensor, e: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    c[i] = a[i] or 5.0
    d[i] = a[i] and 7.0
    e[i] = 1.0 if i < n and a[i] > 0.0 else 0.0      # conditions keep working


def test_or_and_and_on_runtime_values_give_an_operand_as_in_python():
    a = np.array([0, 2.5, -3, 0], np.float32)
    c, d, e = (np.zeros(4, np.float32) for _ in range(3))
    operands[1, 4](a, c, d, e, 3)
    np.testing.assert_array_equal(c, [ai or 5.0 for ai in a])          # [5, 2.5, -3, 5]
    np.testing.assert_array_equal(d, [ai and 7.0 for ai in a])         # [0, 7, 7, 0]
    np.testing.assert_array_equal(e, [0, 1, 0, 0])


# -- for x in tensor ------------------------------------------------------------------

@flydsl.kernel
def sums_rows(x: fx.Tensor, v: fx.Tensor, y: fx.Tensor):
    s = 0.0
    for e in v:                 # a 1-D tensor: its elements
        s += e
    for row in x:               # a 2-D tensor: a view of each row
        s += row[1] * 10.0
    y[0] = s


def test_for_over_a_tensor_walks_its_first_dimension():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    v = np.array([1, 2, 4], np.float32)
    y = np.zeros(1, np.float32)
    sums_rows[1, 1](x, v, y)
    assert y[0] == 7 + 10 * (1 + 3 + 5)


# -- on the GPU backends too -----------------------------------------------------------

@pytest.mark.parametrize("backend, arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_the_gpu_backends_compile_the_same_control_flow(backend, arch):
    x = np.ones(4, np.float32)
    for fn, args in ((last_index, (np.zeros(3, np.int32), 3, -1)),
                     (bound_when_taken, (x, x, 4)),
                     (structures_in_a_loop, (x, np.zeros(5, np.float32), 4)),
                     (operands, (x, x, x, x, 3))):
        prog = flydsl.compile(fn, *args, backend=backend, arch=arch)
        assert prog.asm["llir"]
