"""``flydsl._mlir.dialects.builtin``: ``mlir.dialects.builtin``; builders return kernel values in a trace."""
from mlir.dialects import builtin as _raw
from ._interop import export as _export

_export(_raw, globals())
