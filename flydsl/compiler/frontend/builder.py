"""Build the ``gpu.container_module`` of one kernel specialization."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlir.ir as ir
from mlir.dialects import gpu

from .codegen import Codegen
from .context import TraceContext, tracing
from .source import function_source
from .tensors import TensorValue, tensor_memref_type
from .values import Value


@dataclass
class TracedKernel:
    module: Any                  # ir.Module
    name: str
    params: tuple                # ParamSpec per parameter, in order
    shared_bytes: int = 0
    extra: dict = field(default_factory=dict)
    dependencies: Any = None     # compiler.dependencies.Dependencies: what the trace read


def trace_kernel(fn, name: str, params: tuple, target, options) -> TracedKernel:
    """Trace ``fn`` for the given parameter specializations into a fresh module."""
    src = function_source(fn)
    ctx = ir.Context()
    with ctx, ir.Location.file(src.filename, src.first_line, 1):
        module = ir.Module.parse("module attributes {gpu.container_module} {}")
        with ir.InsertionPoint(module.body):
            gmod = gpu.GPUModuleOp("kernels")
            gmod.regions[0].blocks.append()
        runtime = [p for p in params if p.kind != "constexpr"]
        arg_types = []
        for p in runtime:
            if p.kind == "tensor":
                arg_types.append(tensor_memref_type(p.dtype, p.rank, p.inner_contiguous))
            else:
                arg_types.append(p.dtype.mlir_type())
        ftype = ir.FunctionType.get(arg_types, [])
        with ir.InsertionPoint(gmod.regions[0].blocks[0]):
            func_op = gpu.GPUFuncOp(ftype, sym_name=name, kernel=True)
        entry = func_op.regions[0].blocks.append(*arg_types)
        tctx = TraceContext(kernel_name=name, target=target, options=options, func_op=func_op,
                            filename=src.filename)
        scope = {}
        args = iter(entry.arguments)
        for p in params:
            if p.kind == "constexpr":   # an object's attributes are read through P:name
                scope[p.name] = tctx.deps.found((("P", p.name),), p.value)
            elif p.kind == "tensor":
                scope[p.name] = TensorValue(next(args), p.dtype, p.rank, name=p.name)
            else:
                scope[p.name] = Value(next(args), p.dtype)
        with tracing(tctx), ir.InsertionPoint(entry):
            Codegen(src, scope, name).run_body()
            gpu.return_([])
    return TracedKernel(module=module, name=name, params=params,
                        shared_bytes=tctx.extra.get("shared_bytes", 0), extra=tctx.extra,
                        dependencies=tctx.deps.finish())
