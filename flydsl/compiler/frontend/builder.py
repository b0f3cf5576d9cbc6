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
    #: Names of the tensor parameters the kernel may write (stores, atomics, ...).
    written: tuple = ()


def trace_kernel(fn, name: str, params: tuple, target, options) -> TracedKernel:
    """Trace ``fn`` for the given parameter specializations into a fresh module;
    ``name`` is the kernel's symbol (messages use the Python name)."""
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
        tctx = TraceContext(kernel_name=fn.__name__, target=target, options=options, func_op=func_op,
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
            Codegen(src, scope, fn.__name__).run_body()
            gpu.return_([])
        written = tuple(p.name for p, arg in zip(runtime, entry.arguments)
                        if p.kind == "tensor" and may_write(arg))
    return TracedKernel(module=module, name=name, params=params,
                        shared_bytes=tctx.extra.get("shared_bytes", 0), extra=tctx.extra,
                        dependencies=tctx.deps.finish(), written=written)


#: Ops through which a memref is only read (or only looked at).
_READS = frozenset({"memref.load", "memref.dim", "memref.rank", "vector.load",
                    "vector.transfer_read", "memref.extract_strided_metadata",
                    "memref.extract_aligned_pointer_as_index"})
#: Ops giving a view of the same memory: what is done to the view is done to it.
_VIEWS = frozenset({"memref.subview", "memref.cast", "memref.reinterpret_cast",
                    "memref.collapse_shape", "memref.expand_shape", "memref.view",
                    "memref.transpose"})


def may_write(value) -> bool:
    """Whether the memref ``value`` (or a view of it) may be written: anything but a
    known read counts as a write (stores, atomics, copies, calls)."""
    todo, seen = [value], set()
    while todo:
        v = todo.pop()
        for use in v.uses:
            op = use.owner
            name = op.name
            if name in _READS:
                continue
            if name in _VIEWS:
                key = id(op)
                if key not in seen:
                    seen.add(key)
                    todo.extend(op.results)
                continue
            if name == "memref.store" and use.operand_number == 0:
                continue   # the memref is the value being stored (into a memref of memrefs)
            return True
    return False
