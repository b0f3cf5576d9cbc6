"""``flydsl._mlir.dialects.rocdl``: ``mlir.dialects.rocdl``; builders return kernel values in a trace."""
from mlir.dialects import rocdl as _raw
from ._interop import export as _export

_export(_raw, globals())
