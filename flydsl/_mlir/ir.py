"""``flydsl._mlir.ir``: ``mlir.ir`` (types, attributes, values, locations)."""
from mlir.ir import *  # noqa: F401,F403
from mlir.ir import _GlobalDebug  # noqa: F401
