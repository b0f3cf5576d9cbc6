"""The ``flydsl`` torch.compile backend: pointwise fusion into generated flydsl kernels.

``torch.compile(model, backend="flydsl")`` (registered through the
``torch_dynamo_backends`` entry point) does, per captured graph:

1. check the dynamo graph (``Graph.lint``) and the devices of its
   placeholders' FakeTensors: a graph that has a tensor on a device the active
   flydsl backend cannot launch on runs unchanged in eager mode;
2. hand it to AOTAutograd (with decompositions that expose more pointwise
   ops, see :func:`flydsl.torch.pointwise.decompositions`), which gives ATen
   graphs for the forward and, when gradients are needed, the backward;
3. in each ATen graph, group connected pointwise ops of one shape (see
   :mod:`flydsl.torch.pointwise`) without creating cycles, and replace every
   group of at least :data:`MIN_GROUP_SIZE` ops (option ``min_group_size``)
   by one generated kernel (:class:`flydsl.torch.kernels.FusedModule`);
   everything else runs as eager ATen calls.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from . import kernels
from .pointwise import FX_DTYPES, decompositions, emit_call, lookup

log = logging.getLogger("flydsl.torch")

#: Smallest group worth a generated kernel (a lone op is as fast in eager mode).
MIN_GROUP_SIZE = 2
#: Counters for tests and debugging (per process).
stats = {"graphs": 0, "eager_graphs": 0, "aten_graphs": 0, "fused_groups": 0, "fused_ops": 0}
_PREFIX = "flydsl_fused_"


def flydsl_backend(gm: GraphModule, example_inputs: Sequence[Any], *,
                   mode: Optional[str] = None, options: Optional[dict] = None) -> Callable:
    """``torch.compile`` backend: fuse pointwise ATen ops into flydsl kernels.

    Use it as ``torch.compile(model, backend="flydsl")``. ``options`` (from
    ``torch.compile(..., options={...})``) may set ``min_group_size``, the
    smallest number of ops fused into one kernel (default
    :data:`MIN_GROUP_SIZE`). ``mode`` is accepted and ignored.
    """
    options = dict(options or {})
    min_size = options.pop("min_group_size", MIN_GROUP_SIZE)
    if options or not isinstance(min_size, int) or min_size < 1:
        raise ValueError(f"flydsl backend: unknown options {sorted(options)} or bad "
                         f"min_group_size {min_size!r} (the only option is min_group_size, "
                         "an int >= 1)")
    gm.graph.lint()
    stats["graphs"] += 1
    device_type = target_device_type()
    reason = unsupported_reason(gm, example_inputs, device_type)
    if reason is not None:
        log.info("flydsl backend: running the graph in eager mode: %s", reason)
        stats["eager_graphs"] += 1
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd
    compiler = functools.partial(compile_aten_graph, device_type=device_type,
                                 min_group_size=min_size)
    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=decompositions())(gm, example_inputs)


def target_device_type() -> Optional[str]:
    """The torch device type the active flydsl backend's driver launches on, or None."""
    try:
        from .. import get_backend
        from ..runtime.drivers import lookup_driver_class
        backend = get_backend()
        return lookup_driver_class(backend.driver).torch_device_type or None
    except Exception as e:  # noqa: BLE001 - no usable backend or driver: nothing to fuse for
        log.info("flydsl backend: no flydsl compile backend or driver available: %s", e)
        return None


def unsupported_reason(gm: GraphModule, example_inputs: Sequence[Any],
                       device_type: Optional[str]) -> Optional[str]:
    """Why ``gm`` cannot use flydsl kernels at all (None if it can)."""
    if device_type is None:
        return "no flydsl backend"
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    devices = set()
    for i, node in enumerate(placeholders):
        val = node.meta.get("example_value", node.meta.get("val"))
        if val is None and i < len(example_inputs):
            val = example_inputs[i]
        if isinstance(val, torch.Tensor):
            devices.add(val.device.type)
    if not devices:
        return "no tensor inputs"
    if devices != {device_type}:
        return (f"inputs on {sorted(devices)}, but the flydsl backend launches on "
                f"{device_type!r}")
    return None


def compile_aten_graph(gm: GraphModule, example_inputs: Sequence[Any], *,
                       device_type: str, min_group_size: int = MIN_GROUP_SIZE) -> Callable:
    """AOTAutograd compiler: fuse the pointwise groups of an ATen graph (boxed callable)."""
    from functorch.compile import make_boxed_func
    gm.graph.lint()
    stats["aten_graphs"] += 1
    try:
        fused = fuse_pointwise(gm, device_type, min_group_size)
    except Exception:  # noqa: BLE001 - a fusion bug must not break the user's model
        log.warning("flydsl backend: pointwise fusion failed, running the graph in eager "
                    "mode", exc_info=True)
        fused = gm
    return make_boxed_func(fused.forward)


def fuse_pointwise(gm: GraphModule, device_type: str,
                   min_group_size: int = MIN_GROUP_SIZE) -> GraphModule:
    """A copy of ``gm`` whose pointwise groups run as generated flydsl kernels."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    new = GraphModule(gm, graph)
    groups = partition(new.graph, device_type, min_group_size)
    if not groups:
        return gm
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
    new = fuse_by_partitions(new, [dict.fromkeys(g) for g in groups], prefix=_PREFIX,
                             always_return_tuple=True)
    for node in new.graph.nodes:
        if node.op == "call_module" and node.target.startswith(_PREFIX):
            sub = new.get_submodule(node.target)
            setattr(new, node.target, kernels.FusedModule(
                build_pattern(sub), sub, device_type, output_layouts(sub)))
    new.recompile()
    stats["fused_groups"] += len(groups)
    stats["fused_ops"] += sum(len(g) for g in groups)
    log.debug("flydsl backend: fused %d groups:\n%s", len(groups), new.code)
    return new


# -- partitioning ----------------------------------------------------------------

def _tensor_meta(node: Any) -> Optional[torch.Tensor]:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _is_contiguous(t: torch.Tensor) -> bool:
    from torch._prims_common import is_contiguous_or_false
    return bool(is_contiguous_or_false(t))


def _same_shape(a: Sequence, b: Sequence) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def _same_layout(a: Optional[torch.Tensor], b: torch.Tensor) -> bool:
    return a is not None and _same_shape(a.shape, b.shape) and _same_shape(a.stride(), b.stride())


def fusible(node: Node, device_type: str) -> bool:
    """Whether ``node`` is a pointwise op a generated kernel can compute on ``device_type``."""
    if node.op != "call_function":
        return False
    entry = lookup(node.target)
    if entry is None:
        return False
    bound = entry.bind(node.args, node.kwargs)
    out = _tensor_meta(node)
    if bound is None or out is None or out.dtype not in FX_DTYPES \
            or out.device.type != device_type:
        return False
    if not _is_contiguous(out) and not any(
            _same_layout(_tensor_meta(a), out) for a in node.all_input_nodes):
        return False   # results are allocated contiguous or like an input

    def operand(arg: Node) -> tuple:
        if isinstance(arg.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return "s", None
        meta = _tensor_meta(arg)
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


def partition(graph: torch.fx.Graph, device_type: str,
              min_group_size: int = MIN_GROUP_SIZE) -> list:
    """Groups of fusible nodes (each in topological order) to turn into kernels.

    Greedy, in topological order: a node joins the groups of its same-shape
    fusible inputs when that creates no cycle (a path leaving the group and
    coming back, other groups counted as single nodes).
    """
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    group_of: dict = {}
    groups: dict = {}
    shapes: dict = {}
    next_id = 0
    for n in nodes:
        if not fusible(n, device_type):
            continue
        shape = tuple(n.meta["val"].shape)
        members = [n]
        chosen = []
        for a in n.all_input_nodes:
            g = group_of.get(a)
            if g is None or g in chosen or not _same_shape(shapes[g], shape):
                continue
            trial = members + groups[g]
            if not _creates_cycle(set(trial), index[n], index, group_of, groups):
                members = trial
                chosen.append(g)
        for g in chosen:
            del groups[g], shapes[g]
        groups[next_id], shapes[next_id] = members, shape
        for m in members:
            group_of[m] = next_id
        next_id += 1
    return [sorted(g, key=index.__getitem__) for g in groups.values()
            if len(g) >= min_group_size]


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


# -- from a fused sub-graph to a kernel pattern ---------------------------------------

_SCALAR_PARAM = {torch.SymInt: "Int64", torch.SymFloat: "Float64", torch.SymBool: "Bool",
                 int: "Int64", float: "Float64", bool: "Bool"}


def build_pattern(sub: GraphModule) -> kernels.FusedPattern:
    """The :class:`~flydsl.torch.kernels.FusedPattern` of one fused sub-graph."""
    inputs, body, outputs = [], [], []
    env: dict = {}
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            name = f"x{len(inputs)}"
            if isinstance(val, torch.Tensor):
                inputs.append(("tensor", val.dtype))
                env[node] = (name, val.dtype)
            else:
                inputs.append(("scalar", _SCALAR_PARAM[type(val)]))
                env[node] = (name, None)
        elif node.op == "call_function":
            entry = lookup(node.target)
            out_dtype = node.meta["val"].dtype
            text = emit_call(entry, entry.bind(node.args, node.kwargs), out_dtype,
                             env.__getitem__)
            if text is None:
                raise AssertionError(f"cannot emit {node.format_node()}")
            var = f"v{len(body)}"
            body.append(f"{var} = {text}")
            env[node] = (var, out_dtype)
        elif node.op == "output":
            outputs = [env[a] for a in node.args[0]]
    return kernels.FusedPattern(tuple(inputs), tuple(body), tuple(outputs))


def output_layouts(sub: GraphModule) -> list:
    """Per result of a fused sub-graph: the index of an input whose layout (shape and
    strides) it has, to allocate it with ``empty_like``; None means contiguous."""
    inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    out = []
    for node in sub.graph.output_node().args[0]:
        meta = _tensor_meta(node)
        like = None
        if not _is_contiguous(meta):
            like = next(k for k, n in enumerate(inputs) if _same_layout(_tensor_meta(n), meta))
        out.append(like)
    return out
