"""``flydsl._mlir.dialects.memref``: ``mlir.dialects.memref``; builders return kernel values in a trace."""
from mlir.dialects import memref as _raw
from ._interop import export as _export

_export(_raw, globals())
