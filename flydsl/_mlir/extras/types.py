"""``flydsl._mlir.extras.types``: ``mlir.extras.types`` (``T.f32()``, ``T.i32()``...)."""
from mlir.extras.types import *  # noqa: F401,F403
