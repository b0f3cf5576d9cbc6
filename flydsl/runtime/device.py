"""FlyDSL's ``flydsl.runtime.device``: the AMD GPU architecture host code branches on.

``get_rocm_arch()`` answers, in order:

1. ``FLYDSL_GPU_ARCH`` (a ``gfx...`` name) or ``HSA_OVERRIDE_GFX_VERSION``
   (``9.4.2`` -> ``gfx942``), lower-cased, as FlyDSL does;
2. the arch of ROCm device 0, when flydsl's HIP driver finds one;
3. otherwise ``"gfx942"``: FlyDSL's own answer when it finds no ROCm tool, and the
   machine flydsl's CPU backend runs FlyDSL kernels as (its ``fx.rocdl`` atoms, MFMA
   and buffer copies, execute exactly on the CPU with gfx942's lane layouts), so
   code that branches on ``gfx942`` takes its gfx942 path on a machine without a GPU.

The CPU backend's warps are 32 lanes wide, or 64 (a CDNA wavefront) with
``FLYDSL_CPU_WARP_SIZE=64``; :func:`get_warp_size` without an arch answers the width
kernels will really run with, so a FlyDSL kernel that sizes its shuffles with it gets the
GPU's answers on the CPU, and one that hard-codes 64 lanes (a shuffle across lane 32) is
traced again for 64-lane warps when the width is not set (with a warning naming it; with
``FLYDSL_CPU_WARP_SIZE=32`` such a shuffle is a located error, never a wrong result).
"""
from __future__ import annotations

import functools
import os
from typing import Optional

#: Arch answered without a ROCm device (see the module docstring).
DEFAULT_ROCM_ARCH = "gfx942"

#: LDS bytes per workgroup by arch (FlyDSL's table).
SMEM_CAPACITY = {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840, "gfx1100": 65536,
                 "gfx1151": 65536, "gfx1201": 65536, "gfx1250": 327680}


def _env_arch() -> Optional[str]:
    env = os.environ.get("FLYDSL_GPU_ARCH") or os.environ.get("HSA_OVERRIDE_GFX_VERSION")
    if not env:
        return None
    env = env.strip().lower()
    if env.startswith("gfx"):
        return env
    parts = env.split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        major, minor, step = (int(p) for p in parts)
        return f"gfx{major}{minor:x}{step:x}"
    return None


@functools.lru_cache(maxsize=None)
def _device_arch() -> Optional[str]:
    """The arch of ROCm device 0 (without its ``:xnack-`` features), or None."""
    from .devices import device_arch, device_count
    try:
        if device_count("hip") < 1:
            return None
        return device_arch("hip", 0).split(":", 1)[0].lower()
    except Exception:  # noqa: BLE001 - a broken ROCm install counts as no device
        return None


def get_rocm_arch() -> str:
    """The AMD GPU arch, lower-cased (``"gfx942"``); see the module docstring."""
    return _env_arch() or _device_arch() or DEFAULT_ROCM_ARCH


def get_rocm_device_count() -> int:
    """The number of ROCm devices flydsl's HIP driver sees (0 without one)."""
    try:
        from .devices import device_count
        return int(device_count("hip"))
    except Exception:  # noqa: BLE001
        return 0


def is_rdna_arch(arch: Optional[str] = None) -> bool:
    """RDNA (gfx10, gfx11, gfx120x: 32-lane waves) rather than CDNA."""
    arch = (arch or get_rocm_arch()).lower()
    return arch.startswith(("gfx10", "gfx11", "gfx120"))


def get_warp_size(arch: Optional[str] = None) -> int:
    """Lanes per wavefront of ``arch``: 32 on gfx10-12, 64 otherwise.

    Without ``arch``: the arch of ``FLYDSL_GPU_ARCH`` or of the ROCm device when there is
    one; else the warp the kernel will really run with, so that code sizing its shuffles
    with this answer is right: 32 on a CUDA device, and on the CPU backend its emulated
    warp (32, or 64 with ``FLYDSL_CPU_WARP_SIZE=64``, which runs gfx9 kernels that
    hard-code 64 lanes)."""
    if arch is None and _env_arch() is None and _device_arch() is None:
        return _running_warp_size()
    arch = (arch or get_rocm_arch()).lower()
    return 32 if arch.startswith(("gfx10", "gfx11", "gfx12")) else 64


def _running_warp_size() -> int:
    """The warp width of the backend kernels will run on, when no ROCm arch is known."""
    from .cpu_warp import cpu_warp_size
    from .devices import device_count
    backend = os.environ.get("FLYDSL_COMPILE_BACKEND", "").strip()
    if backend == "cuda" or (not backend and device_count("cuda") > 0):
        return 32
    return cpu_warp_size()


def check_smem_capacity(allocated_bytes: int, arch: Optional[str] = None) -> None:
    """Raise if ``allocated_bytes`` of shared memory exceed ``arch``'s LDS (an unknown
    arch, or none given, is not checked)."""
    if arch is None:
        return
    limit = SMEM_CAPACITY.get(str(arch).lower())
    if limit is not None and allocated_bytes > limit:
        from ..errors import LaunchError
        raise LaunchError(f"shared memory overflow: {allocated_bytes} bytes requested, "
                          f"{arch} has {limit}")


__all__ = ["DEFAULT_ROCM_ARCH", "SMEM_CAPACITY", "check_smem_capacity", "get_rocm_arch",
           "get_rocm_device_count", "get_warp_size", "is_rdna_arch"]
