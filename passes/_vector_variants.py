"""Math computed out of line, with vector versions that branch per vector.

A loop the vectorizer turns into SIMD code cannot branch per lane: inline math code
computes every path for every lane and selects. Functions with a cheap path for most
inputs (sin/cos: a short reduction below 2^20, the long one above) then pay for the
long path always. So :func:`outline_math_ops` replaces each scalar op of a table by a
call to a function of the module, and gives that function vector versions through
LLVM's vector-function ABI (the ``vector-function-abi-variant`` attribute): the loop
vectorizer calls ``name_v16(<16 x float>)`` once per 16 lanes, and that version
takes the cheapest path that every lane allows.

Every lane gets the result the scalar function gives it, whichever path ran: the
``full`` code must select, per lane, the result each path computes wherever that
path's ``ok`` holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mlir.ir as ir
from mlir.dialects import func, scf, vector

from ._arith import Builder, V
from .ir import walk

#: Vector widths given a version (128, 256 and 512 bits of f32), named with the
#: vector-function ABI's target-independent ``_LLVM_`` ISA token: LLVM matches a
#: version by its width, on x86 and AArch64 hosts alike.
VECTOR_WIDTHS = (4, 8, 16)
#: Function names start like this: the CPU backend keeps them out of its internalized
#: symbols (internal functions the vectorizer cannot see would be deleted first).
PREFIX = "_flydsl_math_"


@dataclass(frozen=True)
class Outlined:
    """An f32 function computed out of line.

    ``full(x)``: the result for any input (what the scalar function computes);
    ``paths``: ``(ok, code)`` pairs, cheapest first: ``code(x)`` gives the same result
    as ``full(x)`` on every lane where ``ok(x)`` (an i1 per lane) holds, cheaper.
    """
    full: Callable[[V], V]
    paths: tuple[tuple[Callable[[V], V], Callable[[V], V]], ...]


def outline_math_ops(module: ir.Module, table: dict[str, Outlined]) -> None:
    """Replace every scalar f32 op of ``module`` named in ``table`` by a call to a
    function defined (once) in ``module``, with vector versions."""
    with module.context:
        f32 = ir.F32Type.get()

        def wanted(op) -> bool:
            return (op.name in table and len(op.results) == 1 and len(op.operands) == 1
                    and op.results[0].type == f32)

        ops = list(walk(module.operation, wanted))
        defined: dict[str, str] = {}
        for op in ops:
            name = op.name
            if name not in defined:
                defined[name] = _define(module, name.split(".")[-1] + "f", table[name])
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp([f32], defined[name], [op.operands[0]])
            op.results[0].replace_all_uses_with(call.results[0])
            op.erase()


def _define(module: ir.Module, base: str, fn: Outlined) -> str:
    """Define ``PREFIX + base`` and its vector versions; return the scalar one's name."""
    name = PREFIX + base
    f32 = ir.F32Type.get()
    variants = []
    with ir.Location.unknown(), ir.InsertionPoint(module.body):
        for width in VECTOR_WIDTHS:
            vname = f"{name}_v{width}"
            _function(vname, ir.VectorType.get([width], f32), lambda x: _branching(x, fn))
            variants.append(f"_ZGV_LLVM_N{width}v_{name}({vname})")
        scalar = _function(name, f32, fn.full)
        # noinline: a call the vectorizer can replace (it looks the versions up on the
        # callee); inlined, the code would be vectorized with every path again
        scalar.attributes["passthrough"] = ir.ArrayAttr.get([
            ir.StringAttr.get("noinline"),
            ir.ArrayAttr.get([ir.StringAttr.get("vector-function-abi-variant"),
                              ir.StringAttr.get(",".join(variants))])])
    return name


def _function(name: str, ty: ir.Type, body: Callable[[V], V]) -> func.FuncOp:
    """``func.func @name(ty) -> ty`` returning ``body(x)``, hidden (no other object
    can interpose it; the loader's copy of another kernel's is never used)."""
    f = func.FuncOp(name, ir.FunctionType.get([ty], [ty]))
    f.attributes["visibility_"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)
    entry = f.add_entry_block()
    with ir.InsertionPoint(entry):
        b = Builder(ty, "contract")
        func.ReturnOp([body(b.value(entry.arguments[0])).v])
    return f


def _branching(x: V, fn: Outlined) -> V:
    """The first path whose ``ok`` holds on every lane, else ``full(x)``: one branch
    per vector and path."""
    return _first_path(x, fn.paths, fn.full)


def _first_path(x: V, paths: tuple, full: Callable[[V], V]) -> V:
    if not paths:
        return full(x)
    (ok, code), rest = paths[0], paths[1:]
    every = vector.reduction(x.b.i1, vector.CombiningKind.AND, ok(x).v)
    branch = scf.IfOp(every, [x.v.type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([code(x).v])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([_first_path(x, rest, full).v])
    return V(branch.results[0], x.b)


__all__ = ["Outlined", "outline_math_ops", "PREFIX", "VECTOR_WIDTHS"]
