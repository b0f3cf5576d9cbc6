"""Sums of ``select_backward``/``slice_backward`` pieces become one ``cat``.

Unpacking or slicing a tensor in Python (``q, k, v = qkv``, ``x[..., :d]``)
traces as ``select``/``slice`` calls, and AOTAutograd's backward scatters each
piece's gradient into a zero tensor of the whole shape and adds them up::

    add(add(select_backward(gq, shape, 0, 0), select_backward(gk, shape, 0, 1)),
        select_backward(gv, shape, 0, 2))

That writes the whole gradient once per piece, zeroed, plus an add per piece
(eager autograd writes it once, through ``stack``). When the pieces do not
overlap, the sum is the pieces side by side along their dimension, with zeros
in the gaps: one ``stack`` or ``cat``. A ``permute`` followed by a contiguous
``clone`` of that result (how a ``reshape`` of the permuted gradient traces)
is folded in too: the pieces are permuted and concatenated in the permuted
order, so the result is written once, already contiguous.

This is a plain graph simplification: every ATen graph the backend compiles
gets it, whether or not anything is fused.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
from torch.fx import Graph, Node

from .partition import same_shape

aten = torch.ops.aten
_SCATTERS = (aten.select_backward.default, aten.slice_backward.default)


def merge_scatter_sums(graph: Graph) -> int:
    """Rewrite every add tree of non-overlapping scatters of ``graph`` (see the
    module docstring) in place; returns how many trees were rewritten."""
    done = 0
    consumed: set = set()
    for node in reversed(list(graph.nodes)):   # roots before the adds inside them
        if node in consumed or not _is_plain_add(node):
            continue
        leaves, adds = _add_tree(node)
        if leaves is None or len(leaves) < 2:
            continue
        plan = _plan(leaves)
        if plan is None:
            continue
        try:
            _replace(graph, node, plan)
        except _Untraceable:
            continue
        consumed.update(adds)
        for n in [node, *adds, *leaves]:
            if not n.users:
                graph.erase_node(n)
        done += 1
    return done


class _Untraceable(Exception):
    """The replacement's values could not be computed (the graph is left unchanged)."""


def _is_plain_add(node: Node) -> bool:
    return node.op == "call_function" and node.target is aten.add.Tensor \
        and len(node.args) == 2 and not node.kwargs \
        and all(isinstance(a, Node) for a in node.args)


def _add_tree(root: Node) -> tuple[Optional[list], list]:
    """(scatter leaves, inner adds) of the add tree at ``root``; leaves None when a
    leaf is not a scatter or an inner node is used outside the tree."""
    leaves, adds, stack = [], [], list(root.args)
    while stack:
        n = stack.pop()
        if len(n.users) != 1:
            return None, []
        if _is_plain_add(n):
            adds.append(n)
            stack.extend(n.args)
        elif n.op == "call_function" and n.target in _SCATTERS:
            leaves.append(n)
        else:
            return None, []
    return leaves, adds


def _window(node: Node, size: int) -> Optional[tuple]:
    """(start, stop, is_select) of the index range a scatter fills, or None."""
    if node.target is aten.select_backward.default:
        index = node.args[3]
        if not isinstance(index, int):
            return None
        index += size if index < 0 else 0
        return (index, index + 1, True) if 0 <= index < size else None
    start, end, step = (list(node.args[3:6]) + [None, None, 1])[:3]
    if not all(isinstance(v, int) for v in (start, end, step)) or step != 1:
        return None
    start, end = (min(max(v + size if v < 0 else v, 0), size) for v in (start, end))
    return (start, end, False) if start < end else None


def _plan(leaves: list) -> Optional[dict]:
    """How to build the sum of ``leaves`` (None when it is not a disjoint scatter)."""
    first = leaves[0]
    shape, dim = first.args[1], first.args[2]
    out = first.meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(dim, int):
        return None
    dim += out.dim() if dim < 0 else 0
    size = out.shape[dim] if 0 <= dim < out.dim() else None
    if not isinstance(size, int):
        return None
    pieces = []
    for leaf in leaves:
        val = leaf.meta.get("val")
        ldim = leaf.args[2]
        if not isinstance(val, torch.Tensor) or not isinstance(ldim, int) \
                or (ldim + val.dim() if ldim < 0 else ldim) != dim \
                or val.dtype != out.dtype or val.device != out.device \
                or not same_shape(leaf.args[1], shape):
            return None
        window = _window(leaf, size)
        if window is None:
            return None
        pieces.append((*window, leaf.args[0]))
    pieces.sort(key=operator.itemgetter(0))
    if any(a[1] > b[0] for a, b in zip(pieces, pieces[1:])):
        return None                       # overlapping pieces really add up
    return {"shape": list(shape), "dim": dim, "size": size, "pieces": pieces}


def _replace(graph: Graph, root: Node, plan: dict) -> None:
    """Insert the cat (or stack) of ``plan`` and route ``root``'s uses (or those of
    the contiguous clone of its permute) to it; raises :class:`_Untraceable`, with
    the graph unchanged, when the new values cannot be computed."""
    dim, pieces = plan["dim"], plan["pieces"]
    target, perm = root, None
    users = list(root.users)
    if len(users) == 1 and users[0].target is aten.permute.default:
        clones = list(users[0].users)
        if len(clones) == 1 and clones[0].target is aten.clone.default \
                and clones[0].kwargs.get("memory_format") is torch.contiguous_format:
            target, perm = clones[0], [p % len(plan["shape"]) for p in users[0].args[1]]
    emit = _Emitter(graph, target)
    try:
        if all(is_select for _, _, is_select, _ in pieces) \
                and [p[0] for p in pieces] == list(range(plan["size"])):
            inner = None if perm is None else [p - (p > dim) for p in perm if p != dim]
            parts = [g if inner is None else emit(aten.permute.default, g, inner)
                     for _, _, _, g in pieces]
            result = emit(aten.stack.default, parts, dim if perm is None else perm.index(dim))
        else:
            parts, at = [], 0
            for start, stop, is_select, g in pieces + [(plan["size"], None, False, None)]:
                if start > at:            # a gap: zeros
                    gap = list(plan["shape"])
                    gap[dim] = start - at
                    parts.append(emit(aten.new_zeros.default, pieces[0][3], gap))
                if g is not None:
                    parts.append(emit(aten.unsqueeze.default, g, dim) if is_select else g)
                    at = stop
            if perm is not None:
                parts = [emit(aten.permute.default, p, perm) for p in parts]
            result = emit(aten.cat.default, parts, dim if perm is None else perm.index(dim))
    except Exception as e:  # noqa: BLE001 - fake tensors refused it: keep the adds
        emit.undo()
        raise _Untraceable from e
    target.replace_all_uses_with(result)
    if target is not root:
        permute = target.args[0]
        graph.erase_node(target)
        graph.erase_node(permute)


class _Emitter:
    """Creates ATen nodes before ``where``, each with its ``meta["val"]`` computed on
    the inputs' fake tensors; :meth:`undo` removes them again."""

    def __init__(self, graph: Graph, where: Node):
        self.graph, self.where, self.created = graph, where, []
        self.mode = next((v.fake_mode for n in where.graph.nodes
                          for v in [n.meta.get("val")] if hasattr(v, "fake_mode")), None)
        if self.mode is None:
            raise _Untraceable("no fake tensors in the graph")

    def __call__(self, op, *args: Any) -> Node:
        from torch.fx.node import map_arg
        with self.mode:
            val = op(*map_arg(args, lambda n: n.meta["val"]))
        with self.graph.inserting_before(self.where):
            node = self.graph.call_function(op, args)
        node.meta["val"] = val
        self.created.append(node)
        return node

    def undo(self) -> None:
        for node in reversed(self.created):
            self.graph.erase_node(node)
        self.created.clear()


__all__ = ["merge_scatter_sums"]
