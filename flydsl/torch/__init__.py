"""PyTorch integration of flydsl: ``import flydsl.torch`` (``import flydsl`` never imports torch).

* :func:`custom_op` registers a ``@flydsl.jit`` function as a ``torch.library``
  custom op with a fake implementation: it runs in eager mode, under
  ``torch.compile(fullgraph=True)`` and in ``torch.export``.
* :func:`flydsl_backend` is the ``torch.compile`` backend named ``"flydsl"``
  (installed through the ``torch_dynamo_backends`` entry point, so
  ``torch.compile(model, backend="flydsl")`` works without importing this
  package): it fuses pointwise ops, row reductions and norms with their pointwise
  neighbours, and matmul epilogues into generated flydsl kernels where a cost rule
  says it pays (:mod:`flydsl.torch.fusion_cost`), and leaves every other op to ATen.
"""
from .custom_op import custom_op
from .dynamo_backend import flydsl_backend
from .pointwise import pointwise_ops

__all__ = ["custom_op", "flydsl_backend", "pointwise_ops"]
