"""An out-of-tree flydsl device, "toydev", as a plugin package would ship it.

Its backend compiles like flydsl's CPU backend (the same pipeline, its own target
and arches); its driver runs the kernels on the host, claims two devices, and
counts what flydsl asks of it (launches, synchronizations, streams), so a test
can see every call went through the plugin. Registered only through entry points:

    [project.entry-points."flydsl.backends"]
    toydev = "toy_device:ToyBackend"

    [project.entry-points."flydsl.drivers"]
    toydev = "toy_device:ToyDriver"
"""
from __future__ import annotations

from flydsl.compiler.backends.cpu import CpuBackend
from flydsl.compiler.target import GPUTarget
from flydsl.runtime.drivers import Driver
from flydsl.runtime.drivers.base import used_devices
from flydsl.runtime.drivers.cpu import CpuLauncher

ARCHES = ("toy1", "toy2")


class ToyBackend(CpuBackend):
    """The CPU pipeline, compiled for the "toydev" device's arches."""

    name = "toydev"
    driver = "toydev"

    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        return target.backend == "toydev" and target.arch in ARCHES

    @classmethod
    def make_target(cls, arch: str) -> GPUTarget:
        if arch not in ARCHES:
            raise ValueError(f"toydev arches are {ARCHES}, not {arch!r}")
        return GPUTarget("toydev", arch, 32)

    @classmethod
    def detect_target(cls):
        return GPUTarget("toydev", ARCHES[0], 32)

    @classmethod
    def accepts_env_arch(cls, arch: str) -> bool:
        return arch in ARCHES


class ToyDriver(Driver):
    """Two toy devices whose memory is the host's; launches run on the host."""

    name = "toydev"
    device_types = ("cpu",)
    torch_device_type = "cpu"
    device_kind = "toy device"

    def __init__(self):
        self.launches = 0
        self.synchronized: list = []
        self.streams: list = []

    def make_launcher(self, compiled):
        return _CountingLauncher(compiled, self)

    def device_count(self) -> int:
        return 2

    def device_arch(self, index: int) -> str:
        return ARCHES[index]

    def stream_handle(self, stream) -> int:
        handle = super().stream_handle(stream)
        self.streams.append(handle)
        return handle

    def synchronize(self, index: int) -> None:
        self.synchronized.append(index)


class _CountingLauncher:
    def __init__(self, compiled, driver: ToyDriver):
        self.inner = CpuLauncher(compiled)
        self.driver = driver

    def bind(self, samples, check_smem):
        bound = self.inner.bind(samples, check_smem)
        submit, driver = bound.submit, self.driver

        def counted(buf, grid, block, smem, stream):
            driver.stream_handle(stream)
            driver.launches += 1
            used_devices.add((driver.name, 0))   # what flydsl.synchronize() waits for
            submit(buf, grid, block, smem, stream)
        bound.submit = counted
        return bound
