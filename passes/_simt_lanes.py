"""Thread loops that vectorize: the SIMT-to-CPU pass's lane-level rewrites.

A CPU thread loop vectorizes when the thread id is its innermost induction variable
and the accesses are contiguous across threads. Two GPU idioms defeat that, and are
rewritten here:

* **Per-thread strided loops** (``for j in range(tid, n, BLOCK)``, grid-stride loops):
  left alone, such a loop becomes the innermost loop of the thread loop, scalar and
  strided. :class:`StridedLoopInterchange` turns ``for j = U + t; j < ub; j += s``
  (``t`` the x thread id, ``U``, ``ub``, ``s`` block-uniform; the start may be any
  sum of ``t`` and uniform terms, ``bid * B + t + 1``) into a block-level
  loop ``for b = U; b < ub; b += s`` whose body runs ``j = b + t`` for the threads
  with ``j < ub``, prefetching rows ahead where that pays (:mod:`._simt_prefetch`);
  the loop's per-thread state lives in per-thread slots. A 2-D grid-stride nest (a
  y-strided loop holding only an x-strided loop and pure ops, neither carrying values)
  becomes a loop over row steps whose row guard moves into the x loop, which then
  becomes a loop over column steps in turn (:func:`_sink_guard`). Iteration
  ``k`` of thread ``t`` is iteration ``k`` of the new loop (``t >= 0``), so every
  thread does the same work in the same order; only the interleaving of threads
  changes, which no race-free kernel can observe (threads of a block between two
  barriers may run in any order on a GPU too).
* **Lane guards** (``if tid < s:`` in a tree reduction, ``if tid == 0:``, the bounds
  guard ``if block_idx.x * block_dim.x + tid < n:``): a thread loop whose segment ends
  in such an ``scf.if`` runs only over the threads that pass it (:func:`lane_range`),
  instead of testing every thread. The condition may be a conjunction (``arith.andi``
  or the front end's short-circuit ``and``) of bounds on ``tid + offset``, on
  ``(tid + offset) * K + c`` (a thread walking its own K-element chunk: ``base = 4 * i;
  if base + 3 < n:``; the whole chunks then load as contiguous vectors) and of tests
  the same along the x loop (``row < m``), which the ``scf.if`` keeps. The guard may
  also test the linear thread id ``x + block_dim.x * (y + block_dim.y * z)``
  (``fx.block_reduce``): its part beyond ``x`` does not change along the x loop, so the
  x range is computed in the y loop, from that loop's thread ids. Conditions that do
  not end their segment split the loop instead (:mod:`._simt_split`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import mlir.ir as ir
from mlir.dialects import arith, llvm, scf

from ._simt_ir import SYNC_OPS, dimension_of, int_constant, is_pure, may_trap, strip_casts
from ._simt_prefetch import RowPrefetch
from .ir import ancestor_in_block, block_ops, defining_op, op_of, terminator, walk

#: Marks an ``scf.for`` the thread loops go inside of, like a loop holding a barrier.
LEVEL_ATTR = "flydsl.thread_level"


def is_thread_x(value) -> bool:
    """``value`` is the x thread id, possibly cast to another integer type."""
    return thread_dim(defining_op(strip_casts(value))) == "x"


def split_thread_x(value, is_uniform: Callable, is_x: Callable = is_thread_x
                   ) -> Optional[tuple]:
    """``(t, u)`` when ``value`` is ``t + u`` with ``t`` the x thread id (maybe cast;
    ``is_x`` says what is one) and ``u`` block-uniform (None when there is no ``u``),
    else None."""
    if is_x(value):
        return value, None
    op = defining_op(value)
    if op is None or op.name != "arith.addi":
        return None
    a, b = op.operands
    if is_x(a) and is_uniform(b):
        return a, b
    if is_x(b) and is_uniform(a):
        return b, a
    return None


def split_start(value, is_uniform: Callable, dim: str = "x", depth: int = 0
                ) -> Optional[tuple]:
    """``(t, terms)`` when ``value`` is a sum (``arith.addi``, nested) of the ``dim``
    thread id ``t`` and block-uniform ``terms``: a strided loop's start such as
    ``bid * B + tid`` or ``bid * B + tid + 1``; else None."""
    if thread_dim(defining_op(strip_casts(value))) == dim:
        return value, []
    op = defining_op(value)
    if op is None or op.name != "arith.addi" or depth > 8:
        return None
    a, b = op.operands
    for rest, term in ((a, b), (b, a)):
        if is_uniform(term):
            found = split_start(rest, is_uniform, dim, depth + 1)
            if found is not None:
                return found[0], found[1] + [term]
    return None


def _row_nest(op) -> Optional[ir.Operation]:
    """The x-strided loop of a y-strided loop ``op`` that holds nothing else but pure
    ops that cannot trap (a 2-D grid-stride nest ``for i in range(by * BY + ty, m,
    ...): for j in range(bx * BX + tx, n, ...)``), neither loop carrying values; else
    None."""
    if len(op.regions[0].blocks[0].arguments) != 1 or len(op.results):
        return None
    inner = None
    for o in block_ops(op.regions[0].blocks[0]):
        if o.name == "scf.for" and split_start(o.operands[0], _anything) is not None:
            if inner is not None or len(o.results):
                return None
            inner = o
        elif not (is_pure(o) or thread_dim(o) is not None) or may_trap(o):
            return None
    return inner


def thread_dim(op) -> Optional[str]:
    """"x", "y" or "z" for a ``gpu.thread_id`` op, else None."""
    if op is None or op.name != "gpu.thread_id":
        return None
    return dimension_of(op)


def x_invariant(value, is_uniform: Callable) -> bool:
    """``value`` is computed by pure ops from block-uniform values and the y and z
    thread ids only: the same for every thread of one x loop."""
    if is_uniform(value):
        return True
    op = defining_op(value)
    if op is None:
        return False
    dim = thread_dim(op)
    if dim is not None:
        return dim != "x"
    return is_pure(op) and all(x_invariant(v, is_uniform) for v in op.operands)


def _anything(value) -> bool:
    return True   # before the uniformity analysis: the shape of the bound only


def _nsw() -> ir.Attribute:
    return ir.Attribute.parse("#arith.overflow<nsw>")


class StridedLoopInterchange:
    """Rewrites a kernel's per-thread strided loops (module docstring).

    ``lowering`` is the pass's ``_KernelLowering``: its per-thread slots, the
    uniformity analysis and the kernel's outermost loop.
    """

    def __init__(self, lowering):
        self.k = lowering

    def run(self) -> None:
        # Rounds: a 2-D nest's x loop is a candidate once its y loop is a block level.
        rejected: list = []
        while self._round(rejected):
            pass

    def _round(self, rejected: list) -> bool:
        """Rewrite the outermost candidates; False when none was left."""
        k = self.k
        marked = []
        for op in self._candidates():
            if op in rejected:
                continue
            op.attributes[LEVEL_ATTR] = ir.UnitAttr.get()
            marked.append(op)
        if not marked:
            return False
        # A marked loop is a block level only if all its ancestors are block-uniform
        # control flow; unmark the others until that holds for every one left.
        while True:
            uni = k._analyze()
            bad = [op for op in marked if not self._legal(op, uni)]
            if not bad:
                break
            for op in bad:
                del op.attributes[LEVEL_ATTR]
                marked.remove(op)
                rejected.append(op)
        for op in marked:
            self._rewrite(op, uni)
        return bool(marked)

    def _candidates(self) -> list:
        """Outermost ``scf.for``s whose lower bound is a sum of the x thread id and other
        terms, or of the y thread id when the loop is a 2-D nest's (:func:`_row_nest`),
        and which hold no barrier (their bounds are checked once the analysis runs)."""
        found = []

        def visit(block):
            for op in block_ops(block):
                if (op.name == "scf.for" and "unsignedCmp" not in op.attributes
                        and (split_start(op.operands[0], _anything)
                             or (split_start(op.operands[0], _anything, "y")
                                 and _row_nest(op) is not None))
                        and not walk(op, lambda o: o.name in SYNC_OPS)):
                    found.append(op)
                    continue
                for region in op.regions:
                    for blk in region.blocks:
                        visit(blk)
        visit(self.k.body)
        return found

    def _legal(self, op, uni) -> bool:
        lb, ub, step = list(op.operands)[:3]
        carried = list(op.regions[0].blocks[0].arguments)[1:]
        if any(isinstance(a.type, ir.MemRefType) for a in carried):
            return False   # per-thread slots hold scalars
        if not (uni.is_uniform(ub) and uni.is_uniform(step)
                and (split_start(lb, uni.is_uniform) is not None
                     or split_start(lb, uni.is_uniform, "y") is not None)):
            return False
        p = op.parent
        while p is not None and p != self.k.block_loop:
            if not uni.uniform_control(p):
                return False
            p = p.parent
        return True

    def _rewrite(self, op, uni) -> None:
        """``op`` becomes a marked block-uniform loop over ``b`` guarding ``j = b + t``."""
        k = self.k
        lb, ub, step = list(op.operands)[:3]
        inits = list(op.operands)[3:]
        split = split_start(lb, uni.is_uniform)
        nest = None
        if split is None:    # a y loop over an x loop (_row_nest)
            split, nest = split_start(lb, uni.is_uniform, "y"), _row_nest(op)
        t, terms = split
        body = op.regions[0].blocks[0]
        iv, carried = body.arguments[0], list(body.arguments)[1:]
        yld = terminator(body)
        prefetch = RowPrefetch(op, iv, uni.is_uniform) if nest is None else RowPrefetch.none()
        with ir.InsertionPoint(op), op.location:
            # the row start: the start's uniform terms (added again: `(a + t) + c` is
            # `(a + c) + t` in wrapping arithmetic)
            u = terms[0] if terms else arith.ConstantOp(lb.type, 0).result
            for term in terms[1:]:
                u = arith.AddIOp(u, term).result
            slots = [k.slot(a.type) for a in carried]
            for init, slot in zip(inits, slots):
                k.store_slot(init, slot)
            if prefetch.loads:
                prefetch.plan(k.bdim["x"], step)
            loop = op_of(scf.ForOp(u, ub, step))
            loop.attributes[LEVEL_ATTR] = ir.UnitAttr.get()
        del op.attributes[LEVEL_ATTR]
        new_body = loop.regions[0].blocks[0]
        with ir.InsertionPoint(new_body), op.location:
            if prefetch.loads:   # rows ahead, while this one is read (._simt_prefetch)
                prefetch.emit(new_body.arguments[0])
            j = arith.AddIOp(new_body.arguments[0], t, overflowFlags=_nsw()).result
            inside = arith.cmpi(arith.CmpIPredicate.slt, j, ub)
            guard = op_of(scf.IfOp(inside))
            scf.YieldOp([])
        guard_body = guard.regions[0].blocks[0]
        with ir.InsertionPoint(guard_body), op.location:
            guard_end = op_of(scf.YieldOp([]))
        iv.replace_all_uses_with(j)
        # The next values: loaded (for values carried unchanged or swapped) before
        # any store, so every read of a slot sees this iteration's old value.
        yielded = list(yld.operands)
        with ir.InsertionPoint(yld), yld.location:
            nexts = [k.load_slot(slots[v.arg_number - 1], remat=False)
                     if isinstance(v, ir.BlockArgument) and v.owner == body else v
                     for v in yielded]
            for value, slot in zip(nexts, slots):
                k.store_slot(value, slot)
        for arg, slot in zip(carried, slots):
            k._replace_uses_with_loads(arg, slot, skip=lambda o, n: o == yld, remat=False)
        for result, slot in zip(op.results, slots):
            k._replace_uses_with_loads(result, slot)
        for inner in block_ops(body):
            inner.move_before(guard_end)
        op.erase()
        if nest is not None:
            _sink_guard(guard, nest)


def _sink_guard(guard, loop) -> None:
    """``if c: <pure ops>; for ...: body`` (a y row's guard over its x loop) becomes
    ``<pure ops>; for ...: if c: body``: the x loop is then at the block level, and a
    thread whose row is out of range runs its iterations doing nothing, as it ran none
    (the loop carries no values; the pure ops cannot trap)."""
    for o in block_ops(guard.regions[0].blocks[0]):
        o.move_before(guard)
    body = loop.regions[0].blocks[0]
    end = terminator(body)
    with ir.InsertionPoint(end), loop.location:
        inner = op_of(scf.IfOp(guard.operands[0]))
    with ir.InsertionPoint(inner.regions[0].blocks[0]), loop.location:
        inner_end = op_of(scf.YieldOp([]))
    for o in block_ops(body):
        if o != inner:
            o.move_before(inner_end)
    guard.erase()


# -- lane guards -------------------------------------------------------------------

#: ``arith.cmpi`` predicates in the order of their integer values.
_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
_SWAPPED = {"slt": "sgt", "sle": "sge", "ult": "ugt", "ule": "uge", "eq": "eq",
            "sgt": "slt", "sge": "sle", "ugt": "ult", "uge": "ule"}


class LaneTerm(NamedTuple):
    """A conjunct ``(tid_x + offset) * scale + addend <pred> bound`` of a lane guard
    (``offset``, ``addend`` None: 0; ``scale`` a positive constant, 1 but for a thread
    that handles its own chunk: ``base = 4 * i; if base + 3 < n:``)."""

    pred: str
    offset: Optional[ir.Value]
    bound: ir.Value
    scale: int = 1
    addend: Optional[ir.Value] = None


@dataclass(eq=False)
class LaneGuard:
    """A segment's closing ``scf.if`` whose condition bounds the x thread id.

    ``terms``: the conjuncts (:class:`LaneTerm`), each giving a range of x thread ids;
    ``rest``: the conjuncts the same for every thread of one x loop (``row < m`` in a
    2D kernel), which the ``scf.if`` keeps testing."""

    op: ir.Operation
    terms: list
    rest: list
    ands: list      # the short-circuit ``and``s of its block the condition goes through

    @property
    def offsets(self) -> list:
        return [term.offset for term in self.terms]

    def strip(self) -> None:
        """Once the x loop runs over :func:`lane_range`: inline the guarded ops, or
        leave the ``scf.if`` testing ``rest`` only (loop-invariant: LLVM hoists it)."""
        for op in self.ands:   # each in place, so any order will do
            speculate_and(op)
        if not self.rest:
            take_branch(self.op, 0)
            return
        with ir.InsertionPoint(self.op), self.op.location:
            self.op.operands[0] = all_of(self.rest)


def lane_guard(ops: list, is_uniform: Callable, offsets: bool = True) -> Optional[LaneGuard]:
    """The segment ``ops`` as a :class:`LaneGuard`: an ``scf.if`` without results or
    else branch, last in the segment, whose condition is a conjunction (``arith.andi``)
    of compares of ``tid_x + offset`` with a uniform bound (``<``, ``<=``, ``==``,
    ``>``, ``>=``; at least one) and of x-invariant values; the ops before it are pure
    (or the thread ids, or ``llvm.intr.assume``) and used only inside the segment.
    ``offset`` is uniform or :func:`x_invariant`; with ``offsets`` False (debug mode,
    where every thread must test what it tests on a GPU, wrapped index included) there
    is none. Short-circuit ``and``s of the segment are speculated by
    :meth:`LaneGuard.strip` when their ops cannot trap. Else None."""
    if not ops:
        return None
    guard = ops[-1]
    if guard.name != "scf.if" or len(guard.results) or _has_else(guard):
        return None
    members = set(ops)
    for op in ops[:-1]:
        # also the thread id (pure, but not a block value), the front end's
        # llvm.intr.assume (a fact that stays true for the threads that pass) and its
        # short-circuit `and` (an scf.if yielding a pure condition or false)
        if not (is_pure(op) or thread_dim(op) is not None or op.name == "llvm.intr.assume"
                or short_circuit_and(op)):
            return None
        for r in op.results:
            for use in r.uses:
                if ancestor_in_block(op_of(use.owner), guard.block) not in members:
                    return None

    def holder(op):   # the segment's op holding ``op``
        top = ancestor_in_block(op, guard.block)
        return top if top in members else None

    def compare(cond):
        term = lane_compare(cond, is_uniform, lambda v: x_invariant(v, is_uniform))
        if term is not None and not offsets and (term.offset is not None or term.scale != 1
                                                 or term.addend is not None):
            return None   # (debug mode: may wrap, each thread tests)
        return term
    return guard_on_lanes(guard, holder, lambda v: x_invariant(v, is_uniform), compare)


def guard_on_lanes(op, holder: Callable, invariant: Callable, compare: Callable
                   ) -> Optional[LaneGuard]:
    """``op`` (an ``scf.if``) as a :class:`LaneGuard` when each conjunct of its
    condition (:func:`conjuncts` with ``holder``) is ``invariant`` along the x loop or
    a term that ``compare`` makes of it, and at least one is a term; else None."""
    terms, rest, ands = [], [], []
    for cond in conjuncts(op.operands[0], holder, ands):
        if invariant(cond):
            rest.append(cond)
            continue
        term = compare(cond)
        if term is None:
            return None
        terms.append(term)
    return LaneGuard(op, terms, rest, ands) if terms else None


def conjuncts(cond, holder: Callable, expanded: Optional[list] = None) -> list:
    """``cond``'s conjuncts, left to right, through ``arith.andi`` and the short-circuit
    ``and``s that a rewrite will speculate: those ``holder(op)`` finds a top-level op
    for (the op itself, or the ``and`` it is nested in). Any other, hoisted or computed
    before a barrier, is one conjunct. ``expanded`` collects the top-level ones."""
    op = defining_op(cond)
    if op is not None and op.name == "arith.andi":
        return conjuncts(op.operands[0], holder, expanded) \
            + conjuncts(op.operands[1], holder, expanded)
    if op is not None and op.name == "arith.select" and _is_false(op.operands[2]):
        return conjuncts(op.operands[0], holder, expanded) \
            + conjuncts(op.operands[1], holder, expanded)   # all_of's select(a, b, false)
    if op is not None and short_circuit_and(op) and holder(op) is not None:
        if expanded is not None and holder(op) == op and op not in expanded:
            expanded.append(op)   # (once: a condition may use it twice)
        then_yield = terminator(op.regions[0].blocks[0])
        return conjuncts(op.operands[0], holder, expanded) \
            + conjuncts(then_yield.operands[0], holder, expanded)
    return [cond]


def _is_false(value) -> bool:
    op = defining_op(value)
    return op is not None and op.name == "arith.constant" and str(value.type) == "i1" \
        and ir.IntegerAttr(op.attributes["value"]).value == 0


def all_of(conds: list):
    """``c0 and c1 and ...`` at the current insertion point, as ``arith.select`` so
    that a later conjunct speculated where an earlier one is false (a shift by too
    much: poison) does not make the whole condition poison."""
    out = conds[0]
    for c in conds[1:]:
        out = arith.select(out, c, arith.ConstantOp(out.type, 0).result)
    return out


def short_circuit_and(op) -> bool:
    """``op`` is ``scf.if %a -> (i1) { pure ops; yield %b } else { yield false }``
    (``a and b`` as the front end spells it) whose ops cannot trap."""
    if op.name != "scf.if" or len(op.results) != 1 or len(op.regions[1].blocks) == 0:
        return False
    if str(op.results[0].type) != "i1":
        return False
    then_ops = block_ops(op.regions[0].blocks[0])
    if not all((is_pure(o) and not may_trap(o)) or short_circuit_and(o) for o in then_ops):
        return False   # a and (b and c) nests in the then branch
    else_ops = block_ops(op.regions[1].blocks[0])
    no = terminator(op.regions[1].blocks[0]).operands[0]
    return _is_false(no) and all(o == defining_op(no) for o in else_ops)


def speculate_and(op) -> None:
    """A :func:`short_circuit_and` becomes :func:`all_of` its two conditions: its ops
    run before it."""
    body = op.regions[0].blocks[0]
    for inner in block_ops(body):
        if inner.name == "scf.if":
            speculate_and(inner)
    yielded = terminator(body).operands[0]
    for inner in block_ops(body):
        inner.move_before(op)
    with ir.InsertionPoint(op), op.location:
        both = all_of([op.operands[0], yielded])
    op.results[0].replace_all_uses_with(both)
    op.erase()


def lane_compare(cond, is_uniform: Callable, offset_ok: Callable,
                 is_x: Callable = is_thread_x) -> Optional[LaneTerm]:
    """The :class:`LaneTerm` ``cond`` is: ``tid_x + offset <pred> bound`` (``bound``
    uniform, ``offset`` passing ``offset_ok``), or, compared signed in at most 32 bits,
    ``(tid_x + offset) * K + addend <pred> bound`` (``K`` a positive constant, ``addend``
    uniform; not ``==``), else None."""
    cmp = defining_op(cond)
    if cmp is None or cmp.name != "arith.cmpi":
        return None
    pred = _PREDICATES[ir.IntegerAttr(cmp.attributes["predicate"]).value]
    lhs, rhs = cmp.operands
    if not is_uniform(rhs):
        lhs, rhs, pred = rhs, lhs, _SWAPPED.get(pred)
        if not is_uniform(rhs):
            return None
    if pred not in _RANGES:
        return None
    side = split_thread_x(lhs, offset_ok, is_x)
    if side is not None:
        if pred.startswith("u") and side[1] is not None:
            return None    # tid + u compared unsigned: wraps differently
        return LaneTerm(pred, side[1], rhs)
    if pred not in _SCALED_PREDICATES or _bits(lhs.type) > 32:
        return None
    scaled = _split_scaled(lhs, is_uniform, offset_ok, is_x)
    return None if scaled is None else LaneTerm(pred, scaled[0], rhs, *scaled[1:])


#: The predicates of a scaled term: ``K * v + c < n`` is ``v < ceil((n - c) / K)``.
_SCALED_PREDICATES = ("slt", "sle", "sgt", "sge")


def _split_scaled(value, is_uniform: Callable, offset_ok: Callable, is_x: Callable
                  ) -> Optional[tuple]:
    """``(offset, K, addend)`` when ``value`` is ``(t + offset) * K + addend`` (``t``
    the x thread id, ``K`` > 1 a constant, ``offset`` and ``addend`` maybe absent),
    else None."""
    addend = None
    op = defining_op(value)
    if op is not None and op.name == "arith.addi":
        a, b = op.operands
        value, addend = (a, b) if is_uniform(b) else (b, a) if is_uniform(a) else (None, None)
        if value is None:
            return None
        op = defining_op(value)
    if op is None or op.name != "arith.muli":
        return None
    for v, k in (op.operands, reversed(list(op.operands))):
        scale = int_constant(k)
        side = split_thread_x(v, offset_ok, is_x)
        if scale is not None and scale > 1 and side is not None:
            return side[1], scale, addend
    return None


#: pred -> the passing x thread ids as (lo, hi) offsets from ``limit`` (None: 0 or the
#: block size), for ``tid <pred> limit`` with ``limit = bound - offset``.
_RANGES = {"slt": (None, 0), "ult": (None, 0), "sle": (None, 1), "ule": (None, 1),
           "eq": (0, 1), "sgt": (1, None), "ugt": (1, None), "sge": (0, None),
           "uge": (0, None)}


def lane_range(guard: LaneGuard, stop, const: Callable, offsets: Optional[list] = None,
               start=None) -> tuple:
    """``(lo, hi)``: the x thread ids in ``[start, stop)`` (``start`` None: 0) passing
    every term of ``guard``, built at the current insertion point as index values;
    ``lo`` is ``start`` and ``hi`` is ``stop`` themselves where nothing bounds that side.
    ``offsets`` replaces the terms' offsets (rebuilt per y loop step); a term with an
    offset always bounds ``hi`` (at the first thread whose index would wrap), and a
    scaled one both ``lo`` and ``hi`` (the threads whose ``K * v + addend`` fits).

    Exact for any bound: a difference that would overflow 64 bits saturates, and a
    64-bit unsigned bound past 2^63 is above every thread id. Threads whose
    ``tid + offset`` would wrap past the compare type's maximum are left out: on a GPU
    they test a wrapped, negative index, which they would then access out of bounds
    (debug mode keeps such guards per thread, see :func:`lane_guard`)."""
    idx = ir.IndexType.get()
    lt = arith.CmpIPredicate.slt

    def to_index(v, unsigned=False):
        if isinstance(v.type, ir.IndexType):
            return v
        # frozen: a bound or offset speculated past the test that guarded it (a shift
        # by too much) may be poison, and a loop bound must not be
        v = llvm.freeze(v)
        return (arith.index_castui if unsigned else arith.index_cast)(idx, v)

    def plus_one(v):   # v + 1 clamped to stop + 1: no overflow at the 64-bit maximum
        return arith.addi(arith.minsi(v, stop), const(1))

    start = const(0) if start is None else start
    los, his = [], []
    for term, offset in zip(guard.terms, offsets or guard.offsets):
        pred, bound = term.pred, term.bound
        bits = _bits(bound.type)
        off = None if offset is None else to_index(offset)
        limit = to_index(bound, unsigned=pred.startswith("u"))
        if pred.startswith("u") and bits >= 64:
            limit = arith.select(arith.cmpi(lt, limit, const(0)), const(_MAX64), limit)
        if term.scale != 1:
            # K * v + c <pred> n as v <pred> limit (exact in 64 bits: at most 32-bit
            # operands), for the v whose K * v + c does not wrap
            c = const(0) if term.addend is None else to_index(term.addend)
            ceil = pred in ("slt", "sge")
            limit = _div_by(arith.subi(limit, c), term.scale, ceil, const)
            fits_lo = _div_by(arith.subi(const(-2 ** (bits - 1)), c), term.scale, True, const)
            fits_hi = _div_by(arith.subi(const(2 ** (bits - 1) - 1), c), term.scale, False,
                              const)
            if off is not None:
                fits_lo, fits_hi = arith.subi(fits_lo, off), arith.subi(fits_hi, off)
            los.append(fits_lo)
            his.append(arith.addi(fits_hi, const(1)))
        if off is not None:
            limit = _saturating_sub(limit, off, const) if bits >= 64 else arith.subi(limit, off)
            # tid + off wraps from tid = max - off + 1 on (off > 0)
            wraps_at = arith.addi(arith.subi(const(2 ** (bits - 1) - 1), off), const(1))
            his.append(arith.select(arith.cmpi(arith.CmpIPredicate.sgt, off, const(0)),
                                    wraps_at, stop))
        first, last = _RANGES[pred]
        if first is not None:
            los.append(limit if first == 0 else plus_one(limit))
        if last is not None:
            his.append(limit if last == 0 else plus_one(limit))

    def clamp(v):
        return arith.minsi(arith.maxsi(v, start), stop)

    # Bounds that need no clamp stay the constant 0 and the block size (LLVM vectorizes
    # best from a known start); an empty range may have lo > hi: no iteration runs.
    lo = clamp(_fold(arith.maxsi, los)) if los else start
    hi = clamp(_fold(arith.minsi, his)) if his else stop
    return lo, hi


_MAX64 = 2 ** 63 - 1


def _bits(t: ir.Type) -> int:
    return 64 if isinstance(t, ir.IndexType) else ir.IntegerType(t).width


def _div_by(value, k: int, ceil: bool, const: Callable):
    """``value / k`` rounded down (or up, ``ceil``) for ``k`` > 0 and ``value`` well
    inside the index range (no overflow adding ``k``)."""
    if ceil:
        value = arith.addi(value, const(k - 1))
    neg = arith.cmpi(arith.CmpIPredicate.slt, value, const(0))
    value = arith.subi(value, arith.select(neg, const(k - 1), const(0)))
    return arith.divsi(value, const(k))


def _saturating_sub(a, b, const: Callable):
    """``a - b`` in index, saturating at the 64-bit limits instead of wrapping."""
    lt = arith.CmpIPredicate.slt
    d = arith.subi(a, b)
    # overflow: a and b differ in sign, and so do a and d
    wrapped = arith.cmpi(lt, arith.andi(arith.xori(a, b), arith.xori(a, d)), const(0))
    limit = arith.select(arith.cmpi(lt, a, const(0)), const(-_MAX64 - 1), const(_MAX64))
    return arith.select(wrapped, limit, d)


def _fold(op: Callable, values: list):
    out = values[0]
    for v in values[1:]:
        out = op(out, v)
    return out


def take_branch(op, k: int) -> None:
    """Replace the ``scf.if`` ``op`` by its then (``k`` 0) or else (1) branch: its ops
    run in its place and its results are what that branch yields."""
    region = op.regions[k]
    if len(region.blocks):
        blk = region.blocks[0]
        yielded = list(terminator(blk).operands)
        for inner in block_ops(blk):
            inner.move_before(op)
        for result, value in zip(op.results, yielded):
            result.replace_all_uses_with(value)
    op.erase()


def inline_regions(op) -> None:
    """Move the ops of ``op``'s regions (an ``scf.if`` whose branches no longer need
    it, terminators aside) before it, in order, and erase it."""
    for region in op.regions:
        for blk in region.blocks:
            for inner in block_ops(blk):
                inner.move_before(op)
    op.erase()


def _has_else(op) -> bool:
    region = op.regions[1]
    return len(region.blocks) > 0 and len(block_ops(region.blocks[0])) > 0

