"""Scalar types and parameter annotations of the DSL (no MLIR import here)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


class DType:
    """A DSL scalar type such as ``fx.Float32``.

    Used as a parameter annotation (``n: fx.Int32``), as a cast target
    (``fx.cast(x, fx.Float16)``) and, inside kernels, as a constructor:
    ``fx.Float64(0)`` is a Float64 constant, ``fx.Float32(i)`` a cast.

    Returns: (calling one, inside a kernel) a value of this type: ``value`` converted
    as by ``fx.cast`` (floats truncate toward zero into ints), or a constant.

    Example: ``k = fx.Int32(x[i] * 100.0)``  # a cast: truncates toward zero

    Attributes: ``.name``, ``.kind`` (``"int"``, ``"float"``, ``"bool"``), ``.bits``,
    ``.signed``, ``.np_dtype`` (None for BFloat16), ``.is_float``, ``.is_int``,
    ``.int_limits``.
    """

    def __init__(self, name: str, kind: str, bits: int, mlir: str, np_dtype: Optional[str],
                 signed: bool = True):
        self.name = name
        self.kind = kind          # "int", "float" or "bool"
        self.bits = bits
        #: False for the unsigned integers (UInt8..UInt64): same MLIR type as the signed
        #: ones (MLIR integers are signless), unsigned division, comparison and casts.
        self.signed = signed if kind == "int" else kind == "float"
        self.mlir = mlir          # MLIR type spelling: i32, f16, bf16, i1, ...
        self.np_dtype = np.dtype(np_dtype) if np_dtype else None

    def __repr__(self) -> str:
        return f"fx.{self.name}"

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))

    def __call__(self, value: Any):
        from .implementation import ops
        return ops().cast(value, self)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def int_limits(self) -> tuple[int, int]:
        """``(lo, hi)``: the values an integer type holds are ``lo <= v < hi``
        (``(0, 2)`` for Bool)."""
        if self.kind == "bool":
            return 0, 2
        if self.kind != "int":
            raise TypeError(f"{self!r} is not an integer type")
        if self.signed:
            return -(1 << (self.bits - 1)), 1 << (self.bits - 1)
        return 0, 1 << self.bits

    def mlir_type(self):
        import mlir.ir as ir
        return ir.Type.parse(self.mlir)


Bool = DType("Bool", "bool", 1, "i1", "bool")
Int8 = DType("Int8", "int", 8, "i8", "int8")
Int16 = DType("Int16", "int", 16, "i16", "int16")
Int32 = DType("Int32", "int", 32, "i32", "int32")
Int64 = DType("Int64", "int", 64, "i64", "int64")
UInt8 = DType("UInt8", "int", 8, "i8", "uint8", signed=False)
UInt16 = DType("UInt16", "int", 16, "i16", "uint16", signed=False)
UInt32 = DType("UInt32", "int", 32, "i32", "uint32", signed=False)
UInt64 = DType("UInt64", "int", 64, "i64", "uint64", signed=False)
Float16 = DType("Float16", "float", 16, "f16", "float16")
BFloat16 = DType("BFloat16", "float", 16, "bf16", None)  # numpy has no bfloat16
Float32 = DType("Float32", "float", 32, "f32", "float32")
Float64 = DType("Float64", "float", 64, "f64", "float64")

ALL_DTYPES = (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Float16, BFloat16,
              Float32, Float64)
_BY_NAME = {t.name: t for t in ALL_DTYPES}
_BY_NUMPY = {t.np_dtype: t for t in ALL_DTYPES if t.np_dtype is not None}


def _dtype_by_name(name: str) -> DType:
    return _BY_NAME[name]


def dtype_from_numpy(np_dtype) -> Optional[DType]:
    return _BY_NUMPY.get(np.dtype(np_dtype))


def dtype_from_torch(torch_dtype) -> Optional[DType]:
    name = str(torch_dtype).replace("torch.", "")
    return {"bool": Bool, "int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64,
            "uint8": UInt8, "uint16": UInt16, "uint32": UInt32, "uint64": UInt64,
            "float16": Float16, "bfloat16": BFloat16, "float32": Float32,
            "float64": Float64}.get(name)


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

    def __repr__(self) -> str:
        if self.dtype is None:
            return "fx.Tensor"
        return f"fx.Tensor[{self.dtype!r}" + (f", {self.rank}]" if self.rank is not None else "]")


Tensor = TensorAnnotation()
