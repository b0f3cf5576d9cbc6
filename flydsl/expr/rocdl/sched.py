"""Scheduling hints and wait counters of ``fx.rocdl`` (FlyDSL's names).

On gfx9 each function is its instruction or LLVM scheduling directive
(``s_waitcnt``, ``s_setprio``, ``llvm.amdgcn.sched.barrier`` /
``sched.group.barrier``, which steer the machine scheduler and emit no instruction).
They do not change what a kernel computes, so on the CPU and NVIDIA backends they
are no-ops. Arguments are compile-time ints (checked on every target).

Example::

    fx.rocdl.sched_mfma(2)
    fx.rocdl.sched_dsrd(1)
    fx.rocdl.s_waitcnt(vmcnt=0)
"""
from __future__ import annotations

from typing import Optional

from ...errors import DSLTypeError
from ..implementation import ops as _ops

__all__ = [
    "mask_dsrd", "mask_dswr", "mask_mfma", "mask_vmem_rd", "s_setprio", "s_waitcnt",
    "sched_barrier", "sched_dsrd", "sched_dswr", "sched_group_barrier", "sched_mfma",
    "sched_vmem",
]

#: ``sched_group_barrier`` instruction classes (LLVM's SchedGroupMask bits).
SCHED_MASKS = {
    "none": 0x000, "non_mem_non_sideeffect": 0x001, "valu": 0x002, "salu": 0x004,
    "mfma_wmma": 0x008, "all_vmem": 0x010, "vmem_read": 0x020, "vmem_write": 0x040,
    "all_ds": 0x080, "ds_read": 0x100, "ds_write": 0x200, "transcendental": 0x400,
    "ldsdma": 0x800,
}
mask_mfma = SCHED_MASKS["mfma_wmma"]
mask_vmem_rd = SCHED_MASKS["vmem_read"]
mask_dsrd = SCHED_MASKS["ds_read"]
mask_dswr = SCHED_MASKS["ds_write"]

#: gfx9 s_waitcnt fields: (largest count, where the bits go).
_VMCNT_MAX, _EXPCNT_MAX, _LGKMCNT_MAX = 63, 7, 15


def _static_int(fname: str, what: str, value, lo: int, hi: int) -> int:
    v = getattr(value, "value", value)      # FlyDSL's static Integer has .value
    if isinstance(v, bool) or not isinstance(v, int):
        raise DSLTypeError(f"fx.rocdl.{fname}: {what} must be a compile-time int "
                           f"(it is encoded in the instruction), got {value!r}")
    if not lo <= v <= hi:
        raise DSLTypeError(f"fx.rocdl.{fname}: {what} must be in [{lo}, {hi}], got {v}")
    return v


def _mask(fname: str, mask) -> int:
    if isinstance(mask, str):
        bits = 0
        for part in mask.split("|"):
            key = part.strip().lower()
            if key not in SCHED_MASKS:
                raise DSLTypeError(f"fx.rocdl.{fname}: unknown mask {part!r}; known: "
                                   f"{', '.join(SCHED_MASKS)}")
            bits |= SCHED_MASKS[key]
        return bits
    return _static_int(fname, "mask", mask, 0, 0xFFFF)


def sched_barrier(mask) -> None:
    """``llvm.amdgcn.sched.barrier(mask)``: the scheduler may move only the instruction
    classes in ``mask`` (an int of :data:`SCHED_MASKS` bits or names joined by ``|``)
    across this point; ``0`` moves nothing. A no-op on the CPU and NVIDIA.

    Example: ``fx.rocdl.sched_barrier(0)``
    """
    _ops().rocdl_hint("sched_barrier", _mask("sched_barrier", mask))


def sched_group_barrier(mask, size: int, group_id: int) -> None:
    """``llvm.amdgcn.sched.group.barrier``: a group of ``size`` instructions of the
    ``mask`` classes is scheduled here; groups with the same ``group_id`` are ordered
    as written. A no-op on the CPU and NVIDIA.

    Example: ``fx.rocdl.sched_group_barrier(fx.rocdl.mask_mfma, 1, 0)``
    """
    m = _mask("sched_group_barrier", mask)
    n = _static_int("sched_group_barrier", "size", size, 0, 2**31 - 1)
    g = _static_int("sched_group_barrier", "group_id", group_id, 0, 2**31 - 1)
    _ops().rocdl_hint("sched_group_barrier", m, n, g)


def sched_mfma(cnt: int) -> None:
    """``sched_group_barrier(mask_mfma, cnt, 0)``: ``cnt`` MFMAs here.

    Example: ``fx.rocdl.sched_mfma(2)``
    """
    sched_group_barrier(mask_mfma, cnt, 0)


def sched_vmem(cnt: int) -> None:
    """``sched_group_barrier(mask_vmem_rd, cnt, 0)``: ``cnt`` global/buffer reads here.

    Example: ``fx.rocdl.sched_vmem(1)``
    """
    sched_group_barrier(mask_vmem_rd, cnt, 0)


def sched_dsrd(cnt: int) -> None:
    """``sched_group_barrier(mask_dsrd, cnt, 0)``: ``cnt`` LDS reads here.

    Example: ``fx.rocdl.sched_dsrd(2)``
    """
    sched_group_barrier(mask_dsrd, cnt, 0)


def sched_dswr(cnt: int) -> None:
    """``sched_group_barrier(mask_dswr, cnt, 0)``: ``cnt`` LDS writes here.

    Example: ``fx.rocdl.sched_dswr(1)``
    """
    sched_group_barrier(mask_dswr, cnt, 0)


def s_waitcnt(bitfield: Optional[int] = None, *, vmcnt: Optional[int] = None,
              lgkmcnt: Optional[int] = None, expcnt: Optional[int] = None) -> None:
    """``s_waitcnt``: wait until at most ``vmcnt`` vector-memory, ``lgkmcnt`` LDS/scalar
    memory and ``expcnt`` export operations of this wave are outstanding (``None``:
    do not wait on that counter). ``bitfield`` (FlyDSL's legacy form) is the raw gfx9
    immediate. A no-op on the CPU and NVIDIA, whose memory operations complete in order
    for the thread that issued them.

    Example: ``fx.rocdl.s_waitcnt(vmcnt=0)``
    """
    if bitfield is not None:
        if (vmcnt, lgkmcnt, expcnt) != (None, None, None):
            raise DSLTypeError("fx.rocdl.s_waitcnt: a raw bitfield cannot be combined with "
                               "vmcnt=/lgkmcnt=/expcnt=")
        _ops().rocdl_hint("s_waitcnt", _static_int("s_waitcnt", "bitfield", bitfield,
                                                   0, 0xFFFF))
        return
    _ops().rocdl_hint("s_waitcnt", gfx9_waitcnt(vmcnt, lgkmcnt, expcnt))


def gfx9_waitcnt(vmcnt=None, lgkmcnt=None, expcnt=None) -> int:
    """The gfx9 (CDNA) ``s_waitcnt`` immediate: vmcnt in bits [3:0] and [15:14], expcnt
    in [6:4], lgkmcnt in [11:8]; ``None`` is the field's maximum (no wait).

    Example::

        >>> hex(fx.rocdl.sched.gfx9_waitcnt(vmcnt=0))
        '0xf70'
    """
    vm = _VMCNT_MAX if vmcnt is None else _static_int("s_waitcnt", "vmcnt", vmcnt, 0,
                                                       _VMCNT_MAX)
    exp = _EXPCNT_MAX if expcnt is None else _static_int("s_waitcnt", "expcnt", expcnt, 0,
                                                          _EXPCNT_MAX)
    lgkm = _LGKMCNT_MAX if lgkmcnt is None else _static_int("s_waitcnt", "lgkmcnt", lgkmcnt,
                                                             0, _LGKMCNT_MAX)
    return (vm & 0xF) | ((vm >> 4) << 14) | (exp << 4) | (lgkm << 8)


def s_setprio(priority: int) -> None:
    """``s_setprio``: this wave's issue priority (0 lowest .. 3) relative to the other
    waves of its SIMD. A no-op on the CPU and NVIDIA.

    Example: ``fx.rocdl.s_setprio(1)``
    """
    _ops().rocdl_hint("s_setprio", _static_int("s_setprio", "priority", priority, 0, 3))
