"""Build the ``gpu.container_module`` of one kernel specialization."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import mlir.ir as ir
from mlir.dialects import gpu

from ...passes.ir import CHECKED_ARGS, MEMREF_VIEW_OPS
from ..function_attrs import attach_function_attrs
from ..kernel_function import current_launch_block
from ...runtime.specialization import ALIGNMENT
from .codegen import Codegen
from .context import TraceContext, tracing
from .pointer_ops import bind_pointer_params
from .source import function_source
from .tensors import TensorValue, assume_aligned, assume_divisible, tensor_memref_type
from .values import Value
from .views import bounded_by_memory, make_view


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
        func_op.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [param_attributes(p) for p in runtime])
        tctx = TraceContext(kernel_name=fn.__name__, target=target, options=options, func_op=func_op,
                            filename=src.filename)
        if target.backend == "rocm":   # FlyDSL's value_attrs; other backends have none
            attach_function_attrs(func_op, options.function_attrs)
        launch = current_launch_block()   # the compiled kernel's own declaration
        block_size = launch.declared if launch is not None else None
        if block_size is not None:   # @flydsl.kernel(known_block_size=...): a backend hint
            tctx.extra["known_block_size"] = block_size
            func_op.attributes["known_block_size"] = ir.DenseI32ArrayAttr.get(list(block_size))
        scope = {}
        args = iter(entry.arguments)
        arg_index = {}
        for p in params:
            if p.kind != "constexpr":
                arg_index[p.name] = len(arg_index)
            if p.kind == "constexpr":   # an object's attributes are read through P:name
                scope[p.name] = tctx.deps.found((("P", p.name),), p.value)
            elif p.kind == "tensor":
                scope[p.name] = TensorValue(next(args), p.dtype, p.rank, name=p.name,
                                            wide=p.wide)
            else:
                scope[p.name] = Value(next(args), p.dtype)
        with ir.InsertionPoint(entry):
            assume_specializations(params, scope)
        with tracing(tctx), ir.InsertionPoint(entry):
            bind_pointer_params(fn, scope)      # fx.Pointer parameters
            checked = []   # host views: the 1-d memory through the static layout
            for p in params:
                if p.kind == "tensor" and p.layout is not None:
                    checked.append(arg_index[p.name])
                    scope[p.name] = bounded_by_memory(make_view(scope[p.name], p.layout))
            if checked:    # the layout may reach past the memory: the CPU checks accesses
                func_op.attributes[CHECKED_ARGS] = ir.DenseI32ArrayAttr.get(checked)
            Codegen(src, scope, fn.__name__).run_body()
            gpu.return_([])
        if block_size is None and "launch_block" in tctx.extra:   # compiled for that block
            func_op.attributes["known_block_size"] = ir.DenseI32ArrayAttr.get(
                list(tctx.extra["launch_block"]))
        check_trace_size(tctx, func_op)
        written = tuple(p.name for p, arg in zip(runtime, entry.arguments)
                        if p.kind == "tensor" and may_write(arg))
        func_op.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [param_attributes(p, unaliased(p, written)) for p in runtime])
    return TracedKernel(module=module, name=name, params=params,
                        shared_bytes=tctx.extra.get("shared_bytes", 0), extra=tctx.extra,
                        dependencies=tctx.deps.finish(), written=written)


def param_attributes(p, noalias: bool = False) -> ir.DictAttr:
    """LLVM argument attributes of a runtime parameter: ``llvm.align`` on an aligned
    tensor's pointers (PTX ``.param .ptr .align 16``), ``llvm.noalias`` on those of a
    tensor that shares no memory with another argument where either is written."""
    attrs = {}
    if p.kind == "tensor" and p.aligned:
        i64 = ir.IntegerType.get_signless(64)
        attrs["llvm.align"] = ir.IntegerAttr.get(i64, ALIGNMENT)
    if noalias:
        attrs["llvm.noalias"] = ir.UnitAttr.get()
    return ir.DictAttr.get(attrs)


def unaliased(p, written) -> bool:
    """Whether tensor parameter ``p`` may be ``noalias``: no tensor it may overlap
    (``p.overlaps``, :mod:`flydsl.runtime.specialization`) is written, nor is ``p``
    when it overlaps any."""
    if p.kind != "tensor":
        return False
    return not p.overlaps or (p.name not in written
                              and not any(q in written for q in p.overlaps))


def assume_specializations(params: tuple, scope: dict) -> None:
    """State what the specialization guarantees (aligned tensors, ints divisible by 16:
    :mod:`flydsl.runtime.specialization`) at the kernel's entry, for LLVM to use."""
    for p in params:
        if p.kind == "tensor" and p.aligned:
            t = scope[p.name]
            t.mem = assume_aligned(t.mem, p.dtype, p.rank)
        elif p.kind == "scalar" and p.divisible:
            assume_divisible(scope[p.name].v)


#: Ops through which a memref is only read (or only looked at).
_READS = frozenset({"memref.load", "memref.dim", "memref.rank", "vector.load",
                    "vector.transfer_read"})


def may_write(value) -> bool:
    """Whether the memref ``value`` (or a view of it) may be written: anything but a
    known read counts as a write (stores, atomics, copies, calls). Views are
    followed, so is the base buffer of ``memref.extract_strided_metadata`` (flat
    views of a tensor are made from it), and a raw address
    (``memref.extract_aligned_pointer_as_index``) counts as a write once it becomes
    a pointer (buffer resources, pointer copies); alignment tests on it are reads."""
    # Ops seen, by id, with the op kept alive: an id is unique only while its Python
    # wrapper lives (a freed one's id was reused, and a view op skipped as seen).
    todo, seen = [value], {}
    while todo:
        v = todo.pop()
        for use in v.uses:
            op = use.owner
            name = op.name
            if name in _READS:
                continue
            if name in MEMREF_VIEW_OPS or name == "memref.extract_strided_metadata":
                if seen.setdefault(id(op), op) is op:
                    todo.append(op.results[0]) if name.endswith("metadata") else \
                        todo.extend(op.results)
                continue
            if name == "memref.extract_aligned_pointer_as_index":
                if _address_escapes(op.results[0]):
                    return True
                continue
            if name == "memref.store" and use.operand_number == 0:
                continue   # the memref is the value being stored (into a memref of memrefs)
            return True
    return False


def _address_escapes(address) -> bool:
    """Whether an integer address flows into anything but integer arithmetic and
    comparisons (into a pointer, a call, memory)."""
    todo, seen = [address], {}
    while todo:
        for use in todo.pop().uses:
            op = use.owner
            if not op.name.startswith("arith."):
                return True
            if seen.setdefault(id(op), op) is op:
                todo.extend(op.results)
    return False


#: Ops one traced statement may emit, at most in practice: a trace with fewer than
#: budget / this many statements is not counted (a walk over its ops is not free).
_OPS_PER_STATEMENT = 50
_warned_budget: set = set()


def _env_count(name: str, default: int) -> int:
    from ..dependencies import own_setting   # a limit, not part of the kernel's key
    text = (own_setting(name) or "").strip()
    return int(text) if text.isdigit() else default


def trace_op_budget() -> int:
    """Ops a trace may produce before flydsl warns (``FLYDSL_TRACE_OP_BUDGET``, 20000)."""
    return _env_count("FLYDSL_TRACE_OP_BUDGET", 20_000)


def trace_op_limit() -> int:
    """Ops a trace may produce at most (``FLYDSL_TRACE_OP_LIMIT``, 50000): past it the
    kernel is refused. Compile time grows about with the square of the op count (a
    50,000-op chain took 2.5 minutes, see :func:`compile_ms_per_op`) and, near
    100,000 ops, LLVM's recursion overflowed the main thread's stack (SIGSEGV)."""
    return _env_count("FLYDSL_TRACE_OP_LIMIT", 50_000)


def compile_ms_per_op(ops: int) -> float:
    """Compile time per op to expect, measured on unrolled multiply-add chains (a
    2-core x86 host, CPU backend: 0.8 ms at 20,000 ops, 1.2 to 2.9 ms at 40,000 to
    50,000, 4.5 ms at 80,000, mostly in LLVM): it grows about with the op count, so
    the whole compile grows about with its square. Heavier ops take longer."""
    return 0.8 * max(ops, 1) / 20_000


def check_trace_size(tctx: TraceContext, func_op) -> None:
    """Warn, once per kernel, when tracing produced more ops than the budget: compile
    time grows with them; refuse the kernel (DSLError) past the limit. Both name the
    unrolled loop (or compile-time ``while``) whose copies account for most of the
    traced statements."""
    budget, limit = trace_op_budget(), trace_op_limit()
    if tctx.statements * _OPS_PER_STATEMENT <= min(budget, limit):
        return
    if tctx.kernel_name in _warned_budget and tctx.statements * _OPS_PER_STATEMENT <= limit:
        return
    ops = _count_ops(func_op)
    (filename, lineno), culprit = _largest_unroll(tctx)
    if ops > limit:
        import linecache
        from ...errors import DSLError
        raise DSLError(f"tracing produced {ops} operations, more than the {limit} of "
                       f"FLYDSL_TRACE_OP_LIMIT: compiling them would take too long or crash "
                       f"LLVM" + culprit, kernel=tctx.kernel_name, filename=filename,
                       lineno=lineno, source_line=linecache.getline(filename, lineno))
    if ops <= budget or tctx.kernel_name in _warned_budget:
        return
    _warned_budget.add(tctx.kernel_name)
    import warnings
    from ...errors import CompileTimeWarning
    ms = compile_ms_per_op(ops)
    warnings.warn_explicit(f"kernel {tctx.kernel_name!r}: tracing produced {ops} operations, "
                           f"more than the {budget} of FLYDSL_TRACE_OP_BUDGET; compile time "
                           f"grows faster than the op count (about {ms:.1f} ms per op at this "
                           f"size: ~{ms * ops / 1000:.0f} s; past {limit} ops, "
                           "FLYDSL_TRACE_OP_LIMIT, kernels are refused)" + culprit,
                           CompileTimeWarning, filename, lineno)


def _largest_unroll(tctx: TraceContext) -> tuple[tuple[str, int], str]:
    """((file, line), description) of the unrolled loop with the most traced
    statements; the kernel's file and "" when nothing was unrolled."""
    if not tctx.unrolled_statements:
        return (tctx.filename, 1), ""
    where, count = max(tctx.unrolled_statements.items(), key=lambda kv: kv[1])
    return where, (f"; {count} of its {tctx.statements} traced statements come from the "
                   f"loop at {where[0]}:{where[1]}, unrolled while tracing (make it a runtime "
                   "loop: range(...) or fx.range(...), unless unrolling it matters for speed)")


def _count_ops(op) -> int:
    count = 0

    def visit(_):
        nonlocal count
        count += 1
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit)
    return count
