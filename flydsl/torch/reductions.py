"""Reductions, scans and norms the ``flydsl`` torch.compile backend fuses.

A *row op* reduces its first input along one or more of its dimensions (any
dimensions, ``keepdim`` or not): ``sum``, ``mean``, ``amax``, ``amin``,
``var``, ``std``, ``prod``, ``argmax``, ``argmin``, ``any``, ``all``,
``logsumexp``, ``_softmax``, ``_log_softmax``, ``_softmax_backward_data``,
``native_layer_norm`` (its normalized dimensions) and the scan ``cumsum``.
With the pointwise ops around it (a prologue such as ``scale * x + mask`` or a
residual add, an epilogue such as ``x * rsqrt(mean + eps) * w``) it becomes one
row kernel (:mod:`flydsl.torch.row_kernels`): one block per output element of
the reduction (a *row*), the reductions done with shared memory and barriers,
so the same kernel runs on GPUs. The reduced dimensions are the kernel's
*columns*: at run time they are viewed as one dimension (strided when they are
not the innermost), so a reduction over ``dim=0`` is a strided walk per row.

Each row op is written here as steps of that kernel (:class:`RowBuilder`):
per-element (*full*) values, per-row values, reductions of a full value to a
row value, and scans (``cumsum``: a full value computed by a sequential walk of
each row, stored by that walk; nothing in the kernel reads it back).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.fx import Node

from .pointwise import FX_DTYPES, fx_dtype, register_dtype

aten = torch.ops.aten

_FLOAT_ONLY = {aten.mean.dim, aten.mean.default, aten.var.correction, aten.std.correction,
               aten.logsumexp.default, aten._softmax.default, aten._log_softmax.default,
               aten._softmax_backward_data.default, aten.native_layer_norm.default}
_NO_BOOL = {aten.sum.dim_IntList, aten.sum.default, aten.prod.dim_int, aten.prod.default,
            aten.cumsum.default, aten.amax.default, aten.amin.default, aten.argmax.default,
            aten.argmin.default}
_ANY_DTYPE = {aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
              aten.all.default}
_ROW_OPS = _FLOAT_ONLY | _NO_BOOL | _ANY_DTYPE
#: Ops with a ``dtype`` keyword the kernel honours by accumulating in it.
_WITH_DTYPE = {aten.sum.dim_IntList, aten.sum.default, aten.prod.dim_int, aten.prod.default,
               aten.cumsum.default, aten.mean.dim, aten.mean.default}
#: Row ops whose result is per element of the input (the rest give one value per row).
SCANS = {aten.cumsum.default}


def _bound(node: Node) -> Optional[dict]:
    """``node``'s arguments by schema name, defaults filled in (None if they do not bind)."""
    schema = node.target._schema
    out: dict = {}
    args = list(node.args)
    for k, arg in enumerate(schema.arguments):
        if k < len(args) and not arg.kwarg_only:
            out[arg.name] = args[k]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            return None
    if len(args) > sum(not a.kwarg_only for a in schema.arguments) \
            or set(node.kwargs) - set(out):
        return None
    return out


def _tensor(node: Any) -> Optional[torch.Tensor]:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val if isinstance(val, torch.Tensor) and val.dtype in FX_DTYPES else None


def _dims(dim, rank: int) -> Optional[tuple]:
    """Sorted non-negative reduced dims of ``dim`` (None or [] for all), None if invalid."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    if not all(isinstance(d, int) and -rank <= d < rank for d in dim):
        return None
    dims = tuple(sorted({d % rank for d in dim}))
    return dims if len(dims) == len(dim) else None


def _dtype_ok(t, x: torch.Tensor) -> bool:
    if t in _ANY_DTYPE:
        return True
    if t in _FLOAT_ONLY:
        return x.dtype.is_floating_point
    return x.dtype is not torch.bool


def reduce_dims(node: Node) -> Optional[tuple]:
    """The dims of its first input (sorted, non-negative) that row op ``node``
    reduces (or scans), or None when ``node`` is not a row op this module fuses."""
    if node.op != "call_function" or node.target not in _ROW_OPS or not node.args:
        return None
    x = _tensor(node.args[0])
    if x is None or x.dim() < 1 or not _dtype_ok(node.target, x):
        return None
    a = _bound(node)
    if a is None:
        return None
    t, rank = node.target, x.dim()
    if t in _WITH_DTYPE and a.get("dtype") is not None:
        if a["dtype"] not in FX_DTYPES or (t in SCANS | {aten.mean.dim, aten.mean.default}
                                           and not a["dtype"].is_floating_point):
            return None
    if t is aten._softmax_backward_data.default:
        if _tensor(a["output"]) is None or a["input_dtype"] != x.dtype:
            return None
        return _dims(a["dim"], rank)
    if t is aten._softmax.default or t is aten._log_softmax.default:
        if a["half_to_float"] and x.dtype not in (torch.float16, torch.bfloat16):
            return None
        return _dims(a["dim"], rank)
    if t is aten.native_layer_norm.default:
        k = len(a["normalized_shape"])
        if not 1 <= k <= rank or not isinstance(a["eps"], float) \
                or any(w is not None and _tensor(w) is None for w in (a["weight"], a["bias"])):
            return None
        return tuple(range(rank - k, rank))
    if t in (aten.var.correction, aten.std.correction):
        if not isinstance(a["correction"], (int, float, type(None))):
            return None
    if "dim" not in a:          # sum, mean, prod, any, all over every element
        return tuple(range(rank))
    return _dims(a["dim"], rank)


def row_input(node: Node) -> Optional[torch.Tensor]:
    """The reduced input's value (FakeTensor) if ``node`` is a row op this module
    fuses, else None."""
    return node.args[0].meta["val"] if reduce_dims(node) is not None else None


def is_scan(node: Node) -> bool:
    """Whether ``node`` is a fused scan (``cumsum``): a full result no op of its
    kernel may use (it is stored by the walk that computes it)."""
    return node.op == "call_function" and node.target in SCANS and reduce_dims(node) is not None


def reduction_count(node: Node) -> int:
    """How many block reductions (or scans) row op ``node`` takes per row (0 for other
    nodes)."""
    if reduce_dims(node) is None:
        return 0
    two = (aten.var.correction, aten.std.correction, aten._softmax.default,
           aten._log_softmax.default, aten.native_layer_norm.default, aten.logsumexp.default)
    return 2 if node.target in two else 1


class RowBuilder:
    """Collects the steps of a row kernel: ``full(expr, dtype)`` and ``row(expr,
    dtype)`` add a value (computed per element or once per row) and return its
    name; ``reduce(kind, full_var, dtype)`` adds a reduction (``sum``, ``prod``,
    ``max``, ``min``, ``argmax``, ``argmin``; ``fmax``: a max that skips NaNs, a
    softmax's shift) of a full value to a row value
    (``argmax``/``argmin`` give the index, Int64); ``scan(kind, full_var, dtype)``
    a scan (``sum``) to a full value. Values are held in their register dtype
    (float32 for half types)."""

    def __init__(self):
        self.steps: list = []      # (kind, var, expr or (reduction, source var), dtype)
        self.kinds: dict = {}      # var -> "full" or "row"

    def _add(self, kind: str, expr, dtype: torch.dtype) -> str:
        var = f"v{len(self.steps)}"
        self.steps.append((kind, var, expr, dtype))
        self.kinds[var] = "full" if kind in ("full", "scan") else "row"
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

    def scan(self, how: str, source: str, dtype: torch.dtype) -> str:
        return self._add("scan", (how, source), dtype)


def _rounded(b: RowBuilder, var: str, dtype: torch.dtype, operands: list) -> str:
    """``var`` rounded to a narrow result dtype (as eager stores it), else itself."""
    reg = register_dtype(dtype)
    if reg is dtype:
        return var
    return b.value(f"fx.cast(fx.cast({var}, {fx_dtype(dtype)}), {fx_dtype(reg)})", reg,
                   [var] + operands)


def _cast(b: RowBuilder, x: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Full value ``x`` (register of ``src``) in the register dtype of ``dst``."""
    reg = register_dtype(dst)
    return x if register_dtype(src) is reg else b.full(f"fx.cast({x}, {fx_dtype(reg)})", reg)


def expand_row_op(node: Node, b: RowBuilder, operand: Callable[[Any], str],
                  ncols: str) -> list:
    """Add the steps of row op ``node`` to ``b``; returns its result variables (one,
    or three for ``native_layer_norm``), each holding the result dtype's register.
    ``operand(arg)`` gives the variable of an input; ``ncols`` is the source text
    of the row length (the number of reduced elements per row)."""
    t = node.target
    a = _bound(node)
    x_dtype = node.args[0].meta["val"].dtype
    out = node.meta["val"]
    x = operand(node.args[0])
    if t in _ANY_DTYPE:           # any, all
        cond = f"({x} != 0)" if x_dtype is not torch.bool else x
        v = b.full(f"fx.cast({cond}, fx.Int32)", torch.int32)
        r = b.reduce("max" if t.overloadpacket is aten.any else "min", v, torch.int32)
        return [b.row(f"({r} != 0)", torch.bool)]
    if t in (aten.argmax.default, aten.argmin.default):
        return [b.reduce(t.overloadpacket.__name__, x, register_dtype(x_dtype))]
    # The accumulation dtype: the input's for these four, else the result's (int64 for
    # integer sums); float32 for halves.
    if t in (aten.var.correction, aten.std.correction, aten.native_layer_norm.default,
             aten.logsumexp.default):
        acc = register_dtype(x_dtype)
    else:
        acc = register_dtype(out[0].dtype if isinstance(out, (tuple, list)) else out.dtype)
    x = _cast(b, x, x_dtype, acc)
    n = f"fx.cast({ncols}, {fx_dtype(acc)})"

    def mean_of(v):
        s = b.reduce("sum", v, acc)
        return b.row(f"({s} / {n})", acc)

    if t is aten.cumsum.default:
        return [b.scan("sum", x, acc)]
    if t in (aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
             aten.amax.default, aten.amin.default, aten.prod.dim_int, aten.prod.default):
        how = {aten.amax: "max", aten.amin: "min", aten.prod: "prod"}.get(t.overloadpacket,
                                                                          "sum")
        r = b.reduce(how, x, acc)
        if t.overloadpacket is aten.mean:
            r = b.row(f"({r} / {n})", acc)
        return [_rounded(b, r, out.dtype, [])]
    if t in (aten.var.correction, aten.std.correction):
        c = a["correction"]
        c = 1.0 if c is None else float(c)
        m = mean_of(x)
        d = b.full(f"({x} - {m})", acc)
        s = b.reduce("sum", b.full(f"({d} * {d})", acc), acc)
        # eager divides by max(0, n - correction): 0/0 = nan, x/0 = inf
        r = b.row(f"({s} / fx.max({n} - {c!r}, 0.0))", acc)
        if t is aten.std.correction:
            r = b.row(f"fx.sqrt({r})", acc)
        return [_rounded(b, r, out.dtype, [])]
    # The shifts below are "fmax" (NaNs left out: a NaN makes the row's sum NaN,
    # as eager's) and their exps fm.exp(..., shifted=True) (y <= 0 where the sum is finite).
    if t is aten.logsumexp.default:    # eager's shift: the max, or 0 where it is +-inf
        m = b.reduce("fmax", x, acc)
        m = b.row(f"fx.select(fx.isinf({m}), 0.0, {m})", acc)
        s = b.reduce("sum", b.full(f"fm.exp({x} - {m}, shifted=True)", acc), acc)
        return [_rounded(b, b.row(f"(fx.log({s}) + {m})", acc), out.dtype, [])]
    if t in (aten._softmax.default, aten._log_softmax.default):
        m = b.reduce("fmax", x, acc)
        z = b.full(f"({x} - {m})", acc)
        e = b.full(f"fm.exp({z}, shifted=True)", acc)
        s = b.reduce("sum", e, acc)
        if t is aten._softmax.default:   # times 1/sum, as ATen's kernel: no division
            inv = b.row(f"(1.0 / {s})", acc)  # per element (16x the cost of a multiply)
            r = b.full(f"({e} * {inv})", acc)
        else:
            r = b.full(f"({z} - fx.log({s}))", acc)
        return [_rounded(b, r, out.dtype, [])]
    if t is aten._softmax_backward_data.default:
        y = operand(a["output"])
        s = b.reduce("sum", b.full(f"({x} * {y})", acc), acc)
        return [_rounded(b, b.full(f"({y} * ({x} - {s}))", acc), out.dtype, [])]
    if t is aten.native_layer_norm.default:
        w, bias, eps = a["weight"], a["bias"], a["eps"]
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


__all__ = ["RowBuilder", "SCANS", "expand_row_op", "is_scan", "reduce_dims", "reduction_count",
           "row_input"]
