"""Which ATen ops of a graph go into one generated kernel: the partitioner of the
``flydsl`` torch.compile backend.

:func:`fusible` says whether a node is a pointwise op a kernel can compute;
:func:`partition` groups connected fusible nodes and row ops
(:mod:`flydsl.torch.reductions`) whose iteration spaces fit
(:func:`merge_spaces`), without creating cycles.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence

import torch
from torch.fx import Node

from .pointwise import FX_DTYPES, emit_call, lookup
from .reductions import row_input

#: Smallest group worth a generated kernel (a lone op is as fast in eager mode).
MIN_GROUP_SIZE = 2


def tensor_meta(node: Any) -> Optional[torch.Tensor]:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val if isinstance(val, torch.Tensor) else None


def is_contiguous(t: torch.Tensor) -> bool:
    from torch._prims_common import is_contiguous_or_false
    return bool(is_contiguous_or_false(t))


def same_shape(a: Sequence, b: Sequence) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def same_layout(a: Optional[torch.Tensor], b: torch.Tensor) -> bool:
    return a is not None and same_shape(a.shape, b.shape) and same_shape(a.stride(), b.stride())


def fusible(node: Node, device_type: str) -> bool:
    """Whether ``node`` is a pointwise op a generated kernel can compute on ``device_type``."""
    if node.op != "call_function":
        return False
    entry = lookup(node.target)
    if entry is None:
        return False
    bound = entry.bind(node.args, node.kwargs)
    out = tensor_meta(node)
    if bound is None or out is None or out.dtype not in FX_DTYPES \
            or out.device.type != device_type:
        return False
    if not is_contiguous(out) and not any(
            same_layout(tensor_meta(a), out) for a in node.all_input_nodes):
        return False   # results are allocated contiguous or like an input

    def operand(arg: Node) -> tuple:
        if isinstance(arg.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return "s", None
        meta = tensor_meta(arg)
        if meta is None or meta.dtype not in FX_DTYPES or meta.device != out.device \
                or meta.dim() > out.dim():
            raise _NotFusible
        return "x", meta.dtype

    try:
        return emit_call(entry, bound, out.dtype, operand) is not None
    except _NotFusible:
        return False


class _NotFusible(Exception):
    pass


def is_one(n) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return statically_known_true(n == 1)


def merge_spaces(a: tuple, b: tuple) -> Optional[tuple]:
    """The iteration space of a group joining spaces ``a`` and ``b`` (shapes): the
    same shape, or for a row kernel a full shape and a per-row one (the same
    leading dimensions, a last dimension of 1). None when they do not fit."""
    if same_shape(a, b):
        return a
    if len(a) == len(b) and len(a) >= 1 and same_shape(a[:-1], b[:-1]):
        if is_one(a[-1]) and not is_one(b[-1]):
            return b
        if is_one(b[-1]) and not is_one(a[-1]):
            return a
    return None


def _row_op_space(node: Node, device_type: str) -> Optional[tuple]:
    """The shape a fusible row op reduces (its input's), or None."""
    x = row_input(node)
    if x is None or x.device.type != device_type or is_one(x.shape[-1]):
        return None
    outs = node.meta.get("val")
    for out in outs if isinstance(outs, (tuple, list)) else [outs]:
        if not is_contiguous(out) and not any(   # results are allocated contiguous
                same_layout(tensor_meta(a), out) for a in node.all_input_nodes):
            return None                           # or like an input
    return tuple(x.shape)


def partition(graph: torch.fx.Graph, device_type: str,
              min_group_size: int = MIN_GROUP_SIZE, exclude: frozenset = frozenset()) -> list:
    """Groups of fusible nodes (each in topological order) to turn into kernels.

    Greedy, in topological order: a node joins the groups of its fusible inputs
    whose iteration space fits its own (:func:`merge_spaces`) when that creates
    no cycle (a path leaving the group and coming back, other groups counted as
    single nodes). A row op's space is the shape it reduces; the items of a
    multi-result row op (``getitem``) join its group. Nodes in ``exclude`` stay
    out of every group.
    """
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    group_of: dict = {}
    groups: dict = {}
    spaces: dict = {}
    next_id = 0
    for n in nodes:
        if n.op == "call_function" and n.target is operator.getitem \
                and n.args[0] in group_of and isinstance(n.meta.get("val"), torch.Tensor):
            g = group_of[n.args[0]]
            groups[g].append(n)
            group_of[n] = g
            continue
        if n in exclude:
            continue
        space = _row_op_space(n, device_type)
        if space is None:
            if not fusible(n, device_type):
                continue
            space = tuple(n.meta["val"].shape)
        members = [n]
        chosen = []
        for a in n.all_input_nodes:
            g = group_of.get(a)
            if g is None or g in chosen:
                continue
            merged = merge_spaces(spaces[g], space)
            if merged is None:
                continue
            trial = members + groups[g]
            if not _creates_cycle(set(trial), index[n], index, group_of, groups):
                members, space = trial, merged
                chosen.append(g)
        for g in chosen:
            del groups[g], spaces[g]
        groups[next_id], spaces[next_id] = members, space
        for m in members:
            group_of[m] = next_id
        next_id += 1
    return [sorted(g, key=index.__getitem__) for g in groups.values()
            if op_count(g) >= min_group_size]


def op_count(group: list) -> int:
    return sum(1 for n in group if n.target is not operator.getitem)


def is_row_group(nodes) -> bool:
    """Whether a group needs a row kernel: it has a row op or mixes shapes."""
    shapes = [n.meta["val"].shape for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    return any(row_input(n) is not None for n in nodes) \
        or any(not same_shape(s, shapes[0]) for s in shapes)


def _creates_cycle(members: set, limit: int, index: dict, group_of: dict, groups: dict) -> bool:
    """Whether some path leaves ``members`` and re-enters it (nodes after ``limit``,
    the newest member, cannot lead back)."""
    stack = [u for m in members for u in m.users if u not in members]
    seen: set = set()
    seen_groups: set = set()
    while stack:
        u = stack.pop()
        if u in members:
            return True
        if u in seen or index[u] > limit:
            continue
        seen.add(u)
        stack.extend(u.users)
        g = group_of.get(u)
        if g is not None and g not in seen_groups:   # a group will be one node
            seen_groups.add(g)
            for m in groups[g]:
                stack.extend(m.users)
    return False
