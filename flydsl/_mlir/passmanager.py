"""``flydsl._mlir.passmanager``: ``mlir.passmanager``."""
from mlir.passmanager import *  # noqa: F401,F403
