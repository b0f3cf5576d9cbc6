"""Binding a compiled kernel to its first launch: the driver's launcher, and the
checks every launch of that specialization relies on (where the tensors live,
writability, shared memory)."""
from __future__ import annotations

from typing import Sequence

from ..errors import FlydslRuntimeError, LaunchError
from . import devices
from .drivers import Driver, get_driver
from .tensors import as_tensor


def check_shared(kernel: str, driver: Driver, static_bytes: int, smem: int) -> None:
    """Static + dynamic shared memory within the driver's bound (GPU launchers also
    check the device's own limit)."""
    limit = driver.max_shared_bytes
    if static_bytes + smem > limit:
        raise LaunchError(f"the kernel uses {static_bytes + smem} bytes of shared memory "
                          f"({static_bytes} static + {smem} dynamic); the {driver.name} "
                          f"driver allows {limit}", kernel=kernel)


def check_writable(kernel: str, written: Sequence[str], names: Sequence[str],
                   args: Sequence) -> None:
    """A kernel must not store into read-only memory (a read-only memmap would crash
    the process; ``np.frombuffer(bytes)`` or ``np.broadcast_to`` views would be
    corrupted silently): LaunchError naming the parameter."""
    if not written:
        return
    for name, a in zip(names, args):
        if name not in written:
            continue
        t = as_tensor(a)
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


def load_driver_for(compiled) -> Driver:
    """The driver of ``compiled``'s backend; FlydslRuntimeError saying that
    compile-only still works when its runtime (a GPU, bindings) is missing."""
    try:
        return get_driver(compiled.driver)
    except FlydslRuntimeError as e:
        stage = compiled.binary_stage
        raise FlydslRuntimeError(
            f"kernel {compiled.kernel_name!r}: cannot launch on the {compiled.backend_name} "
            f"backend: {e}. Compile-only still works without a GPU: flydsl.compile(fn, "
            f"*args, backend={compiled.backend_name!r}).asm[{stage!r}] holds the binary"
        ) from None


def launcher_of(compiled, driver: Driver):
    """``compiled``'s launcher (its binary loaded by ``driver``), made once."""
    if compiled.launcher is None:
        with compiled.lock:
            if compiled.launcher is None:
                compiled.launcher = driver.make_launcher(compiled)
    return compiled.launcher


def bind_launch(compiled, samples: Sequence):
    """Check a first launch's arguments and return the launch bound to their types (a
    :class:`~flydsl.runtime.packing.BoundLaunch`: ``run(args, grid, block, smem, stream)``)."""
    driver = load_driver_for(compiled)   # first: a missing GPU driver explains everything else
    launcher = launcher_of(compiled, driver)
    runtime_names = [s.name for s in compiled.specs if s.kind != "constexpr"]
    name, static = compiled.kernel_name, compiled.shared_bytes
    devices.common_device(name, driver, runtime_names, samples)
    check_writable(name, compiled.written, runtime_names, samples)
    check_shared(name, driver, static, 0)

    def check_smem(smem: int) -> None:
        check_shared(name, driver, static, smem)
    bound = launcher.bind(samples, check_smem)
    bound.written = frozenset(i for i, n in enumerate(runtime_names) if n in compiled.written)
    return bound
