"""``flydsl._mlir.dialects.cf``: ``mlir.dialects.cf``; builders return kernel values in a trace."""
from mlir.dialects import cf as _raw
from ._interop import export as _export

_export(_raw, globals())
