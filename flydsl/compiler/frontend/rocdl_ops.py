"""The AMD-specific builtins of ``fx.rocdl`` beyond plain copies and MMAs: scheduling
hints and waits, ``readfirstlane``, buffer loads straight to LDS and buffer atomics.

* **ROCm (gfx9)**: the instruction (``s_waitcnt``, ``s_setprio``, the
  ``llvm.amdgcn.sched.*`` directives, ``v_readfirstlane_b32``,
  ``llvm.amdgcn.raw.ptr.buffer.load.lds``, ``buffer_atomic_*``).
* **CPU and CUDA**: the same semantics with portable operations: hints are no-ops,
  ``readfirstlane`` is a shuffle from the first active lane, a buffer-to-LDS load is a
  checked load (0 past the buffer's records; on the CPU a raw buffer load, per 32-bit
  word as the hardware checks) and a store at the wave's destination
  plus the lane's offset, a buffer atomic is an atomic read-modify-write skipped past
  the records.
"""
from __future__ import annotations

import copy
from typing import Optional

import mlir.ir as ir
from mlir.dialects import arith, llvm, memref, rocdl, scf, vector
from mlir.dialects._ods_common import get_op_result_or_op_results

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import implementation
from . import async_marks, context
from .buffer_resources import address, byte_offset, checked_vector_load, guarded_load, in_records, \
    raw_buffer_access, raw_load, resource, tensor_pointer, word_checked_access
from .values import Value, as_value, cast, to_index
from .views import TensorView, vector_load, vector_store, vector_type, when

__all__ = ["rocdl_buffer_rsrc", "rocdl_buffer_tensor", "rocdl_hint", "rocdl_intrinsic", "rocdl_mfma", "rocdl_raw", "rocdl_readfirstlane",
           "rocdl_tensor_pointer", "rocdl_update_dpp", "buffer_lds_copy", "buffer_atomic_copy"]

#: Lanes of an AMD wave: a buffer-to-LDS load puts lane ``l``'s data ``l * bytes`` past
#: the wave's LDS base on every target.
WAVE_LANES = 64


def _backend() -> str:
    return context.current().target.backend


def _i32(n: int) -> ir.Value:
    return arith.constant(ir.IntegerType.get_signless(32), n)


# -- buffer tensors of a given size ---------------------------------------------------------

def rocdl_buffer_tensor(x, num_records_bytes) -> TensorView:
    """``fx.rocdl.make_buffer_tensor(x, num_records_bytes=n)``: the buffer resource covers
    ``n`` bytes from ``x``'s first element (whole elements; a partial one is dropped)."""
    from .views import TensorView as _View, buffer_tensor
    view = buffer_tensor(x)
    if not isinstance(view.offset, (int, Value)):
        raise DSLTypeError("fx.rocdl.make_buffer_tensor: num_records_bytes needs a tensor, "
                           "not a coordinate view")
    nbytes = _operand(num_records_bytes, "make_buffer_tensor")
    if nbytes.dtype.kind != "int":
        raise DSLTypeError(f"fx.rocdl.make_buffer_tensor: num_records_bytes must be an "
                           f"integer, got {nbytes.dtype.name}")
    nbytes = cast(nbytes, dt.Int64)
    records = nbytes // view.memory.itemsize + view.offset
    return _View(view.memory.with_records(records), view.offset, view.layout)


def rocdl_buffer_rsrc(ptr) -> ir.Value:
    """``fx.rocdl.get_buffer_rsrc(ptr)``: the raw buffer resource (``!llvm.ptr<8>``) of a
    buffer tensor's pointer, based at the pointer's element and covering the tensor's
    records from there (see :func:`.buffer_resources.resource`)."""
    from .pointer_ops import PointerValue
    target = context.current().target
    what = "fx.rocdl.get_buffer_rsrc"
    if not isinstance(ptr, PointerValue):
        raise DSLTypeError(f"{what} needs the pointer of a buffer tensor "
                           "(fx.get_iter(fx.rocdl.make_buffer_tensor(t))), got "
                           f"{type(ptr).__name__} {ptr!r}")
    if ptr.is_raw:
        raise DSLTypeError(f"{what}: the pointer is a raw address (fx.inttoptr, or a recast "
                           "global pointer), which no launched buffer is known to contain; "
                           "make the buffer tensor from the kernel's tensor argument")
    mem = ptr.memory
    if mem.records is None:
        raise DSLTypeError(f"{what} requires a buffer-descriptor pointer, got a {mem.space} "
                           f"pointer to the {mem.label()}; make it with "
                           "fx.rocdl.make_buffer_tensor")
    if mem.space != "global":
        raise DSLTypeError(f"{what}: a buffer resource addresses global memory, not the "
                           f"{mem.space} {mem.label()}")
    if target.backend not in ("rocm", "cpu", "cuda"):
        raise DSLTypeError(f"{what}: a raw AMD buffer resource, which the {target.backend} "
                           "backend has no equivalent of; access the buffer tensor with "
                           "fx.copy and fx.rocdl.BufferCopy*/BufferAtomic* atoms")
    if isinstance(ptr.offset, int) and ptr.offset < 0:
        raise DSLTypeError(f"{what}: the pointer lies {-ptr.offset} elements before the "
                           f"{mem.label()}, outside the launched buffer")
    if not isinstance(ptr.offset, (int, Value)):
        raise DSLTypeError(f"{what}: a coordinate (identity) tensor has no address")
    return resource(mem, mem.physical(ptr.offset))


def rocdl_tensor_pointer(ptr_type: ir.Type, x, what: str) -> ir.Value:
    """FlyDSL's ``fly.extract_aligned_pointer_as_index``: see
    :func:`.buffer_resources.tensor_pointer`."""
    return tensor_pointer(x, ptr_type, what)


# -- scheduling hints and waits -----------------------------------------------------------

def rocdl_hint(kind: str, *args: int) -> None:
    """``kind`` in sched_barrier, sched_group_barrier, s_waitcnt, s_setprio with its
    checked compile-time ints: the instruction on ROCm, nothing elsewhere."""
    context.current()
    if _backend() != "rocm":
        if kind == "s_waitcnt":     # the race checker's mark (race-check builds only)
            vmcnt = (args[0] & 0xF) | ((args[0] >> 10) & 0x30)
            if vmcnt < 0x3F:
                async_marks.event("vmcnt.wait", vmcnt)
        return
    if kind == "sched_barrier":
        rocdl.sched_barrier(args[0])
    elif kind == "sched_group_barrier":
        rocdl.sched_group_barrier(*args)
    elif kind == "s_waitcnt":
        rocdl.s_waitcnt(args[0])
    elif kind == "s_setprio":
        rocdl.s_setprio(args[0])
    else:
        raise AssertionError(kind)


# -- readfirstlane ----------------------------------------------------------------------

def _first_active_lane() -> ir.Value:
    from .warp_ops import _active_raw
    mask = _active_raw()
    first = llvm.intr_cttz(mask, False)
    width = ir.IntegerType(mask.type).width
    return first if width == 32 else arith.trunci(ir.IntegerType.get_signless(32), first)


def _uniform(v: Value) -> Value:
    from .warp_ops import _map_words, _shuffle, _warp
    if _backend() == "rocm":
        return _map_words(v, lambda w: rocdl.readfirstlane(w.type, w))
    return _shuffle(v, "idx", _first_active_lane(), _warp())


def rocdl_readfirstlane(value, dtype: Optional[dt.DType]) -> Value:
    """``fx.rocdl.readfirstlane``: see :func:`flydsl.expr.rocdl.readfirstlane`."""
    context.current()
    v = _operand(value, "readfirstlane")
    if not isinstance(v, Value) or v.dtype.kind == "bool" or v.dtype.bits not in (8, 16, 32, 64):
        raise DSLTypeError(f"fx.rocdl.readfirstlane needs a number, got {value!r}")
    if dtype is not None:
        v = cast(v, dtype)
    return _uniform(v)


# -- FlyDSL's direct ROCDL wrappers ------------------------------------------------------------

_MLIR_DTYPES = {"i1": dt.Bool, "i8": dt.Int8, "i16": dt.Int16, "i32": dt.Int32, "i64": dt.Int64,
                "f16": dt.Float16, "bf16": dt.BFloat16, "f32": dt.Float32, "f64": dt.Float64,
                "index": dt.Index}


def _dtype_of(res, fname: str) -> Optional[dt.DType]:
    """The flydsl dtype a FlyDSL result type names (a dtype, an MLIR type, ``T.i32``)."""
    if res is None:
        return None
    if isinstance(res, dt.DType):
        return res
    if callable(res) and not isinstance(res, (ir.Type, type)):
        res = res()                   # FlyDSL's T.i32 (a type getter), not called
    got = _MLIR_DTYPES.get(str(getattr(res, "ir_type", res)))
    if got is None:
        raise DSLTypeError(f"fx.rocdl.{fname}: unsupported result type {res!r}")
    return got


def _operand(x, fname: str) -> Value:
    if isinstance(x, ir.Value):     # a raw MLIR value (FlyDSL code mixes them in)
        dtype = _MLIR_DTYPES.get(str(x.type))
        if dtype is None:
            raise DSLTypeError(f"fx.rocdl.{fname}: unsupported operand type {x.type}")
        return Value(x, dtype)
    if hasattr(x, "ir_value") and not isinstance(x, Value):
        return _operand(x.ir_value(), fname)
    return as_value(x, None)


def rocdl_intrinsic(name: str, res, *args) -> Optional[Value]:
    """``fx.rocdl.<name>(res, *args)``: see :mod:`flydsl.expr.rocdl.intrinsics`."""
    context.current()
    from .warp_ops import _ballot_raw, _map_words, _mask_dtype, _shuffle, _warp
    rocm = _backend() == "rocm"
    if name == "s_barrier":
        if rocm:
            rocdl.s_barrier()
        else:
            implementation.ops().barrier()
        return None
    out = _dtype_of(res, name)
    if name in ("exp2", "rcp"):
        x = cast(_operand(args[0], name), dt.Float32)
        if rocm:
            r = getattr(rocdl, name)(x.v.type, x.v)
        elif name == "exp2":
            from mlir.dialects import math as mmath
            r = mmath.exp2(x.v)
        else:
            r = arith.divf(arith.constant(x.v.type, 1.0), x.v)
        return cast(Value(r, dt.Float32), out or dt.Float32)
    if name == "cvt_pk_fp8_f32":
        ocp = _ocp_fp8_arch()
        codes = [_pk_fp8_code(cast(_operand(v, name), dt.Float32), ocp) for v in args[:2]]
        old = cast(_operand(args[2], name), dt.Int32)
        high = bool(getattr(args[3], "value", args[3]))
        pair = arith.ori(codes[0], arith.shli(codes[1], _i32(8)))
        shift = 16 if high else 0
        keep = arith.andi(old.v, _i32(~(0xFFFF << shift)))
        word = arith.ori(keep, arith.shli(pair, _i32(shift)) if shift else pair)
        return cast(Value(word, dt.Int32), out or dt.Int32)
    if name in ("ds_bpermute", "readlane"):
        src = _operand(args[1] if name == "ds_bpermute" else args[0], name)
        sel = cast(_operand(args[0] if name == "ds_bpermute" else args[1], name), dt.Int32)
        if rocm and name == "ds_bpermute":
            got = _map_words(src, lambda w: rocdl.ds_bpermute(w.type, sel.v, w))
        elif rocm:
            got = _map_words(src, lambda w: rocdl.readlane(w.type, w, sel.v))
        else:
            lane = arith.shrui(sel.v, _i32(2)) if name == "ds_bpermute" else sel.v
            got = _shuffle(src, "idx", lane, _warp())
        return cast(got, out) if out is not None else got
    if name == "ballot":
        p = _operand(args[0], name)
        pred = p.v if p.dtype.kind == "bool" else (p != 0).v
        mask = Value(_ballot_raw(pred), _mask_dtype())
        return cast(mask, out) if out is not None else mask
    raise AssertionError(name)


def _pk_fp8_code(x: Value, ocp: bool) -> ir.Value:
    """The i32 code ``v_cvt_pk_fp8_f32`` gives the Float32 ``x`` (round to nearest even,
    no clamp modifier, MODE.FP16_OVFL clear as LLVM's kernels have it: not saturating).
    gfx942 (FNUZ): torch's rule, 0x80 for what overflows, inf and NaN. OCP E4M3 (gfx950,
    gfx12): NaN with ``x``'s sign (0x7F/0xFF) for what rounds past 448 (above 464, inf),
    where torch's (and ``fx.cast``'s) Float8E4M3FN saturates."""
    fp8 = dt.Float8E4M3FN if ocp else dt.Float8E4M3FNUZ
    i32 = ir.IntegerType.get_signless(32)
    code = arith.extui(i32, arith.bitcast(ir.IntegerType.get_signless(8), cast(x, fp8).v))
    if not ocp:
        return code
    from mlir.dialects import math as mmath
    over = arith.cmpf(arith.CmpFPredicate.OGT, mmath.absf(x.v),
                      arith.constant(ir.F32Type.get(), 464.0))
    sign = arith.andi(arith.shrui(arith.bitcast(i32, x.v), _i32(24)), _i32(0x80))
    return arith.select(over, arith.ori(sign, _i32(0x7F)), code)


def _ocp_fp8_arch() -> bool:
    """Whether the AMD arch the kernel is for (ROCm's target; on other backends the arch
    flydsl runs FlyDSL kernels as, ``get_rocm_arch()``) converts to the OCP fp8 codes
    (gfx950, gfx12: ``v_cvt_pk_fp8_f32`` gives E4M3FN) rather than gfx942's FNUZ ones."""
    target = context.current().target
    if target.backend == "rocm":
        arch = target.arch
    else:
        from ...runtime.device import get_rocm_arch
        arch = get_rocm_arch()
    return arch.startswith(("gfx950", "gfx12"))


# -- DPP: a lane reads another lane of its row (or wave) --------------------------------------

def _dpp_source(ctrl: int, lane: ir.Value, wave: int, what: str):
    """(source lane, i1 valid) of DPP control ``ctrl`` for ``lane`` (GFX9 encodings)."""
    def c(n):
        return _i32(n)
    true = arith.constant(ir.IntegerType.get_signless(1), 1)
    row_base = arith.andi(lane, c(~15))
    r = arith.andi(lane, c(15))
    if 0 <= ctrl <= 0xFF:                                  # quad_perm
        q = arith.andi(lane, c(3))
        pick = c((ctrl >> 6) & 3)
        for k in (2, 1, 0):
            pick = arith.select(arith.cmpi(arith.CmpIPredicate.eq, q, c(k)),
                                c((ctrl >> (2 * k)) & 3), pick)
        return arith.ori(arith.andi(lane, c(~3)), pick), true
    n = ctrl & 15
    if 0x101 <= ctrl <= 0x10F:                             # row_shl:n
        return arith.addi(lane, c(n)), arith.cmpi(arith.CmpIPredicate.slt,
                                                  arith.addi(r, c(n)), c(16))
    if 0x111 <= ctrl <= 0x11F:                             # row_shr:n
        return arith.subi(lane, c(n)), arith.cmpi(arith.CmpIPredicate.sge, r, c(n))
    if 0x121 <= ctrl <= 0x12F:                             # row_ror:n
        return arith.ori(row_base, arith.andi(arith.subi(r, c(n)), c(15))), true
    if ctrl in (0x130, 0x134, 0x138, 0x13C):               # wave_shl1/rol1/shr1/ror1
        step = 1 if ctrl in (0x130, 0x134) else -1
        src = arith.addi(lane, c(step))
        if ctrl in (0x134, 0x13C):
            return arith.andi(src, c(wave - 1)), true
        ok = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, src, c(0)),
                        arith.cmpi(arith.CmpIPredicate.slt, src, c(wave)))
        return src, ok
    if ctrl == 0x140:                                      # row_mirror
        return arith.ori(row_base, arith.subi(c(15), r)), true
    if ctrl == 0x141:                                      # row_half_mirror
        return arith.ori(arith.andi(lane, c(~7)),
                         arith.subi(c(7), arith.andi(lane, c(7)))), true
    if ctrl == 0x142:                                      # row_bcast:15
        return arith.subi(row_base, c(1)), arith.cmpi(arith.CmpIPredicate.sge, lane, c(16))
    if ctrl == 0x143:                                      # row_bcast:31
        return c(31), arith.cmpi(arith.CmpIPredicate.sge, lane, c(32))
    raise DSLTypeError(f"{what}: dpp_ctrl {ctrl:#x} is not a GFX9 DPP control (quad_perm "
                       "0x00-0xFF, row_shl/shr/ror 0x101-0x12F, wave shifts 0x130-0x13C, "
                       "row_mirror 0x140, row_half_mirror 0x141, row_bcast 0x142/0x143)")


def rocdl_update_dpp(res, old, src, dpp_ctrl, row_mask, bank_mask, bound_ctrl) -> Value:
    """``fx.rocdl.update_dpp``: see :func:`flydsl.expr.rocdl.update_dpp`."""
    from .warp_ops import _lane, _shuffle, _warp
    context.current()
    what = "fx.rocdl.update_dpp"
    ctrl, rmask, bmask = (_flag(x, what) for x in (dpp_ctrl, row_mask, bank_mask))
    bound = getattr(bound_ctrl, "value", bound_ctrl)
    if not isinstance(bound, bool):
        raise DSLTypeError(f"{what}: bound_ctrl must be a compile-time bool, got {bound_ctrl!r}")
    s = _operand(src, "update_dpp")
    out = _dtype_of(res, "update_dpp") or s.dtype
    s, o = cast(s, out), cast(_operand(old, "update_dpp"), out)
    if s.dtype.bits != 32:
        raise DSLTypeError(f"{what}: DPP moves 32-bit values, got {s.dtype.name}")
    if _backend() == "rocm":
        return Value(rocdl.update_dpp(s.v.type, o.v, s.v, ctrl, rmask, bmask, bound), out)
    lane = _lane()
    src_lane, valid = _dpp_source(ctrl, lane, _warp(), what)
    fetched = _shuffle(s, "idx", arith.select(valid, src_lane, lane), _warp())
    value = arith.select(valid, fetched.v, as_value(0, out).v if bound else o.v)
    row = arith.andi(arith.shrui(lane, _i32(4)), _i32(3))
    bank = arith.andi(arith.shrui(lane, _i32(2)), _i32(3))
    one = _i32(1)
    written = arith.andi(arith.andi(arith.shrui(_i32(rmask), row), one),
                         arith.andi(arith.shrui(_i32(bmask), bank), one))
    on = arith.cmpi(arith.CmpIPredicate.ne, written, _i32(0))
    return Value(arith.select(on, value, o.v), out)


# -- any other ROCDL operation, by its builder's name ----------------------------------------

def _raw_arg(x):
    if isinstance(x, Value):
        return x.v
    if isinstance(x, dt.DType):
        return x.mlir_type()
    if isinstance(x, (list, tuple)):
        return type(x)(_raw_arg(v) for v in x)
    if hasattr(x, "ir_value") and not isinstance(x, ir.Value):
        return x.ir_value()
    return x


#: Raw ROCDL operations the CPU and CUDA backends run (``passes/rocdl_buffers``: the
#: buffer resource and the raw buffer loads, stores and atomics as predicated accesses
#: with the hardware's range check).
PORTABLE_RAW_OPS = ("make_buffer_rsrc", "raw_ptr_buffer_load", "raw_ptr_buffer_store",
               "raw_ptr_buffer_atomic_fadd", "raw_ptr_buffer_atomic_fmax",
               "raw_ptr_buffer_atomic_smax", "raw_ptr_buffer_atomic_umin",
               "raw_ptr_buffer_atomic_cmpswap")


def rocdl_raw(name: str, args: tuple, kwargs: dict):
    """``fx.rocdl.<name>(...)`` for a ROCDL builder flydsl does not wrap: the operation on
    ROCm (kernel values passed as their MLIR values; the buffer operations take FlyDSL's
    forms of their i32 operands), and on the CPU and CUDA too for
    :data:`PORTABLE_RAW_OPS`; elsewhere a DSLTypeError."""
    from ..._mlir.dialects import rocdl as compat
    target = context.current().target
    portable = target.backend in ("cpu", "cuda")
    if target.backend != "rocm" and not (portable and name in PORTABLE_RAW_OPS):
        runs = ("the copy atoms, MFMA, readfirstlane, readlane, ds_bpermute, ballot, exp2, "
                "rcp, cvt_pk_fp8_f32, s_barrier and the scheduling hints")
        if portable:
            runs += ", and the raw buffer operations " + ", ".join(PORTABLE_RAW_OPS)
        raise DSLTypeError(f"fx.rocdl.{name}: a raw ROCDL operation, which only the rocm "
                           f"backend has (this is {target.backend}); flydsl runs these "
                           f"fx.rocdl operations everywhere: {runs}")
    builder = getattr(compat, name, None) or getattr(rocdl, name)
    return _results(builder(*(_raw_arg(a) for a in args),
                            **{k: _raw_arg(v) for k, v in kwargs.items()}))


def _results(built):
    """What a builder call gives, as MLIR's builder functions give it: an operation
    (where the dialect's op class has the builder's name, ``rocdl.mfma_*``) as its one
    result, its results, or itself when it has none."""
    if isinstance(built, ir.OpView):
        return get_op_result_or_op_results(built)
    return built


# -- FlyDSL's raw MFMA calls -----------------------------------------------------------------

def _raw(x, what: str) -> ir.Value:
    """An MFMA operand as a raw MLIR value (kernel values and Python ints accepted)."""
    if isinstance(x, ir.Value):
        return x
    if isinstance(x, Value):
        return x.v
    if hasattr(x, "ir_value"):
        return x.ir_value()
    if isinstance(x, int) and not isinstance(x, bool):
        return _i32(x)
    raise DSLTypeError(f"{what}: expected an MLIR value or a kernel value, got {x!r}")


def _flag(x, what: str) -> int:
    v = getattr(x, "value", x)
    if isinstance(v, bool) or not isinstance(v, int):
        raise DSLTypeError(f"{what}: cbsz/abid/blgp must be compile-time ints, got {x!r}")
    return v


def _mfma_spec(name: str, arch):
    from ...expr.mma_layouts import SPECS
    specs = [s for s in SPECS.values() if s.family == "mfma"
             and s.extra["rocdl_op"][len("rocdl."):].replace(".", "_") == name]
    for s in specs:
        if arch is None or arch in s.arches:
            return s, specs
    return None, specs


def _unpack(x: ir.Value, spec, operand: str, what: str) -> list:
    """The per-lane values (register order, as ``ab`` dtype Values) of a packed operand."""
    from .mma_ops import _ELEM
    from ...expr.mma_layouts import values_per_lane
    ab = _ELEM[spec.ab_dtype]
    n = values_per_lane(spec, operand)
    t = x.type
    if n == 1:
        return [cast(Value(x, dt.Float32), ab)]
    if spec.extra.get("packed_bytes"):          # fp8/bf8: 8 codes in an i64 (or its bits)
        i64 = ir.IntegerType.get_signless(64)
        if isinstance(t, ir.VectorType):
            x = vector.extract(vector.bitcast(ir.VectorType.get([1], i64), x), [], [0])
        i8 = ir.IntegerType.get_signless(8)
        codes = [arith.trunci(i8, arith.shrui(x, arith.constant(i64, 8 * j)) if j else x)
                 for j in range(n)]
        return [Value(c if ab.mlir_type() == i8 else arith.bitcast(ab.mlir_type(), c), ab)
                for c in codes]
    if not isinstance(t, ir.VectorType) or ir.VectorType(t).shape != [n]:
        raise DSLTypeError(f"{what}: operand {operand.upper()} must be a vector of {n} "
                           f"elements, got {t}")
    vals = [vector.extract(x, [], [j]) for j in range(n)]
    if spec.ab_dtype == "bf16" and isinstance(ir.VectorType(t).element_type, ir.IntegerType):
        vals = [arith.bitcast(ab.mlir_type(), v) for v in vals]
    return [Value(v, ab) for v in vals]


def rocdl_mfma(name: str, result_type, operands) -> ir.Value:
    """``fx.rocdl.<mfma name>(result_type, [a, b, c, cbsz, abid, blgp])``: see
    :mod:`flydsl.expr.rocdl.mfma`."""
    target = context.current().target
    what = f"fx.rocdl.{name}"
    ops_ = list(operands)
    if len(ops_) not in (3, 6):
        raise DSLTypeError(f"{what}: operands are [a, b, c] or [a, b, c, cbsz, abid, blgp], "
                           f"got {len(ops_)}")
    flags = [_flag(f, what) for f in ops_[3:]] or [0, 0, 0]
    a, b, c = (_raw(v, what) for v in ops_[:3])
    if target.backend == "rocm":
        spec, specs = _mfma_spec(name, target.arch)
        if spec is None:
            raise DSLTypeError(f"{what}: not on {target.arch}; it exists on "
                               f"{', '.join(x for s in specs for x in s.arches)}")
        res = c.type if result_type is None else getattr(result_type, "ir_type", result_type)
        # the result value, as on the CPU (an accumulator a runtime ``if`` merges, or
        # Vec(acc), needs the value)
        return _results(getattr(rocdl, name)(res, [a, b, c] + [_i32(f) for f in flags]))
    # the CPU runs FlyDSL kernels as get_rocm_arch() (gfx942 without FLYDSL_GPU_ARCH): a
    # name two arches read differently (fp8/bf8: gfx942's FNUZ codes, gfx950's OCP ones)
    # is that arch's instruction
    from ...runtime.device import get_rocm_arch
    spec, specs = _mfma_spec(name, get_rocm_arch())
    spec = spec or specs[0]
    if target.backend != "cpu":
        raise DSLTypeError(f"{what}: an AMD matrix-core instruction, which {target.arch} does "
                           f"not have (it exists on {', '.join(spec.arches)}); use "
                           "fx.make_mma_atom with an atom of this target")
    if any(flags):
        raise DSLTypeError(f"{what}: the CPU runs MFMAs with cbsz = abid = blgp = 0, got "
                           f"{flags}")
    from .mma_ops import _ACC, emulated_mfma
    a_vals, b_vals = _unpack(a, spec, "a", what), _unpack(b, spec, "b", what)
    nc = spec.c_regs[1]
    acc = _ACC[spec.acc_dtype]
    if not isinstance(c.type, ir.VectorType) or ir.VectorType(c.type).shape != [nc] \
            or ir.VectorType(c.type).element_type != acc.mlir_type():
        raise DSLTypeError(f"{what}: the accumulator must be a vector of {nc} "
                           f"{spec.acc_dtype}, got {c.type}")
    return emulated_mfma(spec, a_vals, b_vals, c)


# -- buffer loads straight to LDS -----------------------------------------------------------

def _wave_lane() -> ir.Value:
    return (implementation.ops().block_thread_index() % WAVE_LANES).v


def buffer_lds_copy(atom, src: TensorView, dst: TensorView, first: int, width: int,
                    so, do) -> None:
    """One call of a ``BufferCopyLDS`` atom: ``width`` elements from ``src`` (per lane,
    through the buffer resource) to LDS at the wave's destination ``do`` (the first active
    lane's) plus ``lane * width`` elements."""
    target = context.current().target
    bits = atom.op.bits
    if target.backend == "rocm":
        from ...expr.rocdl.copies import LDS_WIDE_ARCHES
        if not target.arch.startswith("gfx9"):
            raise DSLTypeError(f"fx.copy with {atom!r}: buffer loads to LDS exist on CDNA "
                               f"(gfx9) only, not {target.arch}")
        if bits != 32 and target.arch not in LDS_WIDE_ARCHES:
            raise DSLTypeError(f"fx.copy with {atom!r}: a {bits}-bit buffer load to LDS "
                               f"exists on {', '.join(LDS_WIDE_ARCHES)} only, not "
                               f"{target.arch}; use fx.rocdl.BufferCopyLDS32b()")
    lane_first = as_value(_uniform(_as_i32(do)), None)
    lane = Value(_wave_lane(), dt.Int32)
    sm, dm = src.memory, dst.memory
    # The hardware writes lane k's data at the wave's LDS address (M0) + k * width,
    # linearly: a swizzled destination view places only that base, at the element its
    # swizzle maps the wave's first offset to.
    lds_first = dm.physical(lane_first)
    dst_off = lds_first + lane * width
    dm = copy.copy(dm)
    dm.remap = None
    if target.backend == "rocm":
        lds = llvm.inttoptr(llvm.PointerType.get(3),
                            arith.index_cast(ir.IntegerType.get_signless(32),
                                             address(dm, lds_first)))
        rocdl.raw_ptr_buffer_load_lds(resource(sm), lds, _i32(bits // 8),
                                      byte_offset(sm, so), _i32(0), _i32(0), _i32(0))
        return
    vtype = vector_type(width, sm.dtype)
    if raw_buffer_access(sm):
        # the CPU: a raw buffer load (rocdl-buffers checks its words without a branch)
        loaded = raw_load(sm, so, vtype)
    elif word_checked_access(sm):
        # the CPU's memory-profiled build: the same words, by memref loads
        loaded = checked_vector_load(sm, so, width)
    else:
        # in range: one load of the call; else element by element (0 past the records)
        branch = scf.IfOp(in_records(sm, so, width), [vtype], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([vector_load(sm, so, width, sm.itemsize)])
        with ir.InsertionPoint(branch.else_block):
            elems = [guarded_load(sm, so + t if t else so).v for t in range(width)]
            scf.YieldOp([vector.from_elements(vtype, elems)])
        loaded = branch.results[0]
    async_marks.event("lds_dma.issue")
    with async_marks.async_writes("lds_dma"):
        vector_store(dm, dst_off, loaded, dm.itemsize)


def _as_i32(offset) -> Value:
    if isinstance(offset, int):
        return as_value(offset, dt.Int32)
    return cast(offset, dt.Int32) if offset.dtype is not dt.Int32 else offset


# -- buffer atomics ------------------------------------------------------------------------

_RMW = {("add", "float"): "addf", ("add", "int"): "addi", ("max", "float"): "maxnumf",
        ("max", "int"): "maxs", ("max", "uint"): "maxu", ("min", "float"): "minnumf",
        ("min", "int"): "mins", ("min", "uint"): "minu"}


def buffer_atomic_copy(atom, src: TensorView, dst: TensorView, first: int, width: int) -> None:
    """One call of a ``BufferAtomic*`` atom: ``dst[i] = op(dst[i], src[i])`` atomically
    for the call's ``width`` elements, skipping those past ``dst``'s buffer records."""
    op = atom.op
    dm = dst.memory
    if dm.records is None:
        raise DSLTypeError(f"fx.copy with {atom!r}: the destination must be a buffer tensor "
                           "(fx.rocdl.make_buffer_tensor)")
    if dm.space != "global":
        raise DSLTypeError(f"fx.copy with {atom!r}: the destination must be global memory")
    d = dm.dtype
    if op.dtype is not d:
        raise DSLTypeError(f"fx.copy with {atom!r}: the atomic is on {op.dtype.name} but the "
                           f"destination holds {d.name}")
    kind = "float" if d.kind == "float" else ("int" if d.signed else "uint")
    rmw = _RMW.get((op.op, kind))
    if rmw is None:
        raise DSLTypeError(f"fx.copy with {atom!r}: no atomic {op.op} on {d.name}")
    target = context.current().target
    for t in range(first, first + width):
        so, do = src.element_offset(t), dst.element_offset(t)
        val = src.memory.load(so)
        if target.backend == "rocm" and target.arch.startswith("gfx9") and \
                _gfx9_buffer_atomic(op.op, d, val, dm, do):
            continue
        with when(in_records(dm, do, 1)):
            memref.atomic_rmw(getattr(arith.AtomicRMWKind, rmw), cast(val, d).v, dm.mem,
                              [to_index(do)])


def _gfx9_buffer_atomic(op: str, d: dt.DType, val: Value, dm, do) -> bool:
    """The ``buffer_atomic_*`` instruction where ROCDL has it (f32 add/max, i32 smax,
    u32 umin); False where not (the caller emits an atomic with a bounds check)."""
    fn = {("add", "float", 32): rocdl.raw_ptr_buffer_atomic_fadd,
          ("max", "float", 32): rocdl.raw_ptr_buffer_atomic_fmax,
          ("add", "float", 16): rocdl.raw_ptr_buffer_atomic_fadd,
          ("max", "int", 32): rocdl.raw_ptr_buffer_atomic_smax,
          ("min", "uint", 32): rocdl.raw_ptr_buffer_atomic_umin}.get(
        (op, "float" if d.kind == "float" else ("int" if d.signed else "uint"), d.bits))
    if fn is None or (d.bits == 16 and d.name != "Float16"):
        return False
    fn(cast(val, d).v, resource(dm), byte_offset(dm, do), _i32(0), _i32(0))
    return True
