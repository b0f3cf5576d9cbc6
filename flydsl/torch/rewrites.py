"""Graph rewrites that expose fusible work, tried before partitioning.

Each rewrite replaces one ATen call by smaller ones that a generated kernel can
absorb. The backend keeps a rewrite only where its pieces end up inside fused
kernels (:func:`flydsl.torch.dynamo_backend.fuse_pointwise` partitions twice);
elsewhere the original ATen op stays, so a rewrite never turns one eager call
into several.

* :func:`inline_decomposition`: a pointwise op with no DSL emitter but a
  core-ATen decomposition into emitted ops (``silu``, ``gelu_backward``,
  ``sigmoid_backward``, ...).
* :func:`split_addmm`: ``addmm(bias, x, w)`` -> ``mm(x, w) + bias``, the bias
  add moved past a following ``view`` so that it fuses with the activation
  or residual add after the matmul (a matmul epilogue).
* :func:`split_log_softmax`: a ``log_softmax`` read only by a ``gather`` and
  means or sums over its dim (a cross entropy with label smoothing) ->
  ``logsumexp`` and those reductions of its input, so that ``log_softmax``'s
  result is never stored.
* :func:`fold_residual_adds`: after fusion, an eager ``add(r, view(mm(x, w)))``
  of two same-shaped tensors (a residual after a projection without bias)
  -> ``view(addmm(reshape(r), x, w))``: the BLAS call adds ``r`` as it writes
  its result (``beta = 1``), instead of a zeroed result and one more pass.

Every created node carries ``meta["val"]`` and ``meta["flydsl_eager_us"]``,
its share of the replaced call's estimated eager time (see
:mod:`flydsl.torch.fusion_cost`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch.fx import Graph, Node

from .fusion_cost import BYTES_PER_US, eager_cost_us, node_bytes

aten = torch.ops.aten


@dataclass
class Rewrite:
    """One applied rewrite: the name of the node it replaced and the created nodes
    that must land in fused kernels for it to be kept."""

    origin: str
    must_fuse: list


def _fake_mode(node: Node):
    for a in node.all_input_nodes:
        val = a.meta.get("val")
        mode = getattr(val, "fake_mode", None)
        if mode is not None:
            return mode
    return None


def inline_decomposition(graph: Graph, node: Node, fn: Callable,
                         fusible: Callable[[Node], bool],
                         table: Optional[dict] = None) -> Optional[Rewrite]:
    """Replace ``node`` by the ATen graph of ``fn`` (its decomposition) when every
    op of that graph is ``fusible``; None (graph unchanged) otherwise. Ops of
    ``table`` (op -> decomposition) met while tracing ``fn`` are decomposed too."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._pytree import tree_flatten, tree_unflatten
    mode = _fake_mode(node)
    if mode is None:
        return None
    flat, spec = tree_flatten((node.args, node.kwargs))
    slots = [k for k, a in enumerate(flat) if isinstance(a, Node)]
    vals = [flat[k].meta.get("val") for k in slots]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return None

    def call(*tensors):
        args = list(flat)
        for k, t in zip(slots, tensors):
            args[k] = t
        a, kw = tree_unflatten(args, spec)
        return fn(*a, **kw)
    try:
        with mode:
            sub = make_fx(call, decomposition_table=table or {}, tracing_mode="real")(*vals)
    except Exception:  # noqa: BLE001 - a decomposition that does not trace: keep the op
        return None
    _fold_constant_scalars(sub.graph)
    body = [n for n in sub.graph.nodes if n.op == "call_function"]
    if not body or not all(fusible(n) or _is_constant(n) for n in body):
        return None
    out = sub.graph.output_node().args[0]
    if not isinstance(out, Node):
        return None
    env = dict(zip([n for n in sub.graph.nodes if n.op == "placeholder"],
                   [flat[k] for k in slots]))
    cost = eager_cost_us([node])
    created = []
    with graph.inserting_before(node):
        for n in body:
            new = graph.node_copy(n, env.__getitem__)
            new.meta["flydsl_eager_us"] = 0.0 if created else cost
            env[n] = new
            created.append(new)
    node.replace_all_uses_with(env[out])
    graph.erase_node(node)
    return Rewrite(node.name, [n for n in created if not _is_constant(n)])


#: Ops that create a tensor filled with one of their arguments (by position).
_FILLS = {aten.scalar_tensor.default: 0, torch.ops.prims.scalar_tensor.default: 0,
          aten.full.default: 1, aten.new_full.default: 2}


def _constant_scalars(graph: Graph) -> dict:
    """The 0-d tensor nodes of ``graph`` computed from constants alone
    (``scalar_tensor``, ``full([], v)`` and ops on them), evaluated: node -> tensor."""
    from torch.utils._pytree import tree_map
    known: dict = {}
    for node in graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, torch.Tensor) or val.dim() != 0:
            continue
        filled = _FILLS.get(node.target)
        if filled is not None and isinstance(node.args[filled], (bool, int, float)):
            known[node] = torch.tensor(node.args[filled], dtype=val.dtype)
            continue
        if not all(a in known for a in node.all_input_nodes):
            continue
        args, kwargs = tree_map(lambda a: known.get(a, a), (node.args, node.kwargs))
        kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory")}
        try:
            known[node] = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not evaluable here: it stays a graph op
            continue
    return known


def _fold_constant_scalars(graph: Graph) -> None:
    """Decompositions compute constants on 0-d tensors (``where(x > 0, x,
    scalar_tensor(0.))``, ``abs(new_full(x, [], w)) >= 0.5``): each constant that an
    op on other inputs uses becomes one ``scalar_tensor`` of its value (left outside
    the kernel, a 0-d input to it), and the ops on constants alone go."""
    known = _constant_scalars(graph)
    for node, value in known.items():
        if any(u not in known for u in node.users):
            val = node.meta["val"]
            node.target = aten.scalar_tensor.default
            node.args = (value.item(),)
            node.kwargs = {"dtype": val.dtype, "device": val.device}
    for node in reversed(list(known)):
        if not node.users:
            graph.erase_node(node)


def _is_constant(node: Node) -> bool:
    """Whether ``node`` is a ``scalar_tensor`` of a number (see :func:`_fold_constant_scalars`)."""
    return node.op == "call_function" and node.target is aten.scalar_tensor.default \
        and not node.all_input_nodes


def split_addmm(graph: Graph, node: Node, fusible: Callable[[Node], bool]) -> Optional[Rewrite]:
    """``addmm(bias, x, w)`` (1-D bias, default alpha/beta) whose result, possibly
    through one ``view`` that keeps the last dimension, feeds a fusible op:
    becomes ``add(view(mm(x, w)), bias)``. None (graph unchanged) otherwise."""
    if node.target is not aten.addmm.default or node.kwargs or len(node.args) != 3:
        return None
    bias, x, w = node.args
    bval, out = bias.meta.get("val"), node.meta.get("val")
    if not isinstance(bval, torch.Tensor) or bval.dim() != 1 or not isinstance(out, torch.Tensor):
        return None
    view = None
    users = list(node.users)
    if len(users) == 1 and users[0].target in (aten.view.default, aten._unsafe_view.default) \
            and users[0].meta["val"].shape[-1:] == out.shape[-1:]:
        view = users[0]
    tail = view if view is not None else node
    if not any(fusible(u) for u in tail.users):
        return None
    mode = _fake_mode(node)
    if mode is None:
        return None
    with mode:
        mm_val = aten.mm.default(x.meta["val"], w.meta["val"])
        view_val = aten.view.default(mm_val, list(view.args[1])) if view is not None else mm_val
        add_val = aten.add.Tensor(view_val, bval)
    with graph.inserting_before(tail):
        mm = graph.call_function(aten.mm.default, (x, w))
        mm.meta["val"] = mm_val
        mm.meta["flydsl_eager_us"] = 0.0
        src = mm
        if view is not None:
            src = graph.call_function(view.target, (mm, view.args[1]))
            src.meta["val"] = view_val
        add = graph.call_function(aten.add.Tensor, (src, bias))
        add.meta["val"] = add_val
        # eager addmm writes the bias into its result before the product: one pass
    add.meta["flydsl_eager_us"] = node_bytes(node) / BYTES_PER_US
    tail.replace_all_uses_with(add)
    if view is not None:
        graph.erase_node(view)
    graph.erase_node(node)
    return Rewrite(node.name, [add])


def _log_softmax_use(node: Node, user: Node, dim: int, rank: int) -> Optional[str]:
    """How ``user`` reads ``log_softmax`` ``node`` along ``dim``: "gather" (one
    index per row), "mean" or "sum" (over ``dim`` alone); None for other uses."""
    a = user.args
    if user.target is aten.gather.default and len(a) == 3 and not user.kwargs \
            and a[0] is node and isinstance(a[1], int) and a[1] % rank == dim:
        idx = a[2].meta.get("val") if isinstance(a[2], Node) else None
        x = node.meta["val"]
        if isinstance(idx, torch.Tensor) and idx.dim() == rank and all(
                d == dim or idx.shape[d] == x.shape[d] for d in range(rank)):
            return "gather"
    if user.target in (aten.mean.dim, aten.sum.dim_IntList) and a[0] is node and len(a) >= 2 \
            and isinstance(a[1], (list, tuple)) and len(a[1]) == 1 \
            and a[1][0] % rank == dim and not user.kwargs:
        return "mean" if user.target is aten.mean.dim else "sum"
    return None


def split_log_softmax(graph: Graph, node: Node) -> Optional[Rewrite]:
    """``logp = log_softmax(x, d)`` read only by ``gather(logp, d, i)`` and
    ``mean``/``sum`` of ``logp`` over ``d`` (a cross entropy, label smoothing):
    ``logp`` is never stored. With ``lse = logsumexp(x, d)``, ``gather(logp)``
    becomes ``gather(x) - lse`` and ``mean(logp)`` becomes ``mean(x) - lse``
    (``sum``: ``sum(x) - n * lse``), so the reductions of ``x`` share one row
    kernel. None (graph unchanged) otherwise."""
    if node.target is not aten._log_softmax.default or len(node.args) != 3 or node.args[2]:
        return None
    x, dim = node.args[0], node.args[1]
    xval = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(xval, torch.Tensor) or xval.dim() < 1 or not isinstance(dim, int):
        return None
    rank = xval.dim()
    dim %= rank
    uses = [(u, _log_softmax_use(node, u, dim, rank)) for u in node.users]
    mode = _fake_mode(node)
    if not uses or any(how is None for _, how in uses) or mode is None:
        return None
    n = xval.shape[dim]
    lse_of: list = []
    created: list = []

    def make(target, args, eager_us=0.0, fused=True):
        with mode:
            val = target(*[a.meta["val"] if isinstance(a, Node) else a for a in args])
        new = graph.call_function(target, tuple(args))
        new.meta["val"] = val
        new.meta["flydsl_eager_us"] = eager_us
        if fused:
            created.append(new)
        return new

    def lse() -> Node:       # keepdim: every use joins its kernel (eager's cost on it)
        if not lse_of:
            lse_of.append(make(aten.logsumexp.default, [x, [dim], True], eager_cost_us([node])))
        return lse_of[0]
    order = {n: i for i, n in enumerate(graph.nodes)}
    for user, how in sorted(uses, key=lambda u: order[u[0]]):
        with graph.inserting_before(user):
            if how == "gather":
                g = make(aten.gather.default, [x, dim, user.args[2]], eager_cost_us([user]),
                         fused=False)
                new = make(aten.sub.Tensor, [g, lse()])
            else:   # reduced with keepdim, so that it shares lse's kernel; a view drops it
                r = make(user.target, [x, [dim], True], eager_cost_us([user]))
                shift = lse() if how == "mean" else make(aten.mul.Tensor, [lse(), n])
                new = make(aten.sub.Tensor, [r, shift])
                if not (len(user.args) > 2 and user.args[2]):
                    new = make(aten.squeeze.dim, [new, dim], fused=False)
        user.replace_all_uses_with(new)
        graph.erase_node(user)
    graph.erase_node(node)
    return Rewrite(node.name, created)


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _product_of(node: object) -> Optional[tuple]:
    """``(mm, view)`` when ``node`` is ``mm(x, w)`` or a view of it, read by one
    user each (view None when there is none); None otherwise."""
    if not isinstance(node, Node) or node.op != "call_function" or len(node.users) != 1:
        return None
    view = None
    if node.target in _VIEWS:
        view, node = node, node.args[0]
        if not isinstance(node, Node) or node.op != "call_function" or len(node.users) != 1:
            return None
    if node.target is not aten.mm.default or node.kwargs:
        return None
    return node, view


def fold_residual_adds(graph: Graph) -> int:
    """Fold each eager ``add(r, p)`` (either order, no ``alpha``) whose ``p`` is
    ``mm(x, w)`` or a view of it read only there, and ``r`` a floating tensor of
    the add's shape and dtype, into ``addmm(reshape(r, mm's shape), x, w)`` (viewed
    back): torch's own op for ``r + x @ w``, which adds ``r`` as the BLAS call writes
    its result (one rounding of ``r`` plus the product, as the eager add's; the
    product's own rounding may differ by the BLAS's accumulation order, as two
    BLAS calls' do). Run on a fused graph: the adds left are the eager ones.
    Returns the number folded."""
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.add.Tensor \
                or node.kwargs or len(node.args) != 2:
            continue
        out = node.meta.get("val")
        if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
            continue
        for r, p in (node.args, node.args[::-1]):
            found = _product_of(p)
            rval = r.meta.get("val") if isinstance(r, Node) else None
            if found is None or not isinstance(rval, torch.Tensor) \
                    or rval.shape != out.shape or rval.dtype != out.dtype:
                continue
            mm, view = found
            mval = mm.meta.get("val")
            if not isinstance(mval, torch.Tensor) or mval.dtype != out.dtype \
                    or mval.numel() != out.numel():
                continue
            mode = _fake_mode(mm)
            if mode is None:
                continue
            with mode:
                flat_val = aten.reshape.default(rval, list(mval.shape))
                sum_val = aten.addmm.default(flat_val, *[a.meta["val"] for a in mm.args])
                back_val = aten.view.default(sum_val, list(out.shape))
            with graph.inserting_before(node):
                flat = graph.call_function(aten.reshape.default, (r, list(mval.shape)))
                flat.meta["val"] = flat_val
                new = graph.call_function(aten.addmm.default, (flat, *mm.args))
                new.meta["val"] = sum_val
                back = graph.call_function(aten.view.default, (new, list(out.shape)))
                back.meta["val"] = back_val
            node.replace_all_uses_with(back)
            graph.erase_node(node)
            if view is not None:
                graph.erase_node(view)
            graph.erase_node(mm)
            done += 1
            break
    return done


__all__ = ["Rewrite", "fold_residual_adds", "inline_decomposition", "split_addmm",
           "split_log_softmax"]
