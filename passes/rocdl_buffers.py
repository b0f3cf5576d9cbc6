"""Raw AMD buffer operations on targets without buffer instructions (the CPU and CUDA
backends).

FlyDSL kernels build buffer resources and access memory through them with raw ROCDL
operations (``rocdl.make.buffer.rsrc``, ``rocdl.raw.ptr.buffer.load/store`` and the
``raw.ptr.buffer.atomic.*`` family). On gfx9 they are the ``buffer_*`` instructions; this
pass (run before :mod:`.simt_to_cpu` on the CPU, early on CUDA) gives them the same
semantics with plain LLVM memory operations, following the CDNA3 ISA for a raw buffer (stride 0):

* the address is ``base + soffset + voffset`` (the immediate offset of the intrinsics
  is folded into ``voffset`` by their callers);
* the range check is on the whole offset ``voffset + soffset`` (each unsigned 32 bits,
  summed without wrapping: the CDNA ISAs' total offset, as ROCm's CDNA simulator checks
  it against the hardware), for each 32-bit word of a 64/96/128-bit access on its own: a
  word is inside when its last byte lies below ``num_records`` (bytes);
* a load gives 0 for each word outside, a store writes only the words inside, an atomic
  (one word) does nothing outside and a returning one gives 0.

Loads and stores become ``llvm.intr.masked.load``/``masked.store`` of the words (no
access to a word outside), atomics ``llvm.atomicrmw``/``cmpxchg`` under an ``scf.if``.
A resource must come from a ``rocdl.make.buffer.rsrc`` of the same function with stride
0; other ROCDL operations and ``llvm.amdgcn.*`` intrinsics have no equivalent here and
are located errors (LLVM would abort on them).
"""
from __future__ import annotations

from typing import Optional

import mlir.ir as ir

from flydsl.errors import UnsupportedConstructError

from ._simt_ir import source_location
from .ir import defining_op, walk

MAKE = "rocdl.make.buffer.rsrc"
LOAD = "rocdl.raw.ptr.buffer.load"
STORE = "rocdl.raw.ptr.buffer.store"
#: Atomic read-modify-writes: op name -> llvm.atomicrmw binop.
ATOMICS = {"rocdl.raw.ptr.buffer.atomic.fadd": "fadd", "rocdl.raw.ptr.buffer.atomic.fmax": "fmax",
           "rocdl.raw.ptr.buffer.atomic.smax": "max", "rocdl.raw.ptr.buffer.atomic.umin": "umin"}
CMPSWAP = "rocdl.raw.ptr.buffer.atomic.cmpswap"
#: Bytes of a buffer word: the unit of the range check.
WORD = 4


def run(module, target=None, options=None) -> None:
    """Lower every raw buffer operation and the portable ROCDL math of ``module``;
    reject other ROCDL operations."""
    lowering = _Lowering()
    for op in walk(module.operation, lambda o: o.name in (LOAD, STORE, CMPSWAP)
                   or o.name in ATOMICS):
        lowering.lower(op)
    for make in walk(module.operation, lambda o: o.name == MAKE):
        users = [u.owner for r in make.results for u in r.uses]
        if users:
            raise _error(f"a buffer resource (rocdl.make.buffer.rsrc) is used by "
                         f"'{users[0].name}', which the {_backend(target)} backend cannot "
                         "run; it runs raw buffer loads, stores and atomics",
                         _op(users[0]))
        make.erase()
    for op in walk(module.operation, lambda o: o.name in _PORTABLE_MATH):
        _lower_math(op)
    for op in walk(module.operation, _is_amd_only):
        raise _error(f"'{_amd_name(op)}' is an AMD GPU operation with no equivalent on the "
                     f"{_backend(target)} backend", op)


#: ROCDL math operations with a portable meaning (raw ``rocdl.exp2(T.f32, x)`` in
#: FlyDSL kernels, as ``fx.rocdl.exp2`` computes off ROCm): 2 ** x and 1 / x.
_PORTABLE_MATH = ("rocdl.exp2", "rocdl.rcp")


def _lower_math(op: ir.Operation) -> None:
    from mlir.dialects import arith, math
    x = op.operands[0]
    with ir.InsertionPoint(op), op.location:
        if op.name == "rocdl.exp2":
            new = math.exp2(x)
        else:
            new = arith.divf(arith.constant(x.type, 1.0), x)
    op.results[0].replace_all_uses_with(new)
    op.erase()


def _backend(target) -> str:
    return getattr(target, "backend", None) or "cpu"


def _op(x) -> ir.Operation:
    return x.operation if not isinstance(x, ir.Operation) else x


def _is_amd_only(op: ir.Operation) -> bool:
    if op.name.startswith("rocdl."):
        return True
    if op.name == "llvm.call_intrinsic":
        return ir.StringAttr(op.attributes["intrin"]).value.startswith("llvm.amdgcn.")
    return False


def _amd_name(op: ir.Operation) -> str:
    if op.name == "llvm.call_intrinsic":
        return ir.StringAttr(op.attributes["intrin"]).value
    return op.name


def _error(message: str, op: ir.Operation) -> UnsupportedConstructError:
    filename, lineno, source = source_location(op)
    return UnsupportedConstructError(message, kernel=_kernel_of(op), filename=filename,
                                     lineno=lineno, source_line=source)


def _kernel_of(op: ir.Operation) -> str:
    p = op.parent
    while p is not None:
        p = _op(p)
        if p.name in ("gpu.func", "func.func", "llvm.func") and "sym_name" in p.attributes:
            return ir.StringAttr(p.attributes["sym_name"]).value
        p = p.parent
    return ""


class _Resource:
    """A ``rocdl.make.buffer.rsrc``'s base address and size as i64 values."""

    def __init__(self, base: ir.Value, num_records: ir.Value):
        self.base, self.num_records = base, num_records


class _Lowering:
    def __init__(self):
        self.resources: dict = {}      # make op -> _Resource

    def resource(self, value: ir.Value, user: ir.Operation) -> _Resource:
        from mlir.dialects import arith, llvm
        make = defining_op(value)
        if make is None or make.name != MAKE:
            where = "a block argument" if make is None else f"'{make.name}'"
            raise _error(f"'{user.name}': its buffer resource comes from {where}; on this "
                         "backend it must be the result of rocdl.make.buffer.rsrc in the "
                         "same kernel (not passed through a loop, branch or call)", user)
        res = self.resources.get(make)
        if res is not None:
            return res
        base, stride, records, _flags = make.operands
        if not _is_zero(stride):
            raise _error("rocdl.make.buffer.rsrc: only raw buffers (stride 0) run on this "
                         "backend; the stride here is not the constant 0", make)
        i64 = ir.IntegerType.get_signless(64)
        with ir.InsertionPoint(make), make.location:
            addr = llvm.ptrtoint(i64, base)
            width = ir.IntegerType(records.type).width
            # num_records is a 32-bit field of the descriptor
            if width > 32:
                records = arith.trunci(ir.IntegerType.get_signless(32), records)
            records = arith.extui(i64, records)
        res = _Resource(addr, records)
        self.resources[make] = res
        return res

    def lower(self, op: ir.Operation) -> None:
        if op.name == LOAD:
            rsrc, voff, soff, _aux = op.operands
            data_type, data = op.results[0].type, None
        elif op.name == STORE:
            data, rsrc, voff, soff, _aux = op.operands
            data_type = data.type
        elif op.name == CMPSWAP:
            data, cmp, rsrc, voff, soff, _aux = op.operands
            data_type = data.type
        else:
            data, rsrc, voff, soff, _aux = op.operands
            data_type = data.type
        res = self.resource(rsrc, op)
        with ir.InsertionPoint(op), op.location:
            if op.name in (LOAD, STORE):
                value = self._load_store(op, res, voff, soff, data_type, data)
            else:
                value = self._atomic(op, res, voff, soff, data_type, data,
                                     cmp if op.name == CMPSWAP else None)
        if value is not None:
            op.results[0].replace_all_uses_with(value)
        op.erase()

    # -- loads and stores ------------------------------------------------------------

    def _load_store(self, op, res: _Resource, voff, soff, data_type, data) -> Optional[ir.Value]:
        from mlir.dialects import llvm
        nbytes = _bytes(data_type)
        if nbytes is None or (nbytes > WORD and nbytes % WORD):
            raise _error(f"'{op.name}' of {data_type}: the buffer operation moves 1, 2 or a "
                         "multiple of 4 bytes", op)
        words = max(nbytes // WORD, 1)
        word_t = ir.IntegerType.get_signless(min(nbytes, WORD) * 8)
        vec_t = ir.VectorType.get([words], word_t)
        mask = self._word_mask(res, voff, soff, nbytes, words)
        ptr = self._address(res, voff, soff)
        i32 = ir.IntegerType.get_signless(32)
        align = ir.IntegerAttr.get(i32, 1)
        if data is None:
            zero = _zero(vec_t)
            loaded = llvm.intr_masked_load(vec_t, ptr, mask, align, pass_thru=zero)
            return _from_words(loaded, data_type)
        llvm.intr_masked_store(_to_words(data, vec_t), ptr, mask, align)
        return None

    def _word_mask(self, res: _Resource, voff, soff, nbytes: int, words: int) -> ir.Value:
        """vector<words x i1>: word k (bytes voff+soff+4k .. ) lies below num_records."""
        from mlir.dialects import arith, vector
        i64 = ir.IntegerType.get_signless(64)
        v = arith.addi(arith.extui(i64, voff), arith.extui(i64, soff))
        ends = [arith.addi(v, _const(i64, WORD * k + min(WORD, nbytes - WORD * k)))
                for k in range(words)]
        inside = [arith.cmpi(arith.CmpIPredicate.ule, e, res.num_records) for e in ends]
        return vector.from_elements(ir.VectorType.get([words], ir.IntegerType.get_signless(1)),
                                    inside)

    def _address(self, res: _Resource, voff, soff) -> ir.Value:
        from mlir.dialects import arith, llvm
        i64 = ir.IntegerType.get_signless(64)
        addr = arith.addi(res.base, arith.addi(arith.extui(i64, soff), arith.extui(i64, voff)))
        return llvm.inttoptr(llvm.PointerType.get(0), addr)

    # -- atomics ---------------------------------------------------------------------

    def _atomic(self, op, res: _Resource, voff, soff, data_type, data, cmp) -> Optional[ir.Value]:
        from mlir.dialects import arith, llvm, scf
        nbytes = _bytes(data_type)
        if nbytes is None or nbytes > 8:
            raise _error(f"'{op.name}' of {data_type} is not a buffer atomic", op)
        i64 = ir.IntegerType.get_signless(64)
        end = arith.addi(arith.addi(arith.extui(i64, voff), arith.extui(i64, soff)),
                         _const(i64, nbytes))
        inside = arith.cmpi(arith.CmpIPredicate.ule, end, res.num_records)
        returns = len(op.results) == 1
        branch = scf.IfOp(inside, [data_type] if returns else [], has_else=returns)
        with ir.InsertionPoint(branch.then_block):
            ptr = self._address(res, voff, soff)
            if cmp is not None:
                pair = llvm.cmpxchg(ptr, cmp, data, llvm.AtomicOrdering.monotonic,
                                    llvm.AtomicOrdering.monotonic, alignment=nbytes)
                old = llvm.extractvalue(data_type, pair, [0])
            else:
                kind = getattr(llvm.AtomicBinOp, ATOMICS[op.name])
                old = llvm.atomicrmw(kind, ptr, data, llvm.AtomicOrdering.monotonic,
                                     alignment=nbytes)
            scf.YieldOp([old] if returns else [])
        if not returns:
            return None
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([_zero(data_type)])
        return branch.results[0]


# -- helpers ---------------------------------------------------------------------------

def _is_zero(value: ir.Value) -> bool:
    op = defining_op(value)
    if op is None or op.name not in ("arith.constant", "llvm.mlir.constant"):
        return False
    try:
        return ir.IntegerAttr(op.attributes["value"]).value == 0
    except (ValueError, TypeError, KeyError):
        return False


def _bytes(t: ir.Type) -> Optional[int]:
    if isinstance(t, ir.VectorType):
        vt = ir.VectorType(t)
        elem = _bytes(vt.element_type)
        n = 1
        for d in vt.shape:
            n *= d
        return None if elem is None else elem * n
    width = getattr(t, "width", None)
    if width is None or width % 8:
        return None
    return width // 8


def _const(t: ir.Type, v: int) -> ir.Value:
    from mlir.dialects import arith
    return arith.constant(t, v)


def _zero(t: ir.Type) -> ir.Value:
    from mlir.dialects import llvm
    return llvm.mlir_zero(t)


def _to_words(data: ir.Value, vec_t: ir.Type) -> ir.Value:
    from mlir.dialects import llvm
    return data if data.type == vec_t else llvm.bitcast(vec_t, data)


def _from_words(words: ir.Value, t: ir.Type) -> ir.Value:
    from mlir.dialects import llvm
    return words if words.type == t else llvm.bitcast(t, words)
