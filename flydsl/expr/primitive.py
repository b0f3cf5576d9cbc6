"""FlyDSL's ``flydsl.expr.primitive`` module path: the layout, atom, pointer and
compile-time primitives.

flydsl keeps these names in ``flydsl.expr`` (``fx``) itself; this module re-exports the
ones of FlyDSL's ``primitive.__all__`` that flydsl has, so ``from flydsl.expr.primitive
import make_layout`` works. A FlyDSL name flydsl lacks is an ``AttributeError`` saying so.

``select`` here is flydsl's ``fx.select`` (an element-wise choice), not FlyDSL's
layout-mode selection.
"""
from __future__ import annotations

import flydsl.expr as _fx

#: FlyDSL 0.5's ``flydsl.expr.primitive.__all__``.
FLYDSL_NAMES = (
    "AtomicOp", "AddressSpace", "CachePolicy", "MmaOperand", "GemmTraversalOrder",
    "IntTupleType", "BasisType", "TileType", "LayoutType", "SwizzleType",
    "CoordSwizzleType", "ComposedLayoutType", "PointerType", "MemRefType",
    "CoordTensorType", "CopyAtomType", "MmaAtomType", "TiledCopyType", "TiledMmaType",
    "CopyOpUniversalCopyType", "CopyOpUniversalAtomicType", "MmaOpUniversalFMAType",
    "UniversalCopy", "UniversalCopy8b", "UniversalCopy16b", "UniversalCopy32b",
    "UniversalCopy64b", "UniversalCopy128b", "UniversalAtomic", "UniversalAtomicAdd",
    "UniversalAtomicMax", "UniversalAtomicMin", "UniversalAtomicAnd",
    "UniversalAtomicOr", "UniversalAtomicInc", "UniversalAtomicDec", "UniversalFMA",
    "const_expr", "range_constexpr", "rank", "depth", "has_none", "static",
    "make_int_tuple", "make_shape", "make_stride", "make_coord", "make_layout",
    "make_layout_like", "make_ordered_layout", "make_composed_layout",
    "make_identity_layout", "make_view", "make_fragment_layout_like",
    "make_fragment_like", "get_scalar", "get_leaves", "get_shape", "get_stride",
    "get_layout", "get_iter", "composed_get_inner", "composed_get_offset",
    "composed_get_outer", "int_tuple_add", "int_tuple_sub", "int_tuple_mul",
    "int_tuple_div", "int_tuple_mod", "int_tuple_product", "int_tuple_product_each",
    "int_tuple_product_like", "shape_div", "ceil_div", "elem_less", "equal", "get",
    "get_", "take", "select", "group", "append", "prepend", "slice", "dice", "size",
    "coprofile", "coshape", "cosize", "crd2idx", "idx2crd", "get_flat_coord",
    "get_1d_coord", "coalesce", "composition", "complement", "right_inverse",
    "left_inverse", "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
    "logical_product", "zipped_product", "tiled_product", "flat_product",
    "blocked_product", "raked_product", "recast_layout", "tile_to_shape",
    "make_mma_atom", "make_copy_atom", "atom_set_value", "copy_atom_call",
    "mma_atom_call", "make_tiled_copy", "make_tiled_mma", "tiled_copy_partition_src",
    "tiled_copy_partition_dst", "tiled_copy_retile", "tiled_mma_partition",
    "tiled_mma_partition_shape", "mma_make_fragment", "copy", "gemm", "make_ptr",
    "get_dyn_shared", "inttoptr", "ptrtoint", "to_llvm_ptr", "add_offset",
    "apply_swizzle", "ptr_load", "ptr_store", "recast_iter", "memref_alloca",
    "memref_load_vec", "memref_store_vec", "memref_load", "memref_store", "printf",
    "assume", "make_tile"
)

__all__ = [_n for _n in FLYDSL_NAMES if hasattr(_fx, _n)]
globals().update({_n: getattr(_fx, _n) for _n in __all__})


def __getattr__(name: str):
    if name in FLYDSL_NAMES:
        raise AttributeError(f"flydsl.expr.primitive.{name} (a FlyDSL name) is not implemented "
                             "by flydsl yet")
    raise AttributeError(f"module 'flydsl.expr.primitive' has no attribute {name!r}")
