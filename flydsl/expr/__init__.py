"""The DSL a kernel body uses: ``import flydsl.expr as fx``."""
from .builtins import (
    abs, atomic_add, barrier, block_dim, block_idx, cast, ceil, cos, exp, floor, fma,
    grid_dim, log, max, min, range, range_constexpr, rsqrt, select, shared_array, shuffle_xor,
    sin, sqrt, static_range, tanh, thread_idx, warp_size, where,
)
from .dtypes import (
    BFloat16, Bool, Constexpr, DType, Float16, Float32, Float64, Int8, Int16, Int32, Int64,
    Tensor,
)

__all__ = [
    "BFloat16", "Bool", "Constexpr", "DType", "Float16", "Float32", "Float64", "Int8", "Int16",
    "Int32", "Int64", "Tensor", "abs", "atomic_add", "barrier", "block_dim", "block_idx",
    "cast", "ceil", "cos", "exp", "floor", "fma", "grid_dim", "log", "max", "min", "range",
    "range_constexpr", "rsqrt", "select", "shared_array", "shuffle_xor", "sin", "sqrt",
    "static_range", "tanh", "thread_idx", "warp_size", "where",
]
