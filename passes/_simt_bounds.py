"""Debug bounds checks for the SIMT-to-CPU pass (``CompileOptions.debug``).

Every ``memref.load``/``memref.store``/``memref.atomic_rmw`` and
``vector.load``/``vector.store`` (its last element too) on a user-visible
memref (kernel arguments, workgroup and private memory) becomes::

    %ok = (i0 <u dim0) and (i1 <u dim1) ...     // unsigned: catches negatives
    %r = scf.if %ok {
      the access
    } else {
      call @__flydsl_oob_report(site, dim, index, size, block ids, thread ids)
      yield zero                                // loads read zero
    }

so an out-of-bounds access never touches memory.  The report helper
(private, cold, never inlined) counts the failure in the module's error
record ``@__flydsl_oob`` (a public ``memref.global``, exported from the
kernel library) and the first failure of a launch, the one whose atomic
increment found the count at zero, also stores where it happened.  The
runtime (:mod:`flydsl.runtime.debug_checks`) reads the record after a launch
and raises.  The site table, a JSON list describing each site id, goes into
the module attribute ``flydsl.debug_sites``; the CPU backend copies it into
the artifact's ``debug_sites`` stage.

Each ``cf.assert`` (``fx.device_assert``, emitted in debug mode only) becomes::

    scf.if %failed {
      atomic add 1 to the record's assertion count
      call @__flydsl_oob_report(site, 0, 0, 0, block ids, thread ids)
    }

with a site whose ``op`` is ``"assert"`` and ``message`` the assertion's.
Shared-memory race checks (:mod:`._simt_racecheck`) report through the same
record and helper (``declare_record``, ``add_site``).
"""
from __future__ import annotations

import json
from typing import Callable, Optional

import mlir.ir as ir
from mlir.dialects import arith, func, memref, scf, ub

from flydsl.runtime import debug_checks as rec

from ._simt_ir import source_location, strip_memory_space
from .ir import op_of, root_memref, walk

#: Module attribute holding the JSON site table.
SITES_ATTR = "flydsl.debug_sites"
REPORT_FUNC = "__flydsl_oob_report"

_CHECKED = {
    # op name -> (index of the memref operand, index of the first index operand, kind)
    "memref.load": (0, 1, "load"),
    "memref.store": (1, 2, "store"),
    "memref.atomic_rmw": (1, 2, "atomic"),
    "vector.load": (0, 1, "load"),       # the last index and the vector's length
    "vector.store": (1, 2, "store"),
}


#: ids(op) -> [linear block, block x, y, z, thread x, y, z] (index values built
#: at the current insertion point, which lies inside ``op``'s thread loop).
IdsFn = Callable[[ir.Operation], list]


class BoundsChecks:
    """The bounds checks of one module: its error record, report helper and sites."""

    def __init__(self, top: ir.Block):
        self.top = top
        self.sites: list = []
        self._declared = False

    def guard_kernel(self, func_op: ir.Operation, kernel: str, ids: IdsFn, *,
                     skip=(), labels: Optional[dict] = None, only=None) -> int:
        """Guard the accesses in ``func_op``; return how many.

        ``skip``: memrefs indexed in bounds by construction (pass scratch
        buffers); ``labels``: root memref value -> site fields naming it
        (``{"arg": 0, "name": "a"}``, ``{"tensor": "shared array 0"}``);
        ``only``: guard just the accesses of these root memrefs (and no asserts).
        """
        skip = set(skip)
        labels = labels or {}
        if only is not None:     # a checked view (a shared pool's) checks its whole buffer
            only = {root_memref(m) for m in only}
        count = 0
        for op in walk(func_op, lambda o: o.name in _CHECKED):
            mem_at, idx_at, kind = _CHECKED[op.name]
            operands = list(op.operands)
            mem, indices = operands[mem_at], operands[idx_at:]
            if mem in skip or not indices:
                continue
            if only is not None and root_memref(mem) not in only:
                continue
            site = self.add_site(op, kernel, kind, type=str(strip_memory_space(mem.type)),
                                 **labels.get(root_memref(mem), {"tensor": "a local array"}))
            self._guard(op, mem, indices, site, ids)
            count += 1
        for op in walk(func_op, lambda o: o.name == "cf.assert" and only is None):
            site = self.add_site(op, kernel, "assert",
                                 message=ir.StringAttr(op.attributes["msg"]).value)
            self._check_assert(op, site, ids)
            count += 1
        return count

    def add_site(self, op, kernel: str, kind: str, **fields) -> int:
        """Describe a check of ``op`` in the site table (declaring the record); its id."""
        self.declare_record()
        filename, lineno, source = source_location(op)
        self.sites.append({"kernel": kernel, "file": filename, "line": lineno,
                           "source": source, "op": kind, **fields})
        return len(self.sites) - 1

    def finish(self, module: ir.Module) -> None:
        """Attach the site table to ``module`` (nothing when no access was guarded)."""
        if self.sites:
            module.operation.attributes[SITES_ATTR] = ir.StringAttr.get(
                json.dumps(self.sites, separators=(",", ":")))

    # -- the guard -----------------------------------------------------------
    def _guard(self, op, mem, indices, site: int, ids: IdsFn) -> None:
        index = ir.IndexType.get()
        mtype = ir.MemRefType(mem.type)
        with ir.InsertionPoint(op), op.location:
            sizes, inside = [], []
            lanes = _vector_length(op)
            for i, idx in enumerate(indices):
                if mtype.is_dynamic_dim(i):
                    size = memref.dim(mem, arith.ConstantOp(index, i).result)
                else:
                    size = arith.ConstantOp(index, mtype.shape[i]).result
                sizes.append(size)
                ok = arith.cmpi(arith.CmpIPredicate.ult, idx, size)
                if lanes > 1 and i == len(indices) - 1:   # and its last element
                    last = arith.addi(idx, arith.ConstantOp(index, lanes - 1).result)
                    ok = arith.andi(ok, arith.cmpi(arith.CmpIPredicate.ult, last, size))
                inside.append(ok)
            ok = inside[0]
            for c in inside[1:]:
                ok = arith.andi(ok, c)
            guard = op_of(scf.IfOp(ok, [r.type for r in op.results], has_else=True))
        for old, new in zip(op.results, guard.results):
            old.replace_all_uses_with(new)
        with ir.InsertionPoint(guard.regions[0].blocks[0]), op.location:
            yld = scf.YieldOp(list(op.results))
        op.move_before(op_of(yld))
        with ir.InsertionPoint(guard.regions[1].blocks[0]), op.location:
            # the first failing dimension: fold from the last one down
            last = len(indices) - 1
            dim, bad, size = arith.ConstantOp(index, last).result, indices[last], sizes[last]
            for i in range(last - 1, -1, -1):
                dim = arith.select(inside[i], dim, arith.ConstantOp(index, i).result)
                bad = arith.select(inside[i], bad, indices[i])
                size = arith.select(inside[i], size, sizes[i])
            report(site, dim, bad, size, ids(op))
            scf.YieldOp([_zero(r.type) for r in op.results])

    def _check_assert(self, op, site: int, ids: IdsFn) -> None:
        """``cf.assert %ok`` -> count and report the failure when ``%ok`` is false."""
        index = ir.IndexType.get()
        with ir.InsertionPoint(op), op.location:
            true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
            failed = scf.IfOp(arith.xori(op.operands[0], true))
            with ir.InsertionPoint(failed.then_block):
                count_failure(rec.ASSERTS)
                zero = arith.ConstantOp(index, 0).result
                report(site, zero, zero, zero, ids(op))
                scf.YieldOp([])
        op.erase()

    # -- the error record and the report helper -------------------------------
    def declare_record(self) -> None:
        """Declare the error record and the report helper (once per module)."""
        if self._declared:
            return
        self._declared = True
        i64 = ir.IntegerType.get_signless(64)
        index = ir.IndexType.get()
        rtype = ir.MemRefType.get([rec.RECORD_SLOTS], i64)
        with ir.InsertionPoint.at_block_begin(self.top), ir.Location.unknown():
            # public: exported from the kernel library for the runtime to read
            memref.GlobalOp(rec.OOB_SYMBOL, ir.TypeAttr.get(rtype),
                            initial_value=ir.DenseElementsAttr.get_splat(
                                ir.RankedTensorType.get([rec.RECORD_SLOTS], i64),
                                ir.IntegerAttr.get(i64, 0)))
            # (site, dim, index, size, linear block, block x/y/z, thread x/y/z,
            #  other thread x/y/z)
            f = func.FuncOp(REPORT_FUNC, ([index] * 14, []), visibility="private")
            # internal (not exported); kept out of line and cold, away from the hot loops
            f.attributes["llvm.linkage"] = ir.Attribute.parse("#llvm.linkage<internal>")
            f.attributes["passthrough"] = ir.ArrayAttr.get(
                [ir.StringAttr.get("noinline"), ir.StringAttr.get("cold")])
        entry = f.add_entry_block()
        site, dim, bad, size, lin, bx, by, bz, tx, ty, tz, ox, oy, oz = entry.arguments
        with ir.InsertionPoint(entry), ir.Location.unknown():
            g = memref.get_global(rtype, rec.OOB_SYMBOL)
            c0 = arith.ConstantOp(index, 0).result
            one = arith.ConstantOp(i64, 1).result
            old = memref.atomic_rmw(arith.AtomicRMWKind.addi, one, g, [c0])
            first = arith.cmpi(arith.CmpIPredicate.eq, old, arith.ConstantOp(i64, 0).result)
            if_first = scf.IfOp(first)
            func.ReturnOp([])
        with ir.InsertionPoint(if_first.regions[0].blocks[0]), ir.Location.unknown():
            fields = {rec.SITE: site, rec.BLOCK_LINEAR: lin, rec.BLOCK: bx,
                      rec.BLOCK + 1: by, rec.BLOCK + 2: bz, rec.THREAD: tx,
                      rec.THREAD + 1: ty, rec.THREAD + 2: tz, rec.DIM: dim,
                      rec.INDEX: bad, rec.SIZE: size, rec.OTHER_THREAD: ox,
                      rec.OTHER_THREAD + 1: oy, rec.OTHER_THREAD + 2: oz}
            for slot, value in fields.items():
                memref.store(arith.index_cast(i64, value), g,
                             [arith.ConstantOp(index, slot).result])
            scf.YieldOp([])


def report(site, dim, index, size, ids: list, other=None) -> None:
    """Call the report helper at the current insertion point: ``site`` an id (or an
    index value), ``ids`` from an :data:`IdsFn`, ``other`` a race's other thread ids
    (index values; None: -1s)."""
    idx = ir.IndexType.get()
    if other is None:
        other = [arith.ConstantOp(idx, -1).result] * 3
    if isinstance(site, int):
        site = arith.ConstantOp(idx, site).result
    func.CallOp([], ir.FlatSymbolRefAttr.get(REPORT_FUNC),
                [site, dim, index, size, *ids, *other])


def count_failure(slot: int) -> None:
    """Atomically add one to ``slot`` of the error record (at the insertion point)."""
    i64 = ir.IntegerType.get_signless(64)
    record = memref.get_global(ir.MemRefType.get([rec.RECORD_SLOTS], i64), rec.OOB_SYMBOL)
    memref.atomic_rmw(arith.AtomicRMWKind.addi, arith.ConstantOp(i64, 1).result, record,
                      [arith.ConstantOp(ir.IndexType.get(), slot).result])


def _vector_length(op: ir.Operation) -> int:
    """How many consecutive elements ``op`` accesses along its last index."""
    if op.name == "vector.load":
        t = op.results[0].type
    elif op.name == "vector.store":
        t = op.operands[0].type
    else:
        return 1
    shape = ir.VectorType(t).shape
    return shape[-1] if shape else 1


def _zero(t: ir.Type) -> ir.Value:
    """A zero of type ``t`` (what an out-of-bounds load reads); poison if ``t`` has none."""
    if isinstance(t, ir.VectorType):
        attr = _zero_attr(ir.VectorType(t).element_type)
        if attr is not None:
            return arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(t, attr)).result
    else:
        attr = _zero_attr(t)
        if attr is not None:
            return arith.ConstantOp(t, attr).result
    return ub.PoisonOp(t).result


def _zero_attr(t: ir.Type) -> Optional[ir.Attribute]:
    if isinstance(t, (ir.IntegerType, ir.IndexType)):
        return ir.IntegerAttr.get(t, 0)
    if isinstance(t, ir.FloatType):
        return ir.FloatAttr.get(t, 0.0)
    return None
