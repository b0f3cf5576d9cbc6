"""Libraries written in the DSL itself on top of :mod:`flydsl.expr` (FlyDSL's
``flydsl.extension``): :mod:`~flydsl.extension.coop` (cooperative warp and block
algorithms, ``fx.coop``) and :mod:`~flydsl.extension.random` (counter-based random
numbers, ``fx.random``).

They are ordinary kernel-body code: every function is called from inside a
``@flydsl.kernel`` and traces to the same operations a kernel written by hand would.
Nothing here imports MLIR when loaded.
"""
