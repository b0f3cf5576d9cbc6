"""Shared-memory race checks for the SIMT-to-CPU pass (``CompileOptions.debug`` or
``CompileOptions.racecheck``), like compute-sanitizer's racecheck.

Two accesses of one shared-memory element by two threads of a block race when
no barrier lies between them and one of them is a store (atomics excepted).
The CPU runs the threads of a block one after the other between barriers, so
a race shows as a cross-thread pair inside one *epoch*: the stretch of a
block's run between two barriers.  Each call of a kernel allocates one
``memref<?xi64>`` *shadow*:

* :data:`CONTEXT` words first: the epoch (bumped when a block starts and where
  each barrier was, the barriers of warp collectives too: a conservative
  choice, it can only hide races, never invent them), the block's ids and the
  block's x/y dims, for the reports;
* then, for each shared buffer, two words per element of it:
  ``epoch << 32 | thread`` of its last store, and ``epoch << 32 | thread`` of
  the first thread that loaded it in the epoch, with :data:`SEVERAL` set once
  another thread loaded it too.

Each ``memref.load``/``memref.store`` and ``vector.load``/``vector.store`` of a
shared buffer in a thread loop computes its first element's offset in the buffer
(by address, so views and ``memref.view``s of the dynamic shared buffer work) and
calls the out-of-line helper :data:`CHECK_FUNC` for the elements it covers (a
kernel has thousands of such accesses once its copies and MMAs are unrolled): a
load of an element another thread stored in this epoch, or a store to one another
thread stored or loaded in it, is counted in the error record's
:data:`~flydsl.runtime.debug_checks.RACES` slot and reported through the bounds
checks' helper (the first failure of a launch is kept).  A site's ``op`` is
``"race"``; the record's ``DIM`` slot says what the other thread did, ``INDEX``
the element's offset in the array.  Accesses are not changed.  ``memref.copy``,
masked vector accesses and atomics are not checked.

The CPU runs every copy to shared memory at once, so the asynchronous writers are
vector or scalar stores here: ``BufferCopyLDS*`` (LDS DMA), ``cp.async``,
``stmatrix`` and TMA's copies are checked like plain stores, and ``ds_read``,
``ldmatrix`` and wgmma's shared operands like plain loads.  Only a user's
barrier ends an epoch: the barriers the CPU adds inside its emulations (warp
shuffles and reductions, broadcasts of loaded loop bounds, the MMA/wgmma
fragment exchange through flydsl's scratch) order only their own scratch, where
a GPU exchanges registers, so they must not hide a missing barrier between the
kernel's accesses (:func:`internal_barriers`).  flydsl's scratch arrays (named
with :data:`INTERNAL_PREFIX`) are not checked.  Not modelled:
the wait an asynchronous copy needs besides the barrier (``s_waitcnt vmcnt``,
``cp.async.wait_group``): the CPU completes the copy at once and the waits leave
no trace in the IR here, so a kernel with the barrier but no wait is not reported;
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
#: Shadow words before the buffers' and what they hold.
CONTEXT = 8
_EPOCH, _BLOCK_LINEAR, _BLOCK, _BDIM = 0, 1, 2, 5   # _BLOCK: x, y, z; _BDIM: x, y
#: op name -> (access, index of the memref operand, index of the first index operand)
_ACCESS = {"memref.load": ("load", 0, 1), "memref.store": ("store", 1, 2),
           "vector.load": ("load", 0, 1), "vector.store": ("store", 1, 2)}


def _const(value: int, t: Optional[ir.Type] = None) -> ir.Value:
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
        with ir.InsertionPoint(setup), ir.Location.unknown():
            words = _const(CONTEXT)
            for root in roots:
                self.buffers[root] = (words, memref.extract_aligned_pointer_as_index(root),
                                      element_bytes(ir.MemRefType(root.type).element_type))
                words = arith.addi(words, arith.muli(_element_count(root), _const(2)))
            self.shadow = alloca(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i64()),
                                 [words])
            self.internal.add(self.shadow)
            clear = scf.ForOp(_const(0), words, _const(1))
            with ir.InsertionPoint(clear.body):
                memref.store(_const(0, _i64()), self.shadow, [clear.induction_variable])
                scf.YieldOp([])
            self._put(_BDIM, bdim["x"])
            self._put(_BDIM + 1, bdim["y"])

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
        """Check every shared load/store in ``func_op``'s thread loops; return how many.

        ``thread_ids()``: the thread's x, y, z at the insertion point;
        ``in_thread(op)``: whether ``op`` runs per thread.
        """
        if not self.active:
            return 0
        count = 0
        for op in walk(func_op, lambda o: o.name in _ACCESS):
            kind, mem_at, idx_at = _ACCESS[op.name]
            operands = list(op.operands)
            root = root_memref(operands[mem_at])
            if root not in self.buffers or not in_thread(op):
                continue
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
                store = _const(int(kind == "store"), ir.IntegerType.get_signless(1))
                n = _covered(op, operands[mem_at], root_bytes)
                func.CallOp([], ir.FlatSymbolRefAttr.get(CHECK_FUNC),
                            [self.shadow, first, at, _const(n), *thread_ids(), store,
                             _const(site)])
            count += 1
        return count


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


def _declare_check_func(checks: BoundsChecks) -> None:
    """Define the check helper :data:`CHECK_FUNC` in ``checks``' module (once)::

        (shadow, first word of the buffer, element, count, thread x, y, z, is_store, site)

    It checks the ``count`` elements from ``element`` on, updates their shadow words
    and reports a race."""
    top = checks.top
    if any("sym_name" in o.attributes and ir.StringAttr(o.attributes["sym_name"]).value
           == CHECK_FUNC for o in top.operations):
        return
    index = ir.IndexType.get()
    shadow_t = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i64())
    inputs = [shadow_t] + [index] * 6 + [ir.IntegerType.get_signless(1), index]
    with ir.InsertionPoint.at_block_begin(top), ir.Location.unknown():
        f = func.FuncOp(CHECK_FUNC, (inputs, []), visibility="private")
        f.attributes["llvm.linkage"] = ir.Attribute.parse("#llvm.linkage<internal>")
        f.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
    entry = f.add_entry_block()
    with ir.InsertionPoint(entry), ir.Location.unknown():
        shadow, first, elem, count, *rest = entry.arguments
        each = scf.ForOp(elem, arith.addi(elem, count), _const(1))
        with ir.InsertionPoint(each.body):
            _check_body(shadow, first, each.induction_variable, *rest)
            scf.YieldOp([])
        func.ReturnOp([])


def _check_body(shadow, first, elem, tx, ty, tz, store, site) -> None:
    """The check helper's body: see the module docstring."""
    i64 = _i64()

    def word(k):
        return memref.load(shadow, [_const(k)])

    def as_index(v):
        return arith.index_cast(ir.IndexType.get(), v)

    def thread(w):
        return arith.andi(w, _const(_THREAD, i64))

    epoch = arith.shli(word(_EPOCH), _const(32, i64))

    def now(w):
        return arith.cmpi(arith.CmpIPredicate.eq, arith.andi(w, _const(-(1 << 32), i64)), epoch)

    bdx, bdy = as_index(word(_BDIM)), as_index(word(_BDIM + 1))
    me = arith.index_cast(i64, arith.addi(tx, arith.muli(bdx, arith.addi(ty, arith.muli(bdy, tz)))))
    write_at = arith.addi(first, arith.muli(elem, _const(2)))
    read_at = arith.addi(write_at, _const(1))
    stored = memref.load(shadow, [write_at])
    loaded = memref.load(shadow, [read_at])
    other_store = arith.andi(now(stored),
                             arith.cmpi(arith.CmpIPredicate.ne, thread(stored), me))
    mine = arith.cmpi(arith.CmpIPredicate.eq, thread(loaded), me)
    not_mine = arith.xori(mine, _const(1, ir.IntegerType.get_signless(1)))
    several = arith.cmpi(arith.CmpIPredicate.ne, arith.andi(loaded, _const(SEVERAL, i64)),
                         _const(0, i64))
    # a store races with another thread's store or load of this epoch; a load with a store
    other_load = arith.andi(store, arith.andi(now(loaded), arith.ori(not_mine, several)))
    race = arith.ori(other_store, other_load)
    # the new words: a store's, or the load word (first loader; SEVERAL once another loads)
    again = arith.select(mine, loaded, arith.ori(loaded, _const(SEVERAL, i64)))
    load_word = arith.select(now(loaded), again, arith.ori(epoch, me))
    memref.store(arith.select(store, arith.ori(epoch, me), stored), shadow, [write_at])
    memref.store(arith.select(store, loaded, load_word), shadow, [read_at])
    found = scf.IfOp(race)
    with ir.InsertionPoint(found.then_block):
        first_loader = arith.select(not_mine, thread(loaded), _const(_THREAD, i64))
        other = arith.select(other_store, thread(stored), first_loader)
        what = arith.select(other_store, _const(rec.RACE_STORE), _const(rec.RACE_LOAD))
        block = [as_index(word(_BLOCK_LINEAR + k)) for k in range(4)]
        count_failure(rec.RACES)
        report(site, what, elem, _const(0), block + [tx, ty, tz],
               other=_thread_ids(other, bdx, bdy))
        scf.YieldOp([])


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

