"""``flydsl._mlir.dialects.ub``: ``mlir.dialects.ub``; builders return kernel values in a trace."""
from mlir.dialects import ub as _raw
from ._interop import export as _export

_export(_raw, globals())
