"""Generated row kernels: reductions and scans with the pointwise work around
them (:mod:`flydsl.torch.reductions` says which ops).

A :class:`RowPattern` is a list of steps (see
:class:`flydsl.torch.reductions.RowBuilder`). Its kernel runs one block per
row: values needed once per row are computed by every thread, each reduction
is a loop of the threads over the row's columns followed by a tree reduction
in shared memory (``fx.shared_array`` and ``fx.barrier``; ``argmax``/``argmin``
carry (value, index) pairs and keep the first index of equal values, NaN
winning as in eager), a scan is a walk of the row by thread 0 that stores each
prefix, and a last loop stores the per-element results. Per-element values are
recomputed in each loop that needs them, so intermediate rows never go through
memory; the exception is a transcendental that the last reduction's loop
computes and the store loop needs again (softmax's ``exp``): it waits in a
float32/float64 output, read back by the thread that wrote it.

At run time :class:`RowModule` views every operand as ``[rows..., columns]``:
the reduced dims (``RowPattern.rdims``, any dims of the space) become one
column dim, strided when they are not the innermost (a reduction over ``dim=0``
walks each row with the stride of dim 0), and the other dims the rows (merged
where every operand allows); per-row operands and results have stride 0 along
the columns. Reduced dims that an operand cannot step through as one dim (a
permuted input reduced over two dims) run the group's eager graph.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

import torch

from .kernels import (_MAX_ELEMENTS, FusedModule, KernelPattern, LaunchPlan,
                      broadcast_shape, broadcast_strides, coalesce, module_header,
                      out_specs, view_specs)
from .partition import keepdim_shape, squeezed_shape
from .pointwise import fx_dtype, register_dtype

_MAX_BLOCK = 256
#: Partials left by a row reduction's shared-memory tree, combined by every thread.
_FOLDED = 16
_COMBINE = {"sum": "({a} + {b})", "prod": "({a} * {b})", "max": "fx.max({a}, {b})",
            "min": "fx.min({a}, {b})",
            # A softmax's shift: NaNs need not propagate (the row's sum does), so one
            # compare-select (x86 maxps) instead of fx.max's NaN and signed-zero
            # handling; the + 0.0 keeps LLVM from making the store of the per-thread
            # slot a masked store (slow on AMD). The 16 partials fold with fx.max.
            "fmax": "(fx.select({b} > {a}, {b}, {a}) + 0.0)"}
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
    #: The dims of the iteration space the kernel's columns walk (sorted; the
    #: innermost when empty); not part of the kernel, which sees one column dim.
    rdims: tuple = field(default=(), compare=False, repr=False)

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

    scanned = {var for kind, var, _, _ in p.steps if kind == "scan"}
    full_outs = [(k, v, d) for k, (v, d, where) in enumerate(p.outputs)
                 if where == "full" and v not in scanned]
    kept = _kept_in_output(p, full_outs, per_element, lead)
    body = list(top)
    reductions = [i for i, step in enumerate(p.steps) if step[0] == "reduce"]
    # Reductions that need none of each other's results (nor row values computed
    # after the first of them) share one column loop and one shared-memory tree:
    # the max and the mean of cross entropy's row, each with its own accumulator
    # (the same additions in the same order as apart).
    batch: list = []        # (k, var, how, dtype, src) of the open batch
    since: set = set()      # variables defined since the batch's first reduction
    deferred: list = []     # row steps after the batch's first reduction

    def flush() -> None:
        if not batch:
            return
        compute = per_element([src for *_, src in batch])
        if kept is not None and batch[-1][0] == len(reductions) - 1:
            compute.append(f"{kept[1]} = {kept[0]}")   # its loop stores what it computed
        body.extend(_reduction([(f"red{k}", f"acc{k}", how, dtype, var, src)
                                for k, var, how, dtype, src in batch], compute))
        body.extend(deferred)
        batch.clear()
        since.clear()
        deferred.clear()

    for i, (kind, var, expr, dtype) in enumerate(p.steps):
        if kind == "row":
            if batch:
                deferred.append(f"{var} = {expr}")
                since.add(var)
            else:
                body.append(f"{var} = {expr}")
        elif kind == "reduce":
            how, src = expr
            arg = how in ("argmax", "argmin")
            if batch and (arg or batch[0][2] in ("argmax", "argmin")
                          or since & _row_names(src, full)):
                flush()
            batch.append((reductions.index(i), var, how, dtype, src))
            since.add(var)
        elif kind == "scan":
            flush()
            outs = [(k, d) for k, (v, d, _) in enumerate(p.outputs) if v == var]
            if not outs:
                raise AssertionError(f"row pattern {p.key}: scan {var} is not a result")
            body += _scan(f"scan{i}", expr[0], dtype, per_element([expr[1]]), expr[1],
                          [f"o{k}[{lead}, j] = fx.cast(scan{i}, {fx_dtype(d)})"
                           for k, d in outs])
    flush()
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


def _literal(value: str, dtype: torch.dtype) -> str:
    """Source of the constant ``value`` (a Python literal) in register dtype ``dtype``."""
    if dtype is torch.float32:
        return value
    return f"fx.cast({value}, {fx_dtype(dtype)})"


def _init(how: str, dtype: torch.dtype) -> str:
    """The identity of reduction ``how`` in ``dtype``."""
    if how in ("sum", "prod"):
        one = "1" if how == "prod" else "0"
        return _literal(one + ".0" if dtype.is_floating_point else one, dtype)
    low = how in ("max", "argmax", "fmax")
    if dtype.is_floating_point:
        return _literal("float('-inf')" if low else "float('inf')", dtype)
    info = torch.iinfo(dtype) if dtype is not torch.bool else None
    return _literal(str((info.min if low else info.max) if info else int(not low)), dtype)


def _row_names(src: str, full: dict) -> set:
    """The names the per-column value ``src`` is computed from, through the full
    steps ``full`` (variable -> expression): row values, reductions and inputs."""
    names, stack, seen = set(), [src], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in full:
            stack.extend(_deps(full[v]))
        else:
            names.add(v)
    return names


def _reduction(items: list, compute: list) -> list:
    """Lines reducing each ``(red, acc, how, dtype, var, src)`` of ``items`` over the
    row into ``var``: one strided loop of the threads computing every ``src`` per
    column (``compute``), then one tree in shared memory (``red`` each) down to
    :data:`_FOLDED` partials, which every thread combines (``fm.fold``).

    The last tree steps would leave most threads idle on a GPU and, on the CPU,
    cost a barrier segment each for a few lanes (through memory: most of a short
    row's time); the same reads by every thread are one block value there. Several
    reductions in one loop and tree share those segments."""
    if any(how in ("argmax", "argmin") for _, _, how, *_ in items):
        (item,) = items
        return _arg_reduction(*item, compute)
    lines = [f"{red} = fx.shared_array((BLOCK,), {fx_dtype(dtype)})"
             for red, _, _, dtype, _, _ in items]
    lines += [f"{acc} = {_init(how, dtype)}" for _, acc, how, dtype, _, _ in items]
    lines.append("for j in range(tid, ncols, BLOCK):")
    lines += ["    " + s for s in compute]
    lines += [f"    {acc} = {_COMBINE[how].format(a=acc, b=src)}"
              for _, acc, how, _, _, src in items]
    lines += [f"{red}[tid] = {acc}" for red, acc, *_ in items]
    lines += ["fx.barrier()",
              "s = BLOCK // 2",
              f"while s >= {_FOLDED}:   # unrolled at trace time (BLOCK is a constexpr)",
              "    if tid < s:"]
    lines += [f"        {red}[tid] = {_COMBINE[how].format(a=f'{red}[tid]', b=f'{red}[tid + s]')}"
              for red, _, how, *_ in items]
    lines += ["    fx.barrier()", "    s //= 2"]
    lines += [f"{var} = fm.fold({red}, min(BLOCK, {_FOLDED}), {how!r})"
              for red, _, how, _, var, _ in items]
    return lines


def _better(how: str, dtype: torch.dtype, v: str, u: str) -> str:
    """Whether value ``v`` beats ``u`` for ``how`` (argmax/argmin): strictly larger
    (smaller), or NaN against a number (NaN wins, as in eager)."""
    cmp = ">" if how == "argmax" else "<"
    if not dtype.is_floating_point:
        return f"({v} {cmp} {u})"
    return f"(({v} {cmp} {u}) | (fx.isnan({v}) & (fx.isnan({u}) ^ True)))"


def _arg_pick(how: str, dtype: torch.dtype, av: str, ai: str, bv: str, bi: str) -> str:
    """Whether partial (``bv``, ``bi``) replaces (``av``, ``ai``): it is better, or as
    good at a smaller index (torch keeps the first); an index < 0 is no partial."""
    tie = f"({bv} == {av})"
    if dtype.is_floating_point:
        tie = f"({tie} | (fx.isnan({bv}) & fx.isnan({av})))"
    return (f"(({ai} < 0) | (({bi} >= 0) & ({_better(how, dtype, bv, av)} | "
            f"({tie} & ({bi} < {ai})))))")


def _arg_reduction(red: str, acc: str, how: str, dtype: torch.dtype, var: str, src: str,
                   compute: list) -> list:
    """:func:`_reduction` of ``argmax``/``argmin``: (value, index) pairs, index -1 for
    a thread that saw no column; ``var`` is the index (Int64)."""
    idx, ridx = f"{acc}_i", f"{red}_i"
    take = _better(how, dtype, src, acc)
    lines = [f"{red} = fx.shared_array((BLOCK,), {fx_dtype(dtype)})",
             f"{ridx} = fx.shared_array((BLOCK,), fx.Int32)",
             f"{acc} = {_init(how, dtype)}",
             f"{idx} = fx.cast(-1, fx.Int32)",
             "for j in range(tid, ncols, BLOCK):"]
    lines += ["    " + s for s in compute]
    lines += [f"    take = ({idx} < 0) | {take}",   # j grows: the first of equals stays
              f"    {acc} = fx.select(take, {src}, {acc})",
              f"    {idx} = fx.select(take, fx.cast(j, fx.Int32), {idx})",
              f"{red}[tid] = {acc}",
              f"{ridx}[tid] = {idx}",
              "fx.barrier()",
              "s = BLOCK // 2",
              f"while s >= {_FOLDED}:   # unrolled at trace time (BLOCK is a constexpr)",
              "    if tid < s:",
              f"        av = {red}[tid]",
              f"        ai = {ridx}[tid]",
              f"        bv = {red}[tid + s]",
              f"        bi = {ridx}[tid + s]",
              f"        take = {_arg_pick(how, dtype, 'av', 'ai', 'bv', 'bi')}",
              f"        {red}[tid] = fx.select(take, bv, av)",
              f"        {ridx}[tid] = fx.select(take, bi, ai)",
              "    fx.barrier()",
              "    s //= 2",
              f"{acc} = {red}[0]",
              f"{idx} = {ridx}[0]"]
    for q in range(1, _FOLDED):   # BLOCK >= 32: always _FOLDED partials, in order
        lines += [f"take = {_arg_pick(how, dtype, acc, idx, f'{red}[{q}]', f'{ridx}[{q}]')}",
                  f"{acc} = fx.select(take, {red}[{q}], {acc})",
                  f"{idx} = fx.select(take, {ridx}[{q}], {idx})"]
    return lines + [f"{var} = fx.cast({idx}, fx.Int64)"]


def _scan(acc: str, how: str, dtype: torch.dtype, compute: list, src: str,
          stores: list) -> list:
    """Lines of a sequential scan of ``src`` along the row by thread 0, which stores
    each prefix (``stores``, in terms of ``j`` and ``acc``) as it goes: eager's order
    of additions, and nothing for the other threads to wait for."""
    return (["if tid == 0:",
             f"    {acc} = {_init(how, dtype)}",
             "    for j in range(0, ncols):"]
            + ["        " + s for s in compute]
            + [f"        {acc} = {_COMBINE[how].format(a=acc, b=src)}"]
            + ["        " + s for s in stores])


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
        rdims = self.pattern.rdims or (len(shape) - 1,)
        outs = []
        for (_, dtype, where), like in zip(self.pattern.outputs, self.layouts):
            if where == "full":
                outs.append(torch.empty(shape, dtype=dtype, device=device) if like is None
                            else torch.empty_like(args[like], dtype=dtype))
            else:
                lead = keepdim_shape(shape, rdims) if where == "row" \
                    else squeezed_shape(shape, rdims)
                outs.append(torch.empty(lead, dtype=dtype, device=device))
        strides = [broadcast_strides(t, shape) for t in tensors]
        for o, (_, _, where) in zip(outs, self.pattern.outputs):
            if where == "row_squeezed":
                st = list(o.stride())
                for d in rdims:
                    st.insert(d, 0)
                strides.append(st)
            else:
                strides.append(broadcast_strides(o, shape))
        # The reduced dims become one column dim: each operand must step through
        # them as through one dim (contiguous across them, or constant along them).
        cols = [d for d in rdims if shape[d] != 1] or [rdims[-1]]
        for st in strides:
            if any(st[a] != st[b] * shape[b] for a, b in zip(cols, cols[1:])):
                return None
        ncols = math.prod(shape[d] for d in cols)
        keep = [d for d in range(len(shape)) if d not in rdims]
        lead, lead_strides = coalesce([shape[d] for d in keep] or [1],
                                      [[st[d] for d in keep] or [0] for st in strides])
        sizes = tuple(lead) + (ncols,)
        views = view_specs(tensors + outs, sizes,
                           [tuple(ls) + (st[cols[-1]],) for ls, st in zip(lead_strides, strides)])
        rank = len(sizes)
        if rank in self.broken:
            return None
        kernel = self._kernel(rank)
        if kernel is None:
            return None
        rows = numel // ncols
        # About two columns per thread (measured best on the CPU), 32 to 256 threads.
        block = min(_MAX_BLOCK, 1 << max(5, (ncols - 1).bit_length() - 1))
        return LaunchPlan(out_specs(outs), views, kernel, (rows, 1, 1), (block, 1, 1),
                          (ncols, block))


__all__ = ["RowModule", "RowPattern", "row_kernel_source"]
