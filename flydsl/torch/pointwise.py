"""The pointwise ATen ops the ``flydsl`` torch.compile backend fuses, and their DSL spelling.

Which ops qualify, and how their arguments are laid out, comes from torch's
own operator schemas: an ``OpOverload`` is fusible when it carries
``torch.Tag.pointwise``, is functional (no mutated or aliased argument, one
``Tensor`` result) and every argument is a ``Tensor``, a number (``Scalar``,
``int``, ``float``, optional or not) or a plain constant (``str``, ``bool``,
``ScalarType``, ``MemoryFormat``, ...). The only hand-written part is
:data:`EMITTERS`: per op *base name* (``add`` covers ``add.Tensor`` and
``add.Scalar``), a function that spells the math as a DSL expression.

An emitter receives an :class:`EmitContext` and the op's arguments by schema
name: tensor operands as expression strings (already converted to the
compute dtype: a float result's own, else the operands' common dtype as
torch promotes them, see :func:`common_dtype`), numbers as :class:`Lit` (a
``str`` holding the literal, with ``.value``; converted to that common dtype
for non-float results) or an expression for a runtime scalar, constants as
their Python values. It returns the expression text, or ``None`` when it cannot express
that particular call (which then stays in eager mode).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

#: torch dtype -> flydsl dtype name, for every dtype a fused kernel handles.
FX_DTYPES = {
    torch.bool: "Bool", torch.int8: "Int8", torch.int16: "Int16", torch.int32: "Int32",
    torch.int64: "Int64", torch.float16: "Float16", torch.bfloat16: "BFloat16",
    torch.float32: "Float32", torch.float64: "Float64",
}
#: Narrow floats are computed in float32 and rounded after every op, as eager does.
_OPMATH = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def fx_dtype(dtype: torch.dtype) -> str:
    """``fx.<Name>`` source text for a torch dtype."""
    return "fx." + FX_DTYPES[dtype]


def register_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel holds a value of ``dtype`` in (float32 for float16/bfloat16)."""
    return _OPMATH.get(dtype, dtype)


class Lit(str):
    """A number argument: its source literal (``str``) and its Python ``value``."""

    value: Any

    def __new__(cls, value: Any) -> "Lit":
        if isinstance(value, bool):
            text = repr(value)
        elif isinstance(value, float) and not math.isfinite(value):
            text = f"float({str(value)!r})"
        elif isinstance(value, (int, float)):
            text = repr(value) if value >= 0 else f"({value!r})"
        else:
            raise TypeError(f"not a number literal: {value!r}")
        self = super().__new__(cls, text)
        self.value = value
        return self


@dataclass(frozen=True)
class EmitContext:
    """What an emitter may need besides its operands."""

    dtype: Optional[torch.dtype]   # compute dtype of a float result, None for int/bool results
    out_dtype: torch.dtype         # the op's result dtype
    operands: Optional[torch.dtype] = None   # the dtype the operands were converted to

    @property
    def float_operands(self) -> bool:
        """Whether the operands are floats (``isnan`` of an int is False, ...)."""
        return self.operands is not None and self.operands.is_floating_point


def _is(x, value) -> bool:
    return isinstance(x, Lit) and x.value == value


def _scaled(x: str, alpha) -> str:
    return x if alpha is None or _is(alpha, 1) else f"({x} * {alpha})"


def _binary(sym: str) -> Callable[..., str]:
    return lambda c, self, other: f"({self} {sym} {other})"


def _unary(fn: str) -> Callable[..., str]:
    return lambda c, self: f"{fn}({self})"


def _float_only(fn: str) -> Callable[..., Optional[str]]:
    """Rounding functions: the identity on integers (as in torch)."""
    return lambda c, self: f"{fn}({self})" if c.dtype is not None else self


def _div(c: EmitContext, self, other, rounding_mode=None) -> Optional[str]:
    if rounding_mode is None:
        return f"({self} / {other})"
    if c.dtype is None:             # integer division may trap on 0
        return None
    if rounding_mode == "floor":
        return f"({self} // {other})"
    return f"fx.trunc({self} / {other})" if rounding_mode == "trunc" else None


def _clamp(c: EmitContext, self, min=None, max=None) -> str:
    out = self
    if min is not None:
        out = f"fx.max({out}, {min})"
    if max is not None:
        out = f"fx.min({out}, {max})"
    return out


def _pow(c: EmitContext, self, exponent) -> Optional[str]:
    if not isinstance(exponent, Lit):
        return None
    e = exponent.value
    if isinstance(e, bool) or (c.dtype is None and (not isinstance(e, int) or not 0 <= e <= 16)):
        return None    # integer powers are exact only as repeated products
    if e == 0.5:
        return f"fx.sqrt({self})"
    if isinstance(e, float) and e.is_integer() and 0 <= e <= 16:
        exponent = Lit(int(e))
    return f"({self} ** {exponent})"


def _transcendental(fn: str) -> Callable[..., Optional[str]]:
    def emit(c: EmitContext, self, **const) -> Optional[str]:
        extra = "".join(f", {v!r}" for v in const.values())
        return f"{fn}({self}{extra})"
    return emit


def _float_math(fn: str) -> Callable[..., str]:
    """An ``fx`` math function of any arity (ints are promoted to the float result)."""
    return lambda c, **args: f"{fn}({', '.join(args.values())})"


def _float_test(fn: str, on_ints: str) -> Callable[..., str]:
    """A float predicate (``fx.isnan``, ...): the constant ``on_ints`` for ints and bools."""
    return lambda c, self: f"{fn}({self})" if c.float_operands else on_ints


def _signbit(c: EmitContext, self) -> str:
    if c.float_operands:      # the sign bit of -0.0 and of NaNs too
        return f"(fx.copysign(1.0, {self}) < 0)"
    return "False" if c.operands is torch.bool else f"({self} < 0)"


def _sign(c: EmitContext, self) -> str:
    if c.operands is torch.bool:
        return self
    return f"(fx.select({self} > 0, 1, 0) - fx.select({self} < 0, 1, 0))"


def _round(c: EmitContext, self, decimals=None) -> Optional[str]:
    if c.dtype is None:
        return self
    d = 0 if decimals is None else decimals.value
    if d == 0:
        return f"fx.rint({self})"
    scale = Lit(10.0 ** abs(d))      # as torch: scaled, rounded to even, scaled back
    if d > 0:
        return f"(fx.rint({self} * {scale}) / {scale})"
    return f"(fx.rint({self} / {scale}) * {scale})"


def _nan_ignoring(fn: str) -> Callable[..., str]:
    """``fmax``/``fmin``: a NaN operand gives the other one."""
    def emit(c: EmitContext, self, other) -> str:
        if c.dtype is None:
            return f"{fn}({self}, {other})"
        return (f"fx.select(fx.isnan({self}), {other}, fx.select(fx.isnan({other}), "
                f"{self}, {fn}({self}, {other})))")
    return emit


def _remainder(c: EmitContext, self, other) -> Optional[str]:
    """Python's ``%`` for floats, as torch computes it: fmod, moved to ``other``'s sign."""
    if c.dtype is None:
        return None      # integer division by zero traps; eager raises
    mod = f"fx.fmod({self}, {other})"
    return (f"fx.select(({mod} != 0) & (({other} < 0) != ({mod} < 0)), "
            f"{mod} + {other}, {mod})")


def _int_only(sym: str) -> Callable[..., Optional[str]]:
    """A bitwise operator: integers and bools only, as in torch."""
    return lambda c, self, other: None if c.dtype is not None else f"({self} {sym} {other})"


def _bitwise_not(c: EmitContext, self) -> Optional[str]:
    if c.dtype is not None:
        return None
    return f"({self} ^ True)" if c.operands is torch.bool else f"(-1 - {self})"


def _shift(left: bool) -> Callable[..., Optional[str]]:
    """Shifts by a count outside [0, bits) give 0 (left) or the sign fill (right), as in torch."""
    def emit(c: EmitContext, self, other) -> Optional[str]:
        if c.operands is None or c.operands.is_floating_point or c.operands is torch.bool:
            return None
        bits = c.operands.itemsize * 8
        ok = f"(({other} >= 0) & ({other} < {bits}))"
        if left:
            return f"fx.select({ok}, {self} << fx.select({ok}, {other}, 0), 0)"
        return f"({self} >> fx.select({ok}, {other}, {bits - 1}))"
    return emit


def _angle(c: EmitContext, self) -> str:
    return f"fx.select(fx.isnan({self}), {self}, fx.select({self} < 0, {math.pi!r}, 0.0))"


def _pow_any(c: EmitContext, self, exponent) -> Optional[str]:
    """``pow``: exact products for small integer literals, ``fx.pow`` for floats."""
    out = _pow(c, self, exponent)
    if out is None and c.dtype is not None:
        return f"fx.pow({self}, {exponent})"
    return out


def _via_float64(fn: str) -> Callable[..., Optional[str]]:
    """A :mod:`flydsl.torch._math` function computed in Float64 for Float32 (and
    narrower) results; Float64 results would need more: they stay eager."""
    def emit(c: EmitContext, **args) -> Optional[str]:      # one operand: self or x
        (x,) = args.values()
        return f"{fn}({x})" if c.dtype is torch.float32 else None
    return emit


def _in_result_dtype(fn: str) -> Callable[..., Optional[str]]:
    """A :mod:`flydsl.torch._math` function computed step by step in the result dtype,
    as torch's CPU kernel does (Float32 and Float64 results; torch has no narrower one)."""
    def emit(c: EmitContext, **args) -> Optional[str]:
        if c.dtype not in (torch.float32, torch.float64):
            return None
        return f"{fn}({', '.join(args.values())}, {fx_dtype(c.dtype)})"
    return emit


#: torch.special's orthogonal polynomials (x, n) -> their fx spelling (flydsl.torch._math).
_POLYNOMIALS = {
    "chebyshev_polynomial_t": "chebyshev_t", "chebyshev_polynomial_u": "chebyshev_u",
    "chebyshev_polynomial_v": "chebyshev_v", "chebyshev_polynomial_w": "chebyshev_w",
    "shifted_chebyshev_polynomial_t": "shifted_chebyshev_t",
    "shifted_chebyshev_polynomial_u": "shifted_chebyshev_u",
    "shifted_chebyshev_polynomial_v": "shifted_chebyshev_v",
    "shifted_chebyshev_polynomial_w": "shifted_chebyshev_w",
    "hermite_polynomial_h": "hermite_h", "hermite_polynomial_he": "hermite_he",
    "laguerre_polynomial_l": "laguerre_l", "legendre_polynomial_p": "legendre_p",
}


def _integer_math(fn: str) -> Callable[..., Optional[str]]:
    """gcd/lcm: signed integer operands only, as in torch."""
    def emit(c: EmitContext, self, other) -> Optional[str]:
        if c.dtype is not None or c.operands in (None, torch.bool) \
                or c.operands.is_floating_point:
            return None
        return f"{fn}({self}, {other})"
    return emit


def _nextafter(c: EmitContext, self, other) -> Optional[str]:
    if c.dtype not in (torch.float32, torch.float64) or c.out_dtype is not c.dtype:
        return None       # a half's neighbour is not a float32's
    if isinstance(self, Lit) or isinstance(other, Lit):
        return None
    return f"fm.nextafter({self}, {other})"


#: Base op name -> DSL expression emitter (see the module docstring).
EMITTERS: dict[str, Callable[..., Optional[str]]] = {
    "add": lambda c, self, other, alpha=None: f"({self} + {_scaled(other, alpha)})",
    "sub": lambda c, self, other, alpha=None: f"({self} - {_scaled(other, alpha)})",
    "rsub": lambda c, self, other, alpha=None: f"({other} - {_scaled(self, alpha)})",
    "mul": _binary("*"),
    "div": _div,
    "neg": lambda c, self: f"(-{self})",
    "reciprocal": lambda c, self: f"(1 / {self})",
    "abs": _unary("fx.abs"),
    "exp": _unary("fm.exp"),
    "log": _unary("fx.log"),
    "sqrt": _unary("fx.sqrt"),
    "rsqrt": _unary("fx.rsqrt"),
    "sin": _unary("fx.sin"),
    "cos": _unary("fx.cos"),
    "tanh": _unary("fm.tanh"),
    "sigmoid": _unary("fm.sigmoid"),
    "erf": _transcendental("fm.erf"),
    "gelu": _transcendental("fm.gelu"),
    "floor": _float_only("fx.floor"),
    "ceil": _float_only("fx.ceil"),
    "relu": lambda c, self: f"fx.max({self}, 0)",
    "maximum": lambda c, self, other: f"fx.max({self}, {other})",
    "minimum": lambda c, self, other: f"fx.min({self}, {other})",
    "clamp": _clamp,
    "clamp_min": lambda c, self, min: f"fx.max({self}, {min})",
    "clamp_max": lambda c, self, max: f"fx.min({self}, {max})",
    "pow": _pow_any,
    "where": lambda c, condition, self, other: f"fx.select({condition}, {self}, {other})",
    "lt": _binary("<"), "le": _binary("<="), "gt": _binary(">"), "ge": _binary(">="),
    "eq": _binary("=="), "ne": _binary("!="),
    "logical_not": lambda c, self: f"(fx.cast({self}, fx.Bool) ^ True)",
    "logical_and": lambda c, self, other: f"(fx.cast({self}, fx.Bool) & fx.cast({other}, fx.Bool))",
    "logical_or": lambda c, self, other: f"(fx.cast({self}, fx.Bool) | fx.cast({other}, fx.Bool))",
    "tan": _float_math("fx.tan"), "asin": _float_math("fx.asin"),
    "acos": _float_math("fx.acos"), "atan": _float_math("fx.atan"),
    "atan2": _float_math("fx.atan2"), "sinh": _float_math("fx.sinh"),
    "cosh": _float_math("fx.cosh"), "asinh": _float_math("fx.asinh"),
    "acosh": _float_math("fx.acosh"), "atanh": _float_math("fx.atanh"),
    "exp2": _float_math("fx.exp2"), "expm1": _float_math("fx.expm1"),
    "log2": _float_math("fx.log2"), "log10": _float_math("fx.log10"),
    "log1p": _float_math("fx.log1p"), "erfc": _float_math("fx.erfc"),
    "hypot": _float_math("fx.hypot"), "copysign": _float_math("fx.copysign"),
    "fmod": lambda c, self, other: f"fx.fmod({self}, {other})" if c.dtype is not None else None,
    "remainder": _remainder,
    "trunc": _float_only("fx.trunc"),
    "round": _round,
    "sign": _sign,
    "signbit": _signbit,
    "isnan": _float_test("fx.isnan", "False"),
    "isinf": _float_test("fx.isinf", "False"),
    "isfinite": _float_test("fx.isfinite", "True"),
    "angle": _angle,
    "lgamma": _via_float64("fm.lgamma"), "digamma": _via_float64("fm.digamma"),
    "erfinv": _via_float64("fm.erfinv"),
    "i0": _via_float64("fm.i0"), "special_i0e": _via_float64("fm.i0e"),
    "special_i1": _via_float64("fm.i1"), "special_i1e": _via_float64("fm.i1e"),
    "special_modified_bessel_i0": _via_float64("fm.i0"),
    "special_modified_bessel_i1": _via_float64("fm.i1"),
    "special_erfcx": _via_float64("fm.erfcx"), "erfcx": _via_float64("fm.erfcx"),
    "special_spherical_bessel_j0": _via_float64("fm.spherical_bessel_j0"),
    "spherical_bessel_j0": _via_float64("fm.spherical_bessel_j0"),
    "fmax": _nan_ignoring("fx.max"), "fmin": _nan_ignoring("fx.min"),
    "bitwise_and": _int_only("&"), "bitwise_or": _int_only("|"),
    "bitwise_xor": _int_only("^"), "bitwise_not": _bitwise_not,
    "__lshift__": _shift(True), "__rshift__": _shift(False),
    "bitwise_left_shift": _shift(True), "bitwise_right_shift": _shift(False),
    "logical_xor": lambda c, self, other: f"(fx.cast({self}, fx.Bool) ^ fx.cast({other}, fx.Bool))",
    **{f"special_{op}": _in_result_dtype(f"fm.{fn}") for op, fn in _POLYNOMIALS.items()},
    **{f"special_{fn}": _in_result_dtype(f"fm.{fn}") for fn in (
        "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
        "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
        "ndtri", "zeta")},
    "gcd": _integer_math("fm.gcd"), "lcm": _integer_math("fm.lcm"),
    "nextafter": _nextafter,
    "float_power": lambda c, self, exponent: f"fx.pow({self}, {exponent})",
    # a real tensor's conjugate is itself (complex tensors never fuse)
    "conj_physical": lambda c, self: self, "_conj_physical": lambda c, self: self,
    # Casts: the conversion to the result dtype is what every op ends with.
    "convert_element_type": lambda c, a, dtype: a,
    "clone": lambda c, self, memory_format=None: self,
}


# -- the schema-derived op table ----------------------------------------------

@dataclass(frozen=True)
class ArgSpec:
    """One schema argument: ``kind`` is "tensor", "number" or "const"."""

    name: str
    kind: str
    default: Any
    has_default: bool


@dataclass(frozen=True)
class PointwiseOp:
    """A fusible OpOverload: its schema-derived arguments and its emitter."""

    op: Any                       # torch._ops.OpOverload
    base: str
    args: tuple
    emit: Callable[..., Optional[str]]

    def bind(self, args: tuple, kwargs: dict) -> Optional[dict]:
        """Map an FX call's args/kwargs to schema names (defaults filled); None if unbindable."""
        if len(args) > len(self.args):
            return None
        out = {}
        for i, spec in enumerate(self.args):
            if i < len(args):
                out[spec.name] = args[i]
            elif spec.name in kwargs:
                out[spec.name] = kwargs[spec.name]
            elif spec.has_default:
                out[spec.name] = spec.default
            else:
                return None
        if set(kwargs) - set(out):
            return None
        return out


def _arg_kind(jit_type) -> Optional[str]:
    kind = jit_type.kind()
    if kind == "OptionalType":
        return _arg_kind(jit_type.getElementType())   # None: left out of the call
    if kind == "TensorType":
        return "tensor"
    if kind in ("NumberType", "IntType", "FloatType", "SymIntType", "SymFloatType"):
        return "number"
    if kind in ("StringType", "BoolType", "ScalarTypeType", "MemoryFormatType",
                "LayoutType", "DeviceObjType"):
        return "const"
    return None


#: prims ops (most untagged, met in torch._refs decompositions) whose ATen namesake's
#: emitter would be wrong for them: prims.div truncates integers.
_PRIMS_DIFFER = frozenset({"div"})


def describe(op) -> Optional[PointwiseOp]:
    """The table entry for ``op``, or None if it is not a fusible pointwise op."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    namespace, base = schema.name.split("::")
    if torch.Tag.pointwise not in op.tags and not (
            namespace == "prims" and base in EMITTERS and base not in _PRIMS_DIFFER):
        return None
    emit = EMITTERS.get(base)
    if emit is None or schema.is_mutable or len(schema.returns) != 1:
        return None
    ret = schema.returns[0]
    if ret.type.kind() != "TensorType" or ret.alias_info is not None:
        return None
    specs = []
    for a in schema.arguments:
        kind = _arg_kind(a.type)
        if kind is None or a.alias_info is not None:
            return None
        # ScalarType defaults are ints in the schema; they are never used here.
        specs.append(ArgSpec(a.name, kind, a.default_value if a.has_default_value() else None,
                             a.has_default_value()))
    if not any(s.kind == "tensor" for s in specs):
        return None
    return PointwiseOp(op, base, tuple(specs), emit)


_describe_cached = functools.lru_cache(maxsize=None)(describe)


def lookup(op) -> Optional[PointwiseOp]:
    """Cached :func:`describe` (OpOverloads are hashable singletons)."""
    try:
        return _describe_cached(op)
    except TypeError:      # unhashable target
        return None


@functools.lru_cache(maxsize=None)
def pointwise_ops() -> dict:
    """Every fusible OpOverload of ``aten`` and ``prims``, derived from the schemas."""
    table = {}
    for ns in (torch.ops.aten, torch.ops.prims):
        for base in EMITTERS:
            try:
                packet = getattr(ns, base)
            except (AttributeError, RuntimeError):
                continue
            for name in packet.overloads():
                entry = lookup(getattr(packet, name))
                if entry is not None:
                    table[entry.op] = entry
    return table


@functools.lru_cache(maxsize=None)
def decompositions() -> dict:
    """The decompositions AOTAutograd applies for the backend: only ``_to_copy``
    (casts become ``prims.convert_element_type``, a pointwise op, and cost the
    same when left eager). Other ops keep their ATen call unless the backend
    fuses their pieces, see :func:`inline_decompositions`."""
    from torch._decomp import get_decompositions
    return dict(get_decompositions([torch.ops.aten._to_copy]))


@functools.lru_cache(maxsize=None)
def inline_decompositions() -> dict:
    """Functional pointwise ops with no emitter but a decomposition in torch's tables
    (``torch._decomp.decomposition_table``, which holds the core-ATen ones and
    the ``torch._refs`` definitions: ``silu``, ``addcmul``, ``lerp``, ``logaddexp``,
    ``hardtanh``, ``xlogy``, ...): the backend inlines one, decomposing
    recursively, where all the pieces land in a fused kernel
    (:func:`flydsl.torch.rewrites.inline_decomposition`)."""
    from torch._decomp import core_aten_decompositions, decomposition_table
    table = {}
    for source in (decomposition_table, core_aten_decompositions()):
        for op, fn in source.items():
            if isinstance(op, torch._ops.OpOverload) and _decomposable(op):
                table.setdefault(op, fn)
    return table


def _decomposable(op) -> bool:
    """Whether ``op`` is a functional pointwise op with no emitter."""
    if torch.Tag.pointwise not in op.tags:
        return False
    schema = op._schema
    if schema.is_mutable or schema.name.split("::")[-1] in EMITTERS:
        return False
    return len(schema.returns) == 1 and schema.returns[0].alias_info is None


# -- emitting one call ----------------------------------------------------------

_CONSTANT_TYPES = (str, bool, type(None), torch.dtype, torch.memory_format, torch.layout,
                   torch.device)


def _convert(text: str, src: torch.dtype, dst: torch.dtype) -> str:
    """``text`` (the register of a ``src`` value) converted to the register of a ``dst``
    value, as torch casts: a narrow ``dst`` is rounded to it, and from anything but
    float32 through float32 first (c10::Half/BFloat16 convert from float, so torch
    rounds float64 and int64 twice)."""
    if src == dst:
        return text     # already in its register
    if register_dtype(dst) is dst:
        return f"fx.cast({text}, {fx_dtype(dst)})"
    if register_dtype(src) is not torch.float32:
        text = f"fx.cast({text}, fx.Float32)"
    return f"fx.cast(fx.cast({text}, {fx_dtype(dst)}), fx.Float32)"


def _literal(value, dtype: torch.dtype) -> Optional[Lit]:
    """A Python number converted to ``dtype`` the way torch converts a wrapped scalar
    (narrow floats rounded, out-of-range integers wrapped), or None if torch cannot."""
    src = torch.bool if isinstance(value, bool) else \
        torch.int64 if isinstance(value, int) else torch.float64
    try:
        return Lit(torch.tensor(value, dtype=src).to(dtype).item())
    except (RuntimeError, OverflowError, TypeError):
        return None


#: The torch dtype of a runtime scalar (a kernel parameter of the matching flydsl dtype).
_SCALAR_DTYPES = {torch.SymInt: torch.int64, torch.SymFloat: torch.float64,
                  torch.SymBool: torch.bool, int: torch.int64, float: torch.float64,
                  bool: torch.bool}
_SCALAR_SAMPLES = {torch.int64: 0, torch.float64: 0.0, torch.bool: False}


#: Ops whose eager kernels wrap an out-of-range integer scalar into the integer
#: computation dtype (``int8_tensor > 200`` compares with -56); the others (clamp,
#: where, ...) raise, so such calls stay eager.
_WRAPS_SCALARS = frozenset({"add", "sub", "rsub", "mul", "lt", "le", "gt", "ge", "eq", "ne"})


def _promoted(entry: PointwiseOp, name: str) -> bool:
    """Whether argument ``name`` takes part in the op's type promotion (all numbers and
    tensors but ``alpha`` and where's ``condition``)."""
    return name != "alpha" and not (entry.base == "where" and name == "condition")


def _node_dtype(node: torch.fx.Node) -> Optional[torch.dtype]:
    """dtype of an FX value: a tensor's, or the parameter dtype of a runtime scalar."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return val.dtype
    return _SCALAR_DTYPES.get(type(val))


def common_dtype(entry: PointwiseOp, bound: dict) -> Optional[torch.dtype]:
    """The dtype torch converts the promoted operands of a call to before computing
    (``torch.result_type`` rules: a 0-d tensor or a number only raises the category)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
    parts = []
    for spec in entry.args:
        value = bound[spec.name]
        if spec.kind == "const" or not _promoted(entry, spec.name) or value is None:
            continue
        if isinstance(value, torch.fx.Node):
            val = value.meta.get("val")
            if not isinstance(val, torch.Tensor):
                dtype = _SCALAR_DTYPES.get(type(val))
                if dtype is None:
                    return None
                val = _SCALAR_SAMPLES[dtype]
            parts.append(val)
        elif isinstance(value, (bool, int, float)):
            parts.append(value)
        else:
            return None
    if not parts:
        return None
    try:
        return elementwise_dtypes(
            *parts, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    except Exception:  # noqa: BLE001 - a combination torch rejects: not fusible
        return None


def result_text(expr: str, out: torch.dtype) -> str:
    """``expr`` converted to the register of an ``out`` result (rounded for narrow floats)."""
    reg = register_dtype(out)
    if reg is out:
        return f"fx.cast({expr}, {fx_dtype(out)})"
    return f"fx.cast(fx.cast({expr}, {fx_dtype(out)}), {fx_dtype(reg)})"


def emit_call(entry: PointwiseOp, bound: dict, out_dtype: torch.dtype,
              operand: Callable[[Any], tuple]) -> Optional[str]:
    """The DSL expression computing one op (with its result conversion), or None.

    ``bound``: the call's arguments by schema name (:meth:`PointwiseOp.bind`);
    ``operand(node)`` gives (text, torch dtype) of a tensor operand's register,
    or (text, None) for a runtime scalar (a symbolic int/float/bool).
    """
    is_float = out_dtype.is_floating_point
    # The dtype the operands are converted to: a float result is computed in its own
    # (op-math) dtype; otherwise (comparisons, logical ops, integer math) torch converts
    # the operands to their common dtype, e.g. a half tensor compared with 0.1 compares
    # halves, and a float32 one with a float64 scalar compares float32 values.
    comp = out_dtype if is_float else common_dtype(entry, bound)
    if comp is None or comp not in FX_DTYPES:
        return None
    ctx = EmitContext(register_dtype(out_dtype) if is_float else None, out_dtype, comp)
    kwargs = {}
    for spec in entry.args:
        value = bound[spec.name]
        promoted = _promoted(entry, spec.name)
        if isinstance(value, torch.fx.Node):
            if spec.kind == "const":
                return None
            text, dtype = operand(value)
            if dtype is None:           # runtime scalar, also in a Tensor slot ("wrapped")
                if is_float:            # used unrounded in op-math, like eager's scalars
                    kwargs[spec.name] = f"fx.cast({text}, {fx_dtype(ctx.dtype)})"
                elif promoted:
                    src = _node_dtype(value)
                    if src is None:
                        return None
                    kwargs[spec.name] = _convert(text, src, comp)
                else:
                    kwargs[spec.name] = text
            elif spec.kind == "tensor":
                kwargs[spec.name] = _convert(text, dtype, comp) if promoted else text
            else:
                return None
        elif spec.kind in ("tensor", "number") and isinstance(value, (int, float)):
            # also a Python number in a Tensor slot; a float result uses it unrounded
            lit = Lit(value) if is_float or not promoted else _literal(value, comp)
            if lit is None or (not comp.is_floating_point and lit.value != value
                               and entry.base not in _WRAPS_SCALARS):
                return None     # eager refuses an integer scalar out of range here
            kwargs[spec.name] = lit
        elif value is None and spec.has_default:      # an optional argument left out
            kwargs[spec.name] = None
        elif spec.kind != "tensor" and isinstance(value, _CONSTANT_TYPES):
            kwargs[spec.name] = value
        else:
            return None
    expr = entry.emit(ctx, **kwargs)
    return None if expr is None else result_text(expr, out_dtype)
