"""Implementations of the warp- and block-level ``flydsl.expr`` collectives (emit MLIR
into the current trace): lane ids, active masks, votes, shuffles, warp/block
reductions and scans, and the counting barriers.

What each target gets:

* **CUDA** -- native PTX: ``shfl.sync.{idx,up,down}``, ``vote.sync.{ballot,all,any}``,
  ``activemask``, ``bar.warp.sync``, ``bar.red.{popc,and,or}``. The member mask of each
  warp instruction is the active mask (the lanes executing the call), as numba's
  ``cuda.activemask()``.
* **ROCm** -- ``ds_bpermute_b32`` reading the source lane that CUDA's rules pick,
  ``rocdl.ballot`` (a ``v_cmp`` into a scalar register pair, masked by ``exec``);
  a wavefront is lockstep, so ``syncwarp`` is only a wavefront-scope fence.
* **CPU and other backends** -- portable ``gpu`` ops that ``passes/simt_to_cpu`` lowers
  (:mod:`flydsl.passes._simt_collectives`): ``gpu.shuffle idx`` with the computed
  source lane; ``gpu.subgroup_reduce`` for the active mask and votes (OR of lane bits)
  and for reductions and scans of the named ops (a flydsl attribute makes it a scan);
  a ``gpu.barrier`` marked as a warp barrier.

On GPUs, and on the CPU for user-defined ops, reductions and scans are a Kogge-Stone
scan of ``shuffle_up`` steps over the active lanes (then a broadcast of the last
one); the CPU folds the named ops in lane order. Either way a custom op is applied
in lane order, ``op(lower lanes, higher lanes)``; float sums may round differently
between the CPU and GPUs (the additions are grouped differently).
"""
from __future__ import annotations

from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, gpu, llvm, nvvm, rocdl, scf

from ...errors import CompileTimeValueRequired, DSLTypeError, WarpTooNarrowError
from ...expr import dtypes as dt
from ...expr import implementation
from ...passes._simt_collectives import IDENTITY_ATTR, SCAN_ATTR, WARP_SYNC_ATTR
from ...runtime.dispatch import MAX_BLOCK_THREADS
from . import context
from .tensors import TensorValue
from .values import Value, as_value, binary, cast, constant, is_scalar
from .views import when

__all__ = [
    "active_mask", "block_reduce", "block_scan", "lane_id", "shuffle", "shuffle_down",
    "shuffle_up", "syncthreads_and", "syncthreads_count", "syncthreads_or", "syncwarp",
    "vote_all", "vote_any", "vote_ballot", "warp_reduce", "warp_scan",
]

# -- the target ----------------------------------------------------------------

def _backend() -> str:
    return context.current().target.backend


def _warp() -> int:
    return context.current().target.warp_size


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _c32(value: int) -> ir.Value:
    return arith.constant(_i32(), value)


def _mask_dtype() -> dt.DType:
    """Lane bit masks: UInt32 on 32-lane warps, UInt64 on 64-lane wavefronts."""
    warp = _warp()
    if warp > 64:
        raise DSLTypeError(f"warp-level masks need at most 64 lanes; this target's warp "
                           f"has {warp}")
    return dt.UInt32 if warp <= 32 else dt.UInt64


def _no_lanes() -> ir.Value:
    """The empty lane mask."""
    return arith.constant(_mask_dtype().mlir_type(), 0)


# -- arguments -------------------------------------------------------------------

def _describe(x) -> str:
    if isinstance(x, TensorValue):
        return "a tensor"
    if isinstance(x, Value):
        return f"a {x.dtype.name} value"
    return f"{type(x).__name__} {x!r}"


def _scalar(x, fname: str) -> Value:
    """A value to exchange or reduce: a kernel value or a Python number."""
    if isinstance(x, Value) or is_scalar(x):
        return as_value(x)
    raise DSLTypeError(f"fx.{fname} needs a number or a kernel value, got {_describe(x)}")


def _pred(x, fname: str) -> ir.Value:
    """A predicate as i1 (numbers and values are true when non-zero)."""
    return cast(_scalar(x, fname), dt.Bool).v


def _int32(x, fname: str, what: str) -> ir.Value:
    """A lane index / delta / mask argument as i32."""
    v = _scalar(x, fname)
    if v.dtype.kind != "int":
        raise DSLTypeError(f"fx.{fname}: {what} must be an integer, got {_describe(x)}")
    if v.dtype.bits > 32:
        return arith.trunci(_i32(), v.v)
    return cast(v, dt.Int32).v if v.dtype.bits < 32 else v.v


def warp_width_error(ctx, lanes: int, message: str) -> DSLTypeError:
    """The error for a warp operation over ``lanes`` lanes the target's warp lacks: on
    the CPU's 32-lane warps a :class:`~flydsl.errors.WarpTooNarrowError`, which the
    launch answers by tracing the kernel again for 64-lane warps (unless
    ``FLYDSL_CPU_WARP_SIZE`` pins the width)."""
    if ctx.target.backend == "cpu" and ctx.target.warp_size < 64 and 32 <= lanes <= 64:
        return WarpTooNarrowError(f"{message}; the CPU backend runs 32-lane warps unless "
                                  "FLYDSL_CPU_WARP_SIZE=64 (a 64-lane CDNA wavefront)")
    return DSLTypeError(message)


def _width(width, fname: str) -> int:
    """The segment width of a shuffle: a compile-time power of two <= the warp size."""
    warp = _warp()
    if width is None:
        return warp
    if isinstance(width, Value):
        raise CompileTimeValueRequired(f"fx.{fname}: width must be a compile-time int "
                                       "(a Python int or an fx.Constexpr parameter)")
    if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= warp \
            or width & (width - 1):
        message = (f"fx.{fname}: width must be a power of two from 1 to the warp size "
                   f"({warp}), got {width!r}")
        if isinstance(width, int) and not width & (width - 1):
            raise warp_width_error(context.current(), width, message)
        raise DSLTypeError(message)
    return width


# -- lanes, masks, votes -------------------------------------------------------------

def _lane() -> ir.Value:
    """The lane of the calling thread in its warp (i32)."""
    return arith.index_cast(_i32(), gpu.lane_id())


def _cuda_activemask() -> ir.Value:
    """``activemask.b32`` (what CUDA's ``__activemask()`` is: PTX inline assembly)."""
    return llvm.inline_asm(_i32(), [], "activemask.b32 $0;", "=r", has_side_effects=True)


def _lane_bit(lane: ir.Value) -> ir.Value:
    """``1 << lane`` in the mask type."""
    mtype = _mask_dtype().mlir_type()
    shift = lane if mtype == _i32() else arith.extui(mtype, lane)
    return arith.shli(arith.constant(mtype, 1), shift)


def _ballot_raw(pred: ir.Value) -> ir.Value:
    """Bit ``i`` set for each active lane ``i`` whose ``pred`` holds."""
    backend = _backend()
    if backend == "cuda":
        return nvvm.vote_sync(_i32(), _cuda_activemask(), pred, nvvm.VoteSyncKind.ballot)
    mtype = _mask_dtype().mlir_type()
    if backend == "rocm":
        return rocdl.ballot(mtype, pred)
    bits = arith.select(pred, _lane_bit(_lane()), arith.constant(mtype, 0))
    return gpu.subgroup_reduce(bits, gpu.AllReduceOperation.OR)


def _active_raw() -> ir.Value:
    """The active mask in the mask type."""
    if _backend() == "cuda":
        return _cuda_activemask()
    return _ballot_raw(arith.constant(ir.IntegerType.get_signless(1), 1))


def _mask_has(mask: ir.Value, lane: ir.Value) -> ir.Value:
    """Whether bit ``lane`` (i32, in range) of ``mask`` is set (i1)."""
    mtype = mask.type
    shift = lane if mtype == _i32() else arith.extui(mtype, lane)
    bit = arith.andi(arith.shrui(mask, shift), arith.constant(mtype, 1))
    return arith.cmpi(arith.CmpIPredicate.ne, bit, arith.constant(mtype, 0))


def _highest_lane(mask: ir.Value) -> ir.Value:
    """The highest set bit of a non-zero mask, as an i32 lane."""
    mtype = mask.type
    top = arith.subi(arith.constant(mtype, mtype.width - 1), llvm.intr_ctlz(mask, False))
    return top if mtype == _i32() else arith.trunci(_i32(), top)


def lane_id() -> Value:
    context.current()
    return Value(_lane(), dt.Int32)


def active_mask() -> Value:
    context.current()
    return Value(_active_raw(), _mask_dtype())


def vote_ballot(pred) -> Value:
    context.current()
    return Value(_ballot_raw(_pred(pred, "vote_ballot")), _mask_dtype())


def vote_any(pred) -> Value:
    context.current()
    p = _pred(pred, "vote_any")
    if _backend() == "cuda":
        r = nvvm.vote_sync(ir.IntegerType.get_signless(1), _cuda_activemask(), p,
                           nvvm.VoteSyncKind.any)
        return Value(r, dt.Bool)
    ballot = _ballot_raw(p)
    return Value(arith.cmpi(arith.CmpIPredicate.ne, ballot, _no_lanes()), dt.Bool)


def vote_all(pred) -> Value:
    context.current()
    p = _pred(pred, "vote_all")
    if _backend() == "cuda":
        r = nvvm.vote_sync(ir.IntegerType.get_signless(1), _cuda_activemask(), p,
                           nvvm.VoteSyncKind.all)
        return Value(r, dt.Bool)
    # all active lanes hold pred <=> no active lane fails it
    failing = _ballot_raw(arith.xori(p, arith.constant(p.type, 1)))
    return Value(arith.cmpi(arith.CmpIPredicate.eq, failing, _no_lanes()), dt.Bool)


def syncwarp(mask=0xFFFFFFFF) -> None:
    context.current()
    m = _int32(mask, "syncwarp", "mask")
    backend = _backend()
    if backend == "cuda":
        nvvm.bar_warp_sync(m)
    elif backend == "rocm":
        # a wavefront runs in lockstep: only keep memory operations from moving across
        llvm.fence(llvm.AtomicOrdering.acq_rel, syncscope="wavefront")
    else:
        barrier = gpu.barrier()
        barrier.operation.attributes[WARP_SYNC_ATTR] = ir.UnitAttr.get()


# -- shuffles ------------------------------------------------------------------------

def _map_words(v: Value, fn: Callable[[ir.Value], ir.Value]) -> Value:
    """Apply ``fn`` (i32 -> i32) to the 32-bit words of ``v``: narrower values are
    widened, 64-bit values split in two; the result has ``v``'s dtype."""
    t, i32 = v.dtype, _i32()
    bits = 1 if t.kind == "bool" else t.bits
    itype = ir.IntegerType.get_signless(bits)
    x = v.v if t.kind != "float" else arith.bitcast(itype, v.v)
    if bits == 64:
        c32 = arith.constant(itype, 32)
        lo = fn(arith.trunci(i32, x))
        hi = fn(arith.trunci(i32, arith.shrui(x, c32)))
        x = arith.ori(arith.extui(itype, lo), arith.shli(arith.extui(itype, hi), c32))
    elif bits == 32:
        x = fn(x)
    else:
        x = arith.trunci(itype, fn(arith.extui(i32, x)))
    return Value(x if t.kind != "float" else arith.bitcast(t.mlir_type(), x), t)


def _source_lane(mode: str, b: ir.Value, width: int) -> ir.Value:
    """The lane a shuffle reads, by PTX's rules for ``shfl.sync``: the segment of
    ``width`` lanes holding the caller, ``b`` modulo the width for ``idx``; for
    ``up``/``down`` ``b`` modulo the warp size, and the caller's own lane when the
    source falls outside its segment."""
    warp = _warp()
    lane = _lane()
    seg = arith.andi(lane, _c32(~(width - 1)))
    if mode == "idx":
        return arith.ori(seg, arith.andi(b, _c32(width - 1)))
    b = arith.andi(b, _c32(warp - 1))
    if mode == "up":
        src = arith.subi(lane, b)
        ok = arith.cmpi(arith.CmpIPredicate.sge, src, seg)
    else:
        src = arith.addi(lane, b)
        ok = arith.cmpi(arith.CmpIPredicate.sle, src, arith.ori(seg, _c32(width - 1)))
    return arith.select(ok, src, lane)


def _shuffle(v: Value, mode: str, b: ir.Value, width: int,
             member: Optional[ir.Value] = None) -> Value:
    """``v`` from another lane of the warp (``mode``: idx, up or down with the i32
    operand ``b``). ``member``: the CUDA member mask (default: the active mask)."""
    backend = _backend()
    if backend == "cuda":
        member = member if member is not None else _cuda_activemask()
        clamp = _c32(((32 - width) << 8) | (0 if mode == "up" else 0x1F))
        kind = getattr(nvvm.ShflKind, mode)
        return _map_words(v, lambda w: nvvm.shfl_sync(w.type, member, w, b, clamp, kind))
    src = _source_lane(mode, b, width)
    if backend == "rocm":
        addr = arith.shli(src, _c32(2))    # ds_bpermute takes a byte address
        return _map_words(v, lambda w: rocdl.ds_bpermute(w.type, addr, w))
    work = cast(v, dt.Int32) if v.dtype.kind == "bool" else v
    out = gpu.shuffle(work.v, src, _c32(_warp()), gpu.ShuffleMode.IDX)[0]
    return cast(Value(out, work.dtype), v.dtype)


def _shuffle_api(fname: str, mode: str, value, operand, width) -> Value:
    context.current()
    v = _scalar(value, fname)
    what = "src_lane" if mode == "idx" else "delta"
    b = _int32(operand, fname, what)
    return _shuffle(v, mode, b, _width(width, fname))


def shuffle(value, src_lane, width=None) -> Value:
    return _shuffle_api("shuffle", "idx", value, src_lane, width)


def shuffle_up(value, delta, width=None) -> Value:
    return _shuffle_api("shuffle_up", "up", value, delta, width)


def shuffle_down(value, delta, width=None) -> Value:
    return _shuffle_api("shuffle_down", "down", value, delta, width)


# -- reduction operators ---------------------------------------------------------------

_NAMED_OPS = ("sum", "prod", "max", "min", "and", "or", "xor")
_KINDS = gpu.AllReduceOperation
#: named op -> the gpu.subgroup_reduce kind folding it: (signed int, unsigned int, float).
_SUBGROUP_KINDS = {
    "sum": (_KINDS.ADD, _KINDS.ADD, _KINDS.ADD), "prod": (_KINDS.MUL, _KINDS.MUL, _KINDS.MUL),
    "max": (_KINDS.MAXSI, _KINDS.MAXUI, _KINDS.MAXIMUMF),
    "min": (_KINDS.MINSI, _KINDS.MINUI, _KINDS.MINIMUMF),
    "and": (_KINDS.AND, _KINDS.AND, None), "or": (_KINDS.OR, _KINDS.OR, None),
    "xor": (_KINDS.XOR, _KINDS.XOR, None),
}


class _Op:
    """A reduction operator applied to values of one dtype: ``combine(a, b)``, and on the
    CPU the ``gpu.subgroup_reduce`` kind its lowering folds (named ops only; GPUs and
    user functions run the shuffle algorithm)."""

    def __init__(self, op, dtype: dt.DType, fname: str):
        self.fname = fname
        self.dtype = dtype
        if callable(op) and not isinstance(op, str):
            self.name = None
            self.combine = lambda a, b: cast(as_value(op(a, b)), dtype)
            self.kind = None
            return
        if op not in _NAMED_OPS:
            raise DSLTypeError(f"fx.{fname}: op must be one of "
                               f"{', '.join(map(repr, _NAMED_OPS))} or a function "
                               f"(a, b) -> value, got {op!r}")
        if op in ("and", "or", "xor") and dtype.kind == "float":
            raise DSLTypeError(f"fx.{fname}: op {op!r} needs integer or Bool values, got "
                               f"{dtype.name}")
        ops = implementation.ops()
        fn = {"sum": lambda a, b: binary("+", a, b), "prod": lambda a, b: binary("*", a, b),
              "max": ops.maximum, "min": ops.minimum, "and": lambda a, b: binary("&", a, b),
              "or": lambda a, b: binary("|", a, b),
              "xor": lambda a, b: binary("^", a, b)}[op]
        self.name = op
        self.combine = lambda a, b: cast(fn(a, b), dtype)
        column = 2 if dtype.kind == "float" else (0 if dtype.signed or dtype.kind == "bool"
                                                   else 1)
        self.kind = None if _backend() in ("cuda", "rocm") else _SUBGROUP_KINDS[op][column]

    def identity(self, given) -> Value:
        """The value an exclusive scan starts from: ``given`` (a number or a value) or
        the named op's identity (a constant)."""
        if given is not None:
            return cast(_scalar(given, self.fname), self.dtype)
        if self.name is None:
            raise DSLTypeError(f"fx.{self.fname}: an exclusive scan with a custom op needs "
                               "identity= (the value op leaves unchanged, e.g. 0 for a sum)")
        t = self.dtype
        if t.kind == "float":
            inf = float("inf")
            return constant({"sum": 0.0, "prod": 1.0, "max": -inf, "min": inf}[self.name], t)
        lo, hi = t.int_limits
        ones = -1 if t.kind == "int" and t.signed else hi - 1     # all bits set
        return constant({"sum": 0, "prod": 1, "max": lo, "min": hi - 1, "and": ones, "or": 0,
                         "xor": 0}[self.name], t)


def _operand_for(op, value, fname: str) -> tuple[Value, _Op]:
    """The value to reduce and its operator: Bool sums and products count in Int32 (as
    numpy's)."""
    v = _scalar(value, fname)
    if v.dtype.kind == "bool" and op in ("sum", "prod"):
        v = cast(v, dt.Int32)
    return v, _Op(op, v.dtype, fname)


def _subgroup(v: Value, kind, scan: Optional[str] = None,
              identity: Optional[ir.Attribute] = None) -> Value:
    """``gpu.subgroup_reduce`` (CPU only), optionally as a flydsl scan (``identity``: the
    exclusive scan's constant, of ``v``'s type)."""
    work = cast(v, dt.Int32) if v.dtype.kind == "bool" else v
    result = gpu.subgroup_reduce(work.v, kind)
    attrs = result.owner.attributes
    if scan is not None:
        attrs[SCAN_ATTR] = ir.StringAttr.get(scan)
    if identity is not None:
        attrs[IDENTITY_ATTR] = identity
    return cast(Value(result, work.dtype), v.dtype)


def _constant_attr(v: Value) -> Optional[ir.Attribute]:
    """The attribute of a constant value (None when ``v`` is computed)."""
    if not isinstance(v.v, ir.OpResult):
        return None
    op = v.v.owner.operation
    return op.attributes["value"] if op.name == "arith.constant" else None


# -- warp reductions and scans --------------------------------------------------------

def _member() -> Optional[ir.Value]:
    """The CUDA member mask of a collective's shuffles (None elsewhere)."""
    return _cuda_activemask() if _backend() == "cuda" else None


def _scan_steps(v: Value, rop: _Op, active: ir.Value) -> Value:
    """Inclusive scan over the ``active`` lanes (contiguous) by shuffles: Kogge-Stone,
    ``x = op(x[lane - d], x)`` for d = 1, 2, 4, ..."""
    member = active if _backend() == "cuda" else None
    lane = _lane()
    x, d = v, 1
    while d < _warp():
        y = _shuffle(x, "up", _c32(d), _warp(), member)
        below = arith.cmpi(arith.CmpIPredicate.sge, lane, _c32(d))
        src = arith.select(below, arith.subi(lane, _c32(d)), lane)
        take = arith.andi(below, _mask_has(active, src))
        x = Value(arith.select(take, rop.combine(y, x).v, x.v), x.dtype)
        d *= 2
    return x


def _warp_total(v: Value, rop: _Op) -> Value:
    """The reduction over the active lanes, in every lane."""
    if rop.kind is not None:
        return _subgroup(v, rop.kind)
    active = _active_raw()
    incl = _scan_steps(v, rop, active)
    return _shuffle(incl, "idx", _highest_lane(active), _warp(), _member())


def _warp_inclusive(v: Value, rop: _Op) -> Value:
    if rop.kind is not None:
        return _subgroup(v, rop.kind, "inclusive")
    return _scan_steps(v, rop, _active_raw())


def _shift_up(incl: Value, first: ir.Value, identity) -> Value:
    """An exclusive scan from the inclusive one: the lane below's value; ``first`` lanes
    get ``identity``."""
    prev = _shuffle(incl, "up", _c32(1), _warp(), _member())
    return Value(arith.select(first, cast(identity, incl.dtype).v, prev.v), incl.dtype)


def warp_reduce(value, op="sum") -> Value:
    context.current()
    v, rop = _operand_for(op, value, "warp_reduce")
    return _warp_total(v, rop)


def warp_scan(value, op="sum", inclusive: bool = True, identity=None) -> Value:
    context.current()
    v, rop = _operand_for(op, value, "warp_scan")
    if inclusive:
        return _warp_inclusive(v, rop)
    ident = rop.identity(identity)
    constant_ident = _constant_attr(ident)
    if rop.kind is not None and constant_ident is not None and v.dtype.kind != "bool":
        return _subgroup(v, rop.kind, "exclusive", constant_ident)
    active = _active_raw()
    incl = _scan_steps(v, rop, active)
    lane = _lane()
    at_zero = arith.cmpi(arith.CmpIPredicate.eq, lane, _c32(0))
    below = _mask_has(active, arith.select(at_zero, lane, arith.subi(lane, _c32(1))))
    first = arith.ori(at_zero, arith.xori(below, arith.constant(below.type, 1)))
    return _shift_up(incl, first, ident)


# -- block level --------------------------------------------------------------------

class _Block:
    """The calling thread's place in its block: linear id, warp, lane, warp count."""

    def __init__(self):
        ops = implementation.ops()
        dim = [ops.launch_index("block_dim", d) for d in "xyz"]
        warp = _warp()
        self.linear = ops.block_thread_index()
        self.threads = dim[0] * dim[1] * dim[2]
        self.warp = self.linear // warp
        self.lane = Value(_lane(), dt.Int32)
        self.warps = (self.threads + (warp - 1)) // warp
        self.max_warps = MAX_BLOCK_THREADS // warp

    def last_lane(self) -> Value:
        """The highest lane of the calling thread's warp (the last warp may be partial)."""
        return implementation.ops().minimum(self.threads - self.warp * _warp(), _warp()) - 1


def _store_if(cond: Value, smem: TensorValue, index, value: Value) -> None:
    """``if cond: smem[index] = value``."""
    with when(cond):
        smem[index] = value


def _over_warp_totals(blk: _Block, smem: TensorValue, body: Callable[[Value], None]) -> None:
    """Run ``body(total of warp lane)`` in lanes 0 .. warps-1 of warp 0."""
    with when((blk.warp == 0) & (blk.lane < blk.warps)):
        body(smem[blk.lane])


def block_reduce(value, op="sum") -> Value:
    context.current()
    v, rop = _operand_for(op, value, "block_reduce")
    if _backend() == "cpu":
        return _block_reduce_tree(v, rop)
    ops, blk = implementation.ops(), _Block()
    smem = ops.shared_array(blk.max_warps + 1, v.dtype)
    _store_if(blk.lane == 0, smem, blk.warp, _warp_total(v, rop))
    ops.barrier()
    # warp 0 reduces the warp totals; entry max_warps gets the block's
    _over_warp_totals(blk, smem, lambda totals: _store_if(
        blk.lane == 0, smem, blk.max_warps, _warp_total(totals, rop)))
    ops.barrier()
    return smem[blk.max_warps]


def _block_reduce_tree(v: Value, rop) -> Value:
    """The CPU's block reduction: a tree in shared memory. Step ``s`` (512, 256, ..., 1)
    folds ``red[t + s]`` into ``red[t]`` for ``t < min(s, threads - s)``; from the
    largest ``s`` below the thread count on, ``red[0 .. s)`` holds the whole block.
    Thread 0 runs the steps, each a loop over ``t`` that vectorizes, between one
    barrier before and one after, instead of the threads with a barrier per step:
    the same folds in the same order, and a 2^24-float block sum (one reduction per
    256 threads) 3.6 -> 3.3 ms on one thread (a hand-written tree of constant steps
    2.4). ``red[0]`` is read once per block; warp reductions would fold every warp
    through per-thread exchanges (17x the time at 128 threads)."""
    ops, blk = implementation.ops(), _Block()
    red = ops.shared_array(MAX_BLOCK_THREADS, v.dtype)
    red[blk.linear] = v
    ops.barrier()
    with when(blk.linear == 0):
        s = MAX_BLOCK_THREADS // 2
        while s > 0:
            count = ops.minimum(blk.threads - s, s)     # <= 0: no fold at this step
            index = ir.IndexType.get()
            loop = scf.ForOp(arith.constant(index, 0), arith.index_cast(index, count.v),
                             arith.constant(index, 1))
            with ir.InsertionPoint(loop.body):
                t = Value(arith.index_cast(ir.IntegerType.get_signless(32),
                                           loop.induction_variable), dt.Int32)
                red[t] = rop.combine(red[t], red[t + s])
                scf.YieldOp([])
            s //= 2
    ops.barrier()
    total = red[0]
    ops.barrier()    # every thread has read it before a later reduction reuses red
    return total


def block_scan(value, op="sum", inclusive: bool = True, identity=None) -> Value:
    context.current()
    v, rop = _operand_for(op, value, "block_scan")
    ident = None if inclusive else rop.identity(identity)
    ops, blk = implementation.ops(), _Block()
    smem = ops.shared_array(2 * blk.max_warps, v.dtype)
    incl = _warp_inclusive(v, rop)
    _store_if(blk.lane == blk.last_lane(), smem, blk.warp, incl)
    ops.barrier()
    # warp 0 scans the warp totals: entry max_warps + w gets warps 0..w together
    _over_warp_totals(blk, smem, lambda totals: smem.__setitem__(
        blk.max_warps + blk.lane, _warp_inclusive(totals, rop)))
    ops.barrier()
    later = blk.warp > 0
    before = smem[blk.max_warps + ops.select(later, blk.warp - 1, 0)]
    if inclusive:
        return ops.select(later, rop.combine(before, incl), incl)
    first = blk.lane == 0
    excl = _shift_up(incl, first.v, ident)
    return ops.select(later, ops.select(first, before, rop.combine(before, excl)), excl)


# -- counting barriers ------------------------------------------------------------------

def _cuda_barrier_reduce(kind: str, pred: ir.Value) -> ir.Value:
    """``bar.red.<kind>``: a barrier that also reduces a predicate over the block (i32)."""
    p = arith.extui(_i32(), pred)
    return nvvm.barrier(_i32(), reduction_op=ir.Attribute.parse(f"#nvvm.reduction<{kind}>"),
                        reduction_predicate=p)


def _count_block(pred: ir.Value) -> tuple[Value, _Block]:
    """(how many threads of the block hold ``pred``, the block): per-warp ballot
    counts added into shared memory between barriers."""
    ops = implementation.ops()
    blk = _Block()
    count = ops.shared_array(1, dt.Int32)
    ops.barrier()                    # earlier readers of the counter are done
    _store_if(blk.linear == 0, count, 0, constant(0, dt.Int32))
    ops.barrier()
    ballot = _ballot_raw(pred)
    in_warp = cast(Value(llvm.intr_ctpop(ballot), _mask_dtype()), dt.Int32)
    with when(blk.lane == 0):
        ops.atomic_add(count, 0, in_warp)
    ops.barrier()
    return count[0], blk


def syncthreads_count(pred) -> Value:
    context.current()
    p = _pred(pred, "syncthreads_count")
    if _backend() == "cuda":
        return Value(_cuda_barrier_reduce("popc", p), dt.Int32)
    return _count_block(p)[0]


def syncthreads_and(pred) -> Value:
    context.current()
    p = _pred(pred, "syncthreads_and")
    if _backend() == "cuda":
        r = _cuda_barrier_reduce("and", p)
        return Value(arith.cmpi(arith.CmpIPredicate.ne, r, _c32(0)), dt.Bool)
    count, blk = _count_block(p)
    return count == blk.threads


def syncthreads_or(pred) -> Value:
    context.current()
    p = _pred(pred, "syncthreads_or")
    if _backend() == "cuda":
        r = _cuda_barrier_reduce("or", p)
        return Value(arith.cmpi(arith.CmpIPredicate.ne, r, _c32(0)), dt.Bool)
    return _count_block(p)[0] > 0
