"""``fx.rocdl.perm_b32``: AMD's byte permute (``v_perm_b32``).

Each result byte ``i`` is chosen by selector byte ``i`` from the eight bytes of
``{src0, src1}`` (``src1`` the low word), as the CDNA ISA defines it: 0-7 that byte,
8/9/10/11 the sign of byte 1/3/5/7 repeated (0x00 or 0xFF), 12 zero, 13 and up 0xFF.
On ROCm it is ``llvm.amdgcn.perm``; elsewhere the same bytes by shifts and selects,
or, for a constant selector, by a shift and mask per run of bytes taken in order from one
source word (``0x07060302``, the bf16 pair pack of FlyDSL's attention kernels, 128 per
kernel: 6 traced ops instead of 38 to 150).
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith, llvm

from ...errors import DSLTypeError
from ...expr import dtypes as dt
from . import context
from .kernel_info_ops import static_int
from .values import Value, as_value, describe
from .vector_ops import kernel_value

__all__ = ["rocdl_perm_b32"]


def _word(x, what: str) -> Value:
    """``x`` (an Int32/UInt32 value, a raw i32, or a Python int as its 32 bits) as Int32."""
    if isinstance(x, int) and not isinstance(x, bool):
        bits = x & 0xFFFFFFFF
        return as_value(bits - (1 << 32) if bits >= 1 << 31 else bits, dt.Int32)
    x = kernel_value(x.ir_value() if hasattr(x, "ir_value") and not isinstance(x, Value)
                     else x)
    if not isinstance(x, Value) or x.dtype.kind != "int" or x.dtype.bits != 32:
        raise DSLTypeError(f"fx.rocdl.perm_b32: {what} must be a 32-bit integer, got "
                           f"{describe(x)}")
    return Value(x.v, dt.Int32)


def rocdl_perm_b32(src0, src1, selector) -> Value:
    """``fx.rocdl.perm_b32(src0, src1, selector)``: see the module docstring."""
    a, b, sel = (_word(x, what) for x, what in
                 ((src0, "src0"), (src1, "src1"), (selector, "selector")))
    i32 = ir.IntegerType.get_signless(32)
    if context.current().target.backend == "rocm":
        return Value(llvm.call_intrinsic(i32, "llvm.amdgcn.perm", [a.v, b.v, sel.v], [], []),
                     dt.Int32)
    known = static_int(sel)
    if known is not None and all((known >> 8 * i) & 0xFF < 8 or (known >> 8 * i) & 0xFF >= 12
                                 for i in range(4)):
        return _constant_perm(a.v, b.v, known & 0xFFFFFFFF)
    i64 = ir.IntegerType.get_signless(64)

    def c64(n: int) -> ir.Value:
        return arith.constant(i64, n)

    data = arith.ori(arith.shli(arith.extui(i64, a.v), c64(32)), arith.extui(i64, b.v))
    sel64 = arith.extui(i64, sel.v)
    out = c64(0)
    for i in range(4):
        s = arith.andi(arith.shrui(sel64, c64(8 * i)), c64(0xFF))
        picked = arith.andi(arith.shrui(data, arith.muli(arith.andi(s, c64(7)), c64(8))),
                            c64(0xFF))
        # 8..11: the sign bit of byte 1, 3, 5, 7 (bit 15 + 16 * (s - 8)) as a whole byte
        bit = arith.addi(c64(15), arith.muli(arith.andi(s, c64(3)), c64(16)))
        sign = arith.muli(arith.andi(arith.shrui(data, bit), c64(1)), c64(0xFF))
        ult = arith.CmpIPredicate.ult
        byte = arith.select(arith.cmpi(ult, s, c64(8)), picked,
                            arith.select(arith.cmpi(ult, s, c64(12)), sign,
                                         arith.select(arith.cmpi(arith.CmpIPredicate.eq, s,
                                                                 c64(12)),
                                                      c64(0), c64(0xFF))))
        out = arith.ori(out, arith.shli(byte, c64(8 * i)))
    return Value(arith.trunci(i32, out), dt.Int32)


def _constant_perm(src0: ir.Value, src1: ir.Value, selector: int) -> Value:
    """``perm_b32`` with a constant selector of byte indexes (0-7), 12 (0x00) and 13 and
    up (0xFF): each run of result bytes that take consecutive bytes of one source word is
    that word shifted into place and masked; the 0xFF bytes are or-ed in."""
    i32 = ir.IntegerType.get_signless(32)

    def c32(n: int) -> ir.Value:
        n &= 0xFFFFFFFF
        return arith.constant(i32, n - (1 << 32) if n >= 1 << 31 else n)

    picks = [(selector >> 8 * i) & 0xFF for i in range(4)]
    ones = sum(0xFF << 8 * i for i, s in enumerate(picks) if s >= 13)
    terms, i = [], 0
    while i < 4:
        s = picks[i]
        if s >= 8:
            i += 1
            continue
        n = 1       # bytes i .. i + n take bytes s .. s + n of the same word, in order
        while i + n < 4 and picks[i + n] == s + n and (s + n) // 4 == s // 4:
            n += 1
        word, shift = (src1 if s < 4 else src0), 8 * (s % 4 - i)
        moved = word if shift == 0 else arith.shrui(word, c32(shift)) if shift > 0 \
            else arith.shli(word, c32(-shift))
        mask = ((1 << 8 * n) - 1) << 8 * i
        # bytes shifted in from past the word are zeros: no mask needed where they fill it
        kept = (0xFFFFFFFF >> shift if shift > 0 else 0xFFFFFFFF << -shift & 0xFFFFFFFF)
        terms.append(moved if kept & ~mask & 0xFFFFFFFF == 0 else arith.andi(moved, c32(mask)))
        i += n
    out = terms[0] if terms else c32(ones)
    for t in terms[1:]:
        out = arith.ori(out, t)
    if terms and ones:
        out = arith.ori(out, c32(ones))
    return Value(out, dt.Int32)
