"""Shared-memory race checks for the SIMT-to-CPU pass (``CompileOptions.debug`` or
``CompileOptions.racecheck``), like compute-sanitizer's racecheck.

Two accesses of one shared-memory element by two threads of a block race when
no barrier lies between them and one of them is a store (atomics of several
threads excepted; an atomic and a plain access race).
The CPU runs the threads of a block one after the other between barriers, so
a race shows as a cross-thread pair inside one *epoch*: the stretch of a
block's run between two barriers.  Each call of a kernel allocates one
``memref<?xi64>`` *shadow*:

* :data:`CONTEXT` words first: the epoch (bumped when a block starts and where
  each barrier was, the barriers of warp collectives too: a conservative
  choice, it can only hide races, never invent them), the block's ids and the
  block's x/y dims, for the reports, where the per-thread words start and the
  block's first epoch (a pending write of an earlier epoch is another block's);
* when the kernel issues ``cp.async`` or LDS DMA copies, :data:`_PER_THREAD`
  words per thread: its issued (committed) copies and the ones its waits completed;
* then, for each shared buffer, :data:`WORDS` words per element of it:
  ``epoch << 32 | thread`` of its last store (:data:`ATOMIC` set for an atomic),
  ``epoch << 32 | thread`` of the first thread that loaded it in the epoch, with
  :data:`SEVERAL` set once another thread loaded it too, and its *async word*:
  the pending write of an asynchronous copy, if any (an mbarrier's element keeps
  there the epochs at which waits saw its phases complete).

Each ``memref.load``/``memref.store``, ``vector.load``/``vector.store`` and
``memref.atomic_rmw``/``generic_atomic_rmw`` of a shared buffer in a thread loop
computes its first element's offset in the buffer (by address, so views and
``memref.view``s of the dynamic shared buffer work) and calls the out-of-line helper
:data:`CHECK_FUNC` for the elements it covers (a kernel has thousands of such
accesses once its copies and MMAs are unrolled): a load of an element another thread
stored in this epoch, a store to one another thread stored or loaded in it, an atomic
where another thread loaded or plainly stored it, or any access to an element whose
asynchronous write is still pending, is counted in the error record's
:data:`~flydsl.runtime.debug_checks.RACES` slot and reported through the bounds
checks' helper (the first failure of a launch is kept).  A site's ``op`` is
``"race"``; the record's ``DIM`` slot says what the other thread did, ``INDEX``
the element's offset in the array.  Accesses are not changed.  ``memref.copy``
and masked vector accesses are not checked.

Asynchronous copies.  The CPU runs every copy to shared memory at once, so the
asynchronous writers are vector or scalar stores here: ``BufferCopyLDS*`` (LDS DMA),
``cp.async``, ``stmatrix`` and TMA's copies are checked like stores, and
``ds_read``, ``ldmatrix`` and wgmma's shared operands like loads.  In race-check
builds the front end marks the stores of ``cp.async``, LDS DMA and TMA loads and
their waits (:data:`WRITE`, :data:`EVENT`; ``flydsl/compiler/frontend/async_marks.py``),
and such a write stays *pending* until it is complete for the accessing thread:

* ``cp.async``: its group is the one its thread commits next; ``wait_group N``
  completes all but the thread's ``N`` newest committed groups;
* LDS DMA: each copy call is numbered per thread; ``s_waitcnt vmcnt(N)``
  completes all but its ``N`` newest (only DMAs are counted: other vector memory
  ops of the thread between them are not, see below);
* TMA load: tagged with its mbarrier and the parity of the phase in progress; an
  mbarrier wait (or try_wait) that sees that phase completed completes it.

A cp.async/DMA write is complete for its own thread after the covering wait, for
another thread once such a wait lies before the last barrier (a wait of the same
epoch does not count); a TMA write once a wait of a later epoch saw its phase done.
Only a user's barrier ends an epoch: the barriers the CPU adds inside its emulations
(warp shuffles and reductions, broadcasts of loaded loop bounds, the MMA/wgmma
fragment exchange through flydsl's scratch) order only their own scratch, where a
GPU exchanges registers, so they must not hide a missing barrier between the
kernel's accesses (:func:`internal_barriers`).  flydsl's scratch arrays (named with
:data:`INTERNAL_PREFIX`) are not checked.  Not modelled: a kernel that relies on
other vector memory ops (plain buffer loads) issued after its LDS DMAs to retire
them under ``vmcnt(N > 0)`` is reported (those ops are not counted); TMA stores and
``cp.async.bulk`` reading shared memory until their ``wait_group.read``;
``fx.syncwarp``'s barrier still starts an epoch (it may hide a race between warps).
"""
from __future__ import annotations

from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, func, memref, scf

from flydsl.runtime import debug_checks as rec

from ._simt_bounds import BoundsChecks, count_failure, report, root_memref
from ._simt_collectives import WARP_SYNC_ATTR
from .ir import block_ops, defining_op, walk

#: The name prefix of flydsl's own shared scratch arrays (MMA and collective
#: emulations): neither race-checked nor profiled.
INTERNAL_PREFIX = "."

#: The out-of-line check of one access (see :func:`_declare_check_func`).
CHECK_FUNC = "__flydsl_race_check"
#: The flag of a load word: several threads loaded the element.
SEVERAL = 1 << 31
#: The thread field of a word (and, as a thread, "unknown").
_THREAD = SEVERAL - 1
#: The front end's marks of asynchronous copies (race-check builds on the CPU only;
#: ``flydsl/compiler/frontend/async_marks.py`` places them).
WRITE = "flydsl.async_write"    #: on a store of an asynchronous copy: its family
ID = "flydsl.async_id"          #: on a TMA's stores and its ``tma.issue`` mark
EVENT = "flydsl.async_event"    #: on an event mark: what it is
COUNT = "flydsl.async_n"        #: on a wait mark: the N of wait_group N / vmcnt(N)
#: The flag of a store word: the store was an atomic (several threads' atomics: the
#: thread field is :data:`_THREAD`, unknown).
ATOMIC = 1 << 31
#: Shadow words before the buffers' and what they hold.
CONTEXT = 9
_EPOCH, _BLOCK_LINEAR, _BLOCK, _BDIM = 0, 1, 2, 5   # _BLOCK: x, y, z; _BDIM: x, y
#: word 7: the first word of the per-thread async-copy counters (0: the kernel has none)
_THREADS = 7
#: word 8: the block's first epoch (an older pending copy is another block's)
_BLOCK_EPOCH = 8
#: Shadow words per element: its store word, its load word, its async word.
WORDS = 3
#: Per-thread words: for cp.async groups, then for LDS DMAs (vmcnt): issued/committed
#: count, the count completed by the thread's waits, the epoch of its last wait, the
#: count completed by its waits of earlier epochs.
_PER_THREAD, _COUNT, _DONE, _WAIT_EPOCH, _DONE_BEFORE = 8, 0, 1, 2, 3
#: An async word's family (bits 62-63): a pending cp.async / LDS DMA write holds the
#: group or DMA number in its low bits, a TMA write the parity of the mbarrier's phase
#: (bit 61) and the shadow word of the mbarrier's async word (low 40 bits), where the
#: epochs of the last observed completion of each parity (:data:`_EPOCH_BITS` each, family
#: bits 0) are kept.
CP_ASYNC, LDS_DMA, TMA = 1, 2, 3
_FAMILY_SHIFT, _PARITY_SHIFT, _SEQ = 62, 61, (1 << 61) - 1
_EPOCH_BITS = 31
_EPOCH_MASK = (1 << _EPOCH_BITS) - 1
_FAMILY = {"cp.async": CP_ASYNC, "lds_dma": LDS_DMA, "tma": TMA}
#: access modes passed to :data:`CHECK_FUNC`
_LOAD, _STORE, _ASYNC_STORE, _ATOMIC = 0, 1, 2, 3
#: op name -> (access, index of the memref operand, index of the first index operand)
_ACCESS = {"memref.load": ("load", 0, 1), "memref.store": ("store", 1, 2),
           "vector.load": ("load", 0, 1), "vector.store": ("store", 1, 2)}
#: shared-memory atomics: (index of the memref operand, of the first index operand)
_ATOMICS = {"memref.atomic_rmw": (1, 2), "memref.generic_atomic_rmw": (0, 1)}
#: The event helper (see :func:`_declare_event_func`) and its events' codes.
EVENT_FUNC = "__flydsl_race_event"
_EVENTS = {"cp.async.commit": 0, "cp.async.wait": 1, "lds_dma.issue": 2, "vmcnt.wait": 3,
           "mbarrier.wait": 4}


def _const(value: int, t: Optional[ir.Type] = None) -> ir.Value:
    if value >= 1 << 63:        # an i64 bit pattern, as the signed value
        value -= 1 << 64
    return arith.ConstantOp(t or ir.IndexType.get(), value).result


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


class RaceChecks:
    """The race checks of one kernel.

    ``shared``: root shared buffer -> the label a report names it by;
    ``alloca(type, dyn_sizes)`` allocates per call, before ``setup`` (the
    block loop), where the shadow is cleared; ``bdim``: the block's dims.
    """

    def __init__(self, checks: BoundsChecks, kernel: str, shared: dict,
                 alloca: Callable, setup: ir.Operation, bdim: dict):
        self.checks = checks
        self.kernel = kernel
        self.labels = shared
        #: the check's own buffers (the bounds checks leave them alone)
        self.internal: set = set()
        self.buffers: dict = {}     # root -> (its first shadow word, address, element bytes)
        self.internal_barriers: set = set()
        self.shadow = None
        scratch = {r for r, label in shared.items() if is_scratch(label)}
        roots = [r for r in shared if r not in scratch
                 and element_bytes(ir.MemRefType(r.type).element_type)]
        if not roots:
            return
        #: the CPU's own barriers: they start no epoch
        self.internal_barriers = internal_barriers(setup, set(roots), scratch)
        # the per-thread words, for cp.async groups and LDS DMAs (TMA needs none)
        counted = walk(setup, lambda o: (EVENT in o.attributes and ir.StringAttr(
            o.attributes[EVENT]).value not in ("tma.issue", "mbarrier.wait")) or (
            WRITE in o.attributes and ir.StringAttr(o.attributes[WRITE]).value != "tma"))
        with ir.InsertionPoint(setup), ir.Location.unknown():
            words = _const(CONTEXT)
            threads = None
            if counted:
                threads = words
                count = arith.muli(arith.muli(bdim["x"], bdim["y"]), bdim["z"])
                words = arith.addi(words, arith.muli(count, _const(_PER_THREAD)))
            for root in roots:
                self.buffers[root] = (words, memref.extract_aligned_pointer_as_index(root),
                                      element_bytes(ir.MemRefType(root.type).element_type))
                words = arith.addi(words, arith.muli(_element_count(root), _const(WORDS)))
            self.shadow = alloca(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i64()),
                                 [words])
            self.internal.add(self.shadow)
            clear = scf.ForOp(_const(0), words, _const(1))
            with ir.InsertionPoint(clear.body):
                memref.store(_const(0, _i64()), self.shadow, [clear.induction_variable])
                scf.YieldOp([])
            self._put(_BDIM, bdim["x"])
            self._put(_BDIM + 1, bdim["y"])
            if threads is not None:
                self._put(_THREADS, threads)

    @property
    def active(self) -> bool:
        return self.shadow is not None

    def _put(self, word: int, value: ir.Value) -> None:
        memref.store(arith.index_cast(_i64(), value), self.shadow, [_const(word)])

    # -- epochs ----------------------------------------------------------------
    def begin_block(self, after: ir.Operation, block_ids: list) -> None:
        """Start a new epoch where each block starts, ``after`` its ids are computed
        (``block_ids``: linear, x, y, z)."""
        if self.active:
            with ir.InsertionPoint.after(after), ir.Location.unknown():
                self._next_epoch()
                memref.store(memref.load(self.shadow, [_const(_EPOCH)]), self.shadow,
                             [_const(_BLOCK_EPOCH)])
                for k, v in enumerate(block_ids):
                    self._put(_BLOCK_LINEAR + k, v)

    def barrier(self, op) -> None:
        """Start a new epoch at the barrier ``op`` (before it), unless the CPU added
        ``op`` inside an emulation (:func:`internal_barriers`)."""
        if self.active and op not in self.internal_barriers:
            with ir.InsertionPoint(op), op.location:
                self._next_epoch()

    def _next_epoch(self) -> None:
        at = [_const(_EPOCH)]
        e = memref.load(self.shadow, at)
        memref.store(arith.addi(e, _const(1, _i64())), self.shadow, at)

    # -- accesses --------------------------------------------------------------
    def instrument(self, func_op, thread_ids: Callable, in_thread: Callable) -> int:
        """Check every shared load/store/atomic in ``func_op``'s thread loops, and follow
        the asynchronous copies' marks (:data:`EVENT`, :data:`WRITE`); return how many
        accesses are checked.

        ``thread_ids()``: the thread's x, y, z at the insertion point;
        ``in_thread(op)``: whether ``op`` runs per thread.
        """
        marks = walk(func_op, lambda o: EVENT in o.attributes)
        if not self.active:
            _erase_marks(marks)
            return 0
        tma_tags = self._events(marks, thread_ids, in_thread)
        count = 0
        for op in walk(func_op, lambda o: o.name in _ACCESS or o.name in _ATOMICS):
            operands = list(op.operands)
            if op.name in _ACCESS:
                kind, mem_at, idx_at = _ACCESS[op.name]
            else:
                kind, (mem_at, idx_at) = "atomic", _ATOMICS[op.name]
            root = root_memref(operands[mem_at])
            if root not in self.buffers or not in_thread(op):
                continue
            mode = {"load": _LOAD, "store": _STORE, "atomic": _ATOMIC}[kind]
            tag = 0
            family = ir.StringAttr(op.attributes[WRITE]).value if WRITE in op.attributes \
                else None
            if family is not None:
                tag = _FAMILY[family] << _FAMILY_SHIFT
                if family == "tma":
                    tag = tma_tags.get(ir.IntegerAttr(op.attributes[ID]).value)
                mode = _STORE if tag is None else _ASYNC_STORE
            shape = ir.MemRefType(root.type)
            static = shape.has_static_shape
            # the dynamic shared buffer is bytes: its elements are named by byte offset
            site = self.checks.add_site(
                op, self.kernel, "race", access=kind,
                shape=list(shape.shape) if static else None,
                unit="index" if static or self.buffers[root][2] > 1 else "byte",
                **self.labels[root])
            with ir.InsertionPoint(op), op.location:
                first, base, root_bytes = self.buffers[root]
                at = _element_offset(operands[mem_at], operands[idx_at:], base, root_bytes)
                if at is None:
                    continue
                _declare_check_func(self.checks)
                n = _covered(op, operands[mem_at], root_bytes)
                tag_value = tag if isinstance(tag, ir.Value) else _const(tag or 0, _i64())
                func.CallOp([], ir.FlatSymbolRefAttr.get(CHECK_FUNC),
                            [self.shadow, first, at, _const(n), *thread_ids(), _const(mode),
                             tag_value, _const(site)])
            count += 1
        _erase_marks([m for m in marks if m.name == "llvm.inline_asm"])
        return count

    def _events(self, marks: list, thread_ids: Callable, in_thread: Callable) -> dict:
        """Per-thread bookkeeping at each event mark; the tags of the TMA loads' writes
        (their issue marks' ids -> the i64 tag, at the issue)."""
        tags: dict = {}
        for op in marks:
            kind = ir.StringAttr(op.attributes[EVENT]).value
            if not in_thread(op):
                continue
            after, state = _past_guards(op) if op.name != "llvm.inline_asm" else (None, None)
            with ir.InsertionPoint(op) if after is None else ir.InsertionPoint.after(after), \
                    op.location:
                if kind in ("tma.issue", "mbarrier.wait"):
                    # the mbarrier's async word, and the phase bit its state shows
                    _, mem, *indices = list(op.operands)
                    root = root_memref(mem)
                    if root not in self.buffers:
                        continue
                    first, base, root_bytes = self.buffers[root]
                    at = _element_offset(mem, indices, base, root_bytes)
                    word = arith.addi(first, arith.addi(arith.muli(at, _const(WORDS)),
                                                        _const(2)))
                    phase = arith.shrui(state, _const(63, _i64()))
                    if kind == "tma.issue":
                        tags[ir.IntegerAttr(op.attributes[ID]).value] = arith.ori(
                            _const(TMA << _FAMILY_SHIFT, _i64()),
                            arith.ori(arith.shli(phase, _const(_PARITY_SHIFT, _i64())),
                                      arith.index_cast(_i64(), word)))
                        continue
                    extra = [word, phase]
                else:
                    extra = [_const(0), _const(0, _i64())]
                _declare_event_func(self.checks)
                n = ir.IntegerAttr(op.attributes[COUNT]).value if COUNT in op.attributes \
                    else 0
                func.CallOp([], ir.FlatSymbolRefAttr.get(EVENT_FUNC),
                            [self.shadow, _const(_EVENTS[kind]), _const(n), *thread_ids(),
                             *extra])
        return tags


def _past_guards(op) -> tuple:
    """The op after which ``op``'s result is available, and that value: ``op`` itself,
    or the bounds checks' ``scf.if`` around it that yields its result."""
    value = op.results[0]
    while True:
        uses = [u.owner for u in value.uses]
        parent = op.parent
        if len(uses) != 1 or uses[0].name != "scf.yield" or parent is None \
                or parent.name != "scf.if":
            return op, value
        at = [i for i, v in enumerate(uses[0].operands) if v == value][0]
        op, value = parent, parent.results[at]


def _erase_marks(marks: list) -> None:
    """Drop the event marks that only the checks use (the empty inline asm ones)."""
    for op in marks:
        if op.name == "llvm.inline_asm":
            op.erase()


def _element_offset(mem, indices, base, root_bytes) -> Optional[ir.Value]:
    """The accessed element's offset in its root buffer, in the root's elements
    (by address: ``mem`` may be any strided view of the root at address ``base``)."""
    address = byte_address(mem, indices)
    if address is None:
        return None
    return arith.divui(arith.subi(address, base), _const(root_bytes))


def byte_address(mem, indices) -> Optional[ir.Value]:
    """The address (an index value, in bytes) of the element of the memref ``mem``
    at ``indices``, built at the insertion point; None when its element type has no
    known size. ``mem`` may be any strided view (its offset and strides are read)."""
    size = element_bytes(ir.MemRefType(mem.type).element_type)
    if size is None:
        return None
    meta = memref.ExtractStridedMetadataOp(mem)
    rank = len(indices)
    offset = meta.results[1]
    for i, stride in zip(indices, list(meta.results)[2 + rank:2 + 2 * rank]):
        offset = arith.addi(offset, arith.muli(i, stride))
    return arith.addi(memref.extract_aligned_pointer_as_index(mem),
                      arith.muli(offset, _const(size)))


def _declare_func(checks: BoundsChecks, name: str, inputs: list) -> Optional[ir.Block]:
    """Declare the private helper ``name`` in ``checks``' module; its entry block to fill
    (None: already there)."""
    top = checks.top
    if any("sym_name" in o.attributes and ir.StringAttr(o.attributes["sym_name"]).value
           == name for o in top.operations):
        return None
    with ir.InsertionPoint.at_block_begin(top), ir.Location.unknown():
        f = func.FuncOp(name, (inputs, []), visibility="private")
        f.attributes["llvm.linkage"] = ir.Attribute.parse("#llvm.linkage<internal>")
        f.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
    return f.add_entry_block()


def _shadow_type() -> ir.Type:
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i64())


def _declare_check_func(checks: BoundsChecks) -> None:
    """Define the check helper :data:`CHECK_FUNC` in ``checks``' module (once)::

        (shadow, first word of the buffer, element, count, thread x, y, z, mode, tag, site)

    It checks the ``count`` elements from ``element`` on, updates their shadow words
    and reports a race (``mode``: load, store, async copy's store, atomic; ``tag``: an
    async store's family, a TMA's whole async word)."""
    index = ir.IndexType.get()
    entry = _declare_func(checks, CHECK_FUNC, [_shadow_type()] + [index] * 7 + [_i64(), index])
    if entry is None:
        return
    with ir.InsertionPoint(entry), ir.Location.unknown():
        shadow, first, elem, count, tx, ty, tz, mode, tag, site = entry.arguments
        me = _linear(shadow, tx, ty, tz)
        tag = _async_tag(shadow, me, mode, tag)
        each = scf.ForOp(elem, arith.addi(elem, count), _const(1))
        with ir.InsertionPoint(each.body):
            _check_body(shadow, first, each.induction_variable, tx, ty, tz, me, mode, tag,
                        site)
            scf.YieldOp([])
        func.ReturnOp([])


def _word(shadow, k) -> ir.Value:
    return memref.load(shadow, [k if isinstance(k, ir.Value) else _const(k)])


def _as_index(v) -> ir.Value:
    return arith.index_cast(ir.IndexType.get(), v)


def _eq(a, b) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.eq, a, b)


def _linear(shadow, tx, ty, tz) -> ir.Value:
    """The thread's linear id (an i64)."""
    bdx, bdy = _as_index(_word(shadow, _BDIM)), _as_index(_word(shadow, _BDIM + 1))
    return arith.index_cast(_i64(), arith.addi(tx, arith.muli(bdx, arith.addi(
        ty, arith.muli(bdy, tz)))))


def _counters(shadow, thread, family) -> ir.Value:
    """The first per-thread word of ``thread``'s (i64) counters of ``family`` (an i64:
    CP_ASYNC or LDS_DMA)."""
    i64 = _i64()
    at = arith.addi(arith.muli(thread, _const(_PER_THREAD, i64)),
                    arith.muli(arith.subi(family, _const(1, i64)), _const(4, i64)))
    return arith.addi(_as_index(_word(shadow, _THREADS)), _as_index(at))


def _async_tag(shadow, me, mode, tag) -> ir.Value:
    """An async store's word: a cp.async write is in the group its thread commits next,
    an LDS DMA write is its thread's last issued DMA; a TMA's ``tag`` is whole."""
    i64 = _i64()
    family = arith.shrui(tag, _const(_FAMILY_SHIFT, i64))
    counted = arith.andi(_eq(mode, _const(_ASYNC_STORE)),
                         arith.ori(_eq(family, _const(CP_ASYNC, i64)),
                                   _eq(family, _const(LDS_DMA, i64))))
    branch = scf.IfOp(counted, [i64], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        issued = _word(shadow, arith.addi(_counters(shadow, me, family), _const(_COUNT)))
        seq = arith.addi(issued, arith.extui(i64, _eq(family, _const(CP_ASYNC, i64))))
        scf.YieldOp([arith.ori(tag, seq)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([tag])
    return branch.results[0]


def _pending(shadow, stored, pend, me) -> ir.Value:
    """Whether the async write ``pend`` (an element's async word, nonzero), made by the
    thread of its store word ``stored``, is not yet complete for thread ``me`` now:
    its thread has not waited for it (before the last barrier, unless it is ``me``), or
    no mbarrier wait has seen a TMA's phase complete since it was issued."""
    i64 = _i64()
    family = arith.shrui(pend, _const(_FAMILY_SHIFT, i64))
    writer = arith.andi(stored, _const(_THREAD, i64))
    issued_at = arith.shrui(stored, _const(32, i64))
    is_tma = _eq(family, _const(TMA, i64))
    branch = scf.IfOp(is_tma, [ir.IntegerType.get_signless(1)], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        mword = _as_index(arith.andi(pend, _const((1 << 40) - 1, i64)))
        parity = arith.andi(arith.shrui(pend, _const(_PARITY_SHIFT, i64)), _const(1, i64))
        seen = arith.andi(arith.shrui(_word(shadow, mword),
                                      arith.muli(parity, _const(_EPOCH_BITS, i64))),
                          _const(_EPOCH_MASK, i64))
        scf.YieldOp([arith.cmpi(arith.CmpIPredicate.ule, seen, issued_at)])
    with ir.InsertionPoint(branch.else_block):
        at = _counters(shadow, writer, family)
        done, waited_at, done_before = (_word(shadow, arith.addi(at, _const(k)))
                                        for k in (_DONE, _WAIT_EPOCH, _DONE_BEFORE))
        # the writer's own later accesses see its waits in program order; another
        # thread sees those of epochs before this one
        seen = arith.select(arith.ori(_eq(writer, me), arith.cmpi(
            arith.CmpIPredicate.ult, waited_at, _word(shadow, _EPOCH))), done, done_before)
        seq = arith.andi(pend, _const(_SEQ, i64))
        scf.YieldOp([arith.cmpi(arith.CmpIPredicate.ugt, seq, seen)])
    return branch.results[0]


def _check_body(shadow, first, elem, tx, ty, tz, me, mode, tag, site) -> None:
    """The check helper's body: see the module docstring."""
    i64 = _i64()
    i1 = ir.IntegerType.get_signless(1)

    def thread(w):
        return arith.andi(w, _const(_THREAD, i64))

    epoch = arith.shli(_word(shadow, _EPOCH), _const(32, i64))

    def now(w):
        return _eq(arith.andi(w, _const(-(1 << 32), i64)), epoch)

    def flag(w, f):
        return arith.cmpi(arith.CmpIPredicate.ne, arith.andi(w, _const(f, i64)),
                          _const(0, i64))

    bdx, bdy = _as_index(_word(shadow, _BDIM)), _as_index(_word(shadow, _BDIM + 1))
    is_atomic = _eq(mode, _const(_ATOMIC))
    is_load = _eq(mode, _const(_LOAD))
    writes = arith.xori(is_load, _const(1, i1))
    write_at = arith.addi(first, arith.muli(elem, _const(WORDS)))
    read_at = arith.addi(write_at, _const(1))
    async_at = arith.addi(write_at, _const(2))
    stored = memref.load(shadow, [write_at])
    loaded = memref.load(shadow, [read_at])
    pend = memref.load(shadow, [async_at])
    # atomics of several threads do not race with each other
    both_atomic = arith.andi(is_atomic, flag(stored, ATOMIC))
    other_store = arith.andi(arith.andi(now(stored), arith.cmpi(
        arith.CmpIPredicate.ne, thread(stored), me)), arith.xori(both_atomic, _const(1, i1)))
    mine = _eq(thread(loaded), me)
    not_mine = arith.xori(mine, _const(1, i1))
    several = flag(loaded, SEVERAL)
    # a store races with another thread's store or load of this epoch; a load with a store
    other_load = arith.andi(writes, arith.andi(now(loaded), arith.ori(not_mine, several)))
    # any access races with an asynchronous copy's write not yet waited for
    has_pend = arith.andi(
        arith.cmpi(arith.CmpIPredicate.ne, arith.shrui(pend, _const(_FAMILY_SHIFT, i64)),
                   _const(0, i64)),
        arith.cmpi(arith.CmpIPredicate.uge, arith.shrui(stored, _const(32, i64)),
                   _word(shadow, _BLOCK_EPOCH)))
    check_pend = scf.IfOp(has_pend, [i1], has_else=True)
    with ir.InsertionPoint(check_pend.then_block):
        scf.YieldOp([_pending(shadow, stored, pend, me)])
    with ir.InsertionPoint(check_pend.else_block):
        scf.YieldOp([_const(0, i1)])
    pending = check_pend.results[0]
    race = arith.ori(pending, arith.ori(other_store, other_load))
    # the new words: a store's (an atomic's: the thread unknown once several stored),
    # or the load word (first loader; SEVERAL once another loads)
    again = arith.select(mine, loaded, arith.ori(loaded, _const(SEVERAL, i64)))
    load_word = arith.select(now(loaded), again, arith.ori(epoch, me))
    shared_atomic = arith.andi(arith.andi(both_atomic, now(stored)),
                               arith.cmpi(arith.CmpIPredicate.ne, thread(stored), me))
    atomic_word = arith.ori(arith.ori(epoch, _const(ATOMIC, i64)),
                            arith.select(shared_atomic, _const(_THREAD, i64), me))
    # an atomic after a plain store of this epoch keeps the plain one (the one that races
    # with other threads' atomics)
    plain_now = arith.andi(now(stored), arith.xori(flag(stored, ATOMIC), _const(1, i1)))
    store_word = arith.select(is_atomic, arith.select(plain_now, stored, atomic_word),
                              arith.ori(epoch, me))
    memref.store(arith.select(writes, store_word, stored), shadow, [write_at])
    memref.store(arith.select(is_load, load_word, loaded), shadow, [read_at])
    # a store ends a pending write (an atomic keeps the word: an mbarrier's epochs)
    new_pend = arith.select(_eq(mode, _const(_ASYNC_STORE)), tag, arith.select(
        _eq(mode, _const(_STORE)), _const(0, i64), pend))
    memref.store(new_pend, shadow, [async_at])
    found = scf.IfOp(race)
    with ir.InsertionPoint(found.then_block):
        first_loader = arith.select(not_mine, thread(loaded), _const(_THREAD, i64))
        other = arith.select(pending, thread(stored),
                             arith.select(other_store, thread(stored), first_loader))
        what = arith.select(pending, _const(rec.RACE_ASYNC), arith.select(
            other_store, arith.select(flag(stored, ATOMIC), _const(rec.RACE_ATOMIC),
                                      _const(rec.RACE_STORE)), _const(rec.RACE_LOAD)))
        block = [_as_index(_word(shadow, _BLOCK_LINEAR + k)) for k in range(4)]
        count_failure(rec.RACES)
        report(site, what, elem, _const(0), block + [tx, ty, tz],
               other=_thread_ids(other, bdx, bdy))
        scf.YieldOp([])


def _declare_event_func(checks: BoundsChecks) -> None:
    """Define the event helper :data:`EVENT_FUNC` (once)::

        (shadow, event, n, thread x, y, z, mbarrier's async word, phase bit)

    A commit or an LDS DMA's issue counts; a wait completes all but the last ``n``
    groups/DMAs of the thread (keeping what its waits of earlier epochs had completed);
    an mbarrier wait notes that the phase before the one its state shows is complete
    (this epoch)."""
    index = ir.IndexType.get()
    entry = _declare_func(checks, EVENT_FUNC, [_shadow_type()] + [index] * 6 + [_i64()])
    if entry is None:
        return
    i64 = _i64()
    with ir.InsertionPoint(entry), ir.Location.unknown():
        shadow, event, n, tx, ty, tz, mword, phase = entry.arguments
        epoch = _word(shadow, _EPOCH)
        is_barrier = _eq(event, _const(_EVENTS["mbarrier.wait"]))
        branch = scf.IfOp(is_barrier, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            # the completed phase's parity is the other one: its epoch (32 bits) is kept
            shift = arith.muli(arith.xori(phase, _const(1, i64)), _const(_EPOCH_BITS, i64))
            kept = arith.andi(_word(shadow, mword), arith.xori(
                arith.shli(_const(_EPOCH_MASK, i64), shift), _const(-1, i64)))
            now = arith.andi(epoch, _const(_EPOCH_MASK, i64))
            memref.store(arith.ori(kept, arith.shli(now, shift)), shadow, [mword])
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            me = _linear(shadow, tx, ty, tz)
            dma = arith.cmpi(arith.CmpIPredicate.uge, event, _const(_EVENTS["lds_dma.issue"]))
            family = arith.select(dma, _const(LDS_DMA, i64), _const(CP_ASYNC, i64))
            at = _counters(shadow, me, family)
            count_at = arith.addi(at, _const(_COUNT))
            count = _word(shadow, count_at)
            counts = arith.ori(
                _eq(event, _const(_EVENTS["cp.async.commit"])),
                _eq(event, _const(_EVENTS["lds_dma.issue"])))
            up = scf.IfOp(counts, [], has_else=True)
            with ir.InsertionPoint(up.then_block):
                memref.store(arith.addi(count, _const(1, i64)), shadow, [count_at])
                scf.YieldOp([])
            with ir.InsertionPoint(up.else_block):
                done_at, epoch_at, before_at = (arith.addi(at, _const(k)) for k in
                                                (_DONE, _WAIT_EPOCH, _DONE_BEFORE))
                done = _word(shadow, done_at)
                waited = arith.subi(count, arith.index_cast(i64, n))
                # done only grows (a wait for fewer pending copies may come later)
                new_done = arith.select(arith.cmpi(arith.CmpIPredicate.sgt, waited, done),
                                        waited, done)
                earlier = arith.cmpi(arith.CmpIPredicate.ne, _word(shadow, epoch_at), epoch)
                memref.store(arith.select(earlier, done, _word(shadow, before_at)), shadow,
                             [before_at])
                memref.store(epoch, shadow, [epoch_at])
                memref.store(new_done, shadow, [done_at])
                scf.YieldOp([])
            scf.YieldOp([])
        func.ReturnOp([])


def _thread_ids(thread, bdx, bdy) -> list:
    """x, y, z of the linear ``thread`` (i64); -1s for an unknown one (:data:`_THREAD`)."""
    lin = arith.index_cast(ir.IndexType.get(), thread)
    row = arith.divui(lin, bdx)
    xyz = (arith.remui(lin, bdx), arith.remui(row, bdy), arith.divui(row, bdy))
    unknown = arith.cmpi(arith.CmpIPredicate.eq, thread, _const(_THREAD, _i64()))
    return [arith.select(unknown, _const(-1), v) for v in xyz]


def _covered(op, mem, root_bytes: int) -> int:
    """How many elements of the root buffer (of ``root_bytes`` each) the access ``op``
    to the memref ``mem`` covers: 1 for a scalar access, a vector's bytes for a vector
    access (along the last index, contiguous: what ``vector.load``/``store`` lower to)."""
    if not op.name.startswith("vector."):
        return 1
    vtype = (op.results[0] if op.name == "vector.load" else op.operands[0]).type
    nbytes = element_bytes(vtype)
    if nbytes is None:      # not expected: vectors of sized elements
        nbytes = element_bytes(ir.MemRefType(mem.type).element_type) or root_bytes
    return max(1, nbytes // root_bytes)


def is_scratch(label: dict) -> bool:
    """Whether the shared buffer labelled ``label`` is flydsl's own scratch."""
    return label.get("tensor", "").startswith(f"shared array '{INTERNAL_PREFIX}")


def internal_barriers(setup: ir.Operation, shared: set, scratch: set) -> set:
    """The ``gpu.barrier``s the CPU added inside its emulations, in the block loop
    ``setup`` (before its thread loops are built).

    Each emulation exchanges values through its own buffers (``scratch``: flydsl's
    shared scratch; the pass's per-thread slots, the function entry's other allocas)
    as *store, barrier, load[, barrier]*: a warp shuffle, a warp reduction or scan, the
    broadcast of a loaded loop bound, an MMA's fragment exchange. So a barrier is the
    emulation's when, of the accesses to those own buffers between the barriers around
    it, the last one before it is a store and the first one after it a load; and so is
    the barrier right after such a one when own buffers are loaded between the two. A
    user's barrier is never inside an emulation: after it, an emulation starts anew,
    with a store. (``shared``: the user's shared buffers, which are not own.)
    """
    entry = setup.parent
    own = set(scratch)

    def is_own(root) -> bool:
        if root in own:
            return True
        owner = defining_op(root)
        if root not in shared and owner is not None and owner.name == "memref.alloca" \
                and owner.parent == entry:
            own.add(root)
            return True
        return False

    def accesses(op) -> list:
        """(is_store, is_own) of the tracked accesses in ``op``, in order."""
        found = []
        for o in walk(op, lambda x: x.name in _ACCESS):
            kind, mem_at, _ = _ACCESS[o.name]
            root = root_memref(list(o.operands)[mem_at])
            if root in shared or is_own(root):
                found.append((kind == "store", is_own(root)))
        return found

    result: set = set()
    for block in _blocks(setup):
        ops = block_ops(block)
        # per op: its tracked accesses (a nested barrier: a boundary, None)
        acc = [None if o.name != "gpu.barrier" and walk(o, lambda x: x.name == "gpu.barrier")
               else accesses(o) for o in ops]
        for i, op in enumerate(ops):
            if op.name != "gpu.barrier" or WARP_SYNC_ATTR in op.attributes:
                continue
            before = [store for store, mine in _side(ops, acc, range(i - 1, -1, -1)) if mine]
            after = [store for store, mine in _side(ops, acc, range(i + 1, len(ops))) if mine]
            if (before and before[-1] and after and not after[0]) or \
                    (False in before and _previous_barrier(ops, i) in result):
                result.add(op)
    return result


def _blocks(op) -> list:
    """Every block nested in ``op``."""
    return [b for o in walk(op) for r in o.regions for b in r.blocks]


def _side(ops: list, acc: list, order) -> list:
    """The tracked accesses from ``ops[order[0]]`` on in ``order`` up to the next
    barrier or op holding one, in program order."""
    found = []
    for j in order:
        if ops[j].name == "gpu.barrier" or acc[j] is None:
            break
        found.append(acc[j])
    if order.step < 0:
        found.reverse()
    return [a for part in found for a in part]


def _previous_barrier(ops: list, i: int):
    """The barrier before ``ops[i]`` in its block when only barrier-free ops lie
    between (else None)."""
    for j in range(i - 1, -1, -1):
        if ops[j].name == "gpu.barrier":
            return ops[j]
        if walk(ops[j], lambda x: x.name == "gpu.barrier"):
            return None
    return None


def _element_count(root) -> ir.Value:
    """The number of elements of the buffer ``root`` (at the insertion point)."""
    mtype = ir.MemRefType(root.type)
    index = ir.IndexType.get()
    n = arith.ConstantOp(index, 1).result
    for i in range(mtype.rank):
        if mtype.is_dynamic_dim(i):
            d = memref.dim(root, arith.ConstantOp(index, i).result)
        else:
            d = arith.ConstantOp(index, mtype.shape[i]).result
        n = arith.muli(n, d)
    return n


def element_bytes(t: ir.Type) -> Optional[int]:
    """Bytes of one element of type ``t`` in memory; None when unknown."""
    if isinstance(t, ir.IndexType):
        return 8
    if isinstance(t, (ir.IntegerType, ir.FloatType)):
        width = ir.IntegerType(t).width if isinstance(t, ir.IntegerType) else ir.FloatType(t).width
        return max(1, width // 8)
    if isinstance(t, ir.VectorType):
        v = ir.VectorType(t)
        inner = element_bytes(v.element_type)
        if inner is None or not v.has_static_shape:
            return None
        n = 1
        for d in v.shape:
            n *= d
        return inner * n
    return None

