"""FlyDSL's ``compile_backend_name()`` and ``current_target()``: the backend and
target a launch compiles for when nothing pins them."""
from __future__ import annotations

from ...expr import implementation as _implementation
from .base import GPUTarget
from .registry import get_backend, selected_backend_name


def compile_backend_name() -> str:
    """The compile backend in effect: ``FLYDSL_COMPILE_BACKEND`` if set, else the
    first of rocm, cuda, cpu with a device (``"cpu"`` on a machine without a GPU)."""
    return selected_backend_name()


def current_target() -> GPUTarget:
    """The :class:`GPUTarget` (``backend``, ``arch``, ``warp_size``) of that backend:
    ``FLYDSL_GPU_ARCH`` or device 0's arch on a GPU backend, this host on the CPU."""
    return get_backend().target


__all__ = ["compile_backend_name", "current_target"]

# fx.gpu.num_warp_threads() & co. outside a kernel ask the expr layer, which cannot
# import the compiler: it is handed the function instead
_implementation.install_host_target(current_target)
