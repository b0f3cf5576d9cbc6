"""``flydsl._mlir``: the MLIR Python bindings under FlyDSL's name.

Upstream FlyDSL ships its own build of the bindings as ``flydsl._mlir``; flydsl uses the
``mlir`` package it depends on, and this package re-exports it: ``flydsl._mlir.ir`` is
``mlir.ir``, ``flydsl._mlir.dialects.<d>`` is ``mlir.dialects.<d>`` (arith, llvm, vector,
rocdl, nvvm, gpu, scf, memref, math, func, builtin, cf, index, amdgpu, nvgpu, ub),
``flydsl._mlir.passmanager`` and ``flydsl._mlir.extras.types`` likewise.

Interop with kernel values: every flydsl kernel value is an ``ir.Value`` (so a dialect
builder takes it as an operand), and inside a ``@flydsl.kernel`` body the dialect
builders' results are kernel values again, typed from their MLIR type (``i32`` is
Int32, ``vector<4xf32>`` a ``fx.Vector``), so ``arith.addf(a, b) * 2`` works. Outside
a kernel trace the builders return what the bindings return.

Importing ``flydsl`` does not import this package (nor MLIR); importing it does.
"""
