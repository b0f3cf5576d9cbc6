"""What a launch driver is: how one kind of device loads and runs a backend's binaries.

A compile backend (:mod:`flydsl.compiler.backends`) names its driver in
``BaseBackend.driver``; the driver registry (:mod:`.registry`) finds it. A driver
gives flydsl everything it needs to run kernels on its devices:

* **load and launch**: :meth:`Driver.make_launcher` turns a compiled kernel into a
  launcher whose ``bind(samples, check_smem)`` returns a
  :class:`~flydsl.runtime.packing.BoundLaunch` (``run(args, grid, block, smem,
  stream)``: pack the arguments into an int64 slot table, submit);
* **devices**: how many, their arch, the current one, which tensor memory kinds its
  kernels read (``device_types``) and which torch device type
  ``torch.compile(backend="flydsl")`` generates kernels for (``torch_device_type``);
* **streams and synchronization**: a ``stream=`` argument as a raw handle, and
  waiting for (and reporting errors of) asynchronous launches;
* **timing** (what ``flydsl.testing.do_bench`` uses): device events
  (:meth:`Driver.create_event`, :meth:`~Driver.record_event`,
  :meth:`~Driver.event_elapsed_ms`, :meth:`~Driver.destroy_event`) and
  :meth:`Driver.flush_cache`. The defaults mean "no device events, no device cache":
  such a driver's launches are timed with a host clock.

Also here, for every driver: :func:`driver_error` (a FlydslRuntimeError carrying
the driver's code) and :data:`used_devices` (what ``flydsl.synchronize()`` waits
for).
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, ContextManager, Optional, Protocol, Sequence

from ...errors import FlydslRuntimeError, LaunchError


class Launcher(Protocol):
    """A compiled kernel loaded by a driver."""

    def bind(self, samples: Sequence, check_smem: Callable[[int], None]) -> Any:
        """The launch for arguments of the samples' types (a ``BoundLaunch``)."""


class Driver(ABC):
    """A launch driver. Subclasses set the class attributes and ``make_launcher``.

    ``load()`` gives the process's instance (a driver whose runtime is missing
    raises :class:`~flydsl.errors.FlydslRuntimeError` there). Device queries have
    single-device defaults, so a driver for host memory needs little more than
    ``make_launcher``.
    """

    name: ClassVar[str] = ""
    #: Memory kinds (torch/DLPack device types: ``cpu``, ``cuda``, ...) of the tensors
    #: its kernels read and write.
    device_types: ClassVar[tuple[str, ...]] = ()
    #: The torch device type ``torch.compile(backend="flydsl")`` fuses for.
    torch_device_type: ClassVar[str] = ""
    #: Most static + dynamic shared memory a block may use on any of its devices
    #: (checked before a launch; GPU launchers also check the device's own limit).
    max_shared_bytes: ClassVar[int] = 48 * 1024
    #: Kernels run on this host: the arch is the host's, never read from the tensors.
    runs_on_host: ClassVar[bool] = False
    #: What its devices are called in messages ("GPU", "device", ...).
    device_kind: ClassVar[str] = "device"

    _instances: ClassVar[dict] = {}

    @classmethod
    def load(cls) -> "Driver":
        """The process's instance of this driver (created on first use)."""
        inst = Driver._instances.get(cls)
        if inst is None:
            inst = Driver._instances[cls] = cls()
        return inst

    @abstractmethod
    def make_launcher(self, compiled) -> Launcher:
        """Load ``compiled``'s binary (a ``CompiledKernel``) and return its launcher."""

    # -- devices -------------------------------------------------------------
    def device_count(self) -> int:
        """Number of devices this driver launches on."""
        return 1

    def device_arch(self, index: int) -> str:
        """The arch of device ``index`` (``sm_90``, ``gfx942``)."""
        raise FlydslRuntimeError(f"the {self.name} driver does not report device arches")

    def current_device(self) -> int:
        """The device a launch without tensor arguments runs on."""
        return 0

    # -- streams and synchronization -------------------------------------------
    def stream_handle(self, stream) -> int:
        """The raw handle of a launch's ``stream=`` value (see :func:`stream_handle`)."""
        return stream_handle(stream)

    def synchronize(self, index: int) -> None:
        """Wait for the work launched on device ``index``; raise its first error."""

    def synchronize_stream(self, handle: int) -> None:
        """Wait for the work queued on one stream; raise its first error."""

    def on_device(self, index: int) -> ContextManager[None]:
        """Run a block with device ``index`` current, restoring the previous one
        (a single-device driver has nothing to switch)."""
        return contextlib.nullcontext()

    # -- timing (flydsl.testing.do_bench) ----------------------------------------
    def create_event(self) -> Optional[object]:
        """A timing event on the current device, or None when the driver has no
        device events (its launches are then timed with a host clock). Release it
        with :meth:`destroy_event`."""
        return None

    def record_event(self, event: object, stream: int = 0) -> None:
        """Enqueue ``event`` on ``stream`` (a raw handle, 0 = the default stream): it
        completes when the work queued before it has."""
        raise FlydslRuntimeError(f"the {self.name} driver has no timing events")

    def event_elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds of device time between two recorded events; waits for ``end``
        first (and so raises the first error of the work before it)."""
        raise FlydslRuntimeError(f"the {self.name} driver has no timing events")

    def destroy_event(self, event: object) -> None:
        """Release an event from :meth:`create_event` (best effort)."""

    def flush_cache(self, stream: int = 0) -> bool:
        """Queue, on ``stream``, a write over a buffer larger than the current device's
        caches, so the next launch starts cold; False when the driver has no device
        cache of its own (host drivers: the caller flushes the host's)."""
        return False


#: (driver name, device index) pairs this process launched on: what
#: ``flydsl.synchronize()`` waits for.
used_devices: set = set()


def driver_error(message: str, driver: str, code) -> FlydslRuntimeError:
    """A FlydslRuntimeError carrying the driver's error code as ``.code``."""
    err = FlydslRuntimeError(message)
    err.driver = driver
    err.code = code
    return err


def stream_handle(stream) -> int:
    """The raw handle of a launch's ``stream=`` value.

    Accepted: ``None`` or ``0`` (the default stream), an int handle, a torch stream
    (``.cuda_stream``; ROCm torch uses the same attribute), an object speaking the
    CUDA stream protocol (``__cuda_stream__``), or a binding handle (``CUstream``,
    ``hipStream_t``) that converts with ``int()``.
    """
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    raw = getattr(stream, "cuda_stream", None)
    if raw is not None:
        return int(raw)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise LaunchError(f"stream= must be None, an int handle, a torch stream or a driver "
                          f"stream handle, got {type(stream).__name__}") from None


__all__ = ["Driver", "Launcher", "driver_error", "stream_handle", "used_devices"]

