"""From a fused FX sub-graph to the pattern of its generated kernel: a
:class:`~flydsl.torch.kernels.FusedPattern` (pointwise) or a
:class:`~flydsl.torch.row_kernels.RowPattern` (row reductions), and the
layouts of its results.
"""
from __future__ import annotations

import operator
import torch
from torch.fx import GraphModule

from . import kernels
from .partition import is_contiguous, is_one, merge_row_spaces, same_layout, tensor_meta
from .pointwise import emit_call, lookup
from .reductions import RowBuilder, expand_row_op, reduce_dims
from .row_kernels import RowPattern


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
            text, out_dtype = _pointwise_text(node, env)
            var = f"v{len(body)}"
            body.append(f"{var} = {text}")
            env[node] = (var, out_dtype)
        elif node.op == "output":
            outputs = [env[a] for a in node.args[0]]
    return kernels.FusedPattern(tuple(inputs), tuple(body), tuple(outputs))


def _pointwise_text(node, env: dict) -> tuple:
    """(DSL expression, result dtype) of a pointwise ``node`` whose operands ``env``
    names (node -> (variable, dtype))."""
    entry = lookup(node.target)
    out_dtype = node.meta["val"].dtype
    text = emit_call(entry, entry.bind(node.args, node.kwargs), out_dtype, env.__getitem__)
    if text is None:
        raise AssertionError(f"cannot emit {node.format_node()}")
    return text, out_dtype


def output_layouts(sub: GraphModule) -> list:
    """Per result of a fused sub-graph: the index of an input whose layout (shape and
    strides) it has, to allocate it with ``empty_like``; None means contiguous."""
    inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    out = []
    for node in sub.graph.output_node().args[0]:
        meta = tensor_meta(node)
        like = None
        if not is_contiguous(meta):
            like = next(k for k, n in enumerate(inputs) if same_layout(tensor_meta(n), meta))
        out.append(like)
    return out


def build_row_pattern(sub: GraphModule) -> RowPattern:
    """The :class:`~flydsl.torch.row_kernels.RowPattern` of one fused row sub-graph."""
    body = [n for n in sub.graph.nodes if n.op == "call_function"]
    space = None
    for n in sorted(body, key=lambda n: reduce_dims(n) is None):   # row ops first
        rdims = reduce_dims(n)
        if rdims is not None:
            here = (tuple(n.args[0].meta["val"].shape), rdims)
        elif isinstance(n.meta["val"], torch.Tensor):
            here = (tuple(n.meta["val"].shape), None)
        else:
            continue
        space = here if space is None else merge_row_spaces(space, here)
    shape, rdims = space
    rdims = rdims if rdims is not None else (len(shape) - 1,)
    b = RowBuilder()
    inputs: list = []
    env: dict = {}

    def where(val: torch.Tensor) -> str:
        """``row`` for a value constant along the reduced dims (aligned at the right)."""
        padded = [1] * (len(shape) - val.dim()) + list(val.shape)
        return "row" if all(is_one(padded[d]) for d in rdims) \
            and not all(is_one(shape[d]) for d in rdims) else "full"
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            name = f"x{len(inputs)}"
            if isinstance(val, torch.Tensor):
                kind = where(val)
                inputs.append(("tensor", val.dtype, kind))
                b.kinds[name] = kind
                env[node] = (name, val.dtype)
            else:
                inputs.append(("scalar", _SCALAR_PARAM[type(val)], None))
                b.kinds[name] = "row"
                env[node] = (name, None)
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function" and reduce_dims(node) is not None:
            results = expand_row_op(node, b, lambda a: env[a][0], "ncols")
            val = node.meta["val"]
            dtypes = [v.dtype for v in val] if isinstance(val, (tuple, list)) else [val.dtype]
            pairs = [(var, dt) for var, dt in zip(results, dtypes)]
            env[node] = pairs if len(pairs) > 1 else pairs[0]
        elif node.op == "call_function":
            text, out_dtype = _pointwise_text(node, env)
            operands = [env[a][0] for a in node.all_input_nodes]
            env[node] = (b.value(text, out_dtype, operands), out_dtype)
        elif node.op == "output":
            outputs = []
            for a in node.args[0]:
                var, dtype = env[a]
                val = a.meta["val"]
                kind = "full" if where(val) == "full" and val.dim() == len(shape) \
                    else "row" if val.dim() == len(shape) else "row_squeezed"
                if b.kinds[var] == "full" and kind != "full":
                    raise AssertionError(f"per-element value {a} stored per row")
                outputs.append((var, dtype, kind))
    return RowPattern(tuple(inputs), tuple(b.steps), tuple(outputs), tuple(rdims))
