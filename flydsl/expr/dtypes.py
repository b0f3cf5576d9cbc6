"""Scalar types and parameter annotations of the DSL (no MLIR import here)."""
from __future__ import annotations

import bisect
import math
from typing import Any, Optional

import numpy as np


#: NarrowFloatFormat._magnitudes' tables, by format.
_MAGNITUDES: dict = {}


class NarrowFloatFormat:
    """The encoding of a storage-only float type (8 bits or fewer): ``exp_bits``,
    ``man_bits``, ``bias``, the special values it has, and what converting a value
    too large for it gives.

    ``specials`` is ``"ieee"`` (the all-ones exponent holds inf and NaN), ``"fn"``
    (no inf; only the all-ones code ``S.1111.111`` is NaN), ``"fnuz"`` (no inf, no
    negative zero: ``0x80`` is the only NaN), ``"fnu"`` (Float8E8M0FNU: unsigned, a
    power of two, ``0xFF`` is NaN) or ``"none"`` (no inf, no NaN: the FP6/FP4 types).
    ``overflow`` is ``"saturate"`` (to the largest finite value), ``"inf"`` or ``"nan"``.
    """

    __slots__ = ("exp_bits", "man_bits", "bias", "specials", "overflow")

    def __init__(self, exp_bits: int, man_bits: int, bias: int, specials: str, overflow: str):
        self.exp_bits, self.man_bits, self.bias = exp_bits, man_bits, bias
        self.specials, self.overflow = specials, overflow

    @property
    def signed(self) -> bool:
        return self.specials != "fnu"

    @property
    def max_code(self) -> int:
        """The magnitude bits of the largest finite value."""
        top = (1 << (self.exp_bits + self.man_bits)) - 1
        if self.specials == "ieee":
            return top - (1 << self.man_bits)        # exponent all ones is inf/NaN
        if self.specials in ("fn", "fnu"):
            return top - 1                           # the all-ones code is NaN
        return top                                   # fnuz, none

    def decode(self, code: int) -> float:
        """The value of ``code`` (a Python float; NaN for the NaN codes)."""
        bits = self.exp_bits + self.man_bits + (1 if self.signed else 0)
        code &= (1 << bits) - 1
        sign = -1.0 if self.signed and code >> (bits - 1) else 1.0
        mag = code & ((1 << (self.exp_bits + self.man_bits)) - 1)
        if self.specials == "fnuz" and code == 1 << (bits - 1):
            return float("nan")
        if self.specials in ("fn", "fnu") and mag == (1 << (self.exp_bits + self.man_bits)) - 1:
            return float("nan")
        e, m = mag >> self.man_bits, mag & ((1 << self.man_bits) - 1)
        if self.specials == "ieee" and e == (1 << self.exp_bits) - 1:
            return sign * float("inf") if m == 0 else float("nan")
        if self.specials == "fnu":
            return 2.0 ** (e - self.bias)
        if e == 0:
            return sign * m * 2.0 ** (1 - self.bias - self.man_bits)
        return sign * (1 + m / (1 << self.man_bits)) * 2.0 ** (e - self.bias)

    @property
    def max_value(self) -> float:
        return self.decode(self.max_code)

    @property
    def bits(self) -> int:
        return self.exp_bits + self.man_bits + (1 if self.signed else 0)

    def encode(self, x: float) -> int:
        """The code of the Python number ``x`` (rounded to Float32 first, as kernels
        do): round to nearest, ties to the even code, then :attr:`overflow`; NaN gives
        the NaN code (a negative one keeps its sign where the format has one), or the
        largest value where there is none (FP6/FP4). Float8E8M0FNU: the exponent of the
        nearest power of two (ties up, as torch), 0xFF for inf, NaN and overflow."""
        with np.errstate(over="ignore"):      # beyond Float32: inf, as a kernel's cast
            x = float(np.float32(x))
        nbits = self.bits
        sign_bit = 1 << (nbits - 1) if self.signed else 0
        neg = math.copysign(1.0, x) < 0
        if math.isnan(x):
            return self._nan_code(neg)
        a = abs(x)
        if self.specials == "fnu":   # the kernel code's rule, on the Float32 bits
            bits = int(np.float32(a).view(np.uint32))
            e, m = bits >> 23, bits & 0x7FFFFF
            up = bool(m & 0x400000) and (e != 0 or bool(m & 0x3FFFFF))
            return min(e + up, 0xFF)
        # the nearest finite magnitude code, ties to the even code (magnitudes grow
        # with the code: the two codes around ``a`` are the candidates)
        mags = self._magnitudes()
        i = bisect.bisect_left(mags, a)
        best = min((c for c in (i - 1, i) if 0 <= c < len(mags)),
                   key=lambda c: (abs(mags[c] - a), c & 1))
        top = mags[-1]                     # max_value
        half_ulp = (top - mags[-2]) / 2
        if math.isinf(a) or a > top + half_ulp or (a == top + half_ulp and self.max_code & 1):
            if self.overflow == "saturate":
                best = self.max_code
            elif self.overflow == "inf":
                return (sign_bit if neg else 0) | (self.max_code + 1)
            else:
                return self._nan_code(neg)
        if best == 0 and self.specials == "fnuz":
            return 0
        return (sign_bit if neg else 0) | best

    def _magnitudes(self) -> list:
        """The values of the magnitude codes ``0 .. max_code``, increasing (cached per
        format: :meth:`encode` runs per launch for a narrow-float scalar argument)."""
        key = (self.exp_bits, self.man_bits, self.bias, self.specials)
        mags = _MAGNITUDES.get(key)
        if mags is None:
            mags = _MAGNITUDES[key] = [self.decode(c) for c in range(self.max_code + 1)]
        return mags

    def _nan_code(self, negative: bool) -> int:
        nbits = self.bits
        if self.specials == "fnuz":
            return 1 << (nbits - 1)
        if self.specials == "fnu":
            return 0xFF
        if self.specials == "none":
            return self.max_code
        return (1 << (nbits - 1) if negative else 0) | ((1 << (nbits - 1)) - 1)


class DType(type):
    """A DSL scalar type such as ``fx.Float32``: a class (``fx.Float32.__name__ ==
    "Float32"``, ``issubclass(fx.Float32, fx.numeric.Float)``) whose metaclass is
    ``DType``, as FlyDSL's numeric types are classes.

    Used as a parameter annotation (``n: fx.Int32``), as a cast target
    (``fx.cast(x, fx.Float16)``) and, inside kernels, as a constructor:
    ``fx.Float64(0)`` is a Float64 constant, ``fx.Float32(i)`` a cast.

    Returns: (calling one, inside a kernel) a value of this type: ``value`` converted
    as by ``fx.cast`` (floats truncate toward zero into ints), or a constant.

    Example: ``k = fx.Int32(x[i] * 100.0)``  # a cast: truncates toward zero

    Attributes: ``.name`` (= ``__name__``), ``.kind`` (``"int"``, ``"float"``,
    ``"bool"``), ``.bits`` (= ``.width``), ``.signed``, ``.np_dtype`` (None for
    BFloat16 and the narrow floats), ``.is_float``, ``.is_int``, ``.int_limits``,
    ``.ir_type``, ``.format`` (the :class:`NarrowFloatFormat` of a storage-only float,
    else None), ``.storage_only``.
    """

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **_: Any):
        return super().__new__(mcs, name, bases, dict(namespace))

    def __init__(cls, name: str, bases: tuple, namespace: dict, *, kind: str = "int",
                 bits: int = 32, mlir: str = "i32", np_dtype: Optional[str] = None,
                 signed: bool = True, fmt: Optional[NarrowFloatFormat] = None):
        super().__init__(name, bases, namespace)
        cls.name = name
        cls.kind = kind           # "int", "float" or "bool"
        cls.bits = bits
        #: False for the unsigned integers (UInt8..UInt64): same MLIR type as the signed
        #: ones (MLIR integers are signless), unsigned division, comparison and casts.
        cls.signed = signed if kind == "int" else kind == "float"
        cls.mlir = mlir           # MLIR type spelling: i32, f16, bf16, i1, f8E4M3FN, ...
        cls.np_dtype = np.dtype(np_dtype) if np_dtype else None
        cls.format = fmt

    def __repr__(cls) -> str:
        return f"fx.{cls.name}"

    def __call__(cls, value: Any):
        """A cast inside a kernel; outside, a typed host number (FlyDSL passes
        ``fx.Int32(5)`` to jit functions and kernels as an argument)."""
        from .host_scalar import call_type
        return call_type(cls, value)

    @property
    def width(cls) -> int:
        """FlyDSL's name of ``.bits``."""
        return cls.bits

    @property
    def log_width(cls) -> int:
        """``ceil(log2(width))`` (FlyDSL's attribute)."""
        return (cls.bits - 1).bit_length()

    @property
    def zero(cls):
        """The Python zero of the type: ``0`` for ints and Bool, ``0.0`` for floats."""
        return 0.0 if cls.kind == "float" else 0

    @property
    def is_float(cls) -> bool:
        return cls.kind == "float"

    @property
    def is_int(cls) -> bool:
        return cls.kind == "int"

    @property
    def is_integer(cls) -> bool:
        return cls.kind in ("int", "bool")

    @property
    def storage_only(cls) -> bool:
        """True for the narrow floats (FP8/FP6/FP4): they are stored, loaded and
        converted to and from the other types, not computed in."""
        return cls.format is not None

    @property
    def storage_np_dtype(cls) -> Optional[np.dtype]:
        """The numpy dtype holding one element: ``uint8`` for the narrow floats."""
        return np.dtype("uint8") if cls.format is not None else cls.np_dtype

    @property
    def numpy_dtype(cls) -> Optional[np.dtype]:
        return cls.np_dtype

    @property
    def int_limits(cls) -> tuple[int, int]:
        """``(lo, hi)``: the values an integer type holds are ``lo <= v < hi``
        (``(0, 2)`` for Bool)."""
        if cls.kind == "bool":
            return 0, 2
        if cls.kind != "int":
            raise TypeError(f"{cls!r} is not an integer type")
        if cls.signed:
            return -(1 << (cls.bits - 1)), 1 << (cls.bits - 1)
        return 0, 1 << cls.bits

    @property
    def ir_type(cls):
        """The MLIR type (needs an MLIR context)."""
        return cls.mlir_type()

    def mlir_type(cls):
        import mlir.ir as ir
        return ir.Type.parse(cls.mlir)


#: FlyDSL's name of the metaclass of its numeric types.
NumericMeta = DType


class Numeric:
    """Base class of every DSL scalar type (``issubclass(fx.Int32, Numeric)``).

    Example::

        >>> issubclass(fx.Float8E4M3FN, fx.Numeric), isinstance(fx.Int32, fx.DType)
        (True, True)
    """


class Integer(Numeric):
    """Base class of the integer types (and of Boolean).

    Example::

        >>> issubclass(fx.Int4, fx.Integer), issubclass(fx.Float32, fx.Integer)
        (True, False)
    """


class Float(Numeric):
    """Base class of the float types, the narrow (storage-only) ones included.

    Example::

        >>> issubclass(fx.Float8E5M2, fx.Float), issubclass(fx.Int8, fx.Float)
        (True, False)
    """


def _make(name: str, base: type, doc: str = "", **kw: Any) -> DType:
    ns = {"__module__": __name__, "__qualname__": name, "__doc__": doc or f"fx.{name}"}
    return DType(name, (base,), ns, **kw)


def _int(name: str, bits: int, signed: bool = True, mlir: Optional[str] = None,
         np_name: Optional[str] = None) -> DType:
    if np_name is None and bits in (8, 16, 32, 64):
        np_name = f"{'' if signed else 'u'}int{bits}"
    return _make(name, Integer, kind="int", bits=bits, mlir=mlir or f"i{bits}",
                 np_dtype=np_name, signed=signed)


def _narrow(name: str, bits: int, mlir: str, fmt: NarrowFloatFormat, doc: str) -> DType:
    return _make(name, Float, doc, kind="float", bits=bits, mlir=mlir, fmt=fmt)


Bool = _make("Bool", Integer, kind="bool", bits=1, mlir="i1", np_dtype="bool")
Int8 = _int("Int8", 8)
Int16 = _int("Int16", 16)
Int32 = _int("Int32", 32)
Int64 = _int("Int64", 64)
UInt8 = _int("UInt8", 8, signed=False)
UInt16 = _int("UInt16", 16, signed=False)
UInt32 = _int("UInt32", 32, signed=False)
UInt64 = _int("UInt64", 64, signed=False)
Float16 = _make("Float16", Float, kind="float", bits=16, mlir="f16", np_dtype="float16")
BFloat16 = _make("BFloat16", Float, kind="float", bits=16, mlir="bf16")  # numpy has none
Float32 = _make("Float32", Float, kind="float", bits=32, mlir="f32", np_dtype="float32")
Float64 = _make("Float64", Float, kind="float", bits=64, mlir="f64", np_dtype="float64")

# -- FlyDSL's further integer types ---------------------------------------------------
#: A 4-bit signed integer (arithmetic and casts; no tensors of it).
Int4 = _int("Int4", 4)
#: 128-bit integers (arithmetic and casts; numpy has no such tensors).
Int128 = _int("Int128", 128)
UInt128 = _int("UInt128", 128, signed=False)
#: MLIR's ``index`` (64 bits here, signed as ``arith.index_cast``).
Index = _int("Index", 64, mlir="index")
#: FlyDSL's spellings of the unsigned types (the same classes).
Uint8, Uint16, Uint32, Uint64, Uint128 = UInt8, UInt16, UInt32, UInt64, UInt128

# -- the narrow floats: storage and conversion types -----------------------------------
Float8E4M3FN = _narrow("Float8E4M3FN", 8, "f8E4M3FN", NarrowFloatFormat(4, 3, 7, "fn", "saturate"),
                       "OCP FP8 E4M3 (max 448, NaN 0x7F/0xFF, no inf); torch.float8_e4m3fn.")
Float8E4M3FNUZ = _narrow("Float8E4M3FNUZ", 8, "f8E4M3FNUZ",
                         NarrowFloatFormat(4, 3, 8, "fnuz", "nan"),
                         "AMD gfx942 FP8 E4M3 (bias 8, max 240, NaN 0x80); "
                         "torch.float8_e4m3fnuz.")
Float8E5M2 = _narrow("Float8E5M2", 8, "f8E5M2", NarrowFloatFormat(5, 2, 15, "ieee", "inf"),
                     "OCP FP8 E5M2 (IEEE-like, max 57344, inf); torch.float8_e5m2.")
Float8E5M2FNUZ = _narrow("Float8E5M2FNUZ", 8, "f8E5M2FNUZ",
                         NarrowFloatFormat(5, 2, 16, "fnuz", "nan"),
                         "AMD gfx942 BF8 (bias 16, max 57344, NaN 0x80); "
                         "torch.float8_e5m2fnuz.")
Float8E4M3 = _narrow("Float8E4M3", 8, "f8E4M3", NarrowFloatFormat(4, 3, 7, "ieee", "inf"),
                     "IEEE-like FP8 E4M3 (max 240, inf).")
Float8E4M3B11FNUZ = _narrow("Float8E4M3B11FNUZ", 8, "f8E4M3B11FNUZ",
                            NarrowFloatFormat(4, 3, 11, "fnuz", "nan"),
                            "FP8 E4M3 with bias 11 (max 30, NaN 0x80).")
Float8E8M0FNU = _narrow("Float8E8M0FNU", 8, "f8E8M0FNU", NarrowFloatFormat(8, 0, 127, "fnu", "nan"),
                        "OCP MX scale E8M0: 2**(code - 127), NaN 0xFF; torch.float8_e8m0fnu.")
Float6E2M3FN = _narrow("Float6E2M3FN", 6, "f6E2M3FN", NarrowFloatFormat(2, 3, 1, "none", "saturate"),
                       "OCP MX FP6 E2M3 (max 7.5, no inf/NaN), one per uint8 in memory.")
Float6E3M2FN = _narrow("Float6E3M2FN", 6, "f6E3M2FN", NarrowFloatFormat(3, 2, 3, "none", "saturate"),
                       "OCP MX FP6 E3M2 (max 28, no inf/NaN), one per uint8 in memory.")
Float4E2M1FN = _narrow("Float4E2M1FN", 4, "f4E2M1FN", NarrowFloatFormat(2, 1, 1, "none", "saturate"),
                       "OCP MX FP4 E2M1 (max 6, no inf/NaN), one per uint8 in memory.")

NARROW_FLOATS = (Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E4M3,
                 Float8E4M3B11FNUZ, Float8E8M0FNU, Float6E2M3FN, Float6E3M2FN, Float4E2M1FN)
ALL_DTYPES = (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Float16, BFloat16,
              Float32, Float64, Int4, Int128, UInt128, Index) + NARROW_FLOATS
_BY_NAME = {t.name: t for t in ALL_DTYPES}
_BY_NUMPY = {t.np_dtype: t for t in ALL_DTYPES if t.np_dtype is not None and t.bits in (1, 8, 16, 32, 64)
             and t is not Index}
_BY_TORCH = {"bool": Bool, "int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64,
             "uint8": UInt8, "uint16": UInt16, "uint32": UInt32, "uint64": UInt64,
             "float16": Float16, "bfloat16": BFloat16, "float32": Float32, "float64": Float64,
             "float8_e4m3fn": Float8E4M3FN, "float8_e4m3fnuz": Float8E4M3FNUZ,
             "float8_e5m2": Float8E5M2, "float8_e5m2fnuz": Float8E5M2FNUZ,
             "float8_e8m0fnu": Float8E8M0FNU}


def _dtype_by_name(name: str) -> DType:
    return _BY_NAME[name]


#: MLIR scalar type (as text) -> the dtype a raw value of it becomes (signless ints
#: are signed, as upstream FlyDSL reads them).
_BY_MLIR = {t.mlir: t for t in reversed(ALL_DTYPES)}


def dtype_from_mlir_text(text: str) -> Optional[DType]:
    """The dtype of the MLIR scalar type spelled ``text`` (``"i32"``, ``"bf16"``), or None."""
    return _BY_MLIR.get(text)


def dtype_from_numpy(np_dtype) -> Optional[DType]:
    return _BY_NUMPY.get(np.dtype(np_dtype))


def dtype_from_torch(torch_dtype) -> Optional[DType]:
    """The DType of a torch dtype (the float8 ones included), or None."""
    return _BY_TORCH.get(str(torch_dtype).replace("torch.", ""))


def torch_dtype_of(dtype: DType):
    """The torch dtype holding ``dtype`` (``torch.uint8`` for the FP6/FP4 types and the
    FP8 types this torch lacks)."""
    import torch
    for name, t in _BY_TORCH.items():
        if t is dtype and hasattr(torch, name):
            return getattr(torch, name)
    if dtype.storage_only:
        return torch.uint8
    raise TypeError(f"{dtype!r} has no torch dtype")


class ConstexprAnnotation:
    """``fx.Constexpr[T]``: a trace-time constant, part of the specialization key."""

    def __init__(self, py_type: Any = None):
        self.py_type = py_type

    def __repr__(self) -> str:
        return f"fx.Constexpr[{getattr(self.py_type, '__name__', self.py_type)}]"


class Constexpr:
    """Annotate a parameter as a compile-time constant: ``BLOCK: fx.Constexpr[int]``.

    Example::

        @flydsl.kernel
        def fill(out: fx.Tensor, value: fx.Constexpr[float]):
            out[fx.thread_idx.x] = value          # a constant in the compiled kernel

        out = np.zeros(32, np.float32)
        fill[1, 32](out, 2.5)                     # each new value compiles once
        assert (out == 2.5).all()
    """

    def __class_getitem__(cls, py_type: Any) -> ConstexprAnnotation:
        return ConstexprAnnotation(py_type)


class Stream:
    """A launch stream as a parameter: ``stream: fx.Stream = fx.Stream(None)`` in a
    ``@flydsl.jit`` function, passed on as ``launch(stream=stream)``. It wraps what
    ``stream=`` takes (None for the default stream, a torch stream, a handle).

    Example::

        @flydsl.kernel
        def twice(x: fx.Tensor, n: fx.Int32):
            i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
            if i < n:
                x[i] = 2.0 * x[i]

        @flydsl.jit
        def scale(x: fx.Tensor, n: fx.Int32, stream: fx.Stream = fx.Stream(None)):
            twice(x, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), stream=stream)

        x = np.ones(1000, np.float32)
        scale(x, x.size)                          # on a GPU: scale(x, n, fx.Stream(torch_stream))
        assert (x == 2.0).all()
    """

    def __init__(self, value: Any = None):
        self.value = value.value if isinstance(value, Stream) else value

    def __repr__(self) -> str:
        return f"fx.Stream({self.value!r})"


class TensorAnnotation:
    """``fx.Tensor``, ``fx.Tensor[fx.Float32]`` or ``fx.Tensor[fx.Float32, 2]``: a tensor
    parameter (element type, and rank, checked at launch). The argument may be a
    numpy array, a torch tensor or any DLPack object, of any strides.

    Inside a kernel a tensor ``t`` has ``t[i, j]`` (load) and ``t[i, j] = v`` (store)
    with one index per dimension, ``t.shape[k]`` and ``len(t)`` (``Int32``), ``t.size``
    and ``t.numel()`` (``Int64``), ``t.shape.unpack()``; indices are not Python-style
    (``t[-1]`` reads before the array; ``FLYDSL_DEBUG=1`` reports it on the CPU).
    Called, as FlyDSL's ``fx.Tensor(view)``, it takes a view or tensor.

    Returns: ``fx.Tensor[...]`` an annotation with the element type (and rank);
    ``fx.Tensor(view)`` the view itself.

    Example::

        @flydsl.kernel
        def row_sums(a: fx.Tensor[fx.Float32, 2], out: fx.Tensor[fx.Float32]):
            r = fx.thread_idx.x
            acc = 0.0
            for c in range(a.shape[1]):
                acc += a[r, c]
            out[r] = acc

        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = np.zeros(3, np.float32)
        row_sums[1, 3](a, out)
        assert (out == a.sum(axis=1)).all()
    """

    def __init__(self, dtype: Optional[DType] = None, rank: Optional[int] = None):
        self.dtype = dtype
        self.rank = rank

    def __getitem__(self, params) -> "TensorAnnotation":
        if not isinstance(params, tuple):
            params = (params,)
        dtype = params[0] if params else None
        rank = params[1] if len(params) > 1 else None
        if dtype is not None and not isinstance(dtype, DType):
            raise TypeError(f"fx.Tensor[...] takes a flydsl dtype such as fx.Float32, got {dtype!r}")
        if rank is not None and (not isinstance(rank, int) or rank < 0):
            raise TypeError(f"fx.Tensor[dtype, rank]: rank must be a non-negative int, got {rank!r}")
        return TensorAnnotation(dtype, rank)

    def __call__(self, value: Any) -> Any:
        """``fx.Tensor(view)`` (FlyDSL): a view or tensor is a tensor already; it is
        returned as it is."""
        return value

    def __repr__(self) -> str:
        if self.dtype is None:
            return "fx.Tensor"
        return f"fx.Tensor[{self.dtype!r}" + (f", {self.rank}]" if self.rank is not None else "]")


Tensor = TensorAnnotation()
