"""SIMT-to-CPU: turn every ``gpu.func`` kernel into a host function.

For a kernel ``@k(a0, ..., an)`` the module afterwards holds::

    func.func @k(a0, ..., an,
                 %grid_x, %grid_y, %grid_z,        // index
                 %block_x, %block_y, %block_z,     // index
                 %block_begin, %block_end,         // index
                 %dynamic_shared_bytes)            // index

which runs the blocks with linear id ``bx + grid_x * (by + grid_y * bz)`` in
``[block_begin, block_end)`` one after the other and, inside each block, all
``block_x * block_y * block_z`` threads as loop nests (``tz``/``ty``/``tx``,
``tx`` innermost; ``ty`` innermost in a kernel whose rows run along it, which also
walks its blocks ``by`` first: :mod:`._simt_thread_order`).  The ``gpu.module``s and
the ``gpu.container_module`` attribute are removed; no ``gpu`` op is left.  The host may call ``@k``
concurrently on disjoint block ranges: all scratch memory (workgroup memory,
per-thread slots, shuffle buffers) is ``memref.alloca``'d at function entry,
once per call, in the default memory space.

How a kernel body (a single block of structured ops) is lowered:

1. ``gpu.block_id/block_dim/grid_dim`` become function values; ``gpu.thread_id``
   ops stay as *placeholders* until the thread loops exist.
2. ``gpu.shuffle`` becomes a store to a per-call exchange buffer, a barrier, a
   load from the partner lane, and a barrier; ``gpu.subgroup_reduce`` (votes, warp
   reductions and scans) likewise folds its warp's active lanes
   (:mod:`._simt_collectives`).
3. Uniformity analysis (:mod:`._simt_uniformity`); a barrier under divergent
   control flow is a :class:`~flydsl.errors.DivergentBarrierError` (see
   :mod:`.barrier_divergence`), a warp collective there an
   :class:`~flydsl.errors.UnsupportedConstructError`; an emulated MFMA's wave-scoped
   barriers (:data:`._simt_collectives.WAVE_EXCHANGE_ATTR`) run predicated under an
   ``if`` whose condition is the same for every lane of a wave, and are a
   :class:`~flydsl.errors.DivergentBarrierError` under one that may split a wave
   (:class:`.barrier_divergence.WaveDependence`). Before that, the bounds of a
   synchronising ``for`` (the condition of an ``if``) computed from loaded values
   become thread 0's, read at the block level, with a
   :class:`~flydsl.errors.DivergentBarrierWarning` as on GPUs.
   Per-thread strided loops (``for j in range(tid, n, BLOCK)``) become block-level
   loops with the thread loop inside, so it vectorizes (:mod:`._simt_lanes`).
4. Per-thread iter_args / results of barrier-containing ``scf.for``/``scf.if``
   are demoted to per-thread slots (``memref<?xT>`` indexed by the linear
   thread id).
5. Every *block level* (the body and the bodies of barrier-containing
   uniform ``scf.for``/``scf.if``) is cut at barriers into segments; each
   segment's per-thread ops go into a thread loop nest, uniform ops stay
   outside, barriers disappear. A segment that is one lane guard (``if tid < s``)
   loops over the threads passing it only.
6. Per-thread ``memref.alloca``s (and private attributions) move to the
   function entry (one per thread if they live across a barrier; one of run-time
   size cannot).
7. Per-thread values used in a later thread loop are rematerialised when
   cheap (thread-id arithmetic), else spilled to a per-thread slot
   (:mod:`._simt_spill`: ``i1`` as bytes, ``!llvm.ptr`` as ``i64``). A memref view
   is made again in the later loop from its operands, so it views the same buffer;
   one that cannot be (chosen by a per-thread ``scf.if``, loop-carried) keeps its
   descriptor in a slot.
8. With ``CompileOptions.debug``, every user memref access is guarded by a
   bounds check that skips it and records the failure, with the block and
   thread ids, for the runtime to raise (:mod:`._simt_bounds`); with ``debug``
   or ``racecheck``, shared-memory loads and stores are checked for races
   against a per-element shadow of each shared buffer (:mod:`._simt_racecheck`);
   with ``profile == "memory"``, each shared or global access is recorded for the
   memory profiler (:mod:`._simt_memprofile`).
9. Thread-id placeholders become the loop induction variables.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional

import mlir.ir as ir
from mlir.dialects import arith, cf, func, memref, scf

from flydsl.errors import (DivergentBarrierError, DivergentBarrierWarning,
                           UnsupportedConstructError)

from ._simt_bounds import BoundsChecks
from .barrier_divergence import (DATA, THREAD, ThreadDependence, WaveDependence, divergence,
                                 hazard_message, split_wave_message)
from ._simt_collectives import SubgroupReduceLowering, is_warp_collective, wave_lanes
from ._simt_memprofile import MemoryRecorder
from ._simt_printf import PrintfLowering
from ._simt_racecheck import RaceChecks
from ._simt_lanes import (LEVEL_ATTR, StridedLoopInterchange, inline_regions, lane_guard,
                          lane_range, thread_dim)
from ._simt_spill import SPILL_ATTR, SlotCodec, codec_for
from ._simt_split import split_thread_loops
from ._simt_thread_order import prefers_y_inner, swap_x_y
from ._simt_ir import (SYNC_OPS, dimension_of, is_pure, may_trap, source_location,
                       strip_memory_space)
from ._simt_uniformity import BROADCAST_ATTR, Uniformity
from .ir import (CHECKED_ARGS, CHECKED_SHARED, CHECKED_VIEW, ancestor_in_block, block_ops, defining_op,
                 gpu_modules, op_of, terminator, walk)

_DIMS = ("x", "y", "z")
#: Rematerialising a cross-barrier value costs at most this many ops per use loop.
_REMAT_LIMIT = 12
_INF = 1 << 30



def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


#: How an out-of-bounds report names a raw pointer's view (frontend.raw_memory).
_RAW_VIEW_LABEL = ("raw pointer view (its size: the elements left in the kernel argument "
                   "holding its address; 0: no argument holds it, or it is misaligned)")


def _always_checked(op: ir.Operation) -> bool:
    """Whether kernel ``op`` has accesses the CPU checks in every build (host views whose
    layout may reach past their memory, raw pointers' views, shared arrays or pools a
    view reaches past)."""
    if CHECKED_ARGS in op.attributes or CHECKED_SHARED in op.attributes:
        return True
    return bool(walk(op, lambda o: CHECKED_VIEW in o.attributes))


def run(module: ir.Module, target=None, options=None) -> None:
    """Lower every kernel of ``module`` (a ``gpu.container_module``) in place."""
    warp_size = int(getattr(target, "warp_size", 0) or 32)
    with module.context, ir.Location.unknown(module.context):
        top = module.body
        debug = getattr(options, "debug", False)
        racecheck = debug or getattr(options, "racecheck", False)
        checked = any(_always_checked(op) for gm in gpu_modules(module)
                      for op in block_ops(gm.regions[0].blocks[0], with_terminator=True))
        checks = BoundsChecks(top) if racecheck or checked else None
        recorder = MemoryRecorder(module) if getattr(options, "profile", "") == "memory" else None
        printf = PrintfLowering(module)
        printf.lower(module.operation)      # gpu.printf -> fprintf, before the thread loops
        for gm in gpu_modules(module):
            for op in block_ops(gm.regions[0].blocks[0], with_terminator=True):
                name = op.name
                if name == "gpu.func":
                    if "gpu.kernel" in op.attributes:
                        _KernelLowering(op, gm, warp_size, checks, bounds=debug,
                                        races=racecheck, recorder=recorder).run()
                    else:
                        _lower_device_func(op, gm)
                elif name == "gpu.module_end":
                    continue
                else:  # helpers: func.func, memref.global, llvm.func, ...
                    _check_no_gpu_ops(op, _sym_name(op) or name)
                    op.move_before(gm)
            gm.erase()
        for op in block_ops(top, with_terminator=True):
            # workgroup-memory globals became per-call allocas in the kernels; constant
            # memory is plain read-only memory on the host
            if op.name == "memref.global" and _memory_space_global(op):
                t = ir.TypeAttr(op.attributes["type"]).value
                if _in_workgroup_memory(t):
                    op.erase()
                else:
                    op.attributes["type"] = ir.TypeAttr.get(strip_memory_space(t))
        if "gpu.container_module" in module.operation.attributes:
            del module.operation.attributes["gpu.container_module"]
        printf.end_blocks(module.operation)  # each block writes out what it printed
        if checks is not None:
            checks.finish(module)
        if recorder is not None:
            recorder.finish()
        for op in block_ops(top, with_terminator=True):
            _check_no_gpu_ops(op, _sym_name(op) or op.name)


# ---------------------------------------------------------------------------
# errors and helpers


def _memory_space_global(op) -> bool:
    t = ir.TypeAttr(op.attributes["type"]).value
    return isinstance(t, ir.MemRefType) and t.memory_space is not None


def _in_workgroup_memory(t: ir.Type) -> bool:
    return str(ir.MemRefType(t).memory_space) == "#gpu.address_space<workgroup>"


def _shared_names(gfunc) -> list:
    """Shared array names from the optional ``flydsl.shared_names`` attribute (the
    front end's: the variable each array was first assigned to, or "")."""
    if "flydsl.shared_names" not in gfunc.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(gfunc.attributes["flydsl.shared_names"])]


def _arg_names(gfunc) -> list:
    """Kernel parameter names from the optional ``flydsl.arg_names`` attribute."""
    if "flydsl.arg_names" not in gfunc.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(gfunc.attributes["flydsl.arg_names"])]


def _slot_holds(t: ir.Type) -> bool:
    """A per-thread slot can hold values of type ``t`` (:func:`._simt_spill.codec_for`)."""
    try:
        codec_for(t)
    except TypeError:
        return False
    return True


def _sym_name(op) -> str:
    if "sym_name" in op.attributes:
        return ir.StringAttr(op.attributes["sym_name"]).value
    return ""


def _unsupported(message: str, op, kernel: str) -> UnsupportedConstructError:
    filename, lineno, source = source_location(op)
    return UnsupportedConstructError(message, kernel=kernel, filename=filename,
                                     lineno=lineno, source_line=source)


def _check_no_gpu_ops(op, where: str) -> None:
    for inner in walk(op, lambda o: o.name.startswith("gpu.")):
        raise _unsupported(f"'{inner.name}' outside a kernel is not supported on the "
                           "CPU backend", inner, where)


def _lower_device_func(gfunc, gm) -> None:
    """A non-kernel ``gpu.func`` becomes a plain ``func.func`` (no gpu ops allowed)."""
    name = _sym_name(gfunc)
    body = gfunc.regions[0].blocks[0]
    for inner in walk(gfunc, lambda o: o.name.startswith("gpu.") and o.name != "gpu.return"):
        raise _unsupported(f"'{inner.name}' in device function {name!r} is not supported on "
                           "the CPU backend (only kernels may use thread ids and barriers)",
                           inner, name)
    if len(gfunc.regions[0].blocks) != 1:
        raise _unsupported("device functions with several blocks are not supported on the "
                           "CPU backend", gfunc, name)
    ftype = ir.FunctionType(ir.TypeAttr(gfunc.attributes["function_type"]).value)
    with ir.InsertionPoint(gm), gfunc.location:
        f = func.FuncOp(name, (list(ftype.inputs), list(ftype.results)))
    entry = f.add_entry_block()
    for old, new in zip(body.arguments, entry.arguments):
        old.replace_all_uses_with(new)
    ret = terminator(body)
    with ir.InsertionPoint(entry), ret.location:
        func.ReturnOp(list(ret.operands))
    new_ret = terminator(entry)
    for op in block_ops(body):
        op.move_before(new_ret)
    gfunc.erase()


def _iter_arg_index(value, body):
    """``i`` if ``value`` is iter arg ``i`` of the ``scf.for`` body ``body``, else None."""
    if not isinstance(value, ir.BlockArgument) or value.owner != body:
        return None
    n = value.arg_number
    return n - 1 if n >= 1 else None



@dataclass(eq=False)
class _ThreadLoop:
    """One thread loop nest created for a segment."""

    outer: ir.Operation           # outermost scf.for of the nest
    inner: ir.Operation           # innermost (tx) scf.for
    ivs: dict                     # "x"/"y"/"z" -> iv value or None (dim known to be 1)
    anchor: ir.Operation          # values materialised in this loop go before it
    seg_block: ir.Block           # block holding the segment's ops
    memo: dict = field(default_factory=dict)

    @property
    def body(self) -> ir.Block:
        return self.inner.regions[0].blocks[0]


# ---------------------------------------------------------------------------
# kernel lowering


class _KernelLowering:
    def __init__(self, gfunc, gm, warp_size: int, checks: Optional[BoundsChecks] = None,
                 bounds: bool = True, races: bool = True,
                 recorder: Optional[MemoryRecorder] = None):
        self.gfunc = gfunc
        self.name = _sym_name(gfunc)
        self.warp = warp_size
        self.checks = checks            # debug or race checks: the module's error record
        self.bounds = bounds and checks is not None   # bounds-check every access
        # else only those of these arguments (host views reaching past their memory)
        self.checked_args = (list(ir.DenseI32ArrayAttr(gfunc.attributes[CHECKED_ARGS]))
                             if CHECKED_ARGS in gfunc.attributes else [])
        # and those of these shared arrays (a view reaches past one): their buffers
        self.checked_shared = (set(ir.DenseI32ArrayAttr(gfunc.attributes[CHECKED_SHARED]))
                               if CHECKED_SHARED in gfunc.attributes else set())
        self.checked_buffers: set = set()
        self.check_races = races and checks is not None   # debug or race-check mode
        self.races: Optional[RaceChecks] = None
        self.recorder = recorder        # FLYDSL_PROFILE=memory: record shared/global accesses
        self.index = ir.IndexType.get()
        self.loops: list[_ThreadLoop] = []
        self.loop_of_inner: dict = {}
        self.slot_loads: dict = {}      # op giving a slot's value back -> the slot
        self.value_slots: dict = {}     # value -> slot
        self.exchange: dict = {}        # element type str -> exchange buffer
        self.consts: dict = {}
        self.seeds: set = set()
        self.internal: set = set()      # scratch buffers indexed in bounds by construction
        self.codecs: dict = {}          # slot -> how its values are stored (i1 as i8, ...)
        self.mem_labels: dict = {}      # user memref -> how a debug report names it
        self.shared: set = set()        # the block's shared-memory buffers
        self._build_function(gm)

    # -- setup -----------------------------------------------------------
    def _build_function(self, gm) -> None:
        gfunc = self.gfunc
        if len(gfunc.regions[0].blocks) != 1:
            raise _unsupported("kernels with several blocks (unstructured control flow) are "
                               "not supported on the CPU backend", gfunc, self.name)
        ftype = ir.FunctionType(ir.TypeAttr(gfunc.attributes["function_type"]).value)
        inputs = list(ftype.inputs)
        idx = self.index
        with ir.InsertionPoint(gm), gfunc.location:
            f = func.FuncOp(self.name, (inputs + [idx] * 9, []))
        self.func = op_of(f)
        if "arg_attrs" in gfunc.attributes:
            attrs = list(ir.ArrayAttr(gfunc.attributes["arg_attrs"]))
            empty = ir.DictAttr.get({})
            attrs = attrs + [empty] * (len(inputs) + 9 - len(attrs))
            self.func.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
        entry = f.add_entry_block()
        self.entry = entry
        args = list(entry.arguments)
        n = len(inputs)
        gx, gy, gz, bx, by, bz, begin, end, dynamic_shared = args[n:]
        self.seeds.update(args)
        self.known_block = self._known_block_size(gfunc)
        # ty innermost where the kernel's rows run along it (._simt_thread_order); not
        # where a report names threads (debug, race checks, the memory profile)
        swapped = (self.checks is None and self.recorder is None
                   and prefers_y_inner(gfunc))
        if swapped:
            swap_x_y(gfunc)
            bx, by = by, bx
            if self.known_block:
                kx, ky, kz = self.known_block
                self.known_block = [ky, kx, kz]
        loc = gfunc.location
        with ir.InsertionPoint(entry), loc:
            c1 = arith.ConstantOp(idx, 1).result
            self.block_loop = op_of(scf.ForOp(begin, end, c1))
            self.block_loop.attributes["flydsl.block_loop"] = ir.UnitAttr.get()
            func.ReturnOp([])
        self.consts[1] = c1
        self.seeds.add(c1)
        bdim_args = {"x": bx, "y": by, "z": bz}
        self.grid = {"x": gx, "y": gy, "z": gz}
        self.bdim = {d: (self.const(self.known_block[i]) if self.known_block else bdim_args[d])
                     for i, d in enumerate(_DIMS)}
        with ir.InsertionPoint(self.block_loop):
            t = arith.muli(self.bdim["x"], self.bdim["y"])
            self.nthreads = arith.muli(t, self.bdim["z"])
        self.seeds.update([t, self.nthreads])
        # block loop: linear block id -> (bx, by, bz), bx fastest (by where swapped, as
        # ty: the blocks then walk the kernel's rows as well)
        loop_body = self.block_loop.regions[0].blocks[0]
        lin = loop_body.arguments[0]
        fast, slow = ("y", "x") if swapped else ("x", "y")
        self.bid = {}
        with ir.InsertionPoint(loop_body), loc:
            self.bid[fast] = arith.remui(lin, self.grid[fast])
            q = arith.divui(lin, self.grid[fast])
            self.bid[slow] = arith.remui(q, self.grid[slow])
            self.bid["z"] = arith.divui(q, self.grid[slow])
            self.block_yield = op_of(scf.YieldOp([]))
        self.seeds.update([lin, q, *self.bid.values()])
        self.body = loop_body

        # kernel arguments, workgroup and private attributions
        kbody = gfunc.regions[0].blocks[0]
        kargs = list(kbody.arguments)
        for old, new in zip(kargs[:n], args[:n]):
            old.replace_all_uses_with(new)
        names = _arg_names(gfunc)
        for i, a in enumerate(args[:n]):
            self.mem_labels[a] = {"arg": i, "name": names[i]} if i < len(names) else {"arg": i}
        n_wg = 0
        if "workgroup_attributions" in gfunc.attributes:
            n_wg = ir.IntegerAttr(gfunc.attributes["workgroup_attributions"]).value
        shared_names = _shared_names(gfunc)
        for k, old in enumerate(kargs[n:n + n_wg]):
            buf = self.entry_alloca(strip_memory_space(old.type))
            old.replace_all_uses_with(buf)
            named = shared_names[k] if k < len(shared_names) else ""
            label = f"shared array {named!r}" if named else f"shared array {k}"
            self.mem_labels[buf] = {"tensor": label}
            self.shared.add(buf)
            if k in self.checked_shared:
                self.checked_buffers.add(buf)
        private = kargs[n + n_wg:]
        with ir.InsertionPoint(self.block_yield), loc:
            for k, old in enumerate(private):  # per-thread memory: like an alloca in the body
                a = memref.AllocaOp(strip_memory_space(old.type), [], [])
                old.replace_all_uses_with(a.result)
                self.mem_labels[a.result] = {"tensor": f"private array {k}"}
        # workgroup memory declared as a memref.global: one alloca per call
        wg_globals = {}
        for op in walk(gfunc, lambda o: o.name == "memref.get_global"):
            t = op.results[0].type
            if t.memory_space is None or not _in_workgroup_memory(t):
                # constant memory: read in place; got once, at the function entry
                op.move_before(self.block_loop)
                self.seeds.add(op.results[0])
                attrs = op.attributes
                name = ir.StringAttr(attrs["flydsl.name"]).value if "flydsl.name" in attrs else ""
                self.mem_labels[op.results[0]] = {"tensor": f"constant array {name}".strip()}
                continue
            name = str(op.attributes["name"])
            if name not in wg_globals:
                wg_globals[name] = self.entry_alloca(strip_memory_space(t))
                self.mem_labels[wg_globals[name]] = {"tensor": f"shared array {name}"}
                self.shared.add(wg_globals[name])
            op.results[0].replace_all_uses_with(wg_globals[name])
            op.erase()
        self._lower_dynamic_shared(gfunc, dynamic_shared)
        ret = terminator(kbody)
        if ret.name != "gpu.return":
            raise _unsupported(f"kernel body ends in {ret.name}", ret, self.name)
        for op in block_ops(kbody):
            op.move_before(self.block_yield)
        gfunc.erase()
        self.gfunc = None

    def _lower_dynamic_shared(self, gfunc, nbytes) -> None:
        """``gpu.dynamic_shared_memory``: one buffer of the launch's byte count per call,
        which every view aliases (as the blocks of a call run one after the other)."""
        ops = walk(gfunc, lambda o: o.name == "gpu.dynamic_shared_memory")
        if not ops:
            return
        mtype = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i8())
        buf = self.entry_alloca(mtype, [nbytes])
        self.mem_labels[buf] = {"tensor": "dynamic shared array"}
        self.shared.add(buf)
        for op in ops:
            op.results[0].replace_all_uses_with(buf)
            op.erase()

    @staticmethod
    def _known_block_size(gfunc) -> Optional[list]:
        attrs = gfunc.attributes
        for key in ("known_block_size", "gpu.known_block_size"):
            if key in attrs:
                vals = [int(v) for v in ir.DenseI32ArrayAttr(attrs[key])]
                if len(vals) == 3 and all(v > 0 for v in vals):
                    return vals
        return None

    # -- small builders --------------------------------------------------
    def const(self, value: int) -> ir.Value:
        """An index constant at the function entry."""
        if value not in self.consts:
            with ir.InsertionPoint(self.block_loop), ir.Location.unknown():
                c = arith.ConstantOp(self.index, value).result
            self.consts[value] = c
            self.seeds.add(c)
        return self.consts[value]

    def entry_alloca(self, mtype: ir.Type, dyn_sizes=()) -> ir.Value:
        with ir.InsertionPoint(self.block_loop), ir.Location.unknown():
            a = memref.AllocaOp(mtype, list(dyn_sizes), [], alignment=64).result
        self.seeds.add(a)
        return a

    def slot(self, elem_type: ir.Type) -> ir.Value:
        """A fresh per-thread slot for values of ``elem_type``: one row per thread
        (:mod:`._simt_spill`: i1 as i8, pointers as i64, memrefs as their descriptor).
        TypeError for a type no slot can hold."""
        codec = codec_for(elem_type)
        buf = self.entry_alloca(codec.slot_type(), [self.nthreads])
        self.internal.add(buf)
        self.codecs[buf] = codec
        return buf

    def exchange_buffer(self, elem_type: ir.Type) -> ir.Value:
        """The per-thread buffer warp collectives of ``elem_type`` exchange values
        through (one per type; each use is fenced by its own barriers)."""
        key = str(elem_type)
        if key not in self.exchange:
            self.exchange[key] = self.slot(elem_type)
        return self.exchange[key]

    def thread_id(self, dim: str) -> ir.Value:
        """A ``gpu.thread_id`` placeholder at the current insertion point."""
        return ir.Operation.create(
            "gpu.thread_id", results=[self.index],
            attributes={"dimension": ir.Attribute.parse(f"#gpu<dim {dim}>")}).result

    def linear_tid(self) -> ir.Value:
        """tx + bdim_x * (ty + bdim_y * tz) at the current insertion point."""
        kb = self.known_block
        tid = self.thread_id("x")
        if kb and kb[1] == 1 and kb[2] == 1:
            return tid
        tz = self.thread_id("z")
        ty = self.thread_id("y")
        row = arith.addi(arith.muli(tz, self.bdim["y"]), ty)
        return arith.addi(arith.muli(row, self.bdim["x"]), tid)

    def store_slot(self, value, slot) -> None:
        """Store ``value`` in this thread's row of ``slot``."""
        codec: SlotCodec = self.codecs[slot]
        words = codec.encode(value)
        tid = self.linear_tid()
        for k, word in enumerate(words):
            memref.StoreOp(word, slot, [tid] if codec.kind != "memref" else [tid, self.const(k)])

    def load_slot(self, slot, remat: bool = True) -> ir.Value:
        """Load this thread's element of ``slot``.

        ``remat``: the slot keeps this value until every later use of the load
        (true for value and result slots, not for loop-carried slots, which the
        loop body overwrites), so a later thread loop may simply load it again.
        """
        value = self.load_slot_row(slot, self.linear_tid())
        if remat:
            self.slot_loads[op_of(value.owner)] = slot
        return value

    def load_slot_row(self, slot, row) -> ir.Value:
        """The value in row ``row`` of ``slot``, loaded at the current insertion point."""
        codec: SlotCodec = self.codecs[slot]
        if codec.kind != "memref":
            return codec.decode([memref.LoadOp(slot, [row]).result])
        return codec.decode([memref.LoadOp(slot, [row, self.const(k)]).result
                             for k in range(codec.words)])

    # -- driver ----------------------------------------------------------
    def run(self) -> None:
        self._lower_id_ops()
        self._broadcast_loaded_controls()
        self._check_divergence()
        self._rewrite_shuffles()
        SubgroupReduceLowering(self, _unsupported).run()   # votes, warp reductions, scans
        StridedLoopInterchange(self).run()   # for j in range(tid, n, BLOCK): threads innermost
        self._demote_sync_op_values()
        self.uni = self._analyze()
        if self.check_races:
            self._start_race_checks()
        self._lower_level(self.body)
        self._lower_allocas()
        self._demote_cross_segment_values()
        # before step 9: the reports' thread-id placeholders become loop ivs too
        raw_views = [op.results[0] for op in walk(self.func,
                                                  lambda o: CHECKED_VIEW in o.attributes)]
        self.mem_labels.update({view: {"tensor": _RAW_VIEW_LABEL} for view in raw_views})
        if self.bounds:
            self.checks.guard_kernel(self.func, self.name, self._report_ids,
                                     skip=self.internal, labels=self.mem_labels)
        elif self.checks is not None:   # the always-checked memrefs only
            args = list(self.entry.arguments)
            only = {args[i] for i in self.checked_args} | set(raw_views) | self.checked_buffers
            if only:
                self.checks.guard_kernel(self.func, self.name, self._report_ids,
                                         labels=self.mem_labels, only=only)
        if self.races is not None:
            lin = self.body.arguments[0]
            bid = [self.bid[d] for d in _DIMS]
            self.races.begin_block(op_of(bid[2].owner), [lin, *bid])
            self.races.instrument(self.func, lambda: [self.thread_id(d) for d in _DIMS],
                                  lambda op: self._enclosing_loop(op) is not None)
        if self.recorder is not None:
            self.recorder.instrument(self.func, self.name, shared=self.shared,
                                     labels=self.mem_labels, block_id=self.body.arguments[0],
                                     linear_tid=self.linear_tid,
                                     in_thread=lambda op: self._enclosing_loop(op) is not None)
        self._replace_thread_ids()
        if self.checks is None:   # debug mode guards every access: left unsplit
            split_thread_loops(self.loops, self.const)
        self._strip_memory_spaces()
        for op in walk(self.func, lambda o: LEVEL_ATTR in o.attributes):
            del op.attributes[LEVEL_ATTR]
        for op in walk(self.func, lambda o: BROADCAST_ATTR in o.attributes):
            del op.attributes[BROADCAST_ATTR]
        for op in walk(self.func, lambda o: SPILL_ATTR in o.attributes):
            del op.attributes[SPILL_ATTR]

    def _start_race_checks(self) -> None:
        """Shadows of the shared buffers and the epoch counter (:mod:`._simt_racecheck`)."""
        shared = {buf: self.mem_labels[buf] for buf in self.shared}
        self.races = RaceChecks(self.checks, self.name, shared, self.entry_alloca,
                                self.block_loop, self.bdim)
        self.internal |= self.races.internal

    def _report_ids(self, op) -> list:
        """Linear block id, block ids and thread ids of ``op``'s thread, for a
        bounds-check report built at the current insertion point."""
        lin = self.body.arguments[0]
        bid = [self.bid[d] for d in _DIMS]
        if self._enclosing_loop(op) is None:  # not expected: accesses are per-thread ops
            return [lin, *bid] + [self.const(-1)] * 3
        return [lin, *bid] + [self.thread_id(d) for d in _DIMS]

    def _sync_ancestors(self) -> set:
        """Ops holding a barrier (or a loop marked as a block level), with their
        ancestors: the ops the thread loops go inside of."""
        result = set()
        for s in walk(self.block_loop, lambda o: o.name in SYNC_OPS or LEVEL_ATTR in o.attributes):
            p = s if LEVEL_ATTR in s.attributes else s.parent
            while p is not None and p != self.block_loop:
                result.add(p)
                p = p.parent
        return result

    def _analyze(self) -> Uniformity:
        return Uniformity(self.seeds, self._sync_ancestors(), self.shared).run(self.body)

    # -- 1. ids ------------------------------------------------------------
    def _lower_id_ops(self) -> None:
        for op in walk(self.block_loop, lambda o: o.name.startswith("gpu.")):
            name = op.name
            if name in ("gpu.thread_id", "gpu.barrier", "gpu.shuffle", "gpu.subgroup_reduce"):
                continue
            if name in ("gpu.block_id", "gpu.block_dim", "gpu.grid_dim", "gpu.global_id"):
                dim = dimension_of(op)
                table = {"gpu.block_id": self.bid, "gpu.block_dim": self.bdim,
                         "gpu.grid_dim": self.grid}
                if name == "gpu.global_id":
                    with ir.InsertionPoint(op), op.location:
                        new = arith.addi(arith.muli(self.bid[dim], self.bdim[dim]),
                                         self.thread_id(dim))
                else:
                    new = table[name][dim]
            elif name in ("gpu.lane_id", "gpu.subgroup_id"):
                with ir.InsertionPoint(op), op.location:
                    w = self.const(self.warp)
                    ltid = self.linear_tid()
                    new = (arith.remui(ltid, w) if name == "gpu.lane_id"
                           else arith.divui(ltid, w))
            elif name == "gpu.subgroup_size":
                new = self.const(self.warp)
            elif name == "gpu.num_subgroups":
                with ir.InsertionPoint(op), op.location:
                    new = arith.ceildivui(self.nthreads, self.const(self.warp))
            else:
                raise _unsupported(f"'{name}' is not supported on the CPU backend", op, self.name)
            op.results[0].replace_all_uses_with(new)
            op.erase()

    # -- 2. shuffles -------------------------------------------------------
    def _rewrite_shuffles(self) -> None:
        for op in walk(self.block_loop, lambda o: o.name == "gpu.shuffle"):
            mode = str(op.attributes["mode"]).split()[-1].rstrip(">")
            value, offset, width = list(op.operands)
            buf = self.exchange_buffer(value.type)
            idx = self.index
            with ir.InsertionPoint(op), op.location:
                self.store_slot(value, buf)
                ir.Operation.create("gpu.barrier")
                ltid = self.linear_tid()
                w = arith.index_cast(idx, width)
                off = arith.index_cast(idx, offset)
                lane = arith.remui(ltid, w)
                base = arith.subi(ltid, lane)
                if mode == "xor":
                    src_lane = arith.xori(lane, off)
                    valid = arith.cmpi(arith.CmpIPredicate.ult, src_lane, w)
                elif mode == "down":
                    src_lane = arith.addi(lane, off)
                    valid = arith.cmpi(arith.CmpIPredicate.ult, src_lane, w)
                elif mode == "up":
                    src_lane = arith.subi(lane, off)
                    valid = arith.cmpi(arith.CmpIPredicate.uge, lane, off)
                elif mode == "idx":
                    src_lane = off
                    valid = arith.cmpi(arith.CmpIPredicate.ult, src_lane, w)
                else:
                    raise _unsupported(f"gpu.shuffle mode {mode!r} is not supported on the "
                                       "CPU backend", op, self.name)
                src = arith.addi(base, src_lane)
                in_block = arith.cmpi(arith.CmpIPredicate.ult, src, self.nthreads)
                valid = arith.andi(valid, in_block)
                src = arith.select(valid, src, ltid)
                result = self.load_slot_row(buf, src)
                ir.Operation.create("gpu.barrier")
            op.results[0].replace_all_uses_with(result)
            op.results[1].replace_all_uses_with(valid)
            op.erase()

    # -- 3. divergence -----------------------------------------------------
    def _broadcast_loaded_controls(self) -> None:
        """Loops and ifs holding a barrier or warp collective whose bounds or condition
        depend on loaded values (not on the thread id) follow thread 0's value.

        On a GPU such control flow is correct only when every thread of the block
        loads the same value (a row length, an expert's token count): the GPU
        backends warn (:mod:`.barrier_divergence`) and so does this one. Here the
        block's threads run as loops between barriers, so the value must be one
        per block: each thread stores its value to a slot, a barrier ends the
        segment, and the control op reads thread 0's element at the block level.
        Outermost first, so an inner loop's bounds are broadcast inside an outer
        loop that is already block-level.
        """
        deps = ThreadDependence()
        done: set = set()
        while True:
            uni = self._analyze()
            target = None
            for s in walk(self.block_loop, lambda o: o.name in SYNC_OPS):
                chain, p = [], s.parent
                while p != self.block_loop:
                    chain.append(p)
                    p = p.parent
                for p in reversed(chain):           # outermost first
                    if uni.uniform_control(p):
                        continue
                    if (p.name == "scf.if" and is_warp_collective(s)) or p in done \
                            or p.name not in ("scf.for", "scf.if"):
                        break       # predicated, or left to _check_divergence
                    controls = list(p.operands)[:3] if p.name == "scf.for" else \
                        [p.operands[0]]
                    if max(deps.of(v) for v in controls) == DATA:
                        target = (p, s)
                    break
                if target is not None:
                    break
            if target is None:
                return
            p, s = target
            done.add(p)
            self._warn_loaded_control(p, s, deps)
            n = 3 if p.name == "scf.for" else 1
            broadcast: dict = {}
            for k in range(n):
                v = p.operands[k]
                if uni.is_uniform(v):
                    continue
                if v not in broadcast:
                    broadcast[v] = self._block_value_of_thread0(v, p)
                p.operands[k] = broadcast[v]

    def _block_value_of_thread0(self, value, before) -> ir.Value:
        """Thread 0's ``value``, read at the block level right before ``before``."""
        slot = self.slot(value.type)
        with ir.InsertionPoint(before), before.location:
            self.store_slot(value, slot)
            ir.Operation.create("gpu.barrier")
            load = memref.LoadOp(slot, [self.const(0)])
            load.attributes[BROADCAST_ATTR] = ir.UnitAttr.get()
            first = self.codecs[slot].decode([load.result])   # an index or an i1
            if self.bounds:
                # debug mode: every thread must have loaded thread 0's value (else a GPU
                # would run the barriers inside divergently; here the result would be
                # thread 0's loop for everyone, silently)
                what = "range" if before.name == "scf.for" else "condition"
                cf.assert_(arith.cmpi(arith.CmpIPredicate.eq, value, first),
                           f"the {what} of this {before.name[4:]}, computed from loaded "
                           "values, differs between the threads of a block, and a barrier "
                           "or warp collective is inside it: every thread must reach the "
                           "same barriers (the CPU backend ran thread 0's)")
            return first

    def _warn_loaded_control(self, control, sync, deps) -> None:
        where = "a 'for' loop whose range" if control.name == "scf.for" else \
            "an 'if' whose condition"
        filename, lineno, _ = source_location(sync)
        message = hazard_message(where, False)
        warnings.warn_explicit(
            f"in kernel {self.name!r}: {message}. On the CPU backend every thread follows "
            "thread 0's value (FLYDSL_DEBUG=1 checks that every thread has it)",
            DivergentBarrierWarning, filename or "<kernel>", lineno or 0)

    def _check_divergence(self) -> None:
        uni = self._analyze()
        deps = ThreadDependence()
        waves: dict = {}            # lanes -> WaveDependence
        at_run_time: dict = {}      # debug mode: ifs whose waves are checked as they run
        for s in walk(self.block_loop, lambda o: o.name in SYNC_OPS):
            p = s.parent
            lanes = wave_lanes(s)
            while p != self.block_loop:
                ok = (uni.uniform_control(p)
                      # warp collectives under a thread-dependent scf.if run predicated
                      or (p.name == "scf.if" and is_warp_collective(s)))
                if not ok:
                    if s.name == "gpu.barrier" and not is_warp_collective(s):
                        raise self._divergent_barrier(s, deps)
                    raise _unsupported(self._divergent_collective(s, p), s, self.name)
                if lanes and not uni.uniform_control(p):
                    # an emulated MFMA runs predicated only under a condition that
                    # whole waves share (each wave exchanges through its own scratch)
                    if lanes not in waves:
                        waves[lanes] = WaveDependence(lanes, deps, self.bdim["x"],
                                                      self.known_block, self.warp)
                    if waves[lanes].varies(p.operands[0]):
                        filename, lineno, source = source_location(s)
                        raise DivergentBarrierError(split_wave_message(lanes),
                                                    kernel=self.name, filename=filename,
                                                    lineno=lineno, source_line=source)
                    if self.bounds and waves[lanes].varies(p.operands[0], loaded=True):
                        at_run_time[p] = lanes
                p = p.parent
        for p, lanes in at_run_time.items():
            self._check_whole_waves(p, lanes)

    def _check_whole_waves(self, branch, lanes: int) -> None:
        """Debug mode: assert that the lanes of each wave agree on the condition of
        ``branch`` (computed from loaded values), which holds an emulated MFMA: a wave
        whose lanes disagree would read its skipped lanes' stale scratch."""
        cond = branch.operands[0]
        slot = self.slot(cond.type)
        with ir.InsertionPoint(branch), branch.location:
            self.store_slot(cond, slot)
            ir.Operation.create("gpu.barrier")
            wave = arith.divui(self.linear_tid(), self.const(lanes))
            first = self.load_slot_row(slot, arith.muli(wave, self.const(lanes)))
            cf.assert_(arith.cmpi(arith.CmpIPredicate.eq, cond, first),
                       f"the condition of this if, computed from loaded values, differs "
                       f"between the lanes of a wave ({lanes}), and an MFMA is inside it: "
                       "a matrix instruction needs every lane of its wave")

    def _divergent_barrier(self, barrier, deps) -> DivergentBarrierError:
        """The hazard (see :mod:`.barrier_divergence`): a block's threads run as loops
        between barriers here, so a barrier some threads may skip cannot be lowered."""
        where, dependence = divergence(barrier, deps, stop=self.block_loop) or (
            "control flow that", DATA)
        filename, lineno, source = source_location(barrier)
        message = hazard_message(where, dependence == THREAD)
        if "flydsl.sync_origin" in barrier.attributes:   # e.g. fx.nvvm.mbarrier_wait
            origin = ir.StringAttr(barrier.attributes["flydsl.sync_origin"]).value
            message = f"{origin} is a block barrier on the CPU backend; {message}"
        return DivergentBarrierError(message,
                                     kernel=self.name, filename=filename, lineno=lineno,
                                     source_line=source)

    @staticmethod
    def _divergent_collective(s, p) -> str:
        what = ("warp shuffle" if s.name == "gpu.shuffle" else
                "an MFMA's operand exchange" if wave_lanes(s) else "warp collective")
        msg = (f"{what} (it synchronises the block on the CPU) in divergent control flow "
               "is not supported on the CPU backend")
        if p.name == "scf.for":
            why = "an 'scf.for' whose bounds depend on the thread id or on loaded values"
        elif p.name == "scf.if":
            why = "an 'scf.if' whose condition depends on the thread id or on loaded values"
        else:
            why = (f"'{p.name}', which threads may run a different number of times; "
                   "a loop holding a warp collective must be a `for` over a range with "
                   "block-uniform bounds")
        return (f"{msg} (it is inside {why}); move it where all threads of the block "
                "reach it the same number of times")

    # -- 4. demote per-thread values carried by barrier-containing ops ------
    def _demote_sync_op_values(self) -> None:
        uni = self._analyze()
        targets = [op for op in uni.sync if op.name in ("scf.for", "scf.if")]
        for op in targets:
            if op.name == "scf.for":
                inner = list(op.regions[0].blocks[0].arguments)[1:]
                per = [i for i, a in enumerate(inner) if not uni.is_uniform(a)]
                if per:
                    self._demote_for(op, per)
            else:
                per = [i for i, r in enumerate(op.results) if not uni.is_uniform(r)]
                if per:
                    self._demote_if(op, per)

    def _replace_uses_with_loads(self, value, slot, skip=None, remat=True) -> None:
        for use in list(value.uses):
            owner = op_of(use.owner)
            if skip is not None and skip(owner, use.operand_number):
                continue
            with ir.InsertionPoint(owner), owner.location:
                owner.operands[use.operand_number] = self.load_slot(slot, remat)

    def _store_early(self, value, slot, anchor, late_users=()) -> None:
        """Store ``value`` to ``slot`` before ``anchor``, or right after its def.

        Storing right after the def (when it is an op of the same block) keeps
        the store in the def's thread loop instead of a copy loop after the
        next barrier.  ``late_users`` (readers of the slot's previous value)
        must not come after the def.
        """
        d = value.owner if isinstance(value, ir.OpResult) else None
        d = op_of(d) if d is not None else None
        block = anchor.block
        early = d is not None and d.block == block
        if early:
            for u in late_users:
                a = ancestor_in_block(u, block)
                if a is None or (a != d and not a.is_before_in_block(d)):
                    early = False
                    break
        if early:
            with ir.InsertionPoint.after(d), d.location:
                self.store_slot(value, slot)
        else:
            with ir.InsertionPoint(anchor), anchor.location:
                self.store_slot(value, slot)

    def _demote_for(self, op, per) -> None:
        """Carry the per-thread iter args ``per`` of ``op`` in per-thread slots.

        Each use of an iter arg becomes a load of its slot right before the
        user, and each yielded value a store to its slot.  An iteration reads
        the slots' old values and writes their new ones, so every read of a
        slot's old value must come before the store to that slot: a value
        yielded straight from a demoted iter arg (``a, b = b, a``) is loaded
        at the yield before any store there, and a store moved up to its
        value's def (:meth:`_store_early`) must not pass any such read.
        """
        body = op.regions[0].blocks[0]
        inits = list(op.operands)[3:]
        inner = list(body.arguments)[1:]
        yld = terminator(body)
        yielded = list(yld.operands)
        perset = set(per)
        slots = {i: self._carried_slot(inner[i].type, op) for i in per}
        # readers of each slot's value from the previous iteration (the loads
        # go right before them)
        late = {i: [op_of(u.owner) for u in inner[i].uses if op_of(u.owner) != yld]
                for i in per}
        for i in per:
            self._store_early(inits[i], slots[i], op)
        # values yielded straight from a demoted iter arg: load them all at the
        # yield, before any store to a slot
        values = {}
        preloads = {}
        for i in per:
            v = yielded[i]
            j = _iter_arg_index(v, body)
            if j is None or j not in perset:
                values[i] = v
            elif j == i:
                values[i] = None  # carried unchanged: the slot already holds it
            else:
                if j not in preloads:
                    with ir.InsertionPoint(yld), yld.location:
                        preloads[j] = self.load_slot(slots[j], remat=False)
                    late[j].append(op_of(preloads[j].owner))
                values[i] = preloads[j]
        for i in per:
            self._replace_uses_with_loads(
                inner[i], slots[i],
                skip=lambda o, n: o == yld and n in perset, remat=False)
            self._replace_uses_with_loads(op.results[i], slots[i])
        for i in per:
            if values[i] is not None:
                self._store_early(values[i], slots[i], yld, late_users=late[i])
        keep = [i for i in range(len(inner)) if i not in perset]
        self._rebuild_for(op, keep)

    def _carried_slot(self, t: ir.Type, op) -> ir.Value:
        """A slot for a per-thread value of type ``t`` that the barrier-containing ``op``
        carries (an iter arg or result); a located error for a type no slot holds."""
        try:
            return self.slot(t)
        except TypeError:
            raise _unsupported(f"a per-thread value of type {t} carried by this "
                               f"'{op.name}' across a barrier is not supported on the CPU "
                               "backend", op, self.name) from None

    def _rebuild_for(self, op, keep) -> None:
        operands = list(op.operands)
        body = op.regions[0].blocks[0]
        with ir.InsertionPoint(op), op.location:
            new = scf.ForOp(operands[0], operands[1], operands[2],
                            [operands[3 + i] for i in keep])
        new_op = op_of(new)
        for name in op.attributes:
            new_op.attributes[name] = op.attributes[name]
        new_body = new_op.regions[0].blocks[0]
        old_args = list(body.arguments)
        new_args = list(new_body.arguments)
        old_args[0].replace_all_uses_with(new_args[0])
        for j, i in enumerate(keep):
            old_args[1 + i].replace_all_uses_with(new_args[1 + j])
            op.results[i].replace_all_uses_with(new_op.results[j])
        yld = terminator(body)
        yielded = list(yld.operands)
        with ir.InsertionPoint(new_body), yld.location:
            new_yld = op_of(scf.YieldOp([yielded[i] for i in keep]))
        for inner_op in block_ops(body):
            inner_op.move_before(new_yld)
        op.erase()

    def _demote_if(self, op, per) -> None:
        blocks = [r.blocks[0] for r in op.regions if len(r.blocks)]
        perset = set(per)
        for i in per:
            slot = self._carried_slot(op.results[i].type, op)
            for blk in blocks:
                yld = terminator(blk)
                self._store_early(list(yld.operands)[i], slot, yld)
            self._replace_uses_with_loads(op.results[i], slot)
        keep = [i for i in range(len(op.results)) if i not in perset]
        with ir.InsertionPoint(op), op.location:
            new = scf.IfOp(op.operands[0], [op.results[i].type for i in keep],
                           has_else=len(blocks) > 1)
        new_op = op_of(new)
        for j, i in enumerate(keep):
            op.results[i].replace_all_uses_with(new_op.results[j])
        for k, blk in enumerate(blocks):
            yld = terminator(blk)
            yielded = list(yld.operands)
            new_blk = new_op.regions[k].blocks[0]
            with ir.InsertionPoint(new_blk), yld.location:
                new_yld = op_of(scf.YieldOp([yielded[i] for i in keep]))
            for inner_op in block_ops(blk):
                inner_op.move_before(new_yld)
        op.erase()

    # -- 5. segments and thread loops ---------------------------------------
    def _lower_level(self, block, preds=()) -> None:
        """Cut ``block`` (a block level) at barriers into thread loops.

        ``preds``: per-thread i1 values under which the level runs (the
        conditions of enclosing thread-dependent ``scf.if``s holding shuffles).
        """
        uni = self.uni
        segment = []
        term = terminator(block)
        for op in block_ops(block, with_terminator=True):
            if op == term:
                self._make_thread_loop(segment, op, preds)
                break
            if op in uni.hoisted:
                continue
            if op.name == "gpu.barrier":
                self._make_thread_loop(segment, op, preds)
                segment = []
                if self.races is not None:
                    self.races.barrier(op)
                op.erase()
            elif op in uni.sync and op.name == "scf.if" and not uni.is_uniform(op.operands[0]):
                self._lower_predicated_if(op, segment, preds)
                segment = []
            elif op in uni.sync:
                self._make_thread_loop(segment, op, preds)
                segment = []
                for region in op.regions:
                    for blk in region.blocks:
                        self._lower_level(blk, preds)
            else:
                segment.append(op)

    def _lower_predicated_if(self, op, segment, preds) -> None:
        """A thread-dependent ``scf.if`` holding shuffles: run both branches as
        block levels, each thread loop guarded by the (negated) condition."""
        cond = op.operands[0]
        blocks = [r.blocks[0] for r in op.regions if len(r.blocks)]
        branch_preds = [cond]
        if len(blocks) > 1:
            with ir.InsertionPoint(op), op.location:
                true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
                neg = arith.xori(cond, true)
            segment += [op_of(true.owner), op_of(neg.owner)]
            branch_preds.append(neg)
        self._make_thread_loop(segment, op, preds)
        for blk, pred in zip(blocks, branch_preds):
            self._lower_level(blk, tuple(preds) + (pred,))
        inline_regions(op)

    def _make_thread_loop(self, ops, before, preds=()) -> None:
        if not ops:
            return
        kb = self.known_block
        c0 = self.const(0)
        c1 = self.const(1)
        bounds = {d: (c0, self.bdim[d]) for d in _DIMS}
        # `if tid < s:` (tree reductions), `if tid == 0:`: loop over those threads only
        lanes = None if preds else lane_guard(ops, self.uni.is_uniform,
                                              offsets=self.checks is None)
        # an offset from the y/z thread ids (a linear-id guard): x range per y loop step
        per_row = lanes is not None and any(
            off is not None and not self.uni.is_uniform(off) for off in lanes.offsets)
        if lanes is not None and not per_row:
            with ir.InsertionPoint(before), ops[0].location:
                bounds["x"] = lane_range(lanes, self.bdim["x"], self.const)
        ivs = {}
        ip = ir.InsertionPoint(before)
        outer = None
        inner = None
        for i in (2, 1, 0):
            d = _DIMS[i]
            if i > 0 and kb and kb[i] == 1:
                ivs[d] = None
                continue
            if i == 0 and per_row:
                with ip, ops[0].location:
                    offsets = [off if off is None else self._rebuild_offset(off, ivs)
                               for off in lanes.offsets]
                    bounds["x"] = lane_range(lanes, self.bdim["x"], self.const, offsets)
            with ip, ops[0].location:
                loop = op_of(scf.ForOp(*bounds[d], c1))
            loop_body = loop.regions[0].blocks[0]
            with ir.InsertionPoint(loop_body), ops[0].location:
                yld = op_of(scf.YieldOp([]))
            ip = ir.InsertionPoint(yld)
            ivs[d] = loop_body.arguments[0]
            outer = outer or loop
            inner = loop
        seg_block = inner.regions[0].blocks[0]
        seg_end = terminator(seg_block)
        anchor = None
        for pred in preds:
            with ir.InsertionPoint(seg_end), ops[0].location:
                guard = op_of(scf.IfOp(pred))
            anchor = anchor or guard
            seg_block = guard.regions[0].blocks[0]
            with ir.InsertionPoint(seg_block), ops[0].location:
                seg_end = op_of(scf.YieldOp([]))
        for op in ops:
            op.move_before(seg_end)
        if lanes is not None:
            lanes.strip()
            ops = block_ops(seg_block) or [seg_end]   # an empty guarded body: just the yield
        tl = _ThreadLoop(outer=outer, inner=inner, ivs=ivs, anchor=anchor or ops[0],
                         seg_block=seg_block)
        self.loops.append(tl)
        self.loop_of_inner[inner] = tl

    def _rebuild_offset(self, value, ivs: dict):
        """The x-invariant ``value`` rebuilt at the current insertion point, with the
        y and z thread ids replaced by those loops' ivs (0 where there is no loop)."""
        if self.uni.is_uniform(value):
            return value
        op = defining_op(value)
        dim = thread_dim(op)
        if dim is not None:
            return ivs.get(dim) or self.const(0)
        operands = [self._rebuild_offset(v, ivs) for v in op.operands]   # before it
        new = op.clone()
        for k, v in enumerate(operands):
            new.operands[k] = v
        return new.results[0]

    def _enclosing_loop(self, op) -> Optional[_ThreadLoop]:
        p = op.parent
        while p is not None and p != self.func:
            tl = self.loop_of_inner.get(p)
            if tl is not None:
                return tl
            p = p.parent
        return None

    # -- 6. per-thread allocas ---------------------------------------------
    def _lower_allocas(self) -> None:
        for tl in self.loops:
            allocas = walk(tl.inner, lambda o: o.name == "memref.alloca")
            dynamic = False
            for a in allocas:
                mtype = ir.MemRefType(a.results[0].type)
                users = self._memref_users(a.results[0])
                loops = {self._enclosing_loop(u) for u in users}
                loops.discard(tl)
                # a view of it kept in a per-thread slot (a loop-carried memref): the
                # slot holds its address only, so the array must outlive the segment
                spilled = any(SPILL_ATTR in u.attributes for u in users)
                if len(a.operands) or not mtype.has_static_shape:
                    if loops or spilled:
                        raise _unsupported(
                            "a per-thread array of run-time size used across a barrier is "
                            "not supported on the CPU backend (it lives until the next "
                            "barrier); give it a compile-time size", a, self.name)
                    dynamic = True
                    continue
                stripped = strip_memory_space(mtype)
                if not loops and not spilled:
                    a.move_before(self.block_loop)
                    a.results[0].set_type(stripped)
                    self.seeds.add(a.results[0])
                    continue
                # lives across a barrier: one copy per thread, a view per thread
                shape = list(mtype.shape)
                if spilled:
                    self._per_thread_copies(a, mtype)
                    continue
                big_t = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()] + shape,
                                          mtype.element_type)
                big = self.entry_alloca(big_t, [self.nthreads])
                if a.results[0] in self.mem_labels:
                    self.mem_labels[big] = self.mem_labels[a.results[0]]
                with ir.InsertionPoint(a), a.location:
                    view = self._thread_view(big, shape, mtype.element_type)
                if str(view.type) != str(stripped):
                    self._check_retype_ok(a.results[0], a)
                a.results[0].replace_all_uses_with(view)
                a.erase()
            if dynamic:
                self._wrap_alloca_scope(tl)

    def _per_thread_copies(self, a, mtype) -> None:
        """One copy of alloca ``a`` per thread, each thread's a ``memref.view`` of its
        bytes: a view of the alloca's own type (a descriptor kept in a slot is rebuilt
        with that type, which has no offset, so the view must not need one)."""
        elem = mtype.element_type
        width = (ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType) else
                 64 if isinstance(elem, ir.IndexType) else
                 ir.FloatType(elem).width if isinstance(elem, ir.FloatType) else 0)
        own_type = strip_memory_space(mtype)
        if not width or str(own_type) != str(ir.MemRefType.get(list(mtype.shape), elem)):
            raise _unsupported(f"a per-thread array of type {own_type} kept across a barrier "
                               "in a loop-carried value is not supported on the CPU backend",
                               a, self.name)
        count = 1
        for d in mtype.shape:
            count *= d
        nbytes = -(-count * -(-width // 8) // 16) * 16   # each copy 16-byte aligned
        big_t = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i8())
        with ir.InsertionPoint(self.block_loop), ir.Location.unknown():
            total = arith.muli(self.nthreads, self.const(nbytes))
        big = self.entry_alloca(big_t, [total])
        if a.results[0] in self.mem_labels:
            self.mem_labels[big] = self.mem_labels[a.results[0]]
        with ir.InsertionPoint(a), a.location:
            shift = arith.muli(self.linear_tid(), self.const(nbytes))
            view = memref.ViewOp(own_type, big, shift, []).result
        a.results[0].replace_all_uses_with(view)
        a.erase()

    def _thread_view(self, big, shape, elem) -> ir.Value:
        ltid = self.linear_tid()
        rank = len(shape)
        strides = []
        s = 1
        for d in reversed(shape):
            strides.insert(0, s)
            s *= d
        dyn = ir.ShapedType.get_dynamic_stride_or_offset()
        layout = ir.StridedLayoutAttr.get(dyn, strides)
        rtype = ir.MemRefType.get(shape, elem, layout)
        static_offsets = [ir.ShapedType.get_dynamic_size()] + [0] * rank
        return memref.SubViewOp(rtype, big, [ltid], [], [],
                                static_offsets, [1] + shape, [1] * (rank + 1)).result

    def _memref_users(self, value) -> list:
        """Users of a memref value, looking through view-like ops."""
        users, todo = [], [value]
        while todo:
            v = todo.pop()
            for use in v.uses:
                owner = op_of(use.owner)
                users.append(owner)
                for r in owner.results:
                    if isinstance(r.type, ir.MemRefType):
                        todo.append(r)
        return users

    def _check_retype_ok(self, value, op) -> None:
        for use in value.uses:
            owner = op_of(use.owner)
            if owner.name not in ("memref.load", "memref.store", "memref.atomic_rmw",
                                  "memref.subview", "memref.dim", "vector.load",
                                  "vector.store", "vector.transfer_read",
                                  "vector.transfer_write", "memref.copy"):
                raise _unsupported(f"a private array used by '{owner.name}' across a barrier "
                                   "is not supported on the CPU backend", op, self.name)

    def _wrap_alloca_scope(self, tl) -> None:
        body = tl.body
        ops = block_ops(body)
        yld = terminator(body)
        with ir.InsertionPoint(yld), yld.location:
            scope = op_of(memref.AllocaScopeOp([]))
        blk = scope.regions[0].blocks.append()
        with ir.InsertionPoint(blk), yld.location:
            ret = ir.Operation.create("memref.alloca_scope.return", operands=[])
        for op in ops:
            op.move_before(ret)

    # -- 7. values crossing barriers ---------------------------------------
    def _demote_cross_segment_values(self) -> None:
        for tl in self.loops:
            for op in block_ops(tl.seg_block):
                for r in op.results:
                    groups = {}
                    for use in list(r.uses):
                        owner = op_of(use.owner)
                        user_loop = self._enclosing_loop(owner)
                        if user_loop is tl:
                            continue
                        if user_loop is None:
                            raise RuntimeError(
                                f"simt-to-cpu: per-thread value used outside thread loops in "
                                f"kernel {self.name!r}: {owner}")
                        groups.setdefault(user_loop, []).append((owner, use.operand_number))
                    for user_loop, uses in groups.items():
                        new = self._materialize(r, tl, user_loop)
                        for owner, n in uses:
                            owner.operands[n] = new

    def _remat_cost(self, value, tl, memo) -> int:
        if value in memo:
            return memo[value]
        memo[value] = _INF
        if isinstance(value, ir.BlockArgument):
            owner = op_of(value.owner.owner)
            cost = 0 if (self._enclosing_loop(owner) is None
                         and owner not in self.loop_of_inner) else _INF
        else:
            d = op_of(value.owner)
            where = self._enclosing_loop(d)
            if where is None:
                cost = 0
            elif where is not tl:
                cost = _INF
            elif d.name == "gpu.thread_id" or d in self.slot_loads:
                cost = 1
            elif is_pure(d) and not may_trap(d):
                cost = 1 + (4 if d.name.startswith("math.") else 0)
                for o in d.operands:
                    cost += self._remat_cost(o, tl, memo)
                    if cost > _REMAT_LIMIT:
                        cost = _INF
                        break
            else:
                cost = _INF
        memo[value] = cost
        return cost

    def _materialize(self, value, def_loop, use_loop) -> ir.Value:
        """``value`` (of ``def_loop``) for ``use_loop``: recomputed there when cheap, else
        loaded from a per-thread slot. A memref (or a value no slot holds, such as an
        LLVM memref descriptor) made by a side-effect-free op is made again there from
        its operands, themselves materialised: the memref still views the same buffer,
        which bounds and race checks follow. Else a memref's descriptor goes through a
        slot."""
        if value in use_loop.memo:
            return use_loop.memo[value]
        if self._remat_cost(value, def_loop, {}) <= _REMAT_LIMIT:
            new = self._clone_into(value, def_loop, use_loop)
        elif self._rebuildable(value) and (isinstance(value.type, ir.MemRefType)
                                           or not _slot_holds(value.type)):
            d = op_of(value.owner)
            operands = [self._materialize(o, def_loop, use_loop) for o in d.operands]
            clone = d.clone(ir.InsertionPoint(use_loop.anchor))
            for i, o in enumerate(operands):
                clone.operands[i] = o
            for old_r, new_r in zip(d.results, clone.results):
                use_loop.memo.setdefault(old_r, new_r)
            new = clone.results[list(d.results).index(value)]
        else:
            try:
                slot = self._value_slot(value)
            except TypeError:
                d = op_of(value.owner)
                raise _unsupported(f"a per-thread value of type {value.type} ('{d.name}') "
                                   "used across a barrier is not supported on the CPU "
                                   "backend", d, self.name) from None
            with ir.InsertionPoint(use_loop.anchor), ir.Location.unknown():
                new = self.load_slot(slot)
            if value in self.mem_labels:    # a debug report names it as before
                self.mem_labels[new] = self.mem_labels[value]
        use_loop.memo[value] = new
        return new

    def _rebuildable(self, value) -> bool:
        """``value`` is made by a side-effect-free op that cannot trap (a view op), so a
        later thread loop can make it again from its (materialised) operands."""
        if not isinstance(value, ir.OpResult):
            return False
        d = op_of(value.owner)
        return is_pure(d) and not may_trap(d)

    def _clone_into(self, value, def_loop, use_loop) -> ir.Value:
        if value in use_loop.memo:
            return use_loop.memo[value]
        if isinstance(value, ir.BlockArgument):
            return value
        d = op_of(value.owner)
        if self._enclosing_loop(d) is None:
            return value
        if d in self.slot_loads:
            with ir.InsertionPoint(use_loop.anchor), d.location:
                new = self.load_slot(self.slot_loads[d])
        else:
            operands = [self._clone_into(o, def_loop, use_loop) for o in d.operands]
            clone = d.clone(ir.InsertionPoint(use_loop.anchor))
            for i, o in enumerate(operands):
                clone.operands[i] = o
            new = clone.results[list(d.results).index(value)]
            for old_r, new_r in zip(d.results, clone.results):
                use_loop.memo.setdefault(old_r, new_r)
        use_loop.memo[value] = new
        return new

    def _value_slot(self, value) -> ir.Value:
        if value not in self.value_slots:
            slot = self.slot(value.type)
            d = op_of(value.owner)
            with ir.InsertionPoint.after(d), d.location:
                self.store_slot(value, slot)
            self.value_slots[value] = slot
        return self.value_slots[value]

    # -- 8. thread ids -----------------------------------------------------
    def _replace_thread_ids(self) -> None:
        for tl in self.loops:
            for op in walk(tl.inner, lambda o: o.name == "gpu.thread_id"):
                dim = dimension_of(op)
                iv = tl.ivs[dim]
                op.results[0].replace_all_uses_with(iv if iv is not None else self.const(0))
                op.erase()
        left = walk(self.func, lambda o: o.name.startswith("gpu."))
        if left:
            raise RuntimeError(f"simt-to-cpu left {left[0].name} in kernel {self.name!r}")

    def _strip_memory_spaces(self) -> None:
        for op in walk(self.func):
            for r in op.results:
                t = strip_memory_space(r.type)
                if t != r.type:
                    r.set_type(t)
            for region in op.regions:
                for blk in region.blocks:
                    for a in blk.arguments:
                        t = strip_memory_space(a.type)
                        if t != a.type:
                            a.set_type(t)
