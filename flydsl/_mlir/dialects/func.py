"""``flydsl._mlir.dialects.func``: ``mlir.dialects.func``; builders return kernel values in a trace."""
from mlir.dialects import func as _raw
from ._interop import export as _export

_export(_raw, globals())
