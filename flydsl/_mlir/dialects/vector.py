"""``flydsl._mlir.dialects.vector``: ``mlir.dialects.vector``; builders return kernel values in a trace."""
from mlir.dialects import vector as _raw
from ._interop import export as _export

_export(_raw, globals())
