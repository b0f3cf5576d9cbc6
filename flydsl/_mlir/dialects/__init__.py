"""``flydsl._mlir.dialects``: the MLIR dialects' Python builders (see ``flydsl._mlir``)."""
