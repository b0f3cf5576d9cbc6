"""``flydsl._mlir.dialects.nvvm``: ``mlir.dialects.nvvm``; builders return kernel values in a trace."""
from mlir.dialects import nvvm as _raw
from ._interop import export as _export

_export(_raw, globals())
