"""``flydsl._mlir.dialects.fly_rocdl``: upstream FlyDSL's own C++ dialect, which flydsl does
not have; every name read from it raises an AttributeError saying so (see ``fly``)."""
from ...expr.rocdl.enum import TargetAddressSpace  # noqa: F401  (the one enum kernels import)
from .fly import absent_dialect

__getattr__ = absent_dialect("fly_rocdl")
