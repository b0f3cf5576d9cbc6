"""``flydsl._mlir.extras``: ``mlir.extras``."""
