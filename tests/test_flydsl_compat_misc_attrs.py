"""FlyDSL's ``value_attrs={"passthrough": [[key, value], ...]}`` (issue 31): the LLVM
function attributes upstream's flash-attention kernels pass (``denormal-fp-math-f32``,
``unsafe-fp-math``, ...). On ROCm they reach the LLVM function and the code object; on the
CPU they change nothing; other shapes are refused naming the kernel and the entry."""
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
def launch(x, y, daz: fx.Constexpr, extra: fx.Constexpr = None):
    # as upstream writes it: a list built in the launcher, None for "no attributes"
    entries = ([["denormal-fp-math-f32", "preserve-sign,preserve-sign"],
                ["no-nans-fp-math", "true"], ["unsafe-fp-math", "true"]]
               if daz else None)
    if extra is not None:
        entries = [e if isinstance(e, str) else list(e) for e in extra]
    doubled(x, y, value_attrs={"rocdl.waves_per_eu": 2, "passthrough": entries}).launch(
        grid=(x.shape[0] // 64, 1, 1), block=(64, 1, 1))


X = np.arange(128, dtype=np.float32)


def _rocm_asm(daz, extra=None) -> dict:
    prog = flydsl.compile(launch, X, np.zeros_like(X), daz, extra, backend="rocm",
                          arch="gfx942")
    return prog.kernels[0].asm


def _fn_attrs(llir: str) -> str:
    return next(l for l in llir.splitlines() if l.startswith("attributes #0"))


def test_passthrough_reaches_the_llvm_function_and_the_code_object_on_gfx942():
    on, off = _rocm_asm(True), _rocm_asm(False)
    attrs = _fn_attrs(on["llir"])
    assert '"denormal-fp-math-f32"="preserve-sign,preserve-sign"' in attrs
    assert '"unsafe-fp-math"="true"' in attrs and '"no-nans-fp-math"="true"' in attrs
    assert '"amdgpu-waves-per-eu"="2"' in attrs          # next to the rocdl.* ones
    assert "denormal-fp-math" not in _fn_attrs(off["llir"])
    # the kernel descriptor flushes f32 denormals (mode 0) only when asked
    assert ".amdhsa_float_denorm_mode_32 0" in on["amdgcn"]
    assert ".amdhsa_float_denorm_mode_32 3" in off["amdgcn"]
    amd = _rocm_asm(False, (("amdgpu-ieee", "false"),))
    assert '"amdgpu-ieee"="false"' in _fn_attrs(amd["llir"])


def test_passthrough_changes_nothing_on_the_cpu_and_cuda():
    y = np.zeros_like(X)
    launch(X, y, True)
    np.testing.assert_array_equal(y, 2 * X)
    for backend, arch in (("cpu", None), ("cuda", "sm_90")):
        on = flydsl.compile(launch, X, y, True, backend=backend, arch=arch)
        off = flydsl.compile(launch, X, y, False, backend=backend, arch=arch)
        assert on.kernels[0] is off.kernels[0]       # dropped before the cache key


@pytest.mark.parametrize("extra, message", [
    ((("no-such-attr", "1"),), r"key 'no-such-attr' is not supported"),
    (("nounwind",), r"bare flag"),
    ((("unsafe-fp-math", "yes"),), r"'true' or 'false'"),
    ((("denormal-fp-math", "flush"),), r"<mode>\[,<mode>\]"),
    ((("amdgpu-ieee", "false", "x"),), r"not a \[key, value\] pair"),
    ((("unsafe-fp-math", "true"), ("unsafe-fp-math", "false")), r"names a key twice"),
])
def test_other_passthrough_shapes_name_the_kernel_and_the_entry(extra, message):
    with pytest.raises(DSLTypeError, match=r"doubled.*passthrough.*" + message) as info:
        launch(X, np.zeros_like(X), False, extra)
    # located at the kernel call in the launcher
    assert info.value.filename == __file__
    assert "value_attrs=" in info.value.source_line


def test_passthrough_must_be_a_list():
    @flydsl.jit
    def scalar(x, y):
        doubled(x, y, value_attrs={"passthrough": "unsafe-fp-math"}).launch(
            grid=(2, 1, 1), block=(64, 1, 1))
    with pytest.raises(DSLTypeError, match=r"doubled.*must be a list"):
        scalar(X, np.zeros_like(X))
