"""What a kernel body may ask about its own compilation: the block shape it declared
(``fx.gpu.known_block_size()``) and the Python int a kernel constant holds (a shuffle's
width written ``fx.Int32(64)``)."""
from __future__ import annotations

from typing import Any, Optional

import mlir.ir as ir

from . import context
from .values import Value

__all__ = ["known_block_size", "static_int"]


def known_block_size() -> Optional[tuple]:
    """``(x, y, z)`` of ``@flydsl.kernel(known_block_size=...)`` for the kernel being
    traced; without a declaration, the block of the launch it is compiled for (as
    FlyDSL infers it from a launch's static block), which makes the launch block part
    of the kernel's specialization; None when neither is known."""
    from ..kernel_function import LAUNCH_BLOCK_PATH, current_launch_block
    tctx = context.current()
    declared = tctx.extra.get("known_block_size")
    if declared is not None:
        return declared
    state = current_launch_block()
    if state is None or state.block is None:
        return None
    state.read = True
    tctx.extra["launch_block"] = state.block
    return tctx.deps.found(LAUNCH_BLOCK_PATH, state.block)


def static_int(x: Any) -> Optional[int]:
    """The int of an integer kernel value made by a constant (``fx.Int32(64)``), else
    None."""
    v = x.v if isinstance(x, Value) else x
    if not isinstance(v, ir.Value):
        return None
    owner = v.owner
    op = getattr(owner, "opview", owner)
    if getattr(op, "name", None) != "arith.constant" and \
            getattr(getattr(op, "operation", None), "name", None) != "arith.constant":
        return None
    attr = op.attributes["value"]
    return attr.value if isinstance(attr, ir.IntegerAttr) else None
