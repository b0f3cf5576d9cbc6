"""Math without a device library, for the ROCm backend: every math op the AMDGPU
backend cannot lower to its own instructions becomes IEEE arithmetic
(:mod:`._ieee_math`), so no ``__ocml_*`` function is ever needed.

Rewritten: on Float64, every transcendental function (AMDGPU has no Float64 exp, log,
sin ...); on Float32, the functions without an LLVM intrinsic there (``tan``, the
inverse and hyperbolic functions, ``expm1``, ``log1p``, ``erf``, ``erfc``, ``pow``,
``fmod``), computed in Float64 and rounded once, ``tan`` from the Float32 reduction of
:mod:`.math_approx`; on Float16 and BFloat16, those through Float32. Float32 ``exp``,
``exp2``, ``log``, ``log2``, ``log10``, ``sin``, ``cos``, ``sqrt`` stay the hardware's;
``tanh`` is :func:`.rocdl.expand_tanh`'s.

The new ops carry no fastmath flags and the pass runs after ``fp_flags``: nothing may
contract or reassociate them, so they round exactly as written, the same on an AMD
GPU as on the CPU, where ``tests/test_math_matrix.py`` runs this very pass (a CPU
backend whose pipeline includes it) to measure the ROCm backend's accuracy.
"""
from __future__ import annotations

import mlir.ir as ir

from . import _ieee_math, math_approx
from ._arith import rewrite_math_ops

#: Float32 ops the AMDGPU backend cannot expand (their ocml calls cannot be linked).
F32_WITHOUT_INSTRUCTION = (
    "math.tan", "math.asin", "math.acos", "math.atan", "math.atan2", "math.sinh",
    "math.cosh", "math.asinh", "math.acosh", "math.atanh", "math.expm1", "math.log1p",
    "math.erf", "math.erfc", "math.powf", "arith.remf",
)

_F32_AND_F64 = {**_ieee_math.table(_ieee_math.FUNCTIONS, F32_WITHOUT_INSTRUCTION),
                ("math.tan", 32): math_approx.tan_f32}
#: (op name, float width) -> the function building its replacement; Float16 and
#: BFloat16 ops (``fx`` widens them itself, but not every producer of IR does) are
#: computed in Float32, as ``fx`` does.
ROCM_TABLE = {**_F32_AND_F64,
              **{(name, 16): _ieee_math.through(fn, 32)
                 for (name, width), fn in _F32_AND_F64.items() if width == 32}}


def run(module: ir.Module, target=None, options=None) -> None:
    """Replace the ops of :data:`ROCM_TABLE` in ``module`` (after ``fp_flags``)."""
    rewrite_math_ops(module, ROCM_TABLE, None)
