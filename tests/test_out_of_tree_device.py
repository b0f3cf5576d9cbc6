"""A new kind of device from one out-of-tree package, with no edit to flydsl: its
backend and its driver arrive through the flydsl.backends and flydsl.drivers entry
points (tests/plugins/toy_device), and kernels, @flydsl.jit functions,
flydsl.synchronize() and torch.compile(backend="flydsl") all run through it."""
import os
import shutil
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.backends import rediscover_entry_points as rediscover_backends
from flydsl.compiler.backends import unregister_backend
from flydsl.errors import InvalidDriver
from flydsl.runtime.drivers import rediscover_entry_points as rediscover_drivers
from flydsl.runtime.drivers import unregister_driver

PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins", "toy_device")


@pytest.fixture
def toy_device(tmp_path, monkeypatch):
    """The toy_device package installed on sys.path with its entry points."""
    site = tmp_path / "site"
    shutil.copytree(PLUGIN, site / "toy_device")
    dist = site / "toy_device-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-device\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[flydsl.backends]\ntoydev = toy_device:ToyBackend\n\n"
        "[flydsl.drivers]\ntoydev = toy_device:ToyDriver\n")
    monkeypatch.syspath_prepend(str(site))
    rediscover_backends()
    rediscover_drivers()
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "toydev")
    yield
    unregister_backend("toydev")
    unregister_driver("toydev")
    sys.modules.pop("toy_device", None)
    monkeypatch.undo()
    rediscover_backends()
    rediscover_drivers()


@flydsl.kernel
def axpy(x: fx.Tensor, y: fx.Tensor, a: fx.Float32, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = a * x[i] + y[i]


@flydsl.jit
def run_axpy(x, y, a, n, BLOCK: fx.Constexpr[int] = 64):
    axpy(x, y, a, n).launch(grid=((n + BLOCK - 1) // BLOCK, 1, 1), block=(BLOCK, 1, 1),
                            stream=7)


def test_the_device_is_found_lazily_and_listed(toy_device):
    assert "toy_device" not in sys.modules               # discovery imports nothing
    assert "toydev" in flydsl.list_drivers() and "toydev" in flydsl.list_backends()
    assert flydsl.get_backend().target.arch == "toy1"
    assert flydsl.get_driver("toydev").device_count() == 2


def test_kernels_and_jit_functions_run_through_its_driver(toy_device):
    driver = flydsl.get_driver("toydev")
    x, y = np.arange(200, dtype=np.float32), np.ones(200, np.float32)
    axpy.cache_clear()
    axpy[4, 64](x, y, 2.0, 200)                          # direct launch
    run_axpy(x, y, 1.0, 200)                             # through @flydsl.jit, stream=7
    np.testing.assert_array_equal(y, 1 + 3 * x)
    assert driver.launches == 2 and driver.streams[-1] == 7
    [compiled] = axpy._compiled.values()
    assert compiled.backend_name == "toydev" and compiled.driver == "toydev"
    assert compiled.target.arch == "toy1"                # the arch of the tensors' device
    flydsl.synchronize()
    assert driver.synchronized == [0]


def test_wrong_memory_is_reported_in_the_drivers_words(toy_device):
    torch = pytest.importorskip("torch")
    meta = torch.empty(4, device="meta")
    with pytest.raises(flydsl.LaunchError, match="toydev driver launches kernels on a toy device"):
        axpy[1, 4](meta, meta, 1.0, 4)


def test_torch_compile_fuses_for_its_torch_device_type(toy_device):
    torch = pytest.importorskip("torch")
    from flydsl.torch import kernels
    torch._dynamo.reset()
    driver = flydsl.get_driver("toydev")
    before = driver.launches

    def f(a, b):
        return torch.relu(a * b + 1.0) * 2.0 - b

    a, b = torch.randn(500), torch.randn(500)
    # fuse whether or not it pays on 500 elements (tests/test_torch_fusion.py: the cost rule)
    compiled = torch.compile(f, backend="flydsl", options={"cost_rule": False})
    torch.testing.assert_close(compiled(a, b), f(a, b))
    assert driver.launches > before and kernels.stats["launches"] > 0
    torch._dynamo.reset()


def test_a_backend_naming_an_unknown_driver_lists_the_drivers(toy_device, monkeypatch):
    import toy_device
    monkeypatch.setattr(toy_device.ToyBackend, "driver", "nowhere")
    axpy.cache_clear()
    x = np.zeros(4, np.float32)
    with pytest.raises(InvalidDriver, match=r"unknown flydsl driver 'nowhere'.*cpu, cuda, hip"):
        axpy[1, 4](x, x, 1.0, 4)
