"""Which ATen pointwise ops the ``flydsl`` torch.compile backend fuses, measured.

:func:`pointwise_overloads` lists the functional overloads of every op torch
tags ``torch.Tag.pointwise``; :func:`fusion_dtype` says whether one of them
fuses (and for which input dtype), by lowering a one-op graph with the
backend's own entry point (:func:`flydsl.torch.dynamo_backend.fuse_pointwise`).
``python -m flydsl.torch.coverage`` prints the numbers and the ops that stay eager.
"""
from __future__ import annotations

import functools
import operator
from typing import Callable, Optional

import torch

#: Input dtypes tried, in order, for an op's tensor arguments.
SAMPLE_DTYPES = (torch.float32, torch.int64, torch.bool)


@functools.lru_cache(maxsize=None)
def pointwise_overloads() -> tuple:
    """The functional (no mutation, no aliased result, tensor results) overloads of
    every ``aten`` op tagged ``torch.Tag.pointwise``, sorted by name."""
    found = []
    # Every registered aten op by name: dir(torch.ops.aten) lists only the packets
    # already looked up, so its answer depended on what ran before.
    names = {n[len("aten::"):].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::")}
    for name in sorted(names):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            schema = op._schema
            if torch.Tag.pointwise in op.tags and not schema.is_mutable \
                    and all(r.alias_info is None for r in schema.returns) \
                    and all(str(r.type) == "Tensor" for r in schema.returns):
                found.append(op)
    return tuple(sorted(found, key=str))


def _value(arg, tensor: Callable[[str], torch.Tensor]):
    """A sample value for one schema argument (None: leave it to its default)."""
    kind = arg.type.kind()
    if kind == "TensorType":
        return tensor(arg.name)
    if kind == "OptionalType" and arg.type.getElementType().kind() == "TensorType":
        return tensor(arg.name)
    inner = arg.type.getElementType().kind() if kind == "OptionalType" else kind
    if inner == "NumberType" and kind == "OptionalType":
        return 0.5          # clamp's bounds: one must be given
    if inner == "StringType" and not arg.has_default_value():
        return "trunc"      # div's rounding_mode
    if arg.has_default_value():
        return None
    if kind in ("NumberType", "FloatType"):
        return 2
    if kind == "IntType":
        return 1
    if kind == "OptionalType":
        return None
    raise TypeError(f"no sample for {arg.type}")


def sample_call(op, tensor: Callable[[str], torch.Tensor]) -> tuple:
    """(args, kwargs) calling ``op`` with ``tensor(name)`` for its tensor arguments,
    2 for numbers and 1 for ints without a default."""
    args, kwargs = [], {}
    for arg in op._schema.arguments:
        value = _value(arg, tensor)
        if value is None:
            continue
        (kwargs.__setitem__(arg.name, value) if arg.kwarg_only else args.append(value))
    return tuple(args), kwargs


def _tensor_factory(dtype: torch.dtype, make: Callable) -> Callable[[str], torch.Tensor]:
    """Tensors of ``dtype`` from ``make(dtype)``; masks and conditions are bools."""
    return lambda name: make(torch.bool if name in ("mask", "condition") else dtype)


def eager_accepts(op, dtype: torch.dtype) -> bool:
    """Whether eager mode runs ``op`` on positive sample tensors of ``dtype``, and
    torch's meta function (what tracing runs) accepts them too."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    tensor = _tensor_factory(dtype, lambda d: (torch.rand(4) + 0.5).to(d))
    try:
        args, kwargs = sample_call(op, tensor)
        if not isinstance(op(*args, **kwargs), torch.Tensor):
            return False
        with FakeTensorMode(allow_non_fake_inputs=True):
            op(*args, **kwargs)
        return True
    except Exception:  # noqa: BLE001 - eager refuses this dtype (or needs other args)
        return False


def fuses(op, dtype: torch.dtype) -> bool:
    """Whether the backend turns a graph of one ``op`` call on ``dtype`` tensors into
    a generated kernel with no eager op left. The graph is traced with the
    decompositions AOTAutograd applies for the backend (casts become
    ``prims.convert_element_type``); an op that traces to no op at all (the
    conjugate of a real tensor) leaves nothing eager either."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from .dynamo_backend import fuse_pointwise
    from .pointwise import decompositions
    tensor = _tensor_factory(dtype, lambda d: torch.ones(4, dtype=d))
    args, kwargs = sample_call(op, tensor)
    flat = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]

    def one_op(*tensors):
        it = iter(tensors)
        a = [next(it) if isinstance(x, torch.Tensor) else x for x in args]
        kw = {k: next(it) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return (op(*a, **kw),)
    try:
        gm = make_fx(one_op, tracing_mode="fake", decomposition_table=decompositions())(*flat)
    except Exception:  # noqa: BLE001 - not traceable with these samples
        return False
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return True
    fused = fuse_pointwise(gm, "cpu", min_group_size=1, cost_rule=False)
    return fused is not gm and all(
        n.target is operator.getitem or _is_constant(n)
        for n in fused.graph.nodes if n.op == "call_function")


def _is_constant(node) -> bool:
    """A 0-d constant a decomposition made (a kernel input, not an op on the data)."""
    return node.target is torch.ops.aten.scalar_tensor.default and not node.all_input_nodes


def fusion_dtype(op) -> Optional[torch.dtype]:
    """The first of :data:`SAMPLE_DTYPES` that eager accepts for ``op`` and the backend
    fuses; None when it stays eager for all of them."""
    for dtype in SAMPLE_DTYPES:
        if eager_accepts(op, dtype) and fuses(op, dtype):
            return dtype
    return None


def report() -> dict:
    """``{"overloads": n, "fused": [...], "eager": [...]}`` over :func:`pointwise_overloads`."""
    fused, eager = [], []
    for op in pointwise_overloads():
        (fused if fusion_dtype(op) is not None else eager).append(op)
    return {"overloads": len(fused) + len(eager), "fused": fused, "eager": eager}


def _bases(ops) -> set:
    return {op._schema.name for op in ops}


def main() -> None:
    """Print the coverage by overload and by base op, and the ops that stay eager."""
    r = report()
    n_fused, n = len(r["fused"]), r["overloads"]
    all_bases = _bases(r["fused"]) | _bases(r["eager"])
    full = all_bases - _bases(r["eager"])
    print(f"overloads: {n_fused}/{n} fuse ({100 * n_fused / n:.1f}%)")
    print(f"base ops (every functional overload fuses): {len(full)}/{len(all_bases)} "
          f"({100 * len(full) / len(all_bases):.1f}%)")
    print("eager:", " ".join(str(op) for op in r["eager"]))


if __name__ == "__main__":
    main()
