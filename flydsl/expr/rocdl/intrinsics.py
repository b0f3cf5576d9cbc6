"""FlyDSL's thin ROCDL wrappers that its kernels call directly (``rocdl.s_barrier()``,
``rocdl.exp2(T.f32, x)``, ``rocdl.rcp(T.f32, x)``, ``rocdl.cvt_pk_fp8_f32(T.i32, a, b,
old, word_sel)``, ``rocdl.ds_bpermute``, ``rocdl.readlane``, ``rocdl.ballot``).

The first argument, where FlyDSL has one, is the result type (``T.i32``, an MLIR type,
or a flydsl dtype); operands are kernel values, Python numbers or MLIR values. On
ROCm each is its instruction; on the CPU and NVIDIA a portable equivalent with the
same result (``exp2``/``rcp`` to float precision, the lane operations over the 32-lane
warp, where an AMD wave has 64 lanes).
"""
from __future__ import annotations

from ..implementation import ops as _ops

__all__ = ["ballot", "cvt_pk_fp8_f32", "ds_bpermute", "exp2", "rcp", "readlane", "s_barrier",
           "update_dpp"]


def s_barrier() -> None:
    """``s_barrier``: every wave of the work-group waits here (``fx.barrier()`` on the
    CPU and NVIDIA, which also orders shared memory as ``s_barrier`` with the
    compiler's waits does).

    Example: ``fx.rocdl.s_barrier()``
    """
    _ops().rocdl_intrinsic("s_barrier", None)


def exp2(res, x):
    """``v_exp_f32``: 2 ** x (Float32).

    Example: ``p = fx.rocdl.exp2(fx.Float32, v - m)``
    """
    return _ops().rocdl_intrinsic("exp2", res, x)


def rcp(res, x):
    """``v_rcp_f32``: 1 / x (Float32; the hardware's is within 1 ulp).

    Example: ``inv = fx.rocdl.rcp(fx.Float32, s)``
    """
    return _ops().rocdl_intrinsic("rcp", res, x)


def cvt_pk_fp8_f32(res, src_a, src_b, old, word_sel):
    """``v_cvt_pk_fp8_f32``: ``src_a`` and ``src_b`` converted to fp8 (round to nearest
    even) in the arch's format, E4M3FNUZ on gfx942 and OCP E4M3FN on gfx950 (on the CPU,
    the arch ``get_rocm_arch()`` names), and written to the low (``word_sel`` false) or
    high 16 bits of the Int32 ``old`` (byte 0/2: ``src_a``, byte 1/3: ``src_b``). As the
    instruction without clamp (and MODE.FP16_OVFL clear), it does not saturate: what
    overflows, and inf, give NaN (gfx942: 0x80; gfx950: 0x7F/0xFF with the sign, where
    ``fx.cast`` to Float8E4M3FN saturates to 448 as torch).

    Example: ``lo = fx.rocdl.cvt_pk_fp8_f32(fx.Int32, a, b, 0, False)``
    """
    return _ops().rocdl_intrinsic("cvt_pk_fp8_f32", res, src_a, src_b, old, word_sel)


def ds_bpermute(res, index, src):
    """``ds_bpermute_b32``: the ``src`` of the lane whose byte address is ``index``
    (lane ``index // 4`` of the wave).

    Example: ``w = fx.rocdl.ds_bpermute(fx.Int32, (fx.lane_id() ^ 1) * 4, k)``
    """
    return _ops().rocdl_intrinsic("ds_bpermute", res, index, src)


def readlane(res, src, lane):
    """``v_readlane_b32``: ``src`` on lane ``lane`` of the wave (one uniform value).

    Example: ``total = fx.rocdl.readlane(fx.Int32, incl, 63)``
    """
    return _ops().rocdl_intrinsic("readlane", res, src, lane)


def ballot(res, pred):
    """``ballot``: bit ``l`` set for each active lane ``l`` where ``pred`` holds (a
    64-bit mask for a 64-bit ``res`` such as ``T.i64``; on 32-lane targets the upper
    32 bits are 0).

    Example: ``mask = fx.rocdl.ballot(fx.Int64, v > 0.75)``
    """
    return _ops().rocdl_intrinsic("ballot", res, pred)


def update_dpp(res, old, src, dpp_ctrl, row_mask, bank_mask, bound_ctrl):
    """``v_mov_b32_dpp``: each lane reads ``src`` of the lane DPP control ``dpp_ctrl``
    names (``quad_perm`` 0x00-0xFF, ``row_shl:n`` 0x101+, ``row_shr:n`` 0x111+,
    ``row_ror:n`` 0x121+, wave shifts 0x130-0x13C, ``row_mirror`` 0x140,
    ``row_half_mirror`` 0x141, ``row_bcast:15/31`` 0x142/0x143); a lane whose source
    is outside its row (or wave) gets 0 with ``bound_ctrl`` True, else ``old``; lanes of
    rows / banks (groups of 4 lanes) cleared in ``row_mask``/``bank_mask`` keep ``old``.
    32-bit values; compile-time controls. On the CPU and NVIDIA the same result over
    the 32-lane warp (rows are lanes 0-15 and 16-31).

    Example: ``left = fx.rocdl.update_dpp(fx.Int32, 0, v, 0x111, 0xF, 0xF, True)``
    (row_shr:1: the value of the lane before, 0 for the first lane of each row)
    """
    return _ops().rocdl_update_dpp(res, old, src, dpp_ctrl, row_mask, bank_mask, bound_ctrl)
