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
* **A in registers** (``a`` a register fragment of 8 16-bit values, the m16n8k16 A
  fragment of the thread's warp's 16 rows): the ``wgmma`` form with four ``.b32``
  operand registers. On the CPU every thread writes its values to their (row, k) places
  in its warpgroup's part of block-shared scratch, a block barrier, the products, and a
  barrier before the scratch is reused (so, as for ``mma.sync``, every thread of the
  block must issue it).
* **MN-major B** (``WGMMA(..., b_major="mn")``, 16-bit types): B stored as K rows of N
  (``swizzle`` bytes of N per row, 8-row groups ``8 * swizzle`` bytes apart, column
  blocks ``b_mn_stride`` elements apart: the descriptor's SBO and LBO), read with the
  instruction's transpose flag ``imm-trans-b`` = 1; element (n, k) at byte
  ``start + (n // W) * LBO + (k // 8) * 8 S + (k % 8) * S + (n % W) * esize``,
  ``W = S / esize``, then swizzled, on the CPU.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, memref, scf, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr.nvvm_tma import SWIZZLE_BITS
from ...expr.swizzle import Swizzle
from ...runtime.dispatch import MAX_BLOCK_THREADS
from .buffer_resources import address
from .kernel_info_ops import known_block_size
from .mma_ops import _pack, _scratch
from .nvvm_copy_ops import physical_memory
from .nvvm_hopper_ops import inline_ptx, require_hopper
from .ops import block_thread_index
from .nvvm_tma_ops import shared_buffer
from .pointer_ops import PointerValue
from .values import Value, cast
from .views import as_view, to_index

__all__ = ["wgmma", "wgmma_fence", "wgmma_commit_group", "wgmma_wait_group", "setmaxnreg"]

#: Swizzle bytes -> the descriptor's mode field (bits 62-63).
_MODE = {128: 1, 64: 2, 32: 3}


def _i64():
    return ir.IntegerType.get_signless(64)


def _c64(v: int) -> ir.Value:
    return arith.constant(_i64(), v)


def _descriptor(mem, base, swizzle: int, lbo_bytes: int = 16) -> ir.Value:
    """The wgmma matrix descriptor of the operand at ``base`` of ``mem``: SBO the 8-row
    group (8 x ``swizzle`` bytes), LBO ``lbo_bytes`` (unused by K-major operands: 16,
    field value 1; an MN-major operand's column-block stride)."""
    addr = arith.index_cast(_i64(), address(mem, base))
    start = arith.andi(arith.shrui(addr, _c64(4)), _c64(0x3FFF))
    fields = ((lbo_bytes >> 4) << 16) | ((8 * swizzle >> 4) << 32) | (_MODE[swizzle] << 62)
    return arith.ori(start, _c64(fields - (1 << 64) if fields >= 1 << 63 else fields))


def _register_fragment(a):
    """The register view of ``a`` when it is a register fragment, else None."""
    if isinstance(a, PointerValue):
        return None
    try:
        view = as_view(a)
    except DSLTypeError:
        return None
    return view if view.memory is not None and view.memory.space == "register" else None


def wgmma(op, acc, a, b, scale_d) -> None:
    fname = "fx.nvvm.wgmma"
    aregs = _register_fragment(a)
    if aregs is None:
        amem, abase = shared_buffer(fname, a, "A operand")
    else:
        if op.ab_dtype.bits != 16:
            raise DSLTypeError(f"{fname} with {op!r}: an A operand in registers is "
                               f"supported for bf16/f16 only")
        if aregs.size() != 8 or aregs.dtype.bits != 16:
            raise DSLTypeError(f"{fname} with {op!r}: an A operand in registers is 8 "
                               f"{op.ab_dtype.name} values per thread (the m16n8k16 A "
                               f"fragment), got {aregs.size()} {aregs.dtype.name}")
        amem, abase = aregs.memory, None
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
    lbo = op.b_mn_stride * (op.ab_dtype.bits // 8) if op.b_major == "mn" else 16
    if require_hopper(f"wgmma.mma_async ({op!r})", True):
        desc_b = _descriptor(bmem, bbase, op.swizzle, max(lbo, 16))
        if aregs is None:
            _wgmma_ptx(op, accv, _descriptor(amem, abase, op.swizzle), desc_b, scale)
        else:
            _wgmma_ptx_rs(op, accv, aregs, desc_b, scale)
        return
    if aregs is None:
        _wgmma_emulated(op, accv, (amem, abase), (bmem, bbase), scale)
    else:
        _wgmma_emulated_rs(op, accv, aregs, (bmem, bbase), scale)


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


def _wgmma_ptx_rs(op, accv, aregs, desc_b, scale) -> None:
    """The register-A form: ``{a0..a3}`` (4 x .b32, two 16-bit values each), B's
    descriptor, ``imm-trans-b`` only."""
    n = op.n // 2
    f32 = ir.F32Type.get()
    outs = ", ".join(f"${k}" for k in range(n))
    regs = _pack([cast(aregs[j], op.ab_dtype) for j in range(8)], (4, 2, None), True)
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 5}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}.{op.acc_name}.{op.ab_name}."
            f"{op.ab_name} {{{outs}}}, {{${n}, ${n + 1}, ${n + 2}, ${n + 3}}}, ${n + 4}, "
            f"p, 1, 1, {1 if op.b_major == 'mn' else 0}; }}")
    constraints = ",".join(["=f"] * n + ["r"] * 4 + ["l", "r"] + [str(k) for k in range(n)])
    olds = [cast(accv[i], dt.Float32).v for i in range(n)]
    res = inline_ptx(llvm.StructType.get_literal([f32] * n),
                     [*regs, desc_b, scale, *olds], text, constraints)
    for i in range(n):
        accv[i] = Value(llvm.extractvalue(f32, res, [i]), dt.Float32)


def _wgmma_ptx(op, accv, desc_a, desc_b, scale) -> None:
    n = op.n // 2
    f32 = ir.F32Type.get()
    outs = ", ".join(f"${k}" for k in range(n))
    # K-major A; B K-major (0) or MN-major (1)
    trans = f", 0, {1 if op.b_major == 'mn' else 0}" if op.ab_dtype.bits == 16 else ""
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}.{op.acc_name}.{op.ab_name}."
            f"{op.ab_name} {{{outs}}}, ${n}, ${n + 1}, p, 1, 1{trans}; }}")
    constraints = ",".join(["=f"] * n + ["l", "l", "r"] + [str(k) for k in range(n)])
    olds = [cast(accv[i], dt.Float32).v for i in range(n)]
    res = inline_ptx(llvm.StructType.get_literal([f32] * n),
                     [desc_a, desc_b, scale, *olds], text, constraints)
    for i in range(n):
        accv[i] = Value(llvm.extractvalue(f32, res, [i]), dt.Float32)


def _operand_element(op, mem, base, row: ir.Value, k: ir.Value,
                     mn_major: bool = False) -> ir.Value:
    """Element (row, k) of an operand as the descriptor locates it (an f32): K-major,
    or MN-major (``row`` along the swizzle rows, ``k`` across them)."""
    esize = op.ab_dtype.bits // 8
    start = arith.muli(arith.index_cast(_i64(), to_index(base)), _c64(esize))
    if mn_major:
        w = op.swizzle // esize              # elements of N per swizzle row
        offset = arith.addi(
            arith.addi(arith.muli(arith.divui(row, _c64(w)), _c64(op.b_mn_stride * esize)),
                       arith.muli(arith.remui(row, _c64(w)), _c64(esize))),
            arith.addi(arith.muli(arith.divui(k, _c64(8)), _c64(8 * op.swizzle)),
                       arith.muli(arith.remui(k, _c64(8)), _c64(op.swizzle))))
    else:
        offset = arith.addi(
            arith.addi(arith.muli(arith.divui(row, _c64(8)), _c64(8 * op.swizzle)),
                       arith.muli(arith.remui(row, _c64(8)), _c64(op.swizzle))),
            arith.muli(k, _c64(esize)))
    byte = arith.addi(start, offset)
    moved = Swizzle(SWIZZLE_BITS[op.swizzle], 4, 3)(Value(byte, dt.Int64)).v
    elem = arith.trunci(ir.IntegerType.get_signless(32), arith.divui(moved, _c64(esize)))
    v = physical_memory(mem).load(Value(elem, dt.Int32))
    x = cast(v, dt.Float32).v
    if op.ab_name == "tf32":     # the instruction reads 10 of the 23 mantissa bits
        i32 = ir.IntegerType.get_signless(32)
        bits = arith.andi(arith.bitcast(i32, x), arith.constant(i32, -(1 << 13)))
        x = arith.bitcast(ir.F32Type.get(), bits)
    return x


def _thread_geometry():
    """(thread, warp of the warpgroup, lane // 4, lane % 4) as i64 values."""
    t = arith.extsi(_i64(), cast(block_thread_index(), dt.Int32).v)
    w = arith.divui(arith.remui(t, _c64(128)), _c64(32))
    l64 = arith.remui(t, _c64(32))
    return t, w, arith.divui(l64, _c64(4)), arith.remui(l64, _c64(4))


def _emulated_products(op, accv, scale, w, g, q, a_at, b_at) -> None:
    """The thread's accumulators over the instruction's K, one loop: value ``i`` is
    (row ``16 w + g + 8 ((i % 4) // 2)``, column ``8 (i // 4) + 2 q + i % 2``); each k
    reads the thread's 2 A elements (``a_at(row, k)``) and ``n / 4`` B elements
    (``b_at(column, k)``) once, and adds each product in k order (``acc + a * b``)."""
    f32 = ir.F32Type.get()
    keep = arith.cmpi(arith.CmpIPredicate.ne, scale, arith.constant(scale.type, 0))
    rows = [arith.addi(arith.addi(arith.muli(w, _c64(16)), g), _c64(8 * h)) for h in range(2)]
    cols = [arith.addi(_c64(8 * (j // 2) + j % 2), arith.muli(q, _c64(2)))
            for j in range(op.n // 4)]
    n = op.n // 2
    inits = [arith.select(keep, cast(accv[i], dt.Float32).v, arith.constant(f32, 0.0))
             for i in range(n)]
    loop = scf.ForOp(_ci(0), _ci(op.k), _ci(1), inits)
    with ir.InsertionPoint(loop.body):
        k = arith.index_cast(_i64(), loop.induction_variable)
        a = [a_at(r, k) for r in rows]
        b = [b_at(c, k) for c in cols]
        scf.YieldOp([arith.addf(loop.inner_iter_args[i],
                                arith.mulf(a[(i % 4) // 2], b[2 * (i // 4) + i % 2]))
                     for i in range(n)])
    for i in range(n):
        accv[i] = Value(loop.results[i], dt.Float32)


def _wgmma_emulated(op, accv, a, b, scale) -> None:
    _, w, g, q = _thread_geometry()
    mn = op.b_major == "mn"
    _emulated_products(op, accv, scale, w, g, q,
                       lambda r, k: _operand_element(op, *a, r, k),
                       lambda c, k: _operand_element(op, *b, c, k, mn))


def _ci(v: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), v)


def _wgmma_emulated_rs(op, accv, aregs, b, scale) -> None:
    """Register A on the CPU: each thread stores its 8 A values (rounded to the operand
    type, exact in f32) at (row, k) of its warpgroup's 64 x 16 scratch, a barrier, the
    products as in :func:`_wgmma_emulated`, and a barrier before the next use."""
    block = known_block_size()
    threads = block[0] * block[1] * block[2] if block else MAX_BLOCK_THREADS
    groups = max(1, (threads + 127) // 128)
    scratch = _scratch(groups * 64 * op.k, dt.Float32)
    t, w, g, q = _thread_geometry()
    base = arith.muli(arith.divui(t, _c64(128)), _c64(64 * op.k))
    index = ir.IndexType.get()
    for j in range(8):              # a_j: (16 w + g + 8 ((j % 4) // 2), 8 (j // 4) + 2 q + j % 2)
        row = arith.addi(arith.addi(arith.muli(w, _c64(16)), g), _c64(8 * ((j % 4) // 2)))
        col = arith.addi(arith.muli(q, _c64(2)), _c64(8 * (j // 4) + j % 2))
        at = arith.addi(base, arith.addi(arith.muli(row, _c64(op.k)), col))
        x = cast(cast(aregs[j], op.ab_dtype), dt.Float32).v
        memref.store(x, scratch.mem, [arith.index_cast(index, at)])
    gpu.barrier()
    mn = op.b_major == "mn"

    def a_at(r, k):
        at = arith.addi(base, arith.addi(arith.muli(r, _c64(op.k)), k))
        return memref.load(scratch.mem, [arith.index_cast(index, at)])
    _emulated_products(op, accv, scale, w, g, q, a_at,
                       lambda c, k: _operand_element(op, *b, c, k, mn))
    gpu.barrier()


# -- fences, groups, registers ----------------------------------------------------------

def wgmma_fence(fragments=()) -> None:
    if not require_hopper("wgmma.fence", True):
        for frag in fragments:            # checked on the CPU too
            _fence_values(frag)
        return
    if not fragments:
        inline_ptx(None, [], "wgmma.fence.sync.aligned;", "")
        return
    # each fragment's registers pass through the fence (tied in and out, as CUTLASS's
    # warpgroup_fence_operand): whatever computes them stays before it
    views, regs = [], []
    for frag in fragments:
        view, values = _fence_values(frag)
        views.append((view, len(regs), len(values)))
        regs += values
    types = [r.type for r in regs]
    constraints = ",".join(["=" + _reg_class(t) for t in types] +
                           [str(k) for k in range(len(regs))])
    res = inline_ptx(llvm.StructType.get_literal(types), regs, "wgmma.fence.sync.aligned;",
                     constraints)
    i16 = ir.IntegerType.get_signless(16)
    for view, first, count in views:
        outs = [llvm.extractvalue(types[first + k], res, [first + k]) for k in range(count)]
        if view.dtype.bits == 32:
            for k in range(count):
                view[k] = Value(outs[k], view.dtype)
            continue
        for k in range(count):            # 16-bit pairs: unpack the .b32
            pair = vector.bitcast(ir.VectorType.get([2], i16),
                                  vector.from_elements(ir.VectorType.get([1], outs[k].type),
                                                       [outs[k]]))
            for e in range(2):
                bits = vector.extract(pair, [], [e])
                view[2 * k + e] = Value(arith.bitcast(view.dtype.mlir_type(), bits),
                                        view.dtype)


def _reg_class(t) -> str:
    return "f" if t == ir.F32Type.get() else "r"


def _fence_values(frag) -> tuple:
    """(register view, its registers: f32 values, or 16-bit values packed in pairs)."""
    view = _register_fragment(frag)
    if view is None or view.dtype.bits not in (16, 32) or \
            (view.dtype.bits == 16 and view.size() % 2):
        raise DSLTypeError("fx.nvvm.wgmma_fence: the fragments must be register fragments "
                           "of 32-bit values or of an even number of 16-bit values")
    n = view.size()
    if view.dtype.bits == 32:
        return view, [cast(view[k], view.dtype).v for k in range(n)]
    i16 = ir.IntegerType.get_signless(16)
    regs = []
    for k in range(n // 2):
        halves = [arith.bitcast(i16, cast(view[2 * k + e], view.dtype).v) for e in range(2)]
        vec = vector.from_elements(ir.VectorType.get([2], i16), halves)
        regs.append(vector.extract(vector.bitcast(
            ir.VectorType.get([1], ir.IntegerType.get_signless(32)), vec), [], [0]))
    return view, regs


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
