"""``flydsl._mlir.dialects.amdgpu``: ``mlir.dialects.amdgpu``; builders return kernel values in a trace."""
from mlir.dialects import amdgpu as _raw
from ._interop import export as _export

_export(_raw, globals())
