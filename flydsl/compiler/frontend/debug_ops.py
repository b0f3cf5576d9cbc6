"""Implementations of the debugging ``flydsl.expr`` builtins: printf and assertions.

``fx.printf`` checks its format against its values while tracing and emits one
``gpu.printf`` whose operands are already promoted as C varargs are (``i32``,
``i64`` or ``f64``), with the length modifier each conversion needs written
into the format.  The backends lower that op: CUDA to ``vprintf``
(``convert-gpu-to-nvvm``), the CPU to ``fprintf`` into a per-block buffer
(:mod:`flydsl.passes._simt_printf`); ROCm rejects it (its device printf needs
the ROCm device libraries).

``fx.device_assert`` emits a ``cf.assert`` in debug mode only
(``CompileOptions.debug``, ``FLYDSL_DEBUG=1``): CUDA lowers it to
``__assertfail``, ROCm to ``llvm.trap`` (:mod:`flydsl.passes.rocdl`), the CPU to
a report the launch raises (:mod:`flydsl.passes._simt_bounds`).
``fx.static_assert`` runs while tracing.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import mlir.ir as ir
import numpy as np
from mlir.dialects import arith, cf, gpu

from ...errors import CompileTimeValueRequired, DSLError, DSLTypeError
from ...expr import dtypes as dt
from ...expr.dtypes import DType
from . import context
from .tensors import TensorValue
from .values import Value, as_value, cast

__all__ = ["printf", "device_assert", "static_assert"]

#: One C conversion after its ``%``: flags, width, precision, length, conversion.
_C_SPEC = re.compile(r"(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?"
                     r"(?P<length>hh|h|ll|l|j|z|t|L)?(?P<conv>.?)", re.S)
_INT_CONVERSIONS = "diouxXc"
_FLOAT_CONVERSIONS = "eEfFgGaA"
#: Brace formats: ``{{``, ``}}``, ``{}``, or a stray brace (an error).
_BRACE = re.compile(r"\{\{|\}\}|\{\}|\{|\}")


class _Conversion:
    """One ``%...`` conversion of a C format (everything but its length modifier)."""

    def __init__(self, text: str, flags: str, width: str, precision: Optional[str], conv: str):
        self.text = text            # as the user wrote it, for messages
        self.flags, self.width, self.precision, self.conv = flags, width, precision, conv

    def spec(self, length: str = "") -> str:
        precision = "" if self.precision is None else "." + self.precision
        return f"%{self.flags}{self.width}{precision}{length}{self.conv}"


# -- printf ---------------------------------------------------------------------

def printf(fmt: str, *values: Any) -> None:
    """Emit a ``gpu.printf`` of ``values`` under ``fmt`` (C conversions or ``{}``)."""
    context.current()
    if not isinstance(fmt, str):
        raise DSLTypeError(f"fx.printf needs a format string (a Python str) first, "
                           f"got {_describe(fmt)}")
    if "\0" in fmt:
        raise DSLTypeError("fx.printf format must not contain NUL characters")
    pieces = _parse_braces(fmt) if _is_brace_format(fmt) else _parse_c(fmt)
    conversions = [p for p in pieces if isinstance(p, _Conversion)]
    if len(conversions) != len(values):
        raise DSLTypeError(
            f"fx.printf format {fmt!r} has {len(conversions)} "
            f"{'conversion' if len(conversions) == 1 else 'conversions'} but "
            f"{len(values)} {'value was' if len(values) == 1 else 'values were'} given")
    text, operands = [], []
    it = iter(enumerate(values, 1))
    for piece in pieces:
        if isinstance(piece, str):
            text.append(piece)
            continue
        position, value = next(it)
        spec, operand = _convert(piece, value, position)
        text.append(spec)
        if operand is not None:
            operands.append(operand)
    gpu.printf("".join(text), *operands)


def _is_brace_format(fmt: str) -> bool:
    """``{}`` placeholders make a brace format (its ``%`` are text); else a C format."""
    return "{}" in fmt.replace("{{", "").replace("}}", "")


def _parse_c(fmt: str) -> list:
    """Literal text (with ``%%`` kept) and :class:`_Conversion` pieces of a C format."""
    pieces, pos = [], 0
    while True:
        at = fmt.find("%", pos)
        if at < 0:
            pieces.append(fmt[pos:])
            return pieces
        pieces.append(fmt[pos:at])
        if fmt.startswith("%%", at):
            pieces.append("%%")
            pos = at + 2
            continue
        m = _C_SPEC.match(fmt, at + 1)
        text = fmt[at:m.end()]
        conv = m.group("conv")
        if not conv or conv not in _INT_CONVERSIONS + _FLOAT_CONVERSIONS + "s":
            what = f"conversion {text!r}" if conv else f"a '%' at the end ({text!r})"
            raise DSLTypeError(
                f"fx.printf format {fmt!r}: {what} is not supported; use %d %i %u %x %X "
                "%o %c for integers, %f %e %g %a for floats, %s for a Python str, and %% "
                "for a percent sign")
        if "*" in (m.group("width") or "") + (m.group("precision") or ""):
            raise DSLTypeError(f"fx.printf format {fmt!r}: '*' widths and precisions in "
                               f"{text!r} are not supported; write the number into the format")
        pieces.append(_Conversion(text, m.group("flags"), m.group("width") or "",
                                  m.group("precision"), conv))
        pos = m.end()


def _parse_braces(fmt: str) -> list:
    """Pieces of a brace format: ``{}`` become conversions chosen by the value later."""
    pieces, pos = [], 0
    for m in _BRACE.finditer(fmt):
        pieces.append(fmt[pos:m.start()].replace("%", "%%"))
        token = m.group()
        if token == "{}":
            pieces.append(_Conversion("{}", "", "", None, ""))
        elif token in ("{{", "}}"):
            pieces.append(token[0])
        else:
            raise DSLTypeError(
                f"fx.printf format {fmt!r}: a single {token!r} at offset {m.start()}; "
                "placeholders are written {} (no names or format specs: use a C format "
                "such as '%.3f' for those), and literal braces {{ and }}")
        pos = m.end()
    pieces.append(fmt[pos:].replace("%", "%%"))
    return pieces


def _convert(conv: _Conversion, value: Any, position: int) -> tuple[str, Optional[ir.Value]]:
    """The format text and the vararg operand (None: text only) of one conversion."""
    if isinstance(value, (str, DType)):     # compile-time text, embedded in the format
        if conv.conv not in ("", "s"):
            raise _mismatch(conv, value, position)
        text = value if isinstance(value, str) else value.name
        if conv.conv == "s":
            text = conv.spec() % text       # Python's %s takes C's flags, width, precision
        return text.replace("%", "%%"), None
    if _is_float(conv.conv) and type(value) is int:
        value = float(value)                # a Python int literal printed as a float
    v = _printable_value(value, position)
    kind = "float" if v.dtype.kind == "float" else "int"
    if conv.conv == "":                     # {}: the dtype picks the conversion
        conv = _Conversion("{}", "", "", None, "f" if kind == "float" else
                           ("d" if v.dtype.signed or v.dtype.kind == "bool" else "u"))
    elif conv.conv == "s" or _is_float(conv.conv) != (kind == "float"):
        raise _mismatch(conv, value, position)
    if kind == "float":
        return conv.spec(), cast(v, dt.Float64).v
    operand, wide = _int_vararg(v, conv.conv == "c")
    return conv.spec("ll" if wide else ""), operand


def _is_float(conv: str) -> bool:
    """A float conversion letter (``""``, from ``{}``, is neither: the dtype picks)."""
    return conv != "" and conv in _FLOAT_CONVERSIONS


def _printable_value(value: Any, position: int) -> Value:
    """``value`` as a kernel value; Python and numpy numbers become constants."""
    if isinstance(value, TensorValue):
        raise DSLTypeError(f"fx.printf argument {position} is a tensor; print its elements "
                           "(t[i]) instead")
    if isinstance(value, np.generic):
        value = value.item()                # numpy scalars: Python numbers
    if isinstance(value, float):
        return as_value(value, dt.Float64)
    try:
        return as_value(value)
    except DSLTypeError:
        raise DSLTypeError(f"fx.printf argument {position} cannot be printed: "
                           f"{_describe(value)} (print numbers, kernel values or str)") from None


def _int_vararg(v: Value, char: bool) -> tuple[ir.Value, bool]:
    """An integer as C varargs pass it: at least 32 bits, sign- or zero-extended by its
    dtype; returns (operand, whether it is 64-bit). ``%c`` always takes an int."""
    i32 = ir.IntegerType.get_signless(32)
    if v.dtype.bits < 32:
        extend = arith.extsi if v.dtype.kind == "int" and v.dtype.signed else arith.extui
        return extend(i32, v.v), False
    if v.dtype.bits > 32 and char:
        return arith.trunci(i32, v.v), False
    return v.v, v.dtype.bits > 32


def _mismatch(conv: _Conversion, value: Any, position: int) -> DSLTypeError:
    if conv.conv == "s":
        wanted = "a Python str"
    elif _is_float(conv.conv):
        wanted = "a float (convert with fx.Float32(x))"
    else:
        wanted = "an integer (convert with fx.Int32(x))"
    return DSLTypeError(f"fx.printf argument {position} ({_describe(value)}) does not match "
                        f"the conversion {conv.text!r}, which prints {wanted}")


def _describe(value: Any) -> str:
    """How messages name a printf argument: 'an Int32 value', 'the str 'ab'', ..."""
    if isinstance(value, Value):
        name = value.dtype.name
        return f"{'an' if name[0] in 'AEIOUaeiou' else 'a'} {name} value"
    if isinstance(value, TensorValue):
        return "a tensor"
    if isinstance(value, DType):
        return f"the type {value!r}"
    return f"the {type(value).__name__} {value!r}"


# -- assertions -----------------------------------------------------------------

def device_assert(cond: Any, msg: str = "") -> None:
    """In debug mode, a ``cf.assert`` that ``cond`` holds in every thread; else nothing."""
    ctx = context.current()
    _check_message("fx.device_assert", msg)
    if isinstance(cond, TensorValue):
        raise DSLTypeError("fx.device_assert needs a condition (a Bool value or a compile-time "
                           "bool), not a tensor")
    if not getattr(ctx.options, "debug", False):
        return
    if not isinstance(cond, Value):
        if not cond:
            raise DSLError("fx.device_assert failed while compiling: the condition is "
                           "False at compile time" + (f": {msg}" if msg else ""))
        return
    ok = cast(cond, dt.Bool) if cond.dtype.kind != "bool" else cond
    op = cf.assert_(ok.v, msg or "fx.device_assert failed")
    if not msg:     # CUDA's report quotes the message: let it quote the source line
        from ...passes._simt_ir import source_location
        source = source_location(op)[2].strip()
        if source:
            op.attributes["msg"] = ir.StringAttr.get(source)


def static_assert(cond: Any, msg: str = "") -> None:
    """Check a compile-time condition while tracing; a located error if it is False."""
    context.current()
    _check_message("fx.static_assert", msg)
    if isinstance(cond, (Value, TensorValue)):
        what = "a tensor" if isinstance(cond, TensorValue) else _describe(cond)
        raise CompileTimeValueRequired(
            f"fx.static_assert needs a compile-time condition (Python values, fx.Constexpr "
            f"parameters, fx.warp_size()), got {what}; use fx.device_assert to check "
            "values while the kernel runs")
    if not cond:
        raise DSLError("fx.static_assert failed" + (f": {msg}" if msg else ""))


def _check_message(fname: str, msg: Any) -> None:
    if not isinstance(msg, str):
        raise DSLTypeError(f"{fname} message must be a Python str, got {_describe(msg)}")
