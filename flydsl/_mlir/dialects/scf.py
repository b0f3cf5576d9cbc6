"""``flydsl._mlir.dialects.scf``: ``mlir.dialects.scf``; builders return kernel values in a trace."""
from mlir.dialects import scf as _raw
from ._interop import export as _export

_export(_raw, globals())
