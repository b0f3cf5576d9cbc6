"""One launch for many independent fused groups of one pattern (multi-tensor apply).

An optimizer step over a parameter list is the same chain of pointwise ops once
per parameter: as many fused groups, each with its own shapes, that the
partitioner cannot join (their iteration spaces differ), so as many launches.
:func:`merge_independent` replaces such groups (the same
:class:`~flydsl.torch.kernels.FusedPattern`, none depending on another, every
operand of the group's own shape) by one :class:`MultiTensorModule`, whose
kernel takes every group's tensors and gives each group a range of blocks: one
launch, as torch's foreach/fused optimizers do with their tensor lists. The
kernel is shaped for the CPU backend (one thread per block loops over a contiguous
chunk, which LLVM vectorizes): the backend merges groups only for the CPU. At run
time the launch needs each group's operands contiguous (no broadcast, no
strides); otherwise, or while it loses its trial against the groups' eager ops
(:mod:`~flydsl.torch.trials`), the groups run one by one as before.
"""
from __future__ import annotations

import functools
import heapq
import logging
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from ..errors import FlydslError
from ..runtime.tensors import contiguous_strides
from . import kernels
from .pointwise import fx_dtype
from .trials import MAX_GROUP_TRIALS, Trial

log = logging.getLogger("flydsl.torch")

#: Most groups one kernel takes (its source, and its compile time, grow with them);
#: a longer list of groups is split into launches of at most this many.
MAX_SEGMENTS = 16
#: Elements per block (one thread each).
CHUNK = 4096
#: Counters for tests and debugging (per process).
stats = {"merged_nodes": 0, "groups_merged": 0, "multi_launches": 0, "per_group_calls": 0}
_MISSING = object()
_NAME = re.compile(r"\b([xv]\d+)\b")


@dataclass(frozen=True)
class MultiPattern(kernels.KernelPattern):
    """``segments`` copies of ``pattern``, each over its own flat (rank-1) tensors."""

    pattern: kernels.FusedPattern
    segments: int

    def source(self, rank: int) -> tuple[str, str]:
        """(kernel name, module source); ``rank`` must be 1 (operands are flat)."""
        assert rank == 1, rank
        return multi_kernel_source(self.pattern, self.segments)


def multi_kernel_source(pattern: kernels.FusedPattern, segments: int) -> tuple[str, str]:
    """(kernel name, module source) of ``segments`` copies of ``pattern``: copy ``s``
    reads ``t<k>_<s>``, writes its ``r``-th result to ``o<r>_<s>`` (each result its own
    flat tensor, as torch's per-parameter results are) and runs on blocks ``b_<s>`` to
    ``b_<s+1>`` for its ``n_<s>`` elements (arguments ``n, b`` per copy after the
    tensors, then ``b_<segments>``, the number of blocks)."""
    name = f"multi_{pattern.key}_s{segments}"
    params: list = []
    outs: list = []
    lines = kernels.module_header(f"pattern {pattern.key}, {segments} segments")
    lines += ["@flydsl.kernel", None,
              "    b = fx.block_idx.x"]
    for s in range(segments):
        ren = functools.partial(_NAME.sub, lambda m: f"{m.group(1)}_{s}")
        segment_params, loads = kernels.input_params(pattern, 1, f"j_{s}", f"_{s}")
        params += segment_params
        outs += [f"o{r}_{s}: fx.Tensor[{fx_dtype(d)}, 1]"
                 for r, (_, d) in enumerate(pattern.outputs)]
        body = loads + [ren(stmt) for stmt in pattern.body]
        body += [f"o{r}_{s}[j_{s}] = fx.cast({ren(var)}, {fx_dtype(d)})"
                 for r, (var, d) in enumerate(pattern.outputs)]
        # one thread per block, which loops over the block's CHUNK elements: a
        # plain loop over contiguous memory (vectorized by LLVM) under one uniform
        # branch per segment, where a thread per element would run every segment's
        # branch per element on the CPU
        lines += [f"    if (b >= b_{s}) & (b < b_{s + 1}):",
                  f"        lo_{s} = (b - b_{s}) * {CHUNK}",
                  f"        for j_{s} in range(lo_{s}, fx.min(lo_{s} + {CHUNK}, n_{s})):"]
        lines += ["            " + stmt for stmt in body]
    params += outs
    params += [f"{p}_{s}: fx.Int32" for s in range(segments) for p in ("n", "b")]
    params.append(f"b_{segments}: fx.Int32")
    lines[lines.index(None)] = f"def {name}({', '.join(params)}):"
    return name, "\n".join(lines) + "\n"


@dataclass
class _Plan:
    """A multi-tensor launch for one signature of the groups' inputs."""

    flat_outs: tuple     # per group, per result: (shape, strides, dtype), contiguous
    slices: tuple        # each group's results in flat_outs
    alloc: Any           # kernels.allocator of the device
    kernel: Any
    grid: tuple
    extra: tuple         # (n_0, b_0, n_1, b_1, ..., blocks)
    prepared: Any = None
    tried: bool = False
    trial: Any = None


class MultiTensorModule(torch.nn.Module):
    """Runs independent fused groups of one pattern as one launch.

    Called with every group's arguments one after the other, it returns one tuple of
    results per group. ``groups`` are the groups' own
    :class:`~flydsl.torch.kernels.FusedModule`\\ s: they run when the launch cannot
    (operands not contiguous or of another shape than their group's results, a
    build failure) or loses its trial against their eager ops."""

    def __init__(self, groups: Sequence[kernels.FusedModule]):
        super().__init__()
        # a plain tuple: not submodules (the graph trial waits for the FusedModules
        # it finds to settle, and these run only when the launch does not)
        self.__dict__["groups"] = tuple(groups)
        self.pattern = MultiPattern(groups[0].pattern, len(groups))
        self.device_type = groups[0].device_type
        self.measure = groups[0].measure
        self.nargs = len(groups[0].pattern.inputs)
        self.tensor_pos = [k + s * self.nargs for s in range(len(groups))
                           for k in groups[0].tensor_pos]
        self._key = kernels.signature_key(self.tensor_pos)
        self._tensors = kernels.tensors_at(self.tensor_pos)
        self.plans: dict = {}
        # (check, key, plan) of the last call's signature: check(*tensors) tells in C
        # that a call has it again, for a fraction of what its key costs (about 40
        # tensors in an optimizer step); None: none, or a plan changed since
        self._last: Optional[tuple] = None
        self.kernel: Any = None
        self.broken = False

    def forward(self, *args: Any) -> tuple:
        last = self._last
        if last is not None and last[0](*self._tensors(args)):
            _, key, plan = last
        else:
            key = self._key(args)
            plan = self.plans.get(key, _MISSING)
            if plan is _MISSING:
                plan = self.plans[key] = self._plan(args)
                if plan is not None and self.measure:
                    plan.trial = Trial(most=MAX_GROUP_TRIALS)
            check = kernels.tensor_guard(self._tensors(args))
            self._last = None if check is None else (check, key, plan)
        if plan is None:
            return self._per_group(args)
        if plan.trial is not None and plan.tried:
            return self._timed(key, plan, args)
        return self._launch(key, plan, args)

    def _drop(self, key: tuple) -> None:
        """Run the groups one by one from now on for the signature ``key``."""
        self.plans[key] = None
        self._last = None

    __call__ = forward

    def _segments(self, args: tuple) -> list:
        n = self.nargs
        return [args[s * n:(s + 1) * n] for s in range(len(self.groups))]

    def _per_group(self, args: tuple) -> tuple:
        stats["per_group_calls"] += 1
        return tuple(g(*a) for g, a in zip(self.groups, self._segments(args)))

    def _eager(self, args: tuple) -> tuple:
        return tuple(tuple(g.eager(*a)) for g, a in zip(self.groups, self._segments(args)))

    def _timed(self, key: tuple, plan: _Plan, args: tuple) -> tuple:
        trial = plan.trial
        out = trial.run(lambda: self._eager(args), lambda: self._launch(key, plan, args))
        if trial.verdict is not None and plan.trial is not None:
            plan.trial = None
            log.info("%d groups of %s in one launch: %s: %s", len(self.groups),
                     self.pattern.pattern.key, trial.summary(),
                     "keeps it" if trial.verdict else "runs them one by one")
            if not trial.verdict:
                self._drop(key)
        return out

    def _plan(self, args: tuple) -> Optional[_Plan]:
        """The launch for these inputs, or None: every group's tensors must be
        contiguous, of one shape, non-empty, on a device the kernel runs on."""
        dtypes = [d for _, d in self.groups[0].pattern.outputs]
        outs, extra, blocks = [], [], 0
        device = args[self.tensor_pos[0]].device
        for group, seg in zip(self.groups, self._segments(args)):
            tensors = [seg[k] for k in group.tensor_pos]
            shape = tuple(tensors[0].shape)
            numel = math.prod(shape)
            if not 0 < numel < kernels._MAX_ELEMENTS or any(
                    t.shape != shape or not t.is_contiguous() or t.is_neg()
                    or t.device != device for t in tensors):
                return None
            strides = contiguous_strides(shape)
            outs += [(shape, strides, d) for d in dtypes]
            extra += [numel, blocks]
            blocks += -(-numel // CHUNK)
        extra.append(blocks)
        if device.type != self.device_type or self._kernel() is None:
            return None
        k = len(dtypes)
        slices = tuple(slice(s * k, (s + 1) * k) for s in range(len(self.groups)))
        return _Plan(tuple(outs), slices, kernels.allocator(device), self.kernel,
                     (blocks, 1, 1), tuple(extra))

    def _kernel(self):
        if self.kernel is None and not self.broken:
            try:
                self.kernel = kernels.load_kernel(self.pattern, 1)
            except (FlydslError, OSError, SyntaxError) as e:
                log.warning("flydsl.torch: multi-tensor kernel %s failed to build, running "
                            "its groups one by one: %s", self.pattern.key, e)
                self.broken = True
        return self.kernel

    def _launch(self, key: tuple, plan: _Plan, args: tuple) -> tuple:
        # each result its own tensor (one buffer for all of them, several megabytes
        # for an optimizer step, page-faulted on every call where torch's per-parameter
        # buffers came back from the heap)
        alloc = plan.alloc
        outs = [alloc(shape, strides, d) for shape, strides, d in plan.flat_outs]
        kargs = [*args, *outs, *plan.extra]
        results = tuple([tuple(outs[s]) for s in plan.slices])
        prepared = plan.prepared
        # a prepared launch stores only data pointers: the tensors as they are
        if prepared is None or not prepared(kargs):
            flat = [a.view(-1) if isinstance(a, torch.Tensor) else a for a in kargs]
            try:
                plan.kernel[plan.grid, (1, 1, 1)](*flat)
            except (FlydslError, OSError, SyntaxError) as e:
                log.warning("flydsl.torch: multi-tensor kernel %s failed, running its "
                            "groups one by one: %s", self.pattern.key, e)
                self._drop(key)
                return self._per_group(args)
            if not plan.tried:
                plan.tried = True
                # the results are new tensors every call: no overlap checks for them
                fresh = range(len(args), len(args) + len(outs))
                plan.prepared = plan.kernel.prepare(tuple(flat), plan.grid, (1, 1, 1),
                                                    fresh=fresh)
        stats["multi_launches"] += 1
        return results


def _flat_group(module: kernels.FusedModule) -> bool:
    """Whether every operand of the group (by its traced values) has the shape of its
    results, which are contiguous: a candidate for a multi-tensor launch."""
    sub = module.eager
    vals = [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]
    outs = [n.meta.get("val") for n in sub.graph.output_node().args[0]]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs) \
            or any(like is not None for like in module.layouts):
        return False
    shape = outs[0].shape
    return all(o.shape == shape for o in outs) and all(
        v.shape == shape for v in vals if isinstance(v, torch.Tensor))


def merge_independent(gm: GraphModule) -> int:
    """Replace sets of independent calls of :class:`~flydsl.torch.kernels.FusedModule`\\ s
    of one pattern in ``gm`` by one :class:`MultiTensorModule` call each (at most
    :data:`MAX_SEGMENTS` groups a call). Returns how many calls were merged."""
    graph = gm.graph
    candidates = {}
    for node in graph.nodes:
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            if type(mod) is kernels.FusedModule and _flat_group(mod) \
                    and all(u.op == "call_function" and u.target is operator.getitem
                            for u in node.users):
                candidates[node] = mod
    if len(candidates) < 2:
        return 0
    # bit i of ancestors[n]: candidate i is an ancestor of n
    bit = {n: 1 << i for i, n in enumerate(candidates)}
    ancestors: dict = {}
    for node in graph.nodes:
        acc = 0
        for a in node.all_input_nodes:
            acc |= ancestors[a] | bit.get(a, 0)
        ancestors[node] = acc
    buckets: dict = {}     # pattern key -> list of [members, mask of members]
    for node, mod in candidates.items():
        sets = buckets.setdefault(mod.pattern.key, [])
        for entry in sets:   # members come earlier: none of them depends on node
            if len(entry[0]) < MAX_SEGMENTS and not ancestors[node] & entry[1]:
                entry[0].append(node)
                entry[1] |= bit[node]
                break
        else:
            sets.append([[node], bit[node]])
    merged = 0
    for sets in buckets.values():
        for members, _ in sets:
            if len(members) < 2:
                continue
            _merge(gm, members, [candidates[n] for n in members])
            merged += len(members)
    if merged:
        _stable_topological_sort(graph)
        graph.lint()
        gm.recompile()
        stats["merged_nodes"] += 1
        stats["groups_merged"] += merged
    return merged


def _merge(gm: GraphModule, members: list, modules: list) -> None:
    graph = gm.graph
    name = f"flydsl_multi_{members[0].target}"
    gm.add_submodule(name, MultiTensorModule(modules))
    args = [a for n in members for a in n.args]
    with graph.inserting_after(members[-1]):
        call = graph.call_module(name, tuple(args))
    for s, node in enumerate(members):
        with graph.inserting_after(call):
            seg = graph.call_function(operator.getitem, (call, s))
        node.replace_all_uses_with(seg)
        graph.erase_node(node)
        gm.delete_submodule(node.target)
    log.info("%d fused groups of pattern %s run as one launch", len(members),
             modules[0].pattern.key)


def _stable_topological_sort(graph: torch.fx.Graph) -> None:
    """Order ``graph``'s nodes so that each comes after its inputs, keeping the
    present order wherever it already does (ready nodes go by position)."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    pending = {n: len(set(n.all_input_nodes)) for n in nodes}
    ready = [(index[n], n) for n in nodes if not pending[n]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for u in n.users:
            pending[u] -= 1
            if not pending[u]:
                heapq.heappush(ready, (index[u], u))
    assert len(order) == len(nodes), "cycle after merging fused groups"
    for prev, n in zip(order, order[1:]):
        if prev.next is not n:
            prev.append(n)


__all__ = ["MAX_SEGMENTS", "MultiPattern", "MultiTensorModule", "merge_independent",
           "multi_kernel_source", "stats"]
