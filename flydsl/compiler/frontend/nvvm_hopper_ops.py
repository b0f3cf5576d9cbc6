"""Hopper (sm_90a) synchronisation for ``fx.nvvm``: ``mbarrier`` objects, per target.

* **CUDA**: one ``mbarrier.*.shared::cta.b64`` instruction per call (NVVM ops), the
  barrier being a 64-bit element of shared memory (``fx.Int64``/``fx.UInt64``).
* **CPU**: the same 64-bit element holds a packed state that each operation updates
  atomically (:data:`PENDING`, :data:`EXPECTED`, :data:`TX`, :data:`PHASE` below; the
  GPU's encoding is opaque, so nothing depends on it). The phase completes, as in PTX,
  when the pending arrival count and the transaction count both reach zero: the phase
  bit flips and the pending count is reloaded with the expected count. A *wait* is a
  block barrier (the CPU runs a block's threads as loops cut at barriers, so no thread
  can spin while another is still to arrive) followed by the parity test: all threads
  of the block must reach it together, like ``fx.barrier()``, or compiling is a located
  error. In debug mode a wait whose phase is still incomplete after every thread has
  arrived is reported (it would never return on the GPU).
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, cf, gpu, llvm, memref, nvvm

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from . import async_marks, context
from .nvvm_copy_ops import shared_ptr
from .pointer_ops import PointerValue
from .values import Value, as_value, cast
from .views import Memory, as_view, to_index

__all__ = ["mbarrier_init", "mbarrier_init_fence", "mbarrier_arrive", "mbarrier_expect_tx",
           "mbarrier_arrive_expect_tx", "mbarrier_try_wait", "mbarrier_wait",
           "mbarrier_inval", "mbarrier_complete_tx", "require_hopper", "barrier_slot",
           "inline_ptx"]

#: The CPU's packed state: pending arrivals (bits 0-19), expected arrivals (20-39),
#: transaction bytes (40-60, two's complement: it may go negative for a while, as PTX
#: allows when a copy completes before its expect_tx), phase parity (bit 63).
PENDING, EXPECTED, TX, PHASE = (0, 20), (20, 20), (40, 21), 63
#: PTX's limit on an mbarrier's arrival count and transaction count (2^20 - 1).
MAX_COUNT = (1 << 20) - 1
#: Marks the ``gpu.barrier`` of a CPU wait so a divergence error names the wait.
WAIT_ATTR = "flydsl.sync_origin"


def _target():
    return context.current().target


def require_hopper(what: str, arch_specific: bool = False) -> bool:
    """True on CUDA (sm_90 or later, else an error; ``arch_specific``: sm_90a, the
    features of that arch alone), False on the CPU; ROCm is an error."""
    target = _target()
    if target.backend == "rocm":
        raise DSLTypeError(f"{what} is an NVIDIA Hopper instruction; {target.arch} has no "
                           "equivalent")
    if target.backend != "cuda":
        return False
    digits = "".join(ch for ch in target.arch.split("_")[-1] if ch.isdigit())
    if int(digits or 0) < 90:
        raise DSLTypeError(f"{what} needs sm_90 or later, not {target.arch}")
    if arch_specific and target.arch != "sm_90a":
        raise DSLTypeError(f"{what} is an sm_90a (arch-specific) instruction: compile for "
                           f"arch='sm_90a', not {target.arch}")
    return True


def barrier_slot(fname: str, bar) -> tuple:
    """(memory, physical element) of the mbarrier ``bar`` names: a shared 64-bit view
    (its element 0) or a pointer into shared memory."""
    if isinstance(bar, PointerValue):
        if bar.is_raw:
            raise DSLTypeError(f"{fname}: the mbarrier must be an element of a shared array, "
                               "not a raw pointer")
        mem, offset = bar.memory, bar.offset
    else:
        try:
            view = as_view(bar)
        except DSLTypeError:
            raise DSLTypeError(f"{fname}: the mbarrier must be a shared fx.Int64 array, view "
                               f"or pointer, got {type(bar).__name__} {bar!r}") from None
        if view.memory is None:
            raise DSLTypeError(f"{fname}: the mbarrier must be in shared memory, got a "
                               "coordinate tensor")
        mem, offset = view.memory, view.element_offset(0)
    if mem.space != "shared":
        raise DSLTypeError(f"{fname}: the mbarrier must be in shared memory, got a "
                           f"{mem.label()}")
    if mem.dtype.kind not in ("int", "uint") or mem.dtype.bits != 64:
        raise DSLTypeError(f"{fname}: an mbarrier is a 64-bit element (fx.Int64 or "
                           f"fx.UInt64), the {mem.label()} holds {mem.dtype.name}")
    return mem, mem.physical(offset)


def _i64():
    return ir.IntegerType.get_signless(64)


def _i32():
    return ir.IntegerType.get_signless(32)


def _count(fname: str, what: str, n, low: int = 0) -> ir.Value:
    """``n`` (a constant in [low, 2^20 - 1] or a kernel integer) as an i32."""
    if isinstance(n, bool) or (isinstance(n, int) and not low <= n <= MAX_COUNT):
        raise DSLTypeError(f"{fname}: {what} must be in [{low}, {MAX_COUNT}], got {n!r}")
    v = as_value(n, dt.Int32) if isinstance(n, int) else n
    if not isinstance(v, Value) or v.dtype.kind not in ("int", "uint"):
        raise DSLTypeError(f"{fname}: {what} must be an integer, got {n!r}")
    return cast(v, dt.Int32).v


# -- the CPU state ---------------------------------------------------------------------

def _c(v: int) -> ir.Value:
    return arith.constant(_i64(), v)


def _field(state: ir.Value, spec: tuple, signed: bool = False) -> ir.Value:
    lo, bits = spec
    if signed:
        return arith.shrsi(arith.shli(state, _c(64 - lo - bits)), _c(64 - bits))
    return arith.andi(arith.shrui(state, _c(lo)), _c((1 << bits) - 1))


def _pack(pending, expected, tx, phase) -> ir.Value:
    parts = [arith.andi(pending, _c(MAX_COUNT)),
             arith.shli(arith.andi(expected, _c(MAX_COUNT)), _c(EXPECTED[0])),
             arith.shli(arith.andi(tx, _c((1 << TX[1]) - 1)), _c(TX[0])),
             arith.shli(phase, _c(PHASE))]
    out = parts[0]
    for p in parts[1:]:
        out = arith.ori(out, p)
    return out


def _settle(state: ir.Value, d_pending: ir.Value, d_tx: ir.Value) -> ir.Value:
    """``state`` after ``d_pending`` arrivals and ``d_tx`` more expected bytes: when
    both counts reach zero the phase completes (parity flips, pending reloads)."""
    expected = _field(state, EXPECTED)
    pending = arith.subi(_field(state, PENDING), d_pending)
    tx = arith.addi(_field(state, TX, signed=True), d_tx)
    phase = arith.shrui(state, _c(PHASE))
    done = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, pending, _c(0)),
                      arith.cmpi(arith.CmpIPredicate.eq, tx, _c(0)))
    return _pack(arith.select(done, expected, pending), expected, tx,
                 arith.select(done, arith.xori(phase, _c(1)), phase))


def _update(mem: Memory, element, fn) -> ir.Value:
    """``state = fn(state)`` atomically (a block's threads may run concurrently once
    the thread loops are vectorized or split); the old state."""
    op = memref.GenericAtomicRMWOp(_i64(), mem.mem, [to_index(element)])
    body = op.regions[0].blocks.append(_i64())
    with ir.InsertionPoint(body):
        memref.AtomicYieldOp(fn(body.arguments[0]))
    return op.result


def _assign(mem: Memory, element, state: ir.Value) -> None:
    """``state`` stored atomically (a generic update whose body ignores the old value
    does not lower to LLVM)."""
    memref.atomic_rmw(arith.AtomicRMWKind.assign, state, mem.mem, [to_index(element)])


def _ext(v32: ir.Value) -> ir.Value:
    return arith.extsi(_i64(), v32)


# -- the operations --------------------------------------------------------------------

def mbarrier_init(bar, count) -> None:
    fname = "fx.nvvm.mbarrier_init"
    mem, el = barrier_slot(fname, bar)
    n = _count(fname, "the arrival count", count, low=1)
    if require_hopper("mbarrier.init"):
        nvvm.MBarrierInitOp(shared_ptr(mem, el), n)
        return
    n64 = _ext(n)
    _assign(mem, el, _pack(n64, n64, _c(0), _c(0)))


def mbarrier_init_fence() -> None:
    if require_hopper("fence.mbarrier_init"):
        nvvm.FenceMbarrierInitOp()


def mbarrier_arrive(bar) -> None:
    mem, el = barrier_slot("fx.nvvm.mbarrier_arrive", bar)
    if require_hopper("mbarrier.arrive"):
        nvvm.MBarrierArriveOp(_i64(), shared_ptr(mem, el))
        return
    _update(mem, el, lambda s: _settle(s, _c(1), _c(0)))


def mbarrier_expect_tx(bar, nbytes) -> None:
    fname = "fx.nvvm.mbarrier_expect_tx"
    mem, el = barrier_slot(fname, bar)
    n = _count(fname, "the byte count", nbytes)
    if require_hopper("mbarrier.expect_tx"):
        nvvm.MBarrierExpectTxOp(shared_ptr(mem, el), n)
        return
    n64 = _ext(n)
    _update(mem, el, lambda s: _settle(s, _c(0), n64))


def mbarrier_arrive_expect_tx(bar, nbytes) -> None:
    fname = "fx.nvvm.mbarrier_arrive_expect_tx"
    mem, el = barrier_slot(fname, bar)
    n = _count(fname, "the byte count", nbytes)
    if require_hopper("mbarrier.arrive.expect_tx"):
        nvvm.MBarrierArriveExpectTxOp(_i64(), shared_ptr(mem, el), n)
        return
    n64 = _ext(n)
    _update(mem, el, lambda s: _settle(s, _c(1), n64))


def mbarrier_complete_tx(mem: Memory, element, nbytes: ir.Value) -> None:
    """The CPU's side of a TMA copy: ``nbytes`` (an i64) of the barrier's transactions
    are done."""
    _update(mem, element, lambda s: _settle(s, _c(0), arith.subi(_c(0), nbytes)))


def _ticks() -> ir.Value:
    """try_wait's suspend-time hint (ns) before it reports "not yet" (CUTLASS's value)."""
    return arith.constant(_i32(), 10_000_000)


def inline_ptx(result, operands: list, text: str, constraints: str):
    """Inline PTX with side effects (``result`` None: no result), for what has no NVVM
    op that translates to LLVM IR here (try_wait, the bulk copies, wgmma)."""
    if result is None:
        return llvm.InlineAsmOp(None, operands, text, constraints, has_side_effects=True)
    return llvm.inline_asm(result, operands, text, constraints, has_side_effects=True)


def _parity(fname: str, phase) -> ir.Value:
    if isinstance(phase, bool) or (isinstance(phase, int) and phase not in (0, 1)):
        raise DSLTypeError(f"{fname}: the phase parity must be 0 or 1, got {phase!r}")
    v = as_value(phase, dt.Int32) if isinstance(phase, int) else phase
    if not isinstance(v, Value) or v.dtype.kind not in ("int", "uint", "bool"):
        raise DSLTypeError(f"{fname}: the phase parity must be an integer 0 or 1, got "
                           f"{phase!r}")
    return arith.andi(cast(v, dt.Int32).v, arith.constant(_i32(), 1))


def _cpu_wait(fname: str, mem: Memory, el, parity: ir.Value) -> ir.Value:
    """Block barrier, then: has the phase of parity ``parity`` completed?"""
    op = gpu.BarrierOp()
    op.operation.attributes[WAIT_ATTR] = ir.StringAttr.get(fname)
    state = memref.atomic_rmw(arith.AtomicRMWKind.ori, _c(0), mem.mem, [to_index(el)])
    async_marks.mark_mbarrier_wait(state.owner)
    now = arith.trunci(_i32(), arith.shrui(state, _c(PHASE)))
    return arith.cmpi(arith.CmpIPredicate.ne, now, parity)


def mbarrier_try_wait(bar, phase) -> Value:
    fname = "fx.nvvm.mbarrier_try_wait"
    mem, el = barrier_slot(fname, bar)
    parity = _parity(fname, phase)
    if require_hopper("mbarrier.try_wait.parity"):
        asm = ("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2, $3; "
               "selp.u32 $0, 1, 0, p; }")
        word = inline_ptx(_i32(), [shared_ptr(mem, el), parity, _ticks()], asm, "=r,r,r,r")
        return Value(arith.cmpi(arith.CmpIPredicate.ne, word, arith.constant(_i32(), 0)),
                     dt.Bool)
    return Value(_cpu_wait(fname, mem, el, parity), dt.Bool)


def mbarrier_wait(bar, phase) -> None:
    fname = "fx.nvvm.mbarrier_wait"
    mem, el = barrier_slot(fname, bar)
    parity = _parity(fname, phase)
    if require_hopper("mbarrier.try_wait.parity"):
        # (a loop in one asm block: labels inside { } are local to it)
        asm = ("{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1, "
               "$2; @!p bra WAIT; }")
        inline_ptx(None, [shared_ptr(mem, el), parity, _ticks()], asm, "r,r,r")
        return
    done = _cpu_wait(fname, mem, el, parity)
    if getattr(context.current().options, "debug", False):
        cf.assert_(done, f"{fname}: the phase never completes: every thread of the block "
                         "is waiting and no copy is pending (a deadlock on the GPU)")


def mbarrier_inval(bar) -> None:
    mem, el = barrier_slot("fx.nvvm.mbarrier_inval", bar)
    if require_hopper("mbarrier.inval"):
        nvvm.MBarrierInvalOp(shared_ptr(mem, el))
        return
    _assign(mem, el, _c(0))
