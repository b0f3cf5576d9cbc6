"""``flydsl._mlir.dialects.fly``: upstream FlyDSL's own C++ dialect, which flydsl does not have.

The module imports (so upstream helper modules that import it load), and every name read
from it raises an AttributeError saying so: flydsl expresses layouts, pointers and copies
with ``flydsl.expr`` (fx.make_layout, fx.make_view, fx.copy, fx.ptr_load, ...) and lowers them
to standard MLIR dialects itself.
"""


def absent_dialect(dialect: str):
    """The module ``__getattr__`` of an upstream dialect flydsl does not have."""
    def missing(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"flydsl has no '{dialect}' MLIR dialect (upstream FlyDSL's C++ "
                             f"dialect), so flydsl._mlir.dialects.{dialect}.{name} does not "
                             f"exist; use the flydsl.expr (fx) API for layouts, pointers and "
                             f"copies")
    return missing


__getattr__ = absent_dialect("fly")
