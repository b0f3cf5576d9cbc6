"""Python constructs a CUDA/numba user writes in kernels: tensor sizes, typed helper
functions, identity tests and tuple loops on compile-time values, variables bound in
every branch, and error messages in the user's words."""
import math
import os

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import CompileTimeValueRequired, DSLTypeError, UnsupportedConstructError


@flydsl.kernel
def sizes(x: fx.Tensor, out: fx.Tensor):
    tile = fx.shared_array((4, 8), fx.Float32)
    out[0] = len(x)
    out[1] = x.size
    out[2] = x.numel()
    out[3] = x.ndim
    out[4] = len(tile)
    out[5] = tile.size


@pytest.mark.parametrize("shape", [(5, 3), (7, 1, 2)])
def test_len_size_numel_and_ndim_of_tensors(shape):
    out = np.zeros(6, np.int64)
    sizes[1, 1](np.zeros(shape, np.float32), out)
    np.testing.assert_array_equal(out, [shape[0], np.prod(shape), np.prod(shape), len(shape),
                                        4, 32])


def scale(v: fx.Float32, by: fx.Float32) -> fx.Float32:
    return v * by


def halve(v: fx.Int32) -> fx.Int32:
    return v // 2


def put(t: fx.Tensor, i, v):
    t[i] = v


@flydsl.kernel
def typed_helpers(x: fx.Tensor, f: fx.Tensor, h: fx.Tensor):
    i = fx.thread_idx.x
    f[i] = scale(x[i], 1.5)         # Int32 argument converted to the Float32 parameter
    put(h, i, halve(fx.Float32(x[i]) + 0.75))


def test_helper_annotations_convert_arguments_and_results():
    x = np.arange(8, dtype=np.int32)
    f = np.zeros(8, np.float32)
    h = np.zeros(8, np.int32)
    typed_helpers[1, 8](x, f, h)
    np.testing.assert_array_equal(f, x * 1.5)
    np.testing.assert_array_equal(h, x // 2)     # 0.75 truncated away by the Int32 parameter


@flydsl.kernel
def wrong_helper_argument(x: fx.Tensor):
    put(3, 0, x[0])


def test_a_helper_argument_that_contradicts_its_annotation_is_a_located_error():
    with pytest.raises(DSLTypeError, match=r"put\(\) parameter 't' is annotated fx.Tensor") as e:
        wrong_helper_argument[1, 1](np.zeros(2, np.float32))
    assert "put(3, 0, x[0])" in str(e.value)


@flydsl.kernel
def identity_tests(x: fx.Tensor, out: fx.Tensor, MODE: fx.Constexpr[object] = None):
    i = fx.thread_idx.x
    if MODE is None:
        out[i] = x[i]
    elif MODE is not True:
        out[i] = -x[i]
    else:
        out[i] = x[i] * 2


def test_is_and_is_not_on_compile_time_values():
    x = np.arange(4, dtype=np.int32)
    out = np.zeros_like(x)
    identity_tests[1, 4](x, out)
    np.testing.assert_array_equal(out, x)
    identity_tests[1, 4](x, out, "other")
    np.testing.assert_array_equal(out, -x)
    identity_tests[1, 4](x, out, True)
    np.testing.assert_array_equal(out, 2 * x)


COEFFICIENTS = (0.5, -1.0, 2.0)


@flydsl.kernel
def horner(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    acc = 0.0
    for c in COEFFICIENTS:          # a constant tuple: unrolled
        acc = acc * x[i] + c
    out[i] = acc


def test_iterating_a_constant_tuple():
    x = np.linspace(-2, 2, 16).astype(np.float32)
    out = np.zeros_like(x)
    horner[1, 16](x, out)
    np.testing.assert_allclose(out, (0.5 * x - 1.0) * x + 2.0, rtol=1e-6)


@flydsl.kernel
def bound_in_every_branch(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    if x[i] > 2.0:
        y = x[i] * 2.0
    elif x[i] < -2.0:
        y = 0           # an int literal joins the Float32 of the other paths
    else:
        y = -x[i]
    out[i] = y


def test_a_variable_first_bound_in_every_branch_is_usable_after_the_if():
    x = np.linspace(-4, 4, 9).astype(np.float32)
    out = np.zeros_like(x)
    bound_in_every_branch[1, 9](x, out)
    np.testing.assert_array_equal(out, np.where(x > 2, 2 * x, np.where(x < -2, 0, -x)))


@flydsl.kernel
def bound_in_one_branch(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    if x[i] > 0.0:
        y = x[i]
    out[i] = y


def test_a_variable_bound_on_one_path_only_is_reported_where_it_is_read_unassigned(
        monkeypatch):
    out = np.zeros(2, np.float32)
    bound_in_one_branch[1, 2](np.array([1.5, 2.5], np.float32), out)   # as numba: defined
    np.testing.assert_array_equal(out, [1.5, 2.5])                     # where assigned
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(flydsl.FlydslError, match="'y'") as e:
        bound_in_one_branch[1, 2](np.array([1.5, -1.0], np.float32), out)
    assert "out[i] = y" in str(e.value) and "never assigned" in str(e.value)


@flydsl.kernel
def tensor_arithmetic(x: fx.Tensor, out: fx.Tensor):
    out[0] = x + 1


@flydsl.kernel
def value_subscript(x: fx.Tensor):
    v = x[0]
    v[0] = 1.0


@flydsl.kernel
def value_attribute(x: fx.Tensor):
    x[0].foo()


@flydsl.kernel
def attribute_store(x: fx.Tensor):
    x.foo = 1


@pytest.mark.parametrize("kernel, cls, words", [
    (tensor_arithmetic, DSLTypeError, "tensor 'x' is memory, not a value"),
    (value_subscript, DSLTypeError, "a kernel value does not support item assignment"),
    (value_attribute, DSLTypeError, r"a kernel value \(Float32\) has no attribute 'foo'"),
    (attribute_store, UnsupportedConstructError, "assigning to an attribute"),
])
def test_errors_speak_of_tensors_and_values_not_internal_classes(kernel, cls, words):
    with pytest.raises(cls, match=words) as e:
        kernel[1, 1](np.zeros(2, np.float32), *([np.zeros(1, np.float32)]
                                                 if kernel is tensor_arithmetic else []))
    assert "TensorValue" not in str(e.value) and "Value'" not in str(e.value)


@flydsl.kernel
def runtime_len_in_python(x: fx.Tensor, out: fx.Tensor):
    out[0] = [1, 2, 3][len(x)]


def test_a_runtime_length_used_as_a_python_index_says_so():
    with pytest.raises(CompileTimeValueRequired):
        runtime_len_in_python[1, 1](np.zeros(2, np.float32), np.zeros(1, np.float32))


@flydsl.kernel
def grid_stride_copy(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    for i in range(fx.grid(1), n, fx.gridsize(1)):
        y[i] = x[i]
    fx.threadfence()


@flydsl.kernel
def grid_2d(out: fx.Tensor):
    x, y = fx.grid(2)
    w, h = fx.gridsize(2)
    fx.threadfence_block()
    out[y, x] = y * w + x + h * 0


def test_grid_and_gridsize_give_global_indices_like_numba():
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    grid_stride_copy[3, 64](x, y, 1000)          # 192 threads stride over 1000 elements
    np.testing.assert_array_equal(y, x)
    out = np.zeros((6, 8), np.int32)
    grid_2d[(2, 3), (4, 2)](out)
    np.testing.assert_array_equal(out, np.arange(48).reshape(6, 8))


@pytest.mark.parametrize("backend, arch, fence", [("cuda", "sm_90", "fence.acq_rel.gpu"),
                                                  ("rocm", "gfx942", "buffer_wbl2")])
def test_threadfence_is_a_device_scope_fence_on_gpus(backend, arch, fence):
    x = np.zeros(4, np.float32)
    prog = flydsl.compile(grid_stride_copy, x, x, 4, backend=backend, arch=arch)
    asm = prog.asm["ptx" if backend == "cuda" else "amdgcn"]
    assert fence in asm


@flydsl.kernel
def python_math(x: fx.Tensor, y: fx.Tensor, z: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = math.sqrt(x[i]) + math.exp(x[i]) * math.pi     # math.pi: a Python constant
    z[i] = math.floor(x[i] * 3.7)                         # an integer, as in Python


@flydsl.kernel
def python_math_without_equivalent(x: fx.Tensor):
    x[0] = math.gamma(x[0])


def test_math_module_functions_work_on_kernel_values():
    x = np.linspace(0.5, 4, 8).astype(np.float32)
    y = np.zeros_like(x)
    z = np.zeros(8, np.int64)
    python_math[1, 8](x, y, z)
    np.testing.assert_allclose(y, np.sqrt(x) + np.exp(x) * np.pi, rtol=1e-6)
    np.testing.assert_array_equal(z, np.floor(x * np.float32(3.7)))
    with pytest.raises(UnsupportedConstructError, match=r"math.gamma\(\) has no flydsl"):
        python_math_without_equivalent[1, 1](x)


@flydsl.kernel
def rounding_and_choice(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[0, i] = fx.floor(x[i])
    y[1, i] = fx.ceil(x[i])
    y[2, i] = fx.where(x[i] > 0.0, x[i], 0.0)
    y[3, i] = fx.select(x[i] > 0.0, 1.0, -1.0)
    y[4, i] = fx.cast(fx.grid_dim.x, fx.Float32)


def test_floor_ceil_where_select_and_grid_dim():
    x = np.linspace(-2.5, 2.5, 11).astype(np.float32)
    y = np.zeros((5, 11), np.float32)
    rounding_and_choice[1, 11](x, y)
    np.testing.assert_array_equal(y, [np.floor(x), np.ceil(x), np.maximum(x, 0),
                                      np.where(x > 0, 1, -1), np.ones(11)])


# -- assignment expressions, library helpers, numpy scalars, return values -----------

@flydsl.kernel
def walrus_and_library_helpers(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    name = os.path.join("rows", "cols")          # the standard library runs as Python
    if (v := x[i]) > 0.0:
        y[i] = v * np.float32(2.0) + len(name)
    else:
        y[i] = np.float32(0.5) * v + np.int32(1)   # numpy scalars are typed constants


def test_assignment_expressions_library_helpers_and_numpy_scalars():
    x = np.array([1, -2, 3], np.float32)
    y = np.zeros(3, np.float32)
    walrus_and_library_helpers[1, 3](x, y)
    np.testing.assert_array_equal(y, [2 + 9, 0.5 * -2 + 1, 6 + 9])


@flydsl.kernel
def returns_a_value(x: fx.Tensor):
    return x[0]  # RETURNS-VALUE


def test_a_kernel_that_returns_a_value_is_a_located_error():
    with pytest.raises(DSLTypeError, match="a kernel returns nothing") as info:
        returns_a_value[1, 1](np.zeros(1, np.float32))
    assert info.value.source_line.strip() == "return x[0]  # RETURNS-VALUE"
