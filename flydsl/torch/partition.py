"""Which ATen ops of a graph go into one generated kernel: the partitioner of the
``flydsl`` torch.compile backend.

:func:`fusible` says whether a node is a pointwise op a kernel can compute;
:func:`partition` groups connected fusible nodes and row ops
(:mod:`flydsl.torch.reductions`, along any dims) whose iteration spaces fit
(:func:`merge_row_spaces`), without creating cycles.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence

import torch
from torch.fx import Node

from .pointwise import FX_DTYPES, emit_call, lookup
from .reductions import is_scan, reduce_dims, row_input

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


def keepdim_shape(shape: Sequence, rdims: Sequence[int]) -> tuple:
    """``shape`` with 1 at the reduced dims ``rdims`` (a keepdim reduction's result)."""
    return tuple(1 if d in rdims else n for d, n in enumerate(shape))


def squeezed_shape(shape: Sequence, rdims: Sequence[int]) -> tuple:
    """``shape`` without the reduced dims ``rdims`` (a reduction's result)."""
    return tuple(n for d, n in enumerate(shape) if d not in rdims)


def merge_row_spaces(a: tuple, b: tuple) -> Optional[tuple]:
    """The space of a group joining spaces ``a`` and ``b``, each ``(shape, rdims)``
    (``rdims``: the dims its row ops reduce, None for pointwise work). A row space
    takes pointwise work on its full shape, on its per-row shape (keepdim) and on
    its reduced shape; row spaces join when equal. None when they do not fit."""
    (sa, ra), (sb, rb) = a, b
    if ra is None and rb is None:
        merged = merge_spaces(sa, sb)
        if merged is None:
            return None
        return (merged, None) if same_shape(sa, sb) else (merged, (len(merged) - 1,))
    if ra is None:
        (sa, ra), (sb, rb) = (sb, rb), (sa, ra)
    if rb is not None:
        return (sa, ra) if ra == rb and same_shape(sa, sb) else None
    if same_shape(sb, sa) or same_shape(sb, keepdim_shape(sa, ra)) \
            or same_shape(sb, squeezed_shape(sa, ra)):
        return sa, ra
    return None


def row_frame_ok(members, space: tuple) -> bool:
    """Whether the members of a would-be row group over ``space`` fit one kernel:
    no member uses a scan (its result exists only in memory), and every input from
    outside the group of a member computed on the reduced shape broadcasts into
    the full shape the same way aligned at the right (as the kernel takes it) as
    through that reduced shape (as eager does)."""
    shape, rdims = space
    if rdims is None:
        return True
    members = set(members)
    for n in members:
        if is_scan(n) and any(u in members for u in n.users):
            return False
    small = len(shape) - len(rdims)
    for n in members:
        val = tensor_meta(n)
        if val is None or val.dim() >= len(shape) or reduce_dims(n) is not None:
            continue
        for a in n.all_input_nodes:
            t = tensor_meta(a)
            if a in members or t is None:
                continue
            if t.dim() > small:
                return False
            through = [1] * (small - t.dim()) + list(t.shape)
            for d in rdims:
                through.insert(d, 1)
            if not same_shape(through, [1] * (len(shape) - t.dim()) + list(t.shape)):
                return False
    return True


def _row_op_space(node: Node, device_type: str) -> Optional[tuple]:
    """The space of a fusible row op: (the shape it reduces, its reduced dims), or None."""
    rdims = reduce_dims(node)
    if rdims is None:
        return None
    x = node.args[0].meta["val"]
    if x.device.type != device_type or all(is_one(x.shape[d]) for d in rdims):
        return None
    outs = node.meta.get("val")
    for out in outs if isinstance(outs, (tuple, list)) else [outs]:
        if not is_contiguous(out) and not any(   # results are allocated contiguous
                same_layout(tensor_meta(a), out) for a in node.all_input_nodes):
            return None                           # or like an input
    return tuple(x.shape), rdims


def partition(graph: torch.fx.Graph, device_type: str,
              min_group_size: int = MIN_GROUP_SIZE, exclude: frozenset = frozenset()) -> list:
    """Groups of fusible nodes (each in topological order) to turn into kernels.

    Greedy, in topological order: a node joins the groups of its fusible inputs
    whose iteration space fits its own (:func:`merge_spaces`) when that creates
    no cycle (a path leaving the group and coming back, other groups counted as
    single nodes). A row op's space is the shape it reduces and the reduced dims
    (:func:`merge_row_spaces`); the items of a
    multi-result row op (``getitem``) join its group; no user of a scan joins its
    group (:func:`row_frame_ok`). Nodes in ``exclude`` stay out of every group.
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
            space = (tuple(n.meta["val"].shape), None)
        members = [n]
        chosen = []
        for a in n.all_input_nodes:
            g = group_of.get(a)
            if g is None or g in chosen or is_scan(a):
                continue
            merged = merge_row_spaces(spaces[g], space)
            if merged is None:
                continue
            trial = members + groups[g]
            if row_frame_ok(trial, merged) \
                    and not _creates_cycle(set(trial), index[n], index, group_of, groups):
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
