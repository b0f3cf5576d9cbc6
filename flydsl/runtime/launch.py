"""Launchers for compiled kernels, chosen by the backend's driver, and launch checks."""
from __future__ import annotations

from typing import Sequence

from ..errors import FlydslRuntimeError, LaunchError

#: Static + dynamic shared memory a block may use, per driver: upper bounds over all
#: devices (sm_90/sm_100 opt-in, gfx950); the GPU launchers check the device's own limit.
MAX_SHARED_BYTES = {"cpu": 1 << 20, "cuda": 227 * 1024, "hip": 160 * 1024}


def check_shared(kernel: str, driver: str, static_bytes: int, smem: int) -> None:
    limit = MAX_SHARED_BYTES.get(driver)
    if limit is not None and static_bytes + smem > limit:
        raise LaunchError(f"the kernel uses {static_bytes + smem} bytes of shared memory "
                          f"({static_bytes} static + {smem} dynamic); the {driver} backend "
                          f"allows {limit}", kernel=kernel)


def check_devices(kernel: str, driver: str, names: Sequence[str], args: Sequence) -> None:
    """Every tensor must live where the driver runs: host memory for the CPU, one
    device of the driver's GPUs for cuda/hip (LaunchError naming the arguments)."""
    from .devices import GPU_DRIVERS
    if driver in GPU_DRIVERS:
        from .devices import common_device
        common_device(kernel, driver, names, args)
        return
    from .args import as_host_tensor
    for name, a in zip(names, args):
        t = as_host_tensor(a)
        if t is None:
            continue
        if driver == "cpu" and t.device != "cpu":
            raise LaunchError(f"argument {name!r} is on {t.device}, but the cpu backend "
                              "needs host memory", kernel=kernel)


def make_launcher(compiled) -> object:
    """The driver-specific launcher of ``compiled`` (``bind(samples, check_smem)`` returns
    a :class:`~flydsl.runtime.packing.BoundLaunch`)."""
    driver = compiled.driver
    if driver == "cpu":
        from .cpu_launcher import CpuLauncher
        return CpuLauncher(compiled)
    if driver == "cuda":
        from .cuda_driver import CudaLauncher
        return CudaLauncher(compiled)
    if driver == "hip":
        from .hip_driver import HipLauncher
        return HipLauncher(compiled)
    raise FlydslRuntimeError(
        f"kernel {compiled.kernel_name!r}: the {compiled.backend_name} backend names driver "
        f"{driver!r}, which flydsl cannot launch; compile-only still works "
        "(flydsl.compile(fn, *args, backend=...))")


def check_writable(kernel: str, written: Sequence[str], names: Sequence[str],
                   args: Sequence) -> None:
    """A kernel must not store into read-only memory (a read-only memmap would crash
    the process; ``np.frombuffer(bytes)`` or ``np.broadcast_to`` views would be
    corrupted silently): LaunchError naming the parameter."""
    if not written:
        return
    from .devices import tensor_info
    for name, a in zip(names, args):
        if name not in written:
            continue
        t = tensor_info(a)
        if t is not None and not t.writable:
            what, fix = _read_only_kind(a, name)
            raise LaunchError(f"argument {name!r} is read-only ({what}), but the kernel "
                              f"writes it; {fix}", kernel=kernel)


def _read_only_kind(a, name: str) -> tuple[str, str]:
    if getattr(a, "is_inference", None) is not None:
        return ("a torch inference tensor outside torch.inference_mode()",
                "launch inside torch.inference_mode() or pass a normal tensor")
    if hasattr(a, "flags"):
        return (f"a numpy {type(a).__name__} with flags.writeable=False",
                f"pass a writable copy, e.g. np.array({name})")
    return "its array interface marks it read-only", "pass writable memory"


def bind_launch(compiled, samples: Sequence):
    """Check a first launch's arguments and return the launch bound to their types (a
    :class:`~flydsl.runtime.packing.BoundLaunch`: ``run(args, grid, block, smem, stream)``)."""
    launcher = compiled.launcher()   # first: a missing GPU driver explains everything else
    runtime_names = [s.name for s in compiled.specs if s.kind != "constexpr"]
    check_devices(compiled.kernel_name, compiled.driver, runtime_names, samples)
    check_writable(compiled.kernel_name, compiled.written, runtime_names, samples)
    driver, name, static = compiled.driver, compiled.kernel_name, compiled.shared_bytes
    check_shared(name, driver, static, 0)

    def check_smem(smem: int) -> None:
        check_shared(name, driver, static, smem)
    bound = launcher.bind(samples, check_smem)
    bound.written = frozenset(i for i, n in enumerate(runtime_names) if n in compiled.written)
    return bound
