"""FlyDSL's launch-time kernel attributes (issue 31): ``kernel(..., value_attrs={...})``
inside a ``@flyc.jit`` launcher, as upstream's preshuffle GEMM passes
``{"rocdl.waves_per_eu": N}``: AMDGPU function attributes on ROCm, nothing elsewhere,
part of the cache key, unknown keys rejected."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError


@flydsl.kernel
def doubled(x: fx.Tensor, y: fx.Tensor):
    i = fx.block_idx.x * 64 + fx.thread_idx.x
    y[i] = x[i] * 2.0


@flydsl.jit
def launch(x, y, attrs: fx.Constexpr):
    doubled(x, y, value_attrs=dict(attrs)).launch(grid=(x.shape[0] // 64, 1, 1),
                                                  block=(64, 1, 1))


X = np.arange(128, dtype=np.float32)


def _rocm_llir(attrs) -> str:
    prog = flydsl.compile(launch, X, np.zeros_like(X), attrs, backend="rocm", arch="gfx942")
    (kern,) = prog.kernels
    return kern.asm["llir"]


def test_value_attrs_run_unchanged_on_the_cpu():
    y = np.zeros_like(X)
    launch(X, y, (("rocdl.waves_per_eu", 2),))
    np.testing.assert_array_equal(y, 2 * X)
    cpu = flydsl.compile(launch, X, y, (("rocdl.waves_per_eu", 2),), backend="cpu")
    plain = flydsl.compile(launch, X, y, (), backend="cpu")
    assert cpu.kernels[0].asm["mlir"] == plain.kernels[0].asm["mlir"]   # no effect here


def test_waves_per_eu_is_the_amdgpu_function_attribute_on_gfx942():
    assert '"amdgpu-waves-per-eu"="2"' in _rocm_llir((("rocdl.waves_per_eu", 2),))
    text = _rocm_llir((("rocdl.flat_work_group_size", "64,64"),
                       ("rocdl.waves_per_eu", 4)))
    assert '"amdgpu-waves-per-eu"="4"' in text
    assert '"amdgpu-flat-work-group-size"="64,64"' in text
    assert "amdgpu-waves-per-eu" not in _rocm_llir(())


def test_none_values_set_nothing_as_in_flydsl():
    assert "amdgpu-waves-per-eu" not in _rocm_llir((("rocdl.waves_per_eu", None),))


def test_different_attributes_do_not_share_a_binary():
    a = _rocm_llir((("rocdl.waves_per_eu", 1),))
    b = _rocm_llir((("rocdl.waves_per_eu", 3),))
    assert '"amdgpu-waves-per-eu"="1"' in a and '"amdgpu-waves-per-eu"="3"' in b
    from flydsl.compiler.options import CompileOptions
    assert CompileOptions(function_attrs=(("rocdl.waves_per_eu", 1),)).key() \
        != CompileOptions(function_attrs=(("rocdl.waves_per_eu", 3),)).key()


def test_unknown_keys_and_bad_values_name_the_kernel_and_key():
    y = np.zeros_like(X)
    with pytest.raises(DSLTypeError, match=r"doubled.*'rocdl.no_such_attr'"):
        launch(X, y, (("rocdl.no_such_attr", 1),))
    with pytest.raises(DSLTypeError, match=r"doubled.*waves_per_eu.*0\.\.10"):
        launch(X, y, (("rocdl.waves_per_eu", "many"),))
    with pytest.raises(DSLTypeError, match=r"doubled.*flat_work_group_size.*'min,max'"):
        launch(X, y, (("rocdl.flat_work_group_size", "64"),))
