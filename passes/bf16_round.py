"""float -> bfloat16 conversions as integer code the CPU vectorizes, rounding every value.

LLVM lowers ``fptrunc float to bfloat`` to VCVTNEPS2BF16 on hosts with AVX-512 BF16
or AVX-NE-CONVERT, which flushes subnormal inputs and results to zero, and to a call
of ``__truncsfbf2`` per element elsewhere (the CPU backend turns those features off
for the first reason: :func:`flydsl.compiler.backends.cpu._host_cpu`). This pass
replaces each ``arith.truncf`` from f32 (scalar or vector) to bf16 by the rounding
``__truncsfbf2`` does (:mod:`flydsl.compiler.host_object`): add ``0x7FFF`` plus the
kept part's lowest bit, keep the high 16 bits (round to nearest even, subnormals
and overflow to infinity included), and a NaN keeps its sign and payload, quieted.
Four integer ops and a select, in vector registers: a million conversions took
4.5 ms through the call and take what torch's ``.to(torch.bfloat16)`` does.

``truncf`` from f64 keeps ``__truncdfbf2`` (rounding to odd first: no double
rounding); one with an explicit rounding mode is left to LLVM.
"""
from __future__ import annotations

import mlir.ir as ir
from mlir.dialects import arith

from ._arith import Builder, element, select
from .ir import walk


def _wanted(op) -> bool:
    if op.name != "arith.truncf" or "roundingmode" in op.attributes:
        return False
    return (isinstance(element(op.results[0].type), ir.BF16Type)
            and isinstance(element(op.operands[0].type), ir.F32Type))


def run(module: ir.Module, target=None, options=None) -> None:
    """Rewrite every f32 -> bf16 ``arith.truncf`` of ``module``, in place."""
    with module.context:
        for op in walk(module.operation, _wanted):
            ty = op.results[0].type
            with ir.InsertionPoint(op), op.location:
                b = Builder(op.operands[0].type, flags=None)
                x = b.value(op.operands[0])
                bits = b.convert(x, b.i32, arith.bitcast)
                high = bits >> 16
                rounded = (bits + ((high & 1) + 0x7FFF)) >> 16
                kept = select(x.is_nan(), high | 0x40, rounded)
                half = b.convert(kept, ir.IntegerType.get_signless(16), arith.trunci)
                out = arith.bitcast(ty, half.v)
            op.results[0].replace_all_uses_with(out)
            op.erase()
