"""The backend registry: built-ins, registration, selection, arch resolution, entry points."""
import sys
import textwrap

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.backends import (
    GPUTarget, InvalidBackend, backend_tags, get_backend, list_backends,
    lookup_backend_class, register_backend, rediscover_entry_points, selected_backend_name,
    unregister_backend,
)
from flydsl.compiler.backends.cpu import CpuBackend


def test_builtins_are_listed_lazily():
    assert flydsl.list_backends() == ["cpu", "cuda", "rocm"]


def test_unknown_backend_names_the_available_ones(monkeypatch):
    with pytest.raises(InvalidBackend) as e:
        get_backend("nope")
    assert "cpu" in str(e.value) and "cuda" in str(e.value) and "rocm" in str(e.value)
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "nope")
    with pytest.raises(InvalidBackend):
        get_backend()


def test_env_selects_backend_and_auto_falls_back_to_cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    assert get_backend().name == "cuda"
    monkeypatch.delenv("FLYDSL_COMPILE_BACKEND")
    expected = next(n for n in ("rocm", "cuda", "cpu") if lookup_backend_class(n).device_present())
    assert selected_backend_name() == expected


def test_arch_resolution_never_goes_stale(monkeypatch):
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_80")
    assert get_backend("cuda").target.arch == "sm_80"
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "sm_90")
    assert get_backend("cuda").target.arch == "sm_90"
    assert get_backend("cuda", arch="sm_86").target.arch == "sm_86"
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx950")
    assert get_backend("rocm").target == GPUTarget("rocm", "gfx950", 64)
    assert get_backend("cpu").name == "cpu"      # a GPU arch does not apply to the CPU
    with pytest.raises(ValueError):
        get_backend("cuda")                       # gfx950 is no CUDA arch


def test_supports_target_raises_instead_of_asserting():
    with pytest.raises(ValueError, match="does not support"):
        CpuBackend(GPUTarget("cuda", "sm_90", 32))
    with pytest.raises(TypeError):
        CpuBackend("cpu")


def test_hash_covers_target_and_options():
    from flydsl.compiler.options import CompileOptions
    a = get_backend("cuda", arch="sm_80")
    b = get_backend("cuda", arch="sm_90")
    assert a.hash() != b.hash()
    assert a.hash() == get_backend("cuda", arch="sm_80").hash()
    assert a.hash(CompileOptions(opt_level=2)) != a.hash(CompileOptions(opt_level=3))


def test_compile_options_are_validated():
    from flydsl.compiler.options import CompileOptions
    with pytest.raises(ValueError):
        CompileOptions(opt_level=7)
    with pytest.raises(TypeError):
        CompileOptions(debug="yes")


class _Toy(CpuBackend):
    name = "toy"


def test_register_decorator_call_form_tags_and_duplicates():
    try:
        register_backend(_Toy, name="toy", tags=("debug",))
        assert "toy" in list_backends()
        assert "toy" not in list_backends(exclude_tags=("debug",))
        assert backend_tags("toy") == ("debug",)
        with pytest.raises(ValueError, match="duplicate"):
            @register_backend(name="toy")
            class Other(CpuBackend):
                pass
        with pytest.raises(ValueError, match="duplicate"):
            register_backend(_Toy, name="cpu")
        with pytest.raises(TypeError):
            register_backend(object, name="bad")
    finally:
        unregister_backend("toy")
    assert "toy" not in list_backends()


PLUGIN = '''
from flydsl.compiler.backends.base import GPUTarget
from flydsl.compiler.backends.cpu import CpuBackend, CPU_WARP_SIZE, host_arch


class ToyCpuBackend(CpuBackend):
    """An out-of-tree backend: the CPU pipeline under another name."""
    name = "toycpu"
    tags = ("experimental",)

    @classmethod
    def supports_target(cls, target):
        return target.backend == "toycpu"

    @classmethod
    def make_target(cls, arch):
        return GPUTarget("toycpu", host_arch(), CPU_WARP_SIZE)

    @classmethod
    def detect_target(cls):
        return cls.make_target(host_arch())
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A tiny package with a `flydsl.backends` entry point, installed on sys.path."""
    site = tmp_path / "site"
    (site / "toy_flydsl_plugin").mkdir(parents=True)
    (site / "toy_flydsl_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "toy_flydsl_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-flydsl-plugin\n"
                                   "Version: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[flydsl.backends]\ntoycpu = toy_flydsl_plugin:ToyCpuBackend\n")
    monkeypatch.syspath_prepend(str(site))
    rediscover_entry_points()
    yield
    unregister_backend("toycpu")
    sys.modules.pop("toy_flydsl_plugin", None)
    monkeypatch.undo()
    rediscover_entry_points()


def test_entry_point_backend_is_discovered_lazily_and_tagged(installed_plugin):
    assert "toy_flydsl_plugin" not in sys.modules          # discovery does not import
    assert "toycpu" not in list_backends()                 # experimental: hidden by default
    assert "toycpu" in list_backends(exclude_tags=())
    assert "toy_flydsl_plugin" in sys.modules
    backend = get_backend("toycpu")
    assert backend.experimental and backend.target.backend == "toycpu"


def test_entry_point_backend_compiles_and_runs(installed_plugin, monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "toycpu")

    @flydsl.kernel
    def twice(x: fx.Tensor, y: fx.Tensor):
        y[fx.thread_idx.x] = x[fx.thread_idx.x] * 2

    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)
    twice[1, 8](x, y)
    np.testing.assert_array_equal(y, x * 2)
