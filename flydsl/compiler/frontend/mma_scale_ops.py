"""``fx.gemm`` with gfx950's block-scaled MFMA atom (:mod:`flydsl.expr.rocdl.mfma_scale`).

* **ROCm (gfx950)**: ``rocdl.mfma.scale.f32.{16x16x128,32x32x64}.f8f6f4`` on the packed
  registers, with the atom's formats as ``cbsz``/``blgp`` and ``opsel``; no scale given
  is the constant 0 (LLVM then selects the unscaled ``v_mfma_f32_*_f8f6f4``).
* **CPU**: every lane decodes its 32 packed codes exactly (OCP formats, Float32), times
  ``2 ** (byte - 127)`` of its scale byte when a scale is given, and the products are
  summed with the MFMA emulation of :mod:`.mma_ops` (the instruction's lane layouts).

Fragments: A and B hold one lane's packed registers (any 8/16/32/64-bit element type,
e.g. ``fx.make_rmem_tensor(8, fx.Int32)`` for fp8, or the 32 narrow floats themselves),
C and D the 4 (16x16) or 16 (32x32) Float32 accumulators; one atom per call (rank-1
fragments), as FlyDSL's kernels issue it.
"""
from __future__ import annotations

import dataclasses

import mlir.ir as ir
from mlir.dialects import arith, rocdl, vector

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from ...expr import layout_algebra as la
from ...expr.rocdl.mfma_scale import ScaledMfmaOp
from . import context
from .narrow_types import _decode
from .values import Value, cast
from .views import as_view, register_fragment

_FORMATS = {0: dt.Float8E4M3FN, 1: dt.Float8E5M2, 2: dt.Float6E2M3FN, 3: dt.Float6E3M2FN,
            4: dt.Float4E2M1FN}


def gemm(atom, d, a, b, c, scale_a=None, scale_b=None) -> None:
    """``d = (a * 2**(scale_a byte - 127)) @ (b * 2**(...)).T + c`` for one atom."""
    op: ScaledMfmaOp = atom.op
    spec = atom.target_spec()
    what = f"fx.gemm({op.name})"
    frags = {}
    for name, x in (("d", d), ("a", a), ("b", b), ("c", c)):
        v = as_view(x)
        if v.memory is None or v.memory.space != "register" or la.rank(v.layout) != 1:
            raise DSLTypeError(f"{what}: {name} must be a rank-1 register fragment (one "
                               f"atom's registers, e.g. fx.make_rmem_tensor(8, fx.Int32)), "
                               f"got {getattr(v, 'shape', x)!r}")
        frags[name] = v
    words_a = _words(frags["a"], spec.a_regs[1], "a", what)
    words_b = _words(frags["b"], spec.b_regs[1], "b", what)
    nc = spec.c_regs[1]
    for name in "cd":
        if int(la.size(frags[name].layout)) != nc:
            raise DSLTypeError(f"{what}: {name} must hold the {nc} Float32 accumulators of "
                               f"a lane, got {frags[name].shape}")
    acc = [cast(frags["c"][i], dt.Float32) for i in range(nc)]
    scales = (_scale(scale_a, "scale_a", what), _scale(scale_b, "scale_b", what))
    if context.current().target.backend == "rocm":
        out = _instruction(op, spec, words_a, words_b, acc, scales)
    else:
        out = _emulated(op, spec, words_a, words_b, acc, scales)
    for i, v in enumerate(out):
        frags["d"][i] = cast(v, frags["d"].dtype)


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _c32(v: int) -> ir.Value:
    return arith.constant(_i32(), v - (1 << 32) if v >= 1 << 31 else v)


def _words(frag, count: int, name: str, what: str) -> list:
    """The lane's operand as ``count`` i32 words (element 0 in the lowest bits)."""
    width = frag.dtype.bits
    n = int(la.size(frag.layout))
    if width * n != 32 * count or width not in (4, 8, 16, 32, 64):
        raise DSLTypeError(f"{what}: {name} must hold {count} 32-bit registers of packed "
                           f"codes (e.g. fx.make_rmem_tensor({count}, fx.Int32)), got {n} "
                           f"{frag.dtype.name}")
    bits = [arith.bitcast(ir.IntegerType.get_signless(width), frag[i].v)
            if not isinstance(frag[i].v.type, ir.IntegerType) else frag[i].v for i in range(n)]
    if width == 64:
        i64 = ir.IntegerType.get_signless(64)
        return [arith.trunci(_i32(), arith.shrui(x, arith.constant(i64, 32)) if h else x)
                for x in bits for h in (0, 1)]
    if width == 32:
        return bits
    per = 32 // width
    words = []
    for w in range(count):
        word = None
        for j in range(per):
            part = arith.extui(_i32(), bits[w * per + j])
            part = arith.shli(part, _c32(width * j)) if j else part
            word = part if word is None else arith.ori(word, part)
        words.append(word)
    return words


def _scale(s, name: str, what: str):
    """The 32-bit scale register (an i32 value), or None for no scale (a Python 0 too,
    as LLVM folds a constant 0 to the unscaled instruction)."""
    if s is None or (isinstance(s, int) and not isinstance(s, bool) and s == 0):
        return None
    if isinstance(s, int) and not isinstance(s, bool):
        return _c32(s & 0xFFFFFFFF)
    raw = getattr(s, "v", None)
    if raw is None and hasattr(s, "ir_value"):
        raw = s.ir_value()
    if raw is None and isinstance(s, ir.Value):
        raw = s
    if raw is None:
        raise DSLTypeError(f"{what}: {name} must be a 32-bit integer (four E8M0 bytes), "
                           f"got {s!r}")
    t = raw.type
    if isinstance(t, ir.VectorType):    # e.g. four e8m0 bytes as a vector
        n = ir.VectorType(t).shape[0] * _width(ir.VectorType(t).element_type)
        if n != 32:
            raise DSLTypeError(f"{what}: {name} must be 32 bits, got {t}")
        return vector.extract(vector.bitcast(ir.VectorType.get([1], _i32()), raw), [], [0])
    if _width(t) != 32:
        raise DSLTypeError(f"{what}: {name} must be a 32-bit integer (four E8M0 bytes), "
                           f"got {t}")
    return raw if isinstance(t, ir.IntegerType) else arith.bitcast(_i32(), raw)


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    return ir.FloatType(t).width


# -- gfx950: the instruction ---------------------------------------------------------------

def _instruction(op, spec, words_a, words_b, acc, scales) -> list:
    f32 = ir.F32Type.get()
    a = vector.from_elements(ir.VectorType.get([len(words_a)], _i32()), words_a)
    b = vector.from_elements(ir.VectorType.get([len(words_b)], _i32()), words_b)
    ctype = ir.VectorType.get([len(acc)], f32)
    c = vector.from_elements(ctype, [x.v for x in acc])
    sa, sb = (_c32(0) if s is None else s for s in scales)
    fn = getattr(rocdl, spec.extra["rocdl_op"][len("rocdl."):].replace(".", "_"))
    out = fn(ctype, [a, b, c, _c32(spec.extra["cbsz"]), _c32(spec.extra["blgp"]),
                     _c32(op.opsel_a), sa, _c32(op.opsel_b), sb])
    return [Value(vector.extract(out, [], [i]), dt.Float32) for i in range(len(acc))]


# -- the CPU: exact decoding, then the MFMA emulation ---------------------------------------

def _emulated(op, spec, words_a, words_b, acc, scales) -> list:
    """The block-scaled MFMA in Float64: each decoded value times its lane's E8M0 scale
    is exact there (a scale is a power of two from 2^-127 to 2^127, a value has at most
    4 significant bits), so are the products, and the K sum rounds far below Float32;
    the accumulator is rounded to Float32 once. In Float32 the scaled operands alone
    overflowed (448 * 2^127) where the instruction's result, which scales the dot
    product, is finite."""
    from .mma_ops import _emulated_gemm
    f64 = ir.F64Type.get()
    frags = []
    for words, fmt, scale, opsel in ((words_a, op.ab_dtype, scales[0], op.opsel_a),
                                     (words_b, op.b_dtype, scales[1], op.opsel_b)):
        frag = register_fragment(la.make_layout(32), dt.Float64)
        factor = None if scale is None else arith.extf(f64, _e8m0(scale, opsel))
        for j, v in enumerate(_decode_all(words, fmt)):
            v = arith.extf(f64, v)
            frag[j] = Value(v if factor is None else arith.mulf(v, factor), dt.Float64)
        frags.append(frag)
    fc = register_fragment(la.make_layout(len(acc)), dt.Float32)
    for i, x in enumerate(acc):
        fc[i] = x
    _emulated_gemm(None, dataclasses.replace(spec, ab_dtype="f64", acc_dtype="f64"), fc,
                   frags[0], frags[1], fc, 1, 1, 1)
    return [fc[i] for i in range(len(acc))]


def _decode_all(words: list, fmt: dt.DType) -> list:
    """The 32 values (Float32) of ``fmt.bits``-bit codes packed from bit 0 of word 0."""
    width, out = fmt.bits, []
    mask = _c32((1 << width) - 1)
    for j in range(32):
        lo, w = (width * j) % 32, (width * j) // 32
        code = arith.shrui(words[w], _c32(lo)) if lo else words[w]
        if lo + width > 32:     # an fp6 code across two registers
            code = arith.ori(code, arith.shli(words[w + 1], _c32(32 - lo)))
        out.append(_decode(arith.andi(code, mask), fmt.format, width))
    return out


def _e8m0(scale: ir.Value, opsel: int) -> ir.Value:
    """``2 ** (byte - 127)`` of byte ``opsel`` of the scale register (0xFF: NaN)."""
    byte = arith.shrui(scale, _c32(8 * opsel)) if opsel else scale
    byte = arith.andi(byte, _c32(0xFF))
    return _decode(byte, dt.Float8E8M0FNU.format, 8)
