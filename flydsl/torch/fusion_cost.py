"""When a fused kernel pays: the cost rule of the ``flydsl`` torch.compile backend.

A group of ATen ops becomes one generated kernel only when the kernel is
expected to be faster than the eager calls it replaces. Both sides are
estimated the same way, as memory-bound work plus a fixed cost per call::

    eager = ops * ATEN_CALL_US + (bytes every op reads and writes) / BYTES_PER_US
    fused = FUSED_CALL_US      + (bytes the kernel reads and writes) / BYTES_PER_US

plus, for the math functions whose speed differs (table :data:`COMPUTE_NS`),
their per-element compute time on each side, plus for a row kernel
``ROW_REDUCTION_NS`` per row and block reduction; and the group is fused when
``fused < eager``. A kernel saves the round trips of its intermediate values
through memory and all but one call; it costs a flydsl launch, which is dearer
than an ATen call. So a chain of two float32 ops fuses from about 6K elements
up, a longer chain earlier, and a lone op never (nothing is saved). Sizes are
the shapes' hints when they are symbolic. The constants were measured on one
core of the development machine (a shared 2-core VM: they are estimates, good
to tell clear wins from losses, not to rank close calls).
"""
from __future__ import annotations

import operator
from typing import Iterable

import torch
from torch.fx import Node

#: One eager ATen call on a tiny tensor (dispatch and allocation), microseconds.
ATEN_CALL_US = 1.5
#: One call of a fused kernel from the compiled graph on tiny tensors (the
#: FusedModule call: output allocation, views, the flydsl warm launch).
FUSED_CALL_US = 10.0
#: Effective bandwidth of one core on fresh, cache-cold tensors (as in a model:
#: each eager op writes a newly allocated result), bytes per microsecond (10 GB/s).
BYTES_PER_US = 10_000.0
#: Op base name -> (eager, fused) compute nanoseconds per element beyond moving the
#: data, measured on float32 (ATen's vectorized math against flydsl's generated code).
COMPUTE_NS = {
    "exp": (0.0, 0.2), "tanh": (0.1, 0.7), "sigmoid": (0.35, 0.45), "log": (0.8, 0.8),
    "sin": (0.3, 1.0), "cos": (0.25, 1.5), "erf": (0.5, 0.5),
    "gelu": (0.25, 0.9), "gelu_tanh": (2.0, 1.1), "gelu_backward_tanh": (1.0, 1.0),
    "_softmax": (0.35, 0.4), "_log_softmax": (0.35, 0.35),   # the row kernel exps twice
}
#: Matmul throughput of one core (float32 BLAS), flop per microsecond: the share of
#: a graph's time that fusion cannot touch.
MATMUL_FLOP_PER_US = 100_000.0
#: What AOTAutograd's graphs cost beyond eager, as a share of the forward's time:
#: measured at about 5% for training (saved tensors, autograd wrappers) and 1% for
#: inference (the runtime wrapper). A graph is compiled only when its fusions save
#: more; otherwise dynamo's graph runs as captured.
AOT_TRAINING_TAX = 0.05
AOT_INFERENCE_TAX = 0.01
#: A row kernel's cost per row and block reduction (shared memory and barriers),
#: nanoseconds: what makes a lone softmax or layer_norm cheaper in ATen. Measured
#: 35-50 ns (softmax and add + layer_norm, 8192 x 128 against 1024 x 1024); the margin
#: makes up for the eager side's cache-cold bandwidth, which overestimates ATen on
#: tensors that stay in the last-level cache: at 60 ns a masked attention softmax
#: (8 x 8 x 128 x 128) was fused and ran 1.2x slower than eager.
ROW_REDUCTION_NS = 150.0


def _compute_ns(node: Node) -> tuple:
    """(eager, fused) compute ns per element of ``node`` (see :data:`COMPUTE_NS`)."""
    packet = getattr(node.target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if name in ("gelu", "gelu_backward") and node.kwargs.get("approximate", "none") == "tanh":
        name += "_tanh"
    return COMPUTE_NS.get(name, (0.0, 0.0))


def _numel(node: Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0] if val else None
    return tensor_bytes(val) // val.element_size() if isinstance(val, torch.Tensor) else 0


def tensor_bytes(value) -> int:
    """Bytes of a tensor value (a FakeTensor in ``node.meta["val"]``), 0 for others."""
    if not isinstance(value, torch.Tensor):
        return 0
    numel = 1
    for n in value.shape:
        numel *= _hint(n)
    return numel * value.element_size()


def node_bytes(node: Node) -> int:
    """Bytes of the value(s) an FX node produces (its ``meta["val"]``)."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return sum(map(tensor_bytes, val))
    return tensor_bytes(val)


def eager_cost_us(nodes: Iterable[Node]) -> float:
    """Estimated time of running ``nodes`` as eager ATen calls. A node made by a
    rewrite carries its share of the replaced call in ``meta["flydsl_eager_us"]``."""
    total = 0.0
    for n in nodes:
        if n.target is operator.getitem:     # an item of a multi-result op: free
            continue
        given = n.meta.get("flydsl_eager_us")
        if given is not None:
            total += given
            continue
        moved = node_bytes(n) + sum(node_bytes(a) for a in n.all_input_nodes)
        total += ATEN_CALL_US + moved / BYTES_PER_US + _numel(n) * _compute_ns(n)[0] / 1e3
    return total


def fused_cost_us(nodes: list) -> float:
    """Estimated time of one kernel computing ``nodes``: it reads the values from
    outside the group once and writes the values used outside it."""
    members = set(nodes)
    inputs = {a for n in nodes for a in n.all_input_nodes if a not in members}
    outputs = [n for n in nodes if any(u not in members for u in n.users)
               or not n.users]
    moved = sum(map(node_bytes, inputs)) + sum(map(node_bytes, outputs))
    compute = sum(_numel(n) * _compute_ns(n)[1] for n in nodes) / 1e3
    return FUSED_CALL_US + moved / BYTES_PER_US + compute + _row_cost_us(nodes)


def _row_cost_us(nodes: list) -> float:
    from .reductions import reduction_count, row_input
    total = 0.0
    for n in nodes:
        count = reduction_count(n)
        if count:
            x = row_input(n)
            rows = tensor_bytes(x) // max(1, x.element_size()) // max(1, _hint(x.shape[-1]))
            total += rows * count * ROW_REDUCTION_NS / 1e3
    return total


def _hint(n) -> int:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
    return optimization_hint(n, fallback=4096) if isinstance(n, torch.SymInt) else int(n)


def worth_fusing(nodes: list) -> bool:
    """The cost rule: whether one kernel computing ``nodes`` beats their eager calls."""
    return fused_cost_us(nodes) < eager_cost_us(nodes)


_MATMULS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}


def graph_cost_us(nodes: Iterable[Node]) -> float:
    """Estimated eager time of a graph's calls: matmuls by their flops, views free,
    every other op as in :func:`eager_cost_us`."""
    total = 0.0
    for n in nodes:
        if n.op != "call_function" or getattr(n.target, "is_view", False) \
                or n.target is operator.getitem:
            continue
        name = getattr(getattr(n.target, "overloadpacket", None), "__name__", "")
        if name in _MATMULS:
            a, b = (n.args[i].meta.get("val") for i in _MATMULS[name])
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                flops = 2 * tensor_bytes(a) // a.element_size() * _hint(b.shape[-1])
                total += flops / MATMUL_FLOP_PER_US
                continue
        total += eager_cost_us([n])
    return total


def savings_us(groups: Iterable[list]) -> float:
    """Estimated time the fused ``groups`` save over their eager calls."""
    return sum(eager_cost_us(g) - fused_cost_us(g) for g in groups)
