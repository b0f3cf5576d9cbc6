"""``flydsl._mlir.dialects.gpu``: ``mlir.dialects.gpu``; builders return kernel values in a trace."""
from mlir.dialects import gpu as _raw
from ._interop import export as _export

_export(_raw, globals())
