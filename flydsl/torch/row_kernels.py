"""Generated row kernels: reductions along the innermost dimension with the
pointwise work around them (:mod:`flydsl.torch.reductions` says which ops).

A :class:`RowPattern` is a list of steps (see
:class:`flydsl.torch.reductions.RowBuilder`). Its kernel runs one block per
row: values needed once per row are computed by every thread, each reduction
is a loop of the threads over the row's columns followed by a tree reduction
in shared memory (``fx.shared_array`` and ``fx.barrier``), and a last loop
stores the per-element results. Per-element values are recomputed in each loop
that needs them, so intermediate rows never go through memory; the exception is
a transcendental that the last reduction's loop computes and the store loop
needs again (softmax's ``exp``): it waits in a float32/float64 output, read
back by the thread that wrote it.

At run time :class:`RowModule` views every operand as ``[rows..., columns]``
(leading dimensions merged where every operand allows, per-row operands and
results with stride 0 along the columns) and launches ``rows`` blocks.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import torch

from .kernels import (_MAX_ELEMENTS, FusedModule, KernelPattern, LaunchPlan,
                      broadcast_shape, broadcast_strides, coalesce, module_header,
                      out_specs, view_specs)
from .pointwise import fx_dtype, register_dtype

_MAX_BLOCK = 256
#: Partials left by a row reduction's shared-memory tree, combined by every thread.
_FOLDED = 16
_INIT = {"sum": "0.0", "max": "float('-inf')", "min": "float('inf')"}
_COMBINE = {"sum": "({a} + {b})", "max": "fx.max({a}, {b})", "min": "fx.min({a}, {b})"}
_NAME = re.compile(r"\b[vx]\d+\b")


@dataclass(frozen=True)
class RowPattern(KernelPattern):
    """What one row kernel computes.

    ``inputs``: ("tensor", torch dtype, "full" or "row") or ("scalar", flydsl dtype
    name, None) per runtime argument, bound to ``x0, x1, ...``; ``steps``: (kind,
    variable, expression or (reduction, source variable), register dtype) with kind
    "full", "row" or "reduce"; ``outputs``: (variable, torch dtype, "full", "row"
    or "row_squeezed") per stored result (``row``: shape ``[..., 1]``,
    ``row_squeezed``: the leading dimensions only).
    """

    inputs: tuple
    steps: tuple
    outputs: tuple

    def source(self, rank: int) -> tuple[str, str]:
        return row_kernel_source(self, rank)


def _deps(expr) -> list:
    if isinstance(expr, tuple):
        return [expr[1]]
    return _NAME.findall(expr)


def row_kernel_source(p: RowPattern, rank: int) -> tuple[str, str]:
    """(kernel name, module source) of ``p`` over ``[rows (rank - 1 dims), columns]``."""
    name = f"row_{p.key}_r{rank}"
    lead = ", ".join(f"i{d}" for d in range(rank - 1))
    params, top, loads = [], [], {}
    first_tensor = None
    for k, (kind, dtype, where) in enumerate(p.inputs):
        if kind == "scalar":
            params.append(f"x{k}: fx.{dtype}")
            continue
        params.append(f"t{k}: fx.Tensor[{fx_dtype(dtype)}, {rank}]")
        first_tensor = first_tensor or f"t{k}"
        col = "0" if where == "row" else "j"
        load = f"t{k}[{lead}, {col}]"
        if register_dtype(dtype) is not dtype:
            load = f"fx.cast({load}, {fx_dtype(register_dtype(dtype))})"
        if where == "row":
            top.append(f"x{k} = {load}")
        else:
            loads[f"x{k}"] = load
    params += [f"o{k}: fx.Tensor[{fx_dtype(d)}, {rank}]" for k, (_, d, _) in
               enumerate(p.outputs)]
    params += ["ncols: fx.Int32", "BLOCK: fx.Constexpr[int]"]
    first_tensor = first_tensor or "o0"
    full = {var: expr for kind, var, expr, _ in p.steps if kind == "full"}

    def per_element(targets: list) -> list:
        """The loads and full steps computing ``targets`` inside a column loop."""
        need: list = []

        def visit(v):
            if v in need:
                return
            if v in full:
                for d in _deps(full[v]):
                    visit(d)
                need.append(v)
            elif v in loads:
                need.append(v)
        for t in targets:
            visit(t)
        order = [v for v in loads if v in need] + [v for v in full if v in need]
        return [f"{v} = {loads[v] if v in loads else full[v]}" for v in order]

    full_outs = [(k, v, d) for k, (v, d, where) in enumerate(p.outputs) if where == "full"]
    kept = _kept_in_output(p, full_outs, per_element, lead)
    body = list(top)
    reductions = [i for i, step in enumerate(p.steps) if step[0] == "reduce"]
    for i, (kind, var, expr, dtype) in enumerate(p.steps):
        if kind == "row":
            body.append(f"{var} = {expr}")
        elif kind == "reduce":
            how, src = expr
            compute = per_element([src])
            k = reductions.index(i)
            if kept is not None and i == reductions[-1]:
                compute.append(f"{kept[1]} = {kept[0]}")   # its loop stores what it computed
            body += _reduction(f"red{k}", f"acc{k}", how, dtype, var, compute, src)
    if full_outs:
        body.append("for j in range(tid, ncols, BLOCK):")
        if kept is not None:   # read back by the thread that wrote it: no barrier needed
            loads[kept[0]] = kept[1]
            del full[kept[0]]
        body += ["    " + s for s in per_element([v for _, v, _ in full_outs])]
        body += [f"    o{k}[{lead}, j] = fx.cast({v}, {fx_dtype(d)})" for k, v, d in full_outs]
    row_outs = [(k, v, d) for k, (v, d, where) in enumerate(p.outputs) if where != "full"]
    if row_outs:
        body.append("if tid == 0:")
        body += [f"    o{k}[{lead}, 0] = fx.cast({v}, {fx_dtype(d)})" for k, v, d in row_outs]
    decode = []
    if rank > 1:
        decode.append("r = fx.block_idx.x")
        for d in range(rank - 2, 0, -1):
            extent = f"{first_tensor}.shape[{d}]"
            decode += [f"i{d} = r % {extent}", f"r = r // {extent}"]
        decode.append("i0 = r")
    lines = module_header(f"row pattern {p.key}, rank {rank}") + [
        "@flydsl.kernel",
        f"def {name}({', '.join(params)}):",
        "    tid = fx.thread_idx.x",
    ]
    lines += ["    " + s for s in decode + body]
    return name, "\n".join(lines) + "\n"


_EXPENSIVE = re.compile(r"\b(fm\.\w+|fx\.(exp\w*|log\w*|sin|cos|tan|erf\w*))\(")


def _kept_in_output(p: RowPattern, full_outs: list, per_element,
                    lead: str) -> Optional[tuple]:
    """(variable, output element) when the last reduction's loop computes an expensive
    value (a transcendental: softmax's ``exp``) that the final loop needs again: that
    loop then stores it in a float32/float64 full output of its register dtype, and
    the final loop loads it back instead of computing it twice. None otherwise."""
    reduces = [expr[1] for kind, _, expr, _ in p.steps if kind == "reduce"]
    if not reduces or not full_outs:
        return None
    full = {var: (expr, dtype) for kind, var, expr, dtype in p.steps if kind == "full"}
    computed = {line.split(" = ", 1)[0] for line in per_element([reduces[-1]])}
    needed = [line.split(" = ", 1)[0] for line in per_element([v for _, v, _ in full_outs])]
    for var in reversed(needed):       # the latest such value saves the most work
        if var not in computed or var not in full or not _EXPENSIVE.search(full[var][0]):
            continue
        for k, _, dtype in full_outs:
            if dtype in (torch.float32, torch.float64) and dtype == full[var][1]:
                return var, f"o{k}[{lead}, j]"
    return None


def _reduction(red: str, acc: str, how: str, dtype: torch.dtype, var: str,
               compute: list, src: str) -> list:
    """Lines reducing ``src`` (computed per column by ``compute``) over the row into
    ``var``: a strided loop of the threads, then a tree in shared memory ``red`` down
    to :data:`_FOLDED` partials, which every thread combines (``fm.fold``).

    The last tree steps would leave most threads idle on a GPU and, on the CPU,
    cost a barrier segment each for a few lanes (through memory: most of a short
    row's time); the same reads by every thread are one block value there."""
    init = _INIT[how]
    if dtype is torch.float64:
        init = f"fx.cast({init}, fx.Float64)"
    return ([f"{red} = fx.shared_array((BLOCK,), {fx_dtype(dtype)})",
             f"{acc} = {init}",
             "for j in range(tid, ncols, BLOCK):"]
            + ["    " + s for s in compute]
            + [f"    {acc} = {_COMBINE[how].format(a=acc, b=src)}",
               f"{red}[tid] = {acc}",
               "fx.barrier()",
               "s = BLOCK // 2",
               f"while s >= {_FOLDED}:   # unrolled at trace time (BLOCK is a constexpr)",
               "    if tid < s:",
               f"        {red}[tid] = {_COMBINE[how].format(a=f'{red}[tid]', b=f'{red}[tid + s]')}",
               "    fx.barrier()",
               "    s //= 2",
               f"{var} = fm.fold({red}, min(BLOCK, {_FOLDED}), {how!r})"])


class RowModule(FusedModule):
    """Runs one fused row group: its generated row kernel, or ``eager`` when it cannot
    (see :class:`~flydsl.torch.kernels.FusedModule`)."""

    def _plan(self, tensors: list, args: tuple) -> Optional[LaunchPlan]:
        shape = broadcast_shape([t.shape for t in tensors])
        device = tensors[0].device
        numel = math.prod(shape)
        if not shape or numel == 0 or numel >= _MAX_ELEMENTS \
                or any(t.device != device for t in tensors) or device.type != self.device_type:
            return None
        outs = []
        for (_, dtype, where), like in zip(self.pattern.outputs, self.layouts):
            if where == "full":
                outs.append(torch.empty(shape, dtype=dtype, device=device) if like is None
                            else torch.empty_like(args[like], dtype=dtype))
            else:
                lead = list(shape[:-1]) + ([1] if where == "row" else [])
                outs.append(torch.empty(lead, dtype=dtype, device=device))
        strides = [broadcast_strides(t, shape) for t in tensors]
        for o, (_, _, where) in zip(outs, self.pattern.outputs):
            strides.append(list(o.stride()) + [0] if where == "row_squeezed"
                           else broadcast_strides(o, shape))
        lead, lead_strides = coalesce(list(shape[:-1]), [st[:-1] for st in strides])
        sizes = tuple(lead) + (shape[-1],)
        views = view_specs(tensors + outs, sizes,
                           [tuple(ls) + (st[-1],) for ls, st in zip(lead_strides, strides)])
        rank = len(sizes)
        if rank in self.broken:
            return None
        kernel = self._kernel(rank)
        if kernel is None:
            return None
        rows, ncols = numel // shape[-1], shape[-1]
        # About two columns per thread (measured best on the CPU), 32 to 256 threads.
        block = min(_MAX_BLOCK, 1 << max(5, (ncols - 1).bit_length() - 1))
        return LaunchPlan(out_specs(outs), views, kernel, (rows, 1, 1), (block, 1, 1),
                          (ncols, block))


__all__ = ["RowModule", "RowPattern", "row_kernel_source"]
