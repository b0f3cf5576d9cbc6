"""``flydsl._mlir.dialects.index``: ``mlir.dialects.index``; builders return kernel values in a trace."""
from mlir.dialects import index as _raw
from ._interop import export as _export

_export(_raw, globals())
