"""Hopper warpgroup MMA (``fx.nvvm.wgmma``) and its fences, per target.

* **CUDA**: ``wgmma.mma_async.sync.aligned.m64nNkK`` with both operands read from
  shared memory through 64-bit matrix descriptors built here from the operand
  pointers (start address >> 4 in bits 0-13, stride byte offset >> 4 in bits 32-45,
  the swizzle mode in bits 62-63; K-major operands, so the leading byte offset is
  unused and set to 1), the accumulators tied in and out of one inline-PTX statement.
* **CPU**: every thread computes its own accumulators at once (an order PTX allows:
  they may not be read before ``wgmma.wait_group``) from the matrices in shared memory,
  read with the same geometry the descriptor gives the hardware: row ``r`` of an operand
  at byte ``start + (r // 8) * SBO + (r % 8) * S + k * esize`` (``S`` the swizzle span,
  ``SBO = 8 * S``), XOR-swizzled (``Swizzle<B,4,3>``) on its offset from the buffer,
  which must be aligned to the swizzle's repeat as on the GPU. Lane ``l`` of warp ``w``
  of the warpgroup holds, in value ``i``, the element (row ``16 w + l // 4 + 8 ((i %
  4) // 2)``, column ``8 (i // 4) + 2 (l % 4) + i % 2``) of the 64 x N tile (PTX ISA,
  "Matrix fragments for wgmma.mma_async").
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, llvm, scf

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.nvvm_tma import SWIZZLE_BITS
from ...expr.swizzle import Swizzle
from .buffer_resources import address
from .nvvm_copy_ops import physical_memory
from .nvvm_hopper_ops import inline_ptx, require_hopper
from .ops import block_thread_index
from .nvvm_tma_ops import shared_buffer
from .values import Value, cast
from .views import as_view, to_index

__all__ = ["wgmma", "wgmma_fence", "wgmma_commit_group", "wgmma_wait_group", "setmaxnreg"]

#: Swizzle bytes -> the descriptor's mode field (bits 62-63).
_MODE = {128: 1, 64: 2, 32: 3}


def _i64():
    return ir.IntegerType.get_signless(64)


def _c64(v: int) -> ir.Value:
    return arith.constant(_i64(), v)


def _descriptor(mem, base, swizzle: int) -> ir.Value:
    """The wgmma matrix descriptor of the K-major operand at ``base`` of ``mem``."""
    addr = arith.index_cast(_i64(), address(mem, base))
    start = arith.andi(arith.shrui(addr, _c64(4)), _c64(0x3FFF))
    fields = (1 << 16) | ((8 * swizzle >> 4) << 32) | (_MODE[swizzle] << 62)
    return arith.ori(start, _c64(fields - (1 << 64) if fields >= 1 << 63 else fields))


def wgmma(op, acc, a, b, scale_d) -> None:
    fname = "fx.nvvm.wgmma"
    amem, abase = shared_buffer(fname, a, "A operand")
    bmem, bbase = shared_buffer(fname, b, "B operand")
    accv = as_view(acc)
    if accv.memory is None or accv.memory.space != "register":
        raise DSLTypeError(f"{fname}: the accumulator must be a register fragment "
                           f"(fx.make_rmem_tensor(({op.n // 2},), {op.acc_dtype.name}))")
    if accv.size() != op.n // 2 or accv.dtype is not op.acc_dtype:
        raise DSLTypeError(f"{fname} with {op!r}: the accumulator holds {op.n // 2} "
                           f"{op.acc_dtype.name} values per thread, got {accv.size()} "
                           f"{accv.dtype.name}")
    for role, m in (("A", amem), ("B", bmem)):
        if m.dtype.bits != op.ab_dtype.bits:
            raise DSLTypeError(f"{fname} with {op!r}: the {role} operand holds "
                               f"{m.dtype.name}, not {op.ab_dtype.name}-sized elements")
    scale = _scale(fname, scale_d)
    if require_hopper(f"wgmma.mma_async ({op!r})", True):
        _wgmma_ptx(op, accv, _descriptor(amem, abase, op.swizzle),
                   _descriptor(bmem, bbase, op.swizzle), scale)
        return
    _wgmma_emulated(op, accv, (amem, abase), (bmem, bbase), scale)


def _scale(fname: str, scale_d) -> ir.Value:
    """``scale_d`` (0: D = A B, 1: D = A B + D) as an i32."""
    if isinstance(scale_d, bool) or isinstance(scale_d, int):
        if int(scale_d) not in (0, 1):
            raise DSLTypeError(f"{fname}: scale_d must be 0 or 1, got {scale_d!r}")
        return arith.constant(ir.IntegerType.get_signless(32), int(scale_d))
    if not isinstance(scale_d, Value):
        raise DSLTypeError(f"{fname}: scale_d must be 0, 1 or a kernel integer, got "
                           f"{scale_d!r}")
    return cast(scale_d, dt.Int32).v


def _wgmma_ptx(op, accv, desc_a, desc_b, scale) -> None:
    n = op.n // 2
    f32 = ir.F32Type.get()
    outs = ", ".join(f"${k}" for k in range(n))
    trans = ", 0, 0" if op.ab_dtype.bits == 16 else ""      # K-major A and B
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}.{op.acc_name}.{op.ab_name}."
            f"{op.ab_name} {{{outs}}}, ${n}, ${n + 1}, p, 1, 1{trans}; }}")
    constraints = ",".join(["=f"] * n + ["l", "l", "r"] + [str(k) for k in range(n)])
    olds = [cast(accv[i], dt.Float32).v for i in range(n)]
    res = inline_ptx(llvm.StructType.get_literal([f32] * n),
                     [desc_a, desc_b, scale, *olds], text, constraints)
    for i in range(n):
        accv[i] = Value(llvm.extractvalue(f32, res, [i]), dt.Float32)


def _operand_element(op, mem, base, row: ir.Value, k: ir.Value) -> ir.Value:
    """Element (row, k) of a K-major operand as the descriptor locates it (an f32)."""
    esize = op.ab_dtype.bits // 8
    start = arith.muli(arith.index_cast(_i64(), to_index(base)), _c64(esize))
    byte = arith.addi(start, arith.addi(
        arith.addi(arith.muli(arith.divui(row, _c64(8)), _c64(8 * op.swizzle)),
                   arith.muli(arith.remui(row, _c64(8)), _c64(op.swizzle))),
        arith.muli(k, _c64(esize))))
    moved = Swizzle(SWIZZLE_BITS[op.swizzle], 4, 3)(Value(byte, dt.Int64)).v
    elem = arith.trunci(ir.IntegerType.get_signless(32), arith.divui(moved, _c64(esize)))
    v = physical_memory(mem).load(Value(elem, dt.Int32))
    x = cast(v, dt.Float32).v
    if op.ab_name == "tf32":     # the instruction reads 10 of the 23 mantissa bits
        i32 = ir.IntegerType.get_signless(32)
        bits = arith.andi(arith.bitcast(i32, x), arith.constant(i32, -(1 << 13)))
        x = arith.bitcast(ir.F32Type.get(), bits)
    return x


def _wgmma_emulated(op, accv, a, b, scale) -> None:
    t = arith.extsi(_i64(), cast(block_thread_index(), dt.Int32).v)
    w = arith.divui(arith.remui(t, _c64(128)), _c64(32))        # warp of the warpgroup
    l64 = arith.remui(t, _c64(32))
    f32 = ir.F32Type.get()
    keep = arith.cmpi(arith.CmpIPredicate.ne, scale, arith.constant(scale.type, 0))
    for i in range(op.n // 2):
        row = arith.addi(arith.addi(arith.muli(w, _c64(16)), arith.divui(l64, _c64(4))),
                         _c64(8 * ((i % 4) // 2)))
        col = arith.addi(_c64(8 * (i // 4) + i % 2),
                         arith.muli(arith.remui(l64, _c64(4)), _c64(2)))
        init = arith.select(keep, cast(accv[i], dt.Float32).v, arith.constant(f32, 0.0))
        loop = scf.ForOp(_ci(0), _ci(op.k), _ci(1), [init])
        with ir.InsertionPoint(loop.body):
            k = arith.index_cast(_i64(), loop.induction_variable)
            prod = arith.mulf(_operand_element(op, *a, row, k),
                              _operand_element(op, *b, col, k))
            scf.YieldOp([arith.addf(loop.inner_iter_args[0], prod)])
        accv[i] = Value(loop.results[0], dt.Float32)


def _ci(v: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), v)


# -- fences, groups, registers ----------------------------------------------------------

def wgmma_fence() -> None:
    if require_hopper("wgmma.fence", True):
        inline_ptx(None, [], "wgmma.fence.sync.aligned;", "")


def wgmma_commit_group() -> None:
    if require_hopper("wgmma.commit_group", True):
        inline_ptx(None, [], "wgmma.commit_group.sync.aligned;", "")


def wgmma_wait_group(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= 7:
        raise DSLTypeError(f"fx.nvvm.wgmma_wait_group(n): n must be a constant int in "
                           f"[0, 7], got {n!r}")
    if require_hopper("wgmma.wait_group", True):
        inline_ptx(None, [], f"wgmma.wait_group.sync.aligned {n};", "")


def setmaxnreg(count: int, increase: bool) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or not 24 <= count <= 256 \
            or count % 8:
        raise DSLTypeError(f"fx.nvvm.setmaxnreg: the register count must be a multiple of "
                           f"8 in [24, 256], got {count!r}")
    if require_hopper("setmaxnreg", True):
        inline_ptx(None, [], f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 "
                       f"{count};", "")
