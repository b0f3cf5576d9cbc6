"""``flydsl._mlir.dialects.nvgpu``: ``mlir.dialects.nvgpu``; builders return kernel values in a trace."""
from mlir.dialects import nvgpu as _raw
from ._interop import export as _export

_export(_raw, globals())
