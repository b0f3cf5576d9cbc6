"""Row reductions and norms the ``flydsl`` torch.compile backend fuses.

A *row op* reduces its first input along the innermost dimension: ``sum``,
``mean``, ``amax``, ``amin``, ``var`` (``dim=[-1]``), ``_softmax``,
``_log_softmax``, ``_softmax_backward_data`` (``dim=-1``) and
``native_layer_norm`` over the last dimension. With the pointwise ops around
it (a prologue such as ``scale * x + mask`` or a residual add, an epilogue
such as ``x * rsqrt(mean + eps) * w``) it becomes one row kernel
(:mod:`flydsl.torch.row_kernels`): one block per row, the reductions done
with shared memory and barriers, so the same kernel runs on GPUs.

Each row op is written here as steps of that kernel (:class:`RowBuilder`):
per-element (*full*) values, per-row values, and reductions of a full value
to a row value.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.fx import Node

from .pointwise import FX_DTYPES, fx_dtype, register_dtype

aten = torch.ops.aten


def _last_dim(dims, rank: int) -> bool:
    if isinstance(dims, int):
        dims = [dims]
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and isinstance(dims[0], int) \
        and dims[0] in (-1, rank - 1)


def _float_tensor(node: Any) -> Optional[torch.Tensor]:
    val = node.meta.get("val") if isinstance(node, Node) else None
    if isinstance(val, torch.Tensor) and val.dtype.is_floating_point and val.dtype in FX_DTYPES \
            and val.dim() >= 1:
        return val
    return None


def row_input(node: Node) -> Optional[torch.Tensor]:
    """The reduced input's value (FakeTensor) if ``node`` is a row op this module
    fuses, else None."""
    if node.op != "call_function" or not node.args:
        return None
    x = _float_tensor(node.args[0])
    if x is None:
        return None
    t, a, kw = node.target, node.args, node.kwargs
    rank = x.dim()
    if t in (aten.sum.dim_IntList, aten.mean.dim):
        ok = len(a) >= 2 and _last_dim(a[1], rank) and kw.get("dtype") is None and len(a) <= 3
    elif t in (aten.amax.default, aten.amin.default):
        ok = len(a) >= 2 and _last_dim(a[1], rank) and not kw
    elif t is aten.var.correction:
        ok = len(a) >= 2 and _last_dim(a[1], rank) and len(a) == 2 \
            and isinstance(kw.get("correction", 1), (int, float)) and set(kw) <= {"correction",
                                                                                 "keepdim"}
    elif t in (aten._softmax.default, aten._log_softmax.default):
        ok = len(a) == 3 and _last_dim(a[1], rank) and (not a[2] or x.dtype in
                                                        (torch.float16, torch.bfloat16))
    elif t is aten._softmax_backward_data.default:
        ok = len(a) == 4 and _last_dim(a[2], rank) and _float_tensor(a[1]) is not None \
            and a[3] == x.dtype
    elif t is aten.native_layer_norm.default:
        ok = len(a) == 5 and len(a[1]) == 1 and isinstance(a[4], float) \
            and all(w is None or _float_tensor(w) is not None for w in a[2:4])
    else:
        return None
    return x if ok else None


def reduction_count(node: Node) -> int:
    """How many block reductions row op ``node`` takes per row (0 for other nodes)."""
    if row_input(node) is None:
        return 0
    two = (aten.var.correction, aten._softmax.default, aten._log_softmax.default,
           aten.native_layer_norm.default)
    return 2 if node.target in two else 1


class RowBuilder:
    """Collects the steps of a row kernel: ``full(expr, dtype)`` and ``row(expr,
    dtype)`` add a value (computed per element or once per row) and return its
    name; ``reduce(kind, full_var, dtype)`` adds a reduction (``sum``, ``max``,
    ``min``) of a full value to a row value. Values are held in their register
    dtype (float32 for half types)."""

    def __init__(self):
        self.steps: list = []      # (kind, var, expr or (reduction, source var), dtype)
        self.kinds: dict = {}      # var -> "full" or "row"

    def _add(self, kind: str, expr, dtype: torch.dtype) -> str:
        var = f"v{len(self.steps)}"
        self.steps.append((kind, var, expr, dtype))
        self.kinds[var] = "full" if kind == "full" else "row"
        return var

    def full(self, expr: str, dtype: torch.dtype) -> str:
        return self._add("full", expr, dtype)

    def row(self, expr: str, dtype: torch.dtype) -> str:
        return self._add("row", expr, dtype)

    def value(self, expr: str, dtype: torch.dtype, operands: list) -> str:
        """A value that is full when one of its ``operands`` (variables) is."""
        full = any(self.kinds.get(v) == "full" for v in operands)
        return self.full(expr, dtype) if full else self.row(expr, dtype)

    def reduce(self, how: str, source: str, dtype: torch.dtype) -> str:
        return self._add("reduce", (how, source), dtype)


def _acc(dtype: torch.dtype) -> torch.dtype:
    return register_dtype(dtype)


def _rounded(b: RowBuilder, var: str, dtype: torch.dtype, operands: list) -> str:
    """``var`` rounded to a narrow result dtype (as eager stores it), else itself."""
    reg = register_dtype(dtype)
    if reg is dtype:
        return var
    return b.value(f"fx.cast(fx.cast({var}, {fx_dtype(dtype)}), {fx_dtype(reg)})", reg,
                   [var] + operands)


def expand_row_op(node: Node, b: RowBuilder, operand: Callable[[Any], str],
                  ncols: str) -> list:
    """Add the steps of row op ``node`` to ``b``; returns its result variables (one,
    or three for ``native_layer_norm``), each holding the result dtype's register.
    ``operand(arg)`` gives the variable of an input; ``ncols`` is the source text
    of the row length."""
    t, a, kw = node.target, node.args, node.kwargs
    x_dtype = a[0].meta["val"].dtype
    out = node.meta["val"]
    acc = _acc(x_dtype)
    x = operand(a[0])
    n = f"fx.cast({ncols}, {fx_dtype(acc)})"

    def mean_of(v):
        s = b.reduce("sum", v, acc)
        return b.row(f"({s} / {n})", acc)

    if t in (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default):
        how = {aten.amax.default: "max", aten.amin.default: "min"}.get(t, "sum")
        r = b.reduce(how, x, acc)
        if t is aten.mean.dim:
            r = b.row(f"({r} / {n})", acc)
        return [_rounded(b, r, out.dtype, [])]
    if t is aten.var.correction:
        c = float(kw.get("correction", 1))
        m = mean_of(x)
        d = b.full(f"({x} - {m})", acc)
        s = b.reduce("sum", b.full(f"({d} * {d})", acc), acc)
        return [_rounded(b, b.row(f"({s} / ({n} - {c!r}))", acc), out.dtype, [])]
    if t in (aten._softmax.default, aten._log_softmax.default):
        m = b.reduce("max", x, acc)
        z = b.full(f"({x} - {m})", acc)
        e = b.full(f"fm.exp({z})", acc)
        s = b.reduce("sum", e, acc)
        if t is aten._softmax.default:   # times 1/sum, as ATen's kernel: no division
            inv = b.row(f"(1.0 / {s})", acc)  # per element (16x the cost of a multiply)
            r = b.full(f"({e} * {inv})", acc)
        else:
            r = b.full(f"({z} - fx.log({s}))", acc)
        return [_rounded(b, r, out.dtype, [])]
    if t is aten._softmax_backward_data.default:
        y = operand(a[1])
        s = b.reduce("sum", b.full(f"({x} * {y})", acc), acc)
        return [_rounded(b, b.full(f"({y} * ({x} - {s}))", acc), out.dtype, [])]
    if t is aten.native_layer_norm.default:
        w, bias, eps = a[2], a[3], a[4]
        m = mean_of(x)
        d = b.full(f"({x} - {m})", acc)
        v = b.reduce("sum", b.full(f"({d} * {d})", acc), acc)
        rstd = b.row(f"fx.rsqrt({v} / {n} + {eps!r})", acc)
        y = b.full(f"({d} * {rstd})", acc)
        if w is not None:
            y = b.full(f"({y} * {operand(w)})", acc)
        if bias is not None:
            y = b.full(f"({y} + {operand(bias)})", acc)
        return [_rounded(b, v, o.dtype, []) for v, o in zip((y, m, rstd), out)]
    raise AssertionError(f"not a row op: {node.format_node()}")


__all__ = ["RowBuilder", "expand_row_op", "reduction_count", "row_input"]
