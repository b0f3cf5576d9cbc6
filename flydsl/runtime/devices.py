"""Devices through the driver registry: how many, their arch, where a launch's tensors
live, and waiting for asynchronous launches (``flydsl.synchronize``)."""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import FlydslError, FlydslRuntimeError, LaunchError
from .drivers import Driver, get_driver
from .drivers.base import driver_error, used_devices
from .tensors import as_tensor


def device_count(driver: str) -> int:
    """Number of devices driver ``driver`` sees; 0 when its runtime is missing."""
    try:
        return get_driver(driver).device_count()
    except FlydslRuntimeError:
        return 0


def device_arch(driver: str, index: int = 0) -> str:
    """The arch of device ``index`` (``sm_90``, ``gfx942``); FlydslRuntimeError without one."""
    drv = get_driver(driver)
    count = drv.device_count()
    if not 0 <= index < count:
        raise FlydslRuntimeError(f"{drv.name} device {index} does not exist "
                                 f"({count} device(s) visible)")
    return drv.device_arch(index)


def tensors_arch(driver: Driver, args: Sequence) -> Optional[str]:
    """The arch of the device holding the tensors in ``args``: what a backend compiles
    for when no arch is configured. None for a host driver, without device tensors,
    or when the tensors do not agree (the launch's own checks report that)."""
    if driver.runs_on_host:
        return None
    try:
        index = common_device("", driver, [f"#{i}" for i in range(len(args))], args,
                              host_ok=True)
        return None if index is None else device_arch(driver.name, index)
    except FlydslError:
        return None


def common_device(kernel: str, driver: Driver, names: Sequence[str], args: Sequence,
                  host_ok: bool = False) -> Optional[int]:
    """The one device index of the tensors in ``args`` (None without tensors).

    LaunchError naming the kernel and arguments for a tensor outside ``driver``'s
    memory (unless ``host_ok``, which skips host tensors) and for tensors on
    different devices.
    """
    accepted = driver.device_types
    found: list[tuple[str, str, int]] = []
    for name, a in zip(names, args):
        t = as_tensor(a)
        if t is None:
            continue
        if t.device_type not in accepted:
            if host_ok:
                continue
            raise LaunchError(_wrong_memory(name, t.device, driver), kernel=kernel)
        if not t.ptr and all(t.shape):   # a kernel would read address 0: the process dies
            raise LaunchError(f"argument {name!r} has no memory (its data pointer is 0: a "
                              "torch FakeTensor or functionalized tensor, as torch.compile "
                              "traces with, or a ZeroTensor, which autograd makes for zero "
                              "gradients); launch on real tensors (torch.zeros_like(t) for "
                              "a ZeroTensor)", kernel=kernel)
        found.append((name, t.device, t.device_index))
    if len({index for _, _, index in found}) > 1:
        listed = ", ".join(f"{n!r} on {dev}" for n, dev, _ in found)
        raise LaunchError(f"tensor arguments are on different devices ({listed}); a launch "
                          "runs on one device: move them to the same device", kernel=kernel)
    return found[0][2] if found else None


def _wrong_memory(name: str, device: str, driver: Driver) -> str:
    if driver.runs_on_host:
        return (f"argument {name!r} is on {device}, but the {driver.name} driver runs kernels "
                "on this host and needs host memory")
    return (f"argument {name!r} is in {device} memory, but the {driver.name} driver launches "
            f"kernels on a {driver.device_kind} ({', '.join(driver.device_types)} memory): "
            "pass device tensors (e.g. torch tensors moved with .cuda()), or run on the cpu "
            "backend (FLYDSL_COMPILE_BACKEND=cpu)")


def synchronize(device: Optional[int] = None, *, stream=None) -> None:
    """Wait for the GPU work flydsl launched and raise the first asynchronous error.

    GPU launches return once the work is queued; a fault inside a kernel (an
    out-of-bounds access, ...) is reported by the driver at the next
    synchronization, which this turns into a FlydslRuntimeError with the driver's
    error name. Waits on every device this process launched on, only ``device``
    when given, or only ``stream`` (a torch stream or handle) when given.
    CPU-backend launches are synchronous: with no GPU launch this returns at once.
    """
    targets = sorted(used_devices)
    if stream is not None:
        for name in sorted({name for name, _ in targets})[:1]:
            drv = get_driver(name)
            handle = drv.stream_handle(stream)
            _raise_async(lambda: drv.synchronize_stream(handle), f"{name} stream {handle:#x}")
        return
    for name, index in targets:
        if device is None or index == device:
            _raise_async(lambda: get_driver(name).synchronize(index), f"{name} device {index}")


def _raise_async(call, where: str) -> None:
    try:
        call()
    except FlydslRuntimeError as e:
        raise driver_error(f"synchronize ({where}): work launched earlier failed: {e}",
                           getattr(e, "driver", ""), getattr(e, "code", None)) from None


__all__ = ["common_device", "device_arch", "device_count", "synchronize", "tensors_arch"]
