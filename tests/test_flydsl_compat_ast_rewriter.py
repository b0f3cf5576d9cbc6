"""FlyDSL's flydsl.compiler.ast_rewriter names: ASTRewriter.transform on kernel helpers
(their if/for on kernel values become scf ops) and ReplaceIfWithDispatch's functional if
(state carried through an scf.if), run on the CPU against numpy and compiled for gfx942."""
from types import SimpleNamespace

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl._mlir.dialects import arith
from flydsl.compiler.ast_rewriter import ASTRewriter, ReplaceIfWithDispatch
from flydsl.errors import DSLError, DSLTypeError, UnsupportedConstructError

from conftest import gpu_asm_or_skip  # noqa: E402

dispatch = ReplaceIfWithDispatch.scf_if_dispatch


# -- ASTRewriter.transform --------------------------------------------------
def _clipped_sum(v, n):
    """sum over k < n of (v if v > k else -1): a dynamic if inside a dynamic for."""
    s = 0.0
    for k in range(n):
        if v > k:
            s = s + v
        else:
            s = s - 1.0
    return s


clipped_sum = ASTRewriter.transform(_clipped_sum)


class _Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, v):
        if v < 0.0:
            return v * -self.factor
        return v * self.factor


_Scaler.apply = ASTRewriter.transform(_Scaler.apply)
_SCALER = _Scaler(3.0)


@flydsl.kernel
def helper_kernel(x: fx.Tensor, y: fx.Tensor, z: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    y[i] = clipped_sum(x[i], n)
    z[i] = _SCALER.apply(x[i])


def test_transform_returns_the_helper_and_keeps_methods_methods():
    assert clipped_sum is _clipped_sum
    assert _Scaler(2.0).apply(-1.5) == 3.0           # outside a kernel: plain Python


def test_transformed_helpers_run_dynamic_if_and_for_in_a_kernel():
    x = np.array([-1.0, 0.5, 1.5, 2.5, 7.0, -3.0], np.float32)
    y = np.zeros_like(x)
    z = np.zeros_like(x)
    for n in (0, 1, 4):
        helper_kernel[1, x.size](x, y, z, n)
        want = [sum(v if v > k else -1.0 for k in range(n)) for v in x]
        np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_allclose(z, np.abs(x) * 3.0, rtol=1e-6)


def test_transform_names_what_it_cannot_trace():
    with pytest.raises(UnsupportedConstructError, match=r"lambda at .*test_flydsl_compat_ast"):
        ASTRewriter.transform(lambda v: v)
    with pytest.raises(DSLTypeError, match="takes a function defined with `def`"):
        ASTRewriter.transform(len)
    made = {}
    exec("def no_source(v):\n    return v\n", made)
    with pytest.raises(DSLError, match=r"ASTRewriter.transform\(\): no_source"):
        ASTRewriter.transform(made["no_source"])


# -- scf_if_dispatch ----------------------------------------------------------
def _halve_if_large(names, a):
    """A module-level branch with its own dynamic if: traced like a kernel helper."""
    if a > 10.0:
        a = a * 0.5
    return {names[0]: a}


@flydsl.kernel
def one_state(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    y[i] = dispatch(v > 0.0, _halve_if_large, lambda a: -a,
                    state_names=("a",), state_values=(v * 4.0,))


@flydsl.kernel
def two_states(x: fx.Tensor, y: fx.Tensor, c: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    # a raw i1 (FlyDSL kernels compare with arith.cmpi) as the condition
    odd = arith.cmpi(arith.CmpIPredicate.eq, i % 2, fx.Int32(1))
    s, n = dispatch(odd, lambda *st: (st[1] + v, st[2] + 1), None,
                    state_names=("s", "n"), state_values=(v, 0))
    y[i] = s
    c[i] = n


@flydsl.kernel
def three_states(x: fx.Tensor, y: fx.Tensor, c: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    acc = [v, v * 2.0]
    out = dispatch(i < 3, lambda acc, k, m: {"acc": [acc[1], acc[0]], "m": m + k},
                   lambda acc, k, m: {"k": k * 10},
                   state_names=("acc", "k", "m"), state_values=(acc, i, 1.0))
    acc2, k2, m2 = out
    y[i] = acc2[0] + m2
    c[i] = k2


def test_one_state_both_branches_and_a_traced_branch_function():
    x = np.array([-2.0, 1.0, 4.0, -0.5], np.float32)
    y = np.zeros_like(x)
    one_state[1, x.size](x, y)
    a = x * 4.0
    np.testing.assert_allclose(y, np.where(x > 0, np.where(a > 10, a * 0.5, a), -a))


def test_two_states_raw_condition_and_no_else():
    x = np.arange(6, dtype=np.float32) + 0.25
    y, c = np.zeros_like(x), np.zeros(6, np.int32)
    two_states[1, x.size](x, y, c)
    odd = np.arange(6) % 2 == 1
    np.testing.assert_allclose(y, np.where(odd, 2 * x, x))
    np.testing.assert_array_equal(c, odd.astype(np.int32))


def test_three_states_with_a_list_and_partial_dict_results():
    x = np.arange(6, dtype=np.float32) - 2.0
    y, c = np.zeros_like(x), np.zeros(6, np.int32)
    three_states[1, x.size](x, y, c)
    i = np.arange(6)
    np.testing.assert_allclose(y, np.where(i < 3, 2 * x + 1.0 + i, x + 1.0))
    np.testing.assert_array_equal(c, np.where(i < 3, i, 10 * i))


def test_scf_if_dispatch_lowers_to_one_scf_if_with_results_for_gfx942():
    x = np.zeros(64, np.float32)
    y, c = np.zeros_like(x), np.zeros(64, np.int32)
    asm = gpu_asm_or_skip(three_states, (x, y, c), "rocm", "gfx942")
    assert "s_cbranch" in asm or "v_cndmask" in asm, asm[:2000]


@flydsl.kernel
def nested_branches(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x

    def grow(a):             # kernel-local defs as branches: called with the values only
        if a > 2.0:
            a = a * 10.0
        return a + 1.0

    def shrink(a):
        return a - 1.0

    y[i] = dispatch(i % 2 == 0, grow, shrink, state_names=("a",), state_values=(x[i],))


def test_kernel_local_functions_as_branches():
    x = np.array([1.0, 1.0, 3.0, 3.0], np.float32)
    y = np.zeros_like(x)
    nested_branches[1, 4](x, y)
    np.testing.assert_allclose(y, [2.0, 0.0, 31.0, 2.0])


def test_compile_time_condition_calls_the_taken_branch_only():
    called = []
    out = dispatch(True, lambda a, b: (called.append("then"), (a + 1, b))[1],
                   lambda a, b: called.append("else"), state_names=("a", "b"),
                   state_values=(1, 2))
    assert out == (2, 2) and called == ["then"]
    assert dispatch(False, lambda a: a + 1, None, state_names=("a",), state_values=(5,)) == 5
    assert dispatch(False, lambda: called.append("x"), None) is None and called == ["then"]


@flydsl.kernel
def bad_arity(x: fx.Tensor):
    i = fx.thread_idx.x
    a, b = dispatch(x[i] > 0.0, lambda a, b: (a,), None,
                    state_names=("a", "b"), state_values=(x[i], x[i]))
    x[i] = a + b


@flydsl.kernel
def bad_structure(x: fx.Tensor):
    i = fx.thread_idx.x
    a = dispatch(x[i] > 0.0, lambda a: {"a": (a, a)}, None, state_names=("a",),
                 state_values=(x[i],))
    x[i] = a


def test_misuse_is_located_at_the_kernel_line():
    x = np.zeros(4, np.float32)
    with pytest.raises(DSLTypeError, match=r"(?s)lambda.*must return the new state.*"
                                           r"tuple of length 1.*a, b = dispatch"):
        bad_arity[1, 4](x)
    with pytest.raises(DSLTypeError, match=r"(?s)test_flydsl_compat_ast_rewriter.py:\d+: in "
                                           r"kernel 'bad_structure'.*variable 'a' is"):
        bad_structure[1, 4](x)
    with pytest.raises(DSLTypeError, match="2 state names"):
        dispatch(True, lambda a: a, None, state_names=("a", "b"), state_values=(1,))


# -- scf_ifexp_dispatch -------------------------------------------------------
@flydsl.kernel
def ifexp(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    lo, hi = ReplaceIfWithDispatch.scf_ifexp_dispatch(v < 1.0, lambda: (v, 1.0),
                                                      lambda: (1.0, v))
    y[i] = hi - lo


def test_scf_ifexp_dispatch_carries_a_tuple():
    x = np.array([0.25, 3.0, -1.0, 1.0], np.float32)
    y = np.zeros_like(x)
    ifexp[1, 4](x, y)
    np.testing.assert_allclose(y, np.abs(x - 1.0))
    assert ReplaceIfWithDispatch.scf_ifexp_dispatch(0, lambda: "a", lambda: "b") == "b"


# -- trace-time statements FlyDSL's helpers use: try/except/finally, raise, obj.attr = v --
class _Box:
    pass


def _offset_or_zero(t, k):
    """Probes an API as moe's layout helpers do: the handler sees the trace-time error."""
    try:
        base = t.no_such_attribute
    except AttributeError as e:
        assert "no_such_attribute" in str(e)
        base = 0
    else:
        base = base + 1000
    finally:
        k = k + 1
    return base + k


def _swallowed(v):
    try:
        v = v.no_such_attribute
    finally:
        return v * 2.0     # noqa: B012 - `return` in `finally` drops the error, as in Python


def _checked_width(w):
    if w not in (1, 2, 4):
        raise ValueError(f"width {w} is not 1, 2 or 4")
    return w


@flydsl.kernel
def trace_time_statements(x: fx.Tensor, y: fx.Tensor, w: fx.Constexpr[int]):
    i = fx.thread_idx.x
    box = _Box()
    box.scale = x[i] * float(_checked_width(w))
    if x[i] > 0.0:
        box.bias = 1.0          # an object made before the runtime if, set inside it
    y[i] = _offset_or_zero(x, i) + _swallowed(box.scale)


def test_try_except_else_finally_raise_and_attribute_assignment():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    y = np.zeros_like(x)
    trace_time_statements[1, 3](x, y, 2)
    np.testing.assert_allclose(y, np.arange(3) + 1 + 4 * x)
    with pytest.raises(DSLError, match=r"(?s)width 3 is not 1, 2 or 4.*raise ValueError"):
        trace_time_statements[1, 3](x, y, 3)


@flydsl.kernel
def raise_at_run_time(x: fx.Tensor):
    if x[0] > 0.0:
        raise ValueError("positive")


@flydsl.kernel
def uncaught_in_try(x: fx.Tensor):
    try:
        x[0] = x.no_such_attribute
    except KeyError:
        pass
    finally:
        x[1] = 1.0


def test_raise_under_a_runtime_condition_and_uncaught_errors_are_located():
    x = np.zeros(2, np.float32)
    with pytest.raises(UnsupportedConstructError, match="`raise` inside a runtime `if`"):
        raise_at_run_time[1, 1](x)
    with pytest.raises(DSLError, match=r"(?s)uncaught_in_try.*no_such_attribute.*"
                                       r"x\[0\] = x.no_such_attribute"):
        uncaught_in_try[1, 1](x)


@flydsl.kernel
def handled_in_branch(x: fx.Tensor):
    i = fx.thread_idx.x
    try:
        if x[i] > 0.0:
            x[i] = x.no_such_attribute
    except AttributeError:
        x[i] = x[i] - 10.0


def test_an_error_handled_inside_a_runtime_if_leaves_no_half_built_op():
    x = np.array([1.0, -1.0], np.float32)
    handled_in_branch[1, 2](x)
    np.testing.assert_allclose(x, [-9.0, -11.0])


# -- launches as FlyDSL's moe launchers write them ------------------------------
@flydsl.kernel
def fill_block_ids(y: fx.Tensor):
    y[fx.block_idx.y * fx.grid_dim.x + fx.block_idx.x] = fx.block_idx.y * 10 + fx.block_idx.x


def test_grid_of_host_integer_scalars():
    y = np.full(6, -1, np.int32)
    gx = fx.Int64(7) // fx.Int64(3)         # host scalars: FlyDSL's launchers compute grids so
    fill_block_ids(y).launch(grid=(gx, fx.Int64(3), 1), block=(1, 1, 1))
    np.testing.assert_array_equal(y, [0, 1, 10, 11, 20, 21])
    with pytest.raises(flydsl.LaunchError, match="grid must be an int"):
        fill_block_ids(y).launch(grid=(fx.Float32(2.0), 1, 1), block=(1, 1, 1))


def test_int_tuple_rank_and_depth_as_flydsl_names_them():
    shape = fx.make_layout((8, (4, 2), 3)).shape     # moe's helpers read get_shape(v).rank
    assert (shape.rank, shape.depth) == (3, 2)
    assert (shape.rank, shape.depth) == (fx.rank(shape), fx.depth(shape))


# -- carried structures as FlyDSL's control-flow tests use them ------------------
@flydsl.kernel
def structures_through_ifs(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    pair = [x[i], 1.0] if x[i] > 0.0 else [2.0, x[i]]        # a ternary carrying a list
    d = {"a": x[i], "b": 0.0}
    if x[i] > 1.0:
        d = {"a": x[i] * 10.0, "b": 1.0}
    else:
        d = {"b": 2.0, "a": x[i] * 100.0}                       # keys listed the other way
    y[i] = pair[0] + pair[1] * 1000.0 + d["a"] + d["b"] * 0.5


def test_ternary_of_lists_and_dicts_whose_branches_order_keys_differently():
    x = np.array([-1.0, 0.5, 3.0], np.float32)
    y = np.zeros_like(x)
    structures_through_ifs[1, 3](x, y)
    pair = np.where(x > 0, x + 1000.0, 2.0 + x * 1000.0)
    d = np.where(x > 1, x * 10.0 + 0.5, x * 100.0 + 1.0)
    np.testing.assert_allclose(y, pair + d, rtol=1e-6)


@flydsl.kernel
def namespace_through_loops(y: fx.Tensor, n: fx.Int32):
    s = SimpleNamespace(cnt=n, acc=fx.Int32(0))
    while s.cnt > 0:
        s = SimpleNamespace(cnt=s.cnt - 1, acc=s.acc + 2)
    if n > 3:
        s = SimpleNamespace(cnt=s.cnt, acc=s.acc * 10)
    y[0] = s.cnt
    y[1] = s.acc


def test_simple_namespaces_are_carried_by_while_and_if():
    y = np.zeros(2, np.int32)
    for n, acc in ((2, 4), (5, 100)):
        namespace_through_loops[1, 1](y, n)
        np.testing.assert_array_equal(y, [0, acc])
