"""FlyDSL's ``flydsl.expr.derived`` module path: thread views of tiled copies and MMAs,
TV layouts, register tensors, gather and scatter.

flydsl keeps these names in ``flydsl.expr`` (``fx``) itself; this module re-exports the
ones of FlyDSL's ``derived.__all__`` that flydsl has, so ``from flydsl.expr.derived import
make_tiled_copy`` works. A FlyDSL name flydsl lacks is an ``AttributeError`` saying so.
"""
from __future__ import annotations

import flydsl.expr as _fx

#: FlyDSL 0.5's ``flydsl.expr.derived.__all__``.
FLYDSL_NAMES = (
    "ThrCopy", "ThrMma", "make_rmem_tensor", "make_layout_tv", "make_tiled_copy_tv",
    "make_tiled_copy", "make_tiled_copy_A", "make_tiled_copy_B", "make_tiled_copy_C",
    "gather", "scatter"
)

__all__ = [_n for _n in FLYDSL_NAMES if hasattr(_fx, _n)]
globals().update({_n: getattr(_fx, _n) for _n in __all__})


def __getattr__(name: str):
    if name in FLYDSL_NAMES:
        raise AttributeError(f"flydsl.expr.derived.{name} (a FlyDSL name) is not implemented "
                             "by flydsl yet")
    raise AttributeError(f"module 'flydsl.expr.derived' has no attribute {name!r}")
