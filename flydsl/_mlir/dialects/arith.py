"""``flydsl._mlir.dialects.arith``: ``mlir.dialects.arith``; builders return kernel values in a trace."""
from mlir.dialects import arith as _raw
from ._interop import export as _export

_export(_raw, globals())
