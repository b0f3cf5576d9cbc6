"""FlyDSL's raw MFMA calls: ``rocdl.mfma_f32_16x16x32_fp8_fp8(result_type, [a, b, c,
cbsz, abid, blgp])`` and the other MFMA names of :mod:`flydsl.expr.mma_layouts`.

``a``/``b`` are the lane's packed operand registers as the instruction takes them (an
f32, a ``vector<4xf16>``, a ``vector<4xi16>`` of bf16 bits, an ``i64`` of 8 fp8 codes),
``c`` the accumulator vector; the result is the new accumulator vector (an MLIR value).
On ROCm each is the instruction. The CPU runs it with the instruction's per-lane
layouts (the same emulation as :func:`flydsl.expr.gemm`: every lane of the 64-lane wave
must make the call, with ``cbsz = abid = blgp = 0``); NVIDIA has no MFMA (a
``DSLTypeError`` naming the AMD arches that have it).

Example::

    acc = fx.rocdl.mfma_f32_16x16x32_fp8_fp8(T.vec(4, T.f32), [a_i64, b_i64, acc, 0, 0, 0])
"""
from __future__ import annotations

from ..implementation import ops as _ops
from ..mma_layouts import SPECS

__all__ = sorted({s.extra["rocdl_op"][len("rocdl."):].replace(".", "_")
                  for s in SPECS.values() if s.family == "mfma"})


def _make(name: str):
    def mfma(result_type, operands):
        return _ops().rocdl_mfma(name, result_type, operands)

    mfma.__name__ = mfma.__qualname__ = name
    specs = [s for s in SPECS.values() if s.family == "mfma"
             and s.extra["rocdl_op"][len("rocdl."):].replace(".", "_") == name]
    s = specs[0]
    mfma.__doc__ = (f"``{s.extra['isa']}``: D = A * B + C, a {s.m}x{s.n}x{s.k} "
                    f"{'/'.join(x.ab_dtype for x in specs)} MFMA over the 64-lane wave "
                    f"({', '.join(a for x in specs for a in x.arches)}); "
                    "``mfma(result_type, [a, b, c, cbsz, abid, blgp])`` (result_type None: c's), see "
                    ":mod:`flydsl.expr.rocdl.mfma`, whose docstring has a kernel example."
                    "\n\nReturns: the new accumulator vector (an MLIR value)."
                    "\n\nExample::\n\n    >>> sorted(n for n in fx.rocdl.__all__ "
                    "if n.startswith('mfma_f32_32x32x8'))\n"
                    "    ['mfma_f32_32x32x8bf16_1k', 'mfma_f32_32x32x8f16']\n")
    return mfma


for _name in __all__:
    globals()[_name] = _make(_name)
del _name
