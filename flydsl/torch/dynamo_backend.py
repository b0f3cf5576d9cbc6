"""The ``flydsl`` torch.compile backend: fusion into generated flydsl kernels.

``torch.compile(model, backend="flydsl")`` (registered through the
``torch_dynamo_backends`` entry point) does, per captured graph:

1. check the dynamo graph (``Graph.lint``) and the devices of its
   placeholders' FakeTensors: a graph that has a tensor on a device the active
   flydsl backend cannot launch on runs unchanged in eager mode;
2. hand it to AOTAutograd (decomposing only ``_to_copy``), which gives ATen
   graphs for the forward and, when gradients are needed, the backward; sums
   of ``select_backward``/``slice_backward`` pieces in them (the backward of
   ``q, k, v = qkv``) become one ``cat`` (:mod:`flydsl.torch.scatter_sums`);
3. in each ATen graph, try the rewrites of :mod:`flydsl.torch.rewrites`
   (pointwise decompositions, matmul bias epilogues), group connected fusible
   ops (:mod:`flydsl.torch.partition`: pointwise ops and row reductions) without
   creating cycles, and keep
   the groups the cost rule of :mod:`flydsl.torch.fusion_cost` accepts; a
   rewrite whose pieces did not all land in kept groups is undone (the graph is
   partitioned again without it);
4. replace every kept group by one generated kernel (its pattern from
   :mod:`flydsl.torch.patterns`; :class:`flydsl.torch.kernels.FusedModule` or
   :class:`flydsl.torch.row_kernels.RowModule`), and on the CPU independent groups
   of one pattern (an optimizer's per-parameter chains) by one launch
   (:mod:`flydsl.torch.multi_tensor`). Everything else runs as eager
   ATen calls, but a residual add left after a matmul is the matmul's own
   ``addmm`` (:func:`~flydsl.torch.rewrites.fold_residual_adds`). A graph whose
   forward fusions save less than AOTAutograd costs (nothing fused, or
   :data:`~flydsl.torch.fusion_cost.AOT_INFERENCE_TAX` / ``AOT_TRAINING_TAX`` of
   its estimated time) runs as dynamo's graph module itself, as in eager mode
   (eager autograd, no AOTAutograd wrapper).

Set ``FLYDSL_TORCH_LOG=1`` (or ``debug``) to log the fused groups, their cost
estimates and the generated kernels (logger ``"flydsl.torch"``).
"""
from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule

from . import kernels
from .fusion_cost import (AOT_INFERENCE_TAX, AOT_TRAINING_TAX, eager_cost_us,
                          fused_cost_us, graph_cost_us, savings_us, worth_fusing)
from .multi_tensor import MultiTensorModule, merge_independent
from .partition import MIN_GROUP_SIZE, fusible, is_row_group, op_count, partition
from .patterns import build_pattern, build_row_pattern, output_layouts
from .pointwise import decompositions, inline_decompositions
from .reductions import reduction_count, row_input
from .rewrites import fold_residual_adds, inline_decomposition, split_addmm, split_log_softmax
from .row_kernels import RowModule
from .scatter_sums import merge_scatter_sums
from .trials import MAX_GROUP_TRIALS, MAX_TRIALS, GraphTrial

log = logging.getLogger("flydsl.torch")

#: Whether groups must pass the cost rule (the default of the ``cost_rule`` option).
COST_RULE = True
#: Counters for tests and debugging (per process).
stats = {"graphs": 0, "eager_graphs": 0, "aten_graphs": 0, "fused_groups": 0, "fused_ops": 0,
         "rewrites_kept": 0, "rewrites_undone": 0, "not_worth_aot": 0, "scatter_sums": 0,
         "graphs_kept_fused": 0, "graphs_back_to_aten": 0, "graphs_kept_aot": 0,
         "graphs_back_to_dynamo": 0, "residual_adds": 0}
_PREFIX = "flydsl_fused_"
_OPTIONS = {"min_group_size": int, "cost_rule": bool}


def configure_logging() -> None:
    """Send the ``flydsl.torch`` log to stderr when ``FLYDSL_TORCH_LOG`` is set
    (``1``/``info``: fused groups and generated kernels; ``debug``: also the
    fused graphs' code)."""
    level = os.environ.get("FLYDSL_TORCH_LOG", "").strip().lower()
    if level in ("", "0", "off") or getattr(configure_logging, "done", None) == level:
        return
    configure_logging.done = level
    log.setLevel(logging.DEBUG if level == "debug" else logging.INFO)
    if not any(getattr(h, "_flydsl", False) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[flydsl.torch] %(message)s"))
        handler._flydsl = True
        log.addHandler(handler)
        log.propagate = False   # one copy of each line, even under logging.basicConfig


def flydsl_backend(gm: GraphModule, example_inputs: Sequence[Any], *,
                   mode: Optional[str] = None, options: Optional[dict] = None) -> Callable:
    """``torch.compile`` backend: fuse ATen ops into generated flydsl kernels.

    Use it as ``torch.compile(model, backend="flydsl")``. ``options`` (from
    ``torch.compile(..., options={...})``) may set ``min_group_size``, the
    smallest number of ops fused into one kernel (default
    :data:`MIN_GROUP_SIZE`), and ``cost_rule`` (default True; False fuses every
    group of at least ``min_group_size`` ops, for testing and debugging).
    ``mode`` is accepted and ignored.
    """
    configure_logging()
    options = dict(options or {})
    min_size = options.pop("min_group_size", MIN_GROUP_SIZE)
    cost_rule = options.pop("cost_rule", COST_RULE)
    if options or not isinstance(min_size, int) or min_size < 1 \
            or not isinstance(cost_rule, bool):
        raise ValueError(f"flydsl backend: unknown options {sorted(options)}, or bad "
                         f"min_group_size {min_size!r} or cost_rule {cost_rule!r} (the "
                         "options are min_group_size, an int >= 1, and cost_rule, a bool)")
    gm.graph.lint()
    stats["graphs"] += 1
    device_type = target_device_type()
    reason = unsupported_reason(gm, example_inputs, device_type)
    if reason is not None:
        log.info("running the graph in eager mode: %s", reason)
        stats["eager_graphs"] += 1
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd
    compiler = functools.partial(compile_aten_graph, device_type=device_type,
                                 min_group_size=min_size, cost_rule=cost_rule)
    seen: dict = {}         # "inference" or "forward" -> what compiling that graph did

    def recording(role: str) -> Callable:
        def compile_and_record(aten_gm: GraphModule, inputs: Sequence[Any]) -> Callable:
            seen[role] = compiled = compiler(aten_gm, inputs)
            return compiled
        return compile_and_record
    compiled = aot_autograd(fw_compiler=recording("forward"), bw_compiler=compiler,
                            inference_compiler=recording("inference"),
                            decompositions=decompositions())(gm, example_inputs)
    # AOTAutograd's graphs cost more than eager (wrappers; for training, saved
    # tensors): worth it only when the forward's fusions save more (a backward's
    # are alike). Otherwise dynamo's graph runs as captured, as in eager mode.
    role = "inference" if "inference" in seen else "forward"
    record = seen.get(role)
    tax = AOT_INFERENCE_TAX if role == "inference" else AOT_TRAINING_TAX
    if record is not None and record.flydsl_savings_us <= tax * record.flydsl_graph_us:
        log.info("%s graph: fusions save %.0f us of about %.0f us, not more than "
                 "AOTAutograd costs: it runs as dynamo captured it", role,
                 record.flydsl_savings_us, record.flydsl_graph_us)
        stats["not_worth_aot"] += 1
        return gm.forward
    if role == "inference" and cost_rule and device_type == "cpu":
        return _captured_graph_trial(compiled, gm, getattr(record, "flydsl_trial", None))
    return compiled


def _captured_graph_trial(compiled: Callable, gm: GraphModule,
                          inner: Optional[GraphTrial]) -> GraphTrial:
    """An inference graph through AOTAutograd (its fused graph, or the ATen graph
    that beat it: ``inner``) timed against dynamo's graph as captured, which needs
    no AOTAutograd wrapper: once ``inner`` has chosen, the faster runs from then on.
    (A training graph's backward is not in its forward's time: it is not timed.)"""
    def on_verdict(trial) -> None:
        stats["graphs_kept_aot" if trial.verdict else "graphs_back_to_dynamo"] += 1
        log.info("inference graph: %s: %s", trial.summary("AOTAutograd", "as captured"),
                 "keeps it" if trial.verdict else "runs as dynamo captured it")
    settled = (lambda: inner.chosen is not None) if inner is not None else (lambda: True)
    # settles within the groups' trials and the fused graph's (up to MAX_GROUP_TRIALS
    # and MAX_TRIALS a side)
    return GraphTrial(compiled, gm.forward, settled, 2 * MAX_GROUP_TRIALS + 2 * MAX_TRIALS + 6,
                      on_verdict)


def target_device_type() -> Optional[str]:
    """The torch device type the active flydsl backend's driver launches on, or None."""
    try:
        from .. import get_backend
        from ..runtime.drivers import lookup_driver_class
        backend = get_backend()
        return lookup_driver_class(backend.driver).torch_device_type or None
    except Exception as e:  # noqa: BLE001 - no usable backend or driver: nothing to fuse for
        log.info("no flydsl compile backend or driver available: %s", e)
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
                       device_type: str, min_group_size: int = MIN_GROUP_SIZE,
                       cost_rule: bool = True) -> Callable:
    """AOTAutograd compiler: fuse the groups of an ATen graph (boxed callable); a
    graph with nothing worth fusing runs as ``gm.forward`` itself."""
    from functorch.compile import make_boxed_func
    gm.graph.lint()
    stats["aten_graphs"] += 1
    try:
        merged = merge_scatter_sums(gm.graph)
        if merged:
            gm.recompile()
            stats["scatter_sums"] += merged
            log.info("%d sum(s) of select/slice_backward pieces became one cat each", merged)
    except Exception:  # noqa: BLE001 - a rewrite bug must not break the user's model
        log.warning("merging scatter sums failed; the graph keeps them", exc_info=True)
    try:
        fused = fuse_pointwise(gm, device_type, min_group_size, cost_rule)
    except Exception:  # noqa: BLE001 - a fusion bug must not break the user's model
        log.warning("fusion failed, running the graph in eager mode", exc_info=True)
        fused = gm
    run = fused.forward
    if fused is not gm and cost_rule and device_type == "cpu":
        run = _graph_trial(fused, gm)
    compiled = make_boxed_func(run)
    compiled.flydsl_trial = run if isinstance(run, GraphTrial) else None
    # For the backend's choice between this graph and dynamo's (eager autograd).
    compiled.flydsl_savings_us = getattr(fused, "flydsl_savings_us", 0.0)
    compiled.flydsl_graph_us = graph_cost_us(gm.graph.nodes)
    return compiled


def _graph_trial(fused: GraphModule, gm: GraphModule) -> GraphTrial:
    """``fused`` timed against ``gm`` once its groups have decided (trials.py)."""
    modules = [m for m in fused.modules()
               if isinstance(m, (kernels.FusedModule, MultiTensorModule))]

    def settled() -> bool:     # every group ran, and its trials (if any) ended
        return all(m.plans and all(p is None or p.trial is None for p in m.plans.values())
                   for m in modules)

    def on_verdict(trial) -> None:
        stats["graphs_kept_fused" if trial.verdict else "graphs_back_to_aten"] += 1
        log.info("ATen graph with %d fused group(s): %s: %s", len(modules),
                 trial.summary("fused", "ATen"),
                 "keeps its kernels" if trial.verdict else "runs the ATen graph")
    return GraphTrial(fused.forward, gm.forward, settled, 2 * MAX_GROUP_TRIALS + 2,
                      on_verdict)


def fuse_pointwise(gm: GraphModule, device_type: str, min_group_size: int = MIN_GROUP_SIZE,
                   cost_rule: Optional[bool] = None) -> GraphModule:
    """A copy of ``gm`` whose fusible groups run as generated flydsl kernels (``gm``
    itself when no group is worth a kernel). ``cost_rule``: default :data:`COST_RULE`."""
    cost_rule = COST_RULE if cost_rule is None else cost_rule
    new, groups, rewrites = _rewrite_and_partition(gm, device_type, min_group_size,
                                                   cost_rule, None)
    fused_nodes = {n for g in groups for n in g}
    kept = {r.origin for r in rewrites if all(p in fused_nodes for p in r.must_fuse)}
    if len(kept) < len(rewrites):     # undo the rewrites whose pieces stay eager
        stats["rewrites_undone"] += len(rewrites) - len(kept)
        new, groups, rewrites = _rewrite_and_partition(gm, device_type, min_group_size,
                                                       cost_rule, kept)
    if not groups:
        log.info("ATen graph with %d nodes: nothing worth fusing, it runs as is",
                 len(gm.graph.nodes))
        return gm
    stats["rewrites_kept"] += len(rewrites)
    _log_groups(groups, rewrites)
    # cost_rule off: groups may not pay, but they are what was asked for
    saved = max(savings_us(groups), 0.0) if cost_rule else float("inf")
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
    new = fuse_by_partitions(new, [dict.fromkeys(g) for g in groups], prefix=_PREFIX,
                             always_return_tuple=True)
    for node in new.graph.nodes:
        if node.op == "call_module" and node.target.startswith(_PREFIX):
            sub = new.get_submodule(node.target)
            body = [n for n in sub.graph.nodes if n.op == "call_function"]
            kind, pattern = (RowModule, build_row_pattern(sub)) if is_row_group(body) \
                else (kernels.FusedModule, build_pattern(sub))
            # with the cost rule, CPU kernels are also timed against eager (trials.py)
            module = kind(pattern, sub, device_type, output_layouts(sub), measure=cost_rule)
            setattr(new, node.target, module)
    # the residual adds left eager after a matmul: added by the BLAS call instead
    stats["residual_adds"] += fold_residual_adds(new.graph)
    new.recompile()
    if device_type == "cpu":
        # independent groups of one pattern (an optimizer's per-parameter chains): one
        # launch (its kernel is shaped for the CPU: a thread per block loops over a chunk)
        merge_independent(new)
    new.flydsl_savings_us = saved
    stats["fused_groups"] += len(groups)
    stats["fused_ops"] += sum(op_count(g) for g in groups)
    log.debug("fused graph:\n%s", new.code)
    return new


def _rewrite_and_partition(gm: GraphModule, device_type: str, min_group_size: int,
                           cost_rule: bool, allowed: Optional[set]) -> tuple:
    """(copy of ``gm`` with the rewrites applied, kept groups, applied rewrites);
    ``allowed``: names of the nodes that may be rewritten (None: all)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    new = GraphModule(gm, graph)
    is_fusible = functools.partial(fusible, device_type=device_type)
    table = inline_decompositions()
    rewrites = []
    for node in list(new.graph.nodes):
        if node.op != "call_function" or (allowed is not None and node.name not in allowed):
            continue
        done = None
        if node.target in table:
            done = inline_decomposition(new.graph, node, table[node.target], is_fusible,
                                        table)
        else:
            done = split_addmm(new.graph, node, is_fusible) \
                or split_log_softmax(new.graph, node)
        if done is not None:
            rewrites.append(done)
    # A row op can make the group it joins too dear (a lone softmax or layer_norm
    # is faster in ATen): partition again without the row ops of rejected groups,
    # so that their pointwise neighbours still fuse among themselves.
    excluded: set = set()
    for _ in range(3):
        groups = partition(new.graph, device_type, min_group_size, excluded)
        if not cost_rule:
            return new, groups, rewrites
        rejected = {n for g in groups if not worth_fusing(g) for n in g
                    if reduction_count(n)}
        if not rejected:
            break
        excluded |= rejected
    kept = [g for g in groups if worth_fusing(g)]
    if log.isEnabledFor(logging.DEBUG):
        for g in groups:
            if g not in kept:
                log.debug("not fused (%s): %s", _estimate(g), _op_names(g))
    return new, kept, rewrites


def _log_groups(groups: list, rewrites: list) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    if rewrites:
        log.info("kept rewrites of %s", ", ".join(r.origin for r in rewrites))
    for g in groups:
        vals = [v for n in g for v in (row_input(n), n.meta.get("val"))
                if isinstance(v, torch.Tensor)]
        shape = tuple(max(vals, key=lambda v: v.dim()).shape) if vals else "?"
        log.info("fused %d ops %s over %s (%s)", op_count(g), _op_names(g), shape,
                 _estimate(g))


def _op_names(group: list) -> list:
    return [str(n.target).replace("aten.", "") for n in group]


def _estimate(group: list) -> str:
    return f"estimated eager {eager_cost_us(group):.1f} us, fused {fused_cost_us(group):.1f} us"
