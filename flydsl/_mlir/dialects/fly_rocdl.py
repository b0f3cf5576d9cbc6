"""``flydsl._mlir.dialects.fly_rocdl``: upstream FlyDSL's own C++ dialect, which flydsl does not have.

The module imports (so upstream helper modules that import it load), and every name read
from it raises an AttributeError saying so: flydsl expresses layouts, pointers and copies
with ``flydsl.expr`` (fx.make_layout, fx.make_view, fx.copy, fx.ptr_load, ...) and lowers them
to standard MLIR dialects itself.
"""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"flydsl has no 'fly_rocdl' MLIR dialect (upstream FlyDSL's C++ dialect), so "
                         f"flydsl._mlir.dialects.fly_rocdl.{name} does not exist; use the flydsl.expr "
                         f"(fx) API for layouts, pointers and copies")
