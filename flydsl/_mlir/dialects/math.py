"""``flydsl._mlir.dialects.math``: ``mlir.dialects.math``; builders return kernel values in a trace."""
from mlir.dialects import math as _raw
from ._interop import export as _export

_export(_raw, globals())
