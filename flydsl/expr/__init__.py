"""The DSL a kernel body uses: ``import flydsl.expr as fx``."""
from . import debug, layout, memory, numeric, nvvm, pointer, rocdl, warp
from .atoms import (
    BufferCopy, CopyAtom, MmaAtom, ThrCopy, ThrMma, TiledCopy, TiledMma, UniversalAtomic,
    UniversalAtomicAdd, UniversalAtomicAnd, UniversalAtomicDec, UniversalAtomicInc,
    UniversalAtomicMax, UniversalAtomicMin, UniversalAtomicOr, UniversalCopy,
    UniversalCopy8b, UniversalCopy16b, UniversalCopy32b, UniversalCopy64b, UniversalCopy128b,
    UniversalFMA, atom_set_value, make_copy_atom, make_mma_atom,
    make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, make_tiled_copy_C,
    make_tiled_copy_tv, make_tiled_mma,
)
from .builtins import (
    abs, atomic_add, barrier, block_dim, block_idx, cast, ceil, cos, exp, floor, fma, grid,
    grid_dim, gridsize, log, max, min, range, range_constexpr, rsqrt, select, shared_array,
    shuffle_xor, sin, sqrt, static_range, tanh, thread_idx, threadfence, threadfence_block,
    threadfence_system, warp_size, where,
)
from . import enum, gpu    # FlyDSL's module paths (flydsl.expr.enum, fx.gpu)
from .builtins import const_expr
from .gpu import known_block_size, num_warp_threads, shuffle_idx
from .enum import AtomicOp, AtomicOrdering, GemmTraversalOrder, SyncScope
from .debug import *      # noqa: F401,F403  (each area module's __all__)
from .layout import *     # noqa: F401,F403
from .dtypes import (
    BFloat16, Bool, Constexpr, DType, Float16, Float32, Float64, Int8, Int16, Int32, Int64,
    Stream, Tensor, UInt8, UInt16, UInt32, UInt64,
)
from .memory import *     # noqa: F401,F403
from .pipeline import Pipeline, pipeline  # noqa: F401
from .numeric import *    # noqa: F401,F403
from .pointer import *    # noqa: F401,F403
from .layout_types import BasisType, IntTupleType  # noqa: F401  (LayoutType: from .pointer)
# fx.struct is the decorator (flydsl.expr.struct the module, as in FlyDSL)
from .struct import (Align, Arena, Array, SharedAllocator, Storage, Struct,  # noqa: F401
                     Union, struct, union)
from .warp import *       # noqa: F401,F403
from . import math, typing  # FlyDSL's fx.math and fx.typing (no MLIR import)
from .typing import *     # noqa: F401,F403  (T, Vector, ReductionOp, full, Float32x4...)

__all__ = [
    "BFloat16", "Bool", "Constexpr", "DType", "Float16", "Float32", "Float64", "Int8", "Int16",
    "Int32", "Int64", "Tensor", "UInt8", "UInt16", "UInt32", "UInt64",
    "abs", "atomic_add", "barrier", "block_dim", "block_idx", "cast", "ceil", "cos", "exp",
    "floor", "fma", "grid", "grid_dim", "gridsize", "log", "max", "min", "range",
    "range_constexpr", "rsqrt", "select", "shared_array", "shuffle_xor", "sin", "sqrt",
    "static_range", "tanh", "thread_idx", "threadfence", "threadfence_block",
    "threadfence_system", "warp_size", "where",
]
__all__ += debug.__all__ + memory.__all__ + numeric.__all__ + warp.__all__
__all__ += ["Pipeline", "pipeline"]      # fx.pipeline: multistage copy pipelines
#: FlyDSL's enums, its fx.gpu module and fx.const_expr.
__all__ += enum.__all__ + ["const_expr", "gpu", "known_block_size", "num_warp_threads",
                           "shuffle_idx"]
#: Pointers, element access and structured shared memory (FlyDSL's names).
__all__ += pointer.__all__ + ["Align", "Arena", "Array", "SharedAllocator", "Storage",
                              "Struct", "Union", "struct", "union"]
#: FlyDSL's static types of layout values (``x.type``; LayoutType is in pointer's list).
__all__ += ["BasisType", "IntTupleType"]
#: The layout model (CuTe's algebra, views, copy and MMA atoms; fx.rocdl, fx.nvvm).
__all__ += layout.__all__ + [
    "BufferCopy", "Boolean", "CopyAtom", "MmaAtom", "Stream", "ThrCopy", "ThrMma", "TiledCopy",
    "TiledMma", "UniversalAtomic", "UniversalAtomicAdd", "UniversalAtomicAnd",
    "UniversalAtomicDec", "UniversalAtomicInc", "UniversalAtomicMax", "UniversalAtomicMin",
    "UniversalAtomicOr", "UniversalCopy", "UniversalCopy128b", "UniversalCopy16b",
    "UniversalCopy32b", "UniversalCopy64b", "UniversalCopy8b", "UniversalFMA",
    "atom_set_value", "make_copy_atom", "make_mma_atom", "make_tiled_copy", "make_tiled_copy_A",
    "make_tiled_copy_B", "make_tiled_copy_C", "make_tiled_copy_tv", "make_tiled_mma", "nvvm",
    "rocdl",
]
#: FlyDSL's typed-arith layer: fx.arith (its names load MLIR, so on first use), fx.math,
#: fx.typing's T, Vector, ReductionOp, full/zeros_like, the <Type>x<N> vector aliases.
_ARITH_NAMES = ("FastMathFlags", "RoundingMode", "ceildiv", "cmpf", "cmpi",
                "constant_vector", "fastmath", "index_cast", "maximumf", "maxnumf",
                "minimumf", "minnumf", "shrui")
__all__ += typing.__all__ + ["arith", "math", "typing"] + list(_ARITH_NAMES)
#: flydsl.expr.math's names fx has no other function for (fx.absf, fx.powf, fx.clampf...).
from .math import (absf, absi, cbrt, clampf, ctlz, ctpop, cttz, fpowi, ipowi,  # noqa: E402
                   isnormal, powf, roundeven, sincos)
__all__ += ["absf", "absi", "cbrt", "clampf", "ctlz", "ctpop", "cttz", "fpowi", "ipowi",
            "isnormal", "powf", "roundeven", "sincos"]
#: FlyDSL's spelling of fx.Bool.
Boolean = Bool


def __getattr__(name: str):
    """``fx.<unknown>``: an AttributeError naming the close ``fx`` names (``fx.erfx``:
    did you mean fx.erf?)."""
    if name in ("coop", "random"):    # FlyDSL's libraries fx.coop, fx.random (no MLIR)
        import importlib
        return importlib.import_module("flydsl.extension." + name)
    if name == "arith" or name in _ARITH_NAMES:
        import importlib
        arith_module = importlib.import_module(__name__ + ".arith")   # loads MLIR
        return arith_module if name == "arith" else getattr(arith_module, name)
    from ..errors import close_matches
    hint = "" if name.startswith("__") else close_matches(name, __all__, "fx.")
    raise AttributeError(f"module 'flydsl.expr' (fx) has no attribute {name!r}{hint}")
