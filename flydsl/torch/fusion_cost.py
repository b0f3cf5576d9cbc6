"""When a fused kernel pays: the cost rule of the ``flydsl`` torch.compile backend.

A group of ATen ops becomes one generated kernel only when the kernel is
expected to be faster than the eager calls it replaces. Both sides are
estimated the same way, as memory-bound work plus a fixed cost per call::

    eager = ops * ATEN_CALL_US + (bytes every op reads and writes) / BYTES_PER_US
    fused = FUSED_CALL_US      + (bytes the kernel reads and writes) / BYTES_PER_US

plus, for the math functions whose speed differs (table :data:`COMPUTE_NS`),
their per-element compute time on each side, plus for row ops a cost per row
on each side (:data:`ROW_NS`, :data:`ROW_REDUCTION_NS`); and the group is fused
when ``fused < eager``. On the CPU each side's work (all but the call) is divided
by the host threads it runs on: an ATen call's by ``torch.get_num_threads()``
where its tensors are large enough to split (:data:`ATEN_GRAIN`), a flydsl
launch's by what its driver's split policy would give it (with torch loaded, an
OpenMP team from about 16 us of work: ``drivers/openmp.py``). A kernel saves the
round trips of its intermediate values through memory and all but one call; it
costs a flydsl launch, which is dearer than an ATen call. So on one thread a chain
of two float32 ops fuses from about 4K elements up, a longer chain earlier, and a
lone op never (nothing is saved). Sizes are the shapes' hints when they are
symbolic. The constants were measured on one core of the development machine (a
shared 2-core VM with a large last-level cache): they are estimates, good to tell
clear wins from losses, not to rank close calls, which on the CPU the first calls
measure (:mod:`~flydsl.torch.trials`).
"""
from __future__ import annotations

import operator
from typing import Iterable

import torch
from torch.fx import Node

#: One eager ATen call on a tiny tensor (dispatch and allocation), microseconds.
ATEN_CALL_US = 1.5
#: One call of a fused kernel from the compiled graph on tiny tensors (the
#: FusedModule call: plan lookup, output allocation, a prepared launch): 3.1 us
#: against 1.0 us for torch.add on 256 floats (same process), the ratio kept at
#: ATEN_CALL_US's scale.
FUSED_CALL_US = 5.0
#: Effective bandwidth of one core on the tensors of a model's layer, bytes per
#: microsecond: ATen ops on 1-4 MB float32 tensors moved 25-38 GB/s here (they stay
#: in the last-level cache); 25 GB/s, so that fixed costs weigh as they do there.
BYTES_PER_US = 25_000.0
#: Op base name -> (eager, fused) compute nanoseconds per element beyond moving the
#: data at BYTES_PER_US, measured on 2^20 float32 (ATen's vectorized math against
#: flydsl's generated code, ``op(x) * y`` fused against ``op(x)``; medians of 3 runs).
COMPUTE_NS = {
    "exp": (0.0, 0.1), "tanh": (0.1, 0.4), "sigmoid": (0.27, 0.2), "silu": (0.16, 0.2),
    "log": (0.0, 0.35), "sin": (0.17, 0.8), "cos": (0.2, 0.75),
    # erf and erf-GELU: the 0.56 / 0.7 measured before the division-free erf (4e4b62f)
    # scaled by its measured compute ratio (0.69 and 0.66, 2^20 f32, one thread)
    "erf": (0.34, 0.39), "gelu": (0.1, 0.46),
    "gelu_tanh": (1.75, 0.65), "gelu_backward_tanh": (1.0, 1.0),
    # row kernels: max, exp and sum, scale loops (softmax keeps its exp in the output)
    "_softmax": (0.35, 0.8), "_log_softmax": (0.35, 0.5),
}
#: ATen's CPU ops split their elements over ``torch.get_num_threads()`` host threads in
#: chunks of at least this many (``at::internal::GRAIN_SIZE``): an add of 2^17 float32
#: took 1.9-2.1x less time on 2 threads than on 1 here, one of 2^15 the same.
ATEN_GRAIN = 32768
#: Matmul throughput of one core (float32 BLAS), flop per microsecond: the share of
#: a graph's time that fusion cannot touch.
MATMUL_FLOP_PER_US = 100_000.0
#: What AOTAutograd's graphs cost beyond eager, as a share of the forward's time:
#: measured at about 5% for training (saved tensors, autograd wrappers) and 1% for
#: inference (the runtime wrapper). A graph is compiled only when its fusions save
#: more; otherwise dynamo's graph runs as captured.
AOT_TRAINING_TAX = 0.05
AOT_INFERENCE_TAX = 0.01
#: Row op base name -> (eager, fused) nanoseconds per row beyond moving the data and
#: COMPUTE_NS: ATen's layer_norm pays per row too (60 ns; 4 ms for 65536 rows of 8),
#: a row kernel pays its loops and block reductions (shared memory and barriers).
#: Fitted with the bandwidth above to add + layer_norm (65536 x 8: 1.48x eager,
#: 16384 x 32: 1.29x, 4096 x 64: 1.0x, 1024 x 256: 0.88-0.93x), softmax backward +
#: scale (8192 x 128: 0.72x) and scale (+ mask) + softmax (8192 x 128: 1.16-1.33x, and
#: 0.87-1.15x with the mask: kept out, as nothing is won).
ROW_NS = {"native_layer_norm": (60.0, 100.0), "_softmax": (0.0, 25.0),
          "_log_softmax": (0.0, 25.0), "_softmax_backward_data": (0.0, 15.0)}
#: The fused cost per row and block reduction (or scan) of the other row ops (sum,
#: mean, amax, amin, var, std, prod, argmax, argmin, any, all, logsumexp, cumsum),
#: nanoseconds.
ROW_REDUCTION_NS = 40.0


def _base_name(node: Node) -> str:
    return getattr(getattr(node.target, "overloadpacket", None), "__name__", "")


def _compute_ns(node: Node) -> tuple:
    """(eager, fused) compute ns per element of ``node`` (see :data:`COMPUTE_NS`)."""
    name = _base_name(node)
    if name in ("gelu", "gelu_backward") and node.kwargs.get("approximate", "none") == "tanh":
        name += "_tanh"
    return COMPUTE_NS.get(name, (0.0, 0.0))


def _value(node: Node):
    """The value ``node`` produces (its ``meta["val"]``), the first of several."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0] if val else None
    return val


def _numel(node: Node) -> int:
    val = _value(node)
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
        work = moved / BYTES_PER_US + _numel(n) * _compute_ns(n)[0] / 1e3 + _row_us(n, 0)
        total += ATEN_CALL_US + work / _aten_threads(n)
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
    work = moved / BYTES_PER_US + compute + sum(_row_us(n, 1) for n in nodes)
    return FUSED_CALL_US + work / _flydsl_threads(nodes[0], work)


def _on_cpu(node: Node) -> bool:
    val = _value(node)
    return isinstance(val, torch.Tensor) and val.device.type == "cpu"


def _aten_threads(node: Node) -> int:
    """Host threads an eager ATen call of ``node`` runs on: ATen splits a CPU op
    into chunks of :data:`ATEN_GRAIN` elements over ``torch.get_num_threads()``."""
    if not _on_cpu(node):
        return 1
    largest = max([_numel(node)] + [_numel(a) for a in node.all_input_nodes])
    return max(1, min(torch.get_num_threads(), -(-largest // ATEN_GRAIN)))


def _flydsl_threads(node: Node, work_us: float) -> int:
    """Host threads a flydsl CPU launch of ``work_us`` single-thread work runs on (the
    CPU driver's split policy: :func:`~flydsl.runtime.drivers.cpu.expected_workers`)."""
    if not _on_cpu(node):
        return 1
    from ..runtime.drivers.cpu import expected_workers
    return expected_workers(work_us * 1e3)


def _row_us(node: Node, side: int) -> float:
    """Microseconds ``node`` costs per row (:data:`ROW_NS`) on the eager (0) or fused
    (1) side; 0 for nodes that are not row ops."""
    from .reductions import reduce_dims, reduction_count, row_input
    count = reduction_count(node)
    if not count:
        return 0.0
    x = row_input(node)
    ncols = 1
    for d in reduce_dims(node):        # a row is one output of the reduction
        ncols *= _hint(x.shape[d])
    rows = tensor_bytes(x) // max(1, x.element_size()) // max(1, ncols)
    per_row = ROW_NS.get(_base_name(node), (0.0, count * ROW_REDUCTION_NS))[side]
    return rows * per_row / 1e3


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
