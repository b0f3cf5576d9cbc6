"""Floating-point flags on every float op: contraction by default, all of fast math on request.

* Default (``CompileOptions.fp_contract``): ``contract`` on ``arith`` and ``math``
  float ops, so LLVM fuses ``a * b + c`` into one FMA, as nvcc (``--fmad=true``) and
  clang's ``-ffp-contract`` do. A fused multiply-add rounds once instead of twice: it is
  at least as accurate, but bit-for-bit different from two rounded operations.
  ``FLYDSL_FP_CONTRACT=0`` turns it off (for results identical to numpy's ``a*b + c``).
* ``CompileOptions.fast_math`` (``FLYDSL_FAST_MATH=1``): ``fast`` (reassociation, no
  NaN/inf/signed-zero guarantees, reciprocal and approximate functions), which lets LLVM
  vectorize float reductions and drop special-value handling. Results may differ in the
  last bits, and NaN or inf inputs may give anything.

Runs after every pass that creates float arithmetic (the CPU's ``math_approx``) and
before the lowering to LLVM, which carries the flags onto LLVM's instructions.
"""
from __future__ import annotations

import mlir.ir as ir

from .ir import walk

#: Ops that carry an ``arith::FastMathFlagsAttr`` named ``fastmath``.
_ARITH = frozenset({
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf",
})


def flags_for(options) -> str:
    """The fastmath flags ``options`` ask for ("" for none)."""
    if getattr(options, "fast_math", False):
        return "fast"
    return "contract" if getattr(options, "fp_contract", True) else ""


def run(module: ir.Module, target=None, options=None) -> None:
    """Set the flags of ``options`` on every float op of ``module`` that has none."""
    flags = flags_for(options)
    if not flags:
        return
    with module.context:
        arith_flags = ir.Attribute.parse(f"#arith.fastmath<{flags}>")
        for op in walk(module.operation, _takes_flags):
            current = op.attributes["fastmath"] if "fastmath" in op.attributes else None
            if current is None or str(current) == "#arith.fastmath<none>":
                op.attributes["fastmath"] = arith_flags


def _takes_flags(op) -> bool:
    name = op.name
    if name in _ARITH:
        return True
    # math dialect float ops (exp, fma, sqrt, ...) carry the same attribute
    return name.startswith("math.") and len(op.results) == 1 and _is_float(op.results[0].type)


def _is_float(t) -> bool:
    if isinstance(t, ir.VectorType):
        t = ir.VectorType(t).element_type
    return isinstance(t, ir.FloatType)
