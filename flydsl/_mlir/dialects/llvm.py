"""``flydsl._mlir.dialects.llvm``: ``mlir.dialects.llvm``; builders return kernel values in a trace."""
from mlir.dialects import llvm as _raw
from ._interop import export as _export

_export(_raw, globals())
