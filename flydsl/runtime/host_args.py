"""FlyDSL-style host arguments: ``flyc.from_torch_tensor``, ``flyc.from_dlpack``,
host scalars (``fx.Int32(5)`` outside a kernel) and :class:`JitArgumentRegistry`.

A :class:`TensorArgument` wraps a host tensor (torch, numpy, any DLPack or CUDA array
interface object) and is what a ``@flyc.jit`` function sees for a parameter annotated
``fx.Tensor``: ``M, N = A.shape.unpack()``, ``A.stride[0]``, ``A.layout`` work on the
host as in FlyDSL, every other attribute is the wrapped tensor's (``A.numel()``,
``A.data_ptr()``), and passing it to a kernel passes the wrapped tensor.

Layout markers. FlyDSL compiles a tensor's shape and strides into the kernel unless
they are marked dynamic (``mark_layout_dynamic``, ``mark_shape_dynamic``,
``mark_stride_dynamic``); a plain tensor passed to a ``@flyc.jit`` function is
layout-dynamic, one wrapped by ``from_torch_tensor``/``from_dlpack`` is static. flydsl
kernels always read shapes and strides at run time (one binary serves every shape),
so the markers never change what a kernel computes: they are validated as FlyDSL
validates them and recorded in :meth:`TensorArgument.cache_signature`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import DSLError, DSLTypeError
from ..expr import dtypes as dt
from ..expr.layout_algebra import IntTuple, StaticInt
from ..expr.host_scalar import HostScalar, convert_host_scalar, host_scalar
from .tensors import as_tensor, is_torch_tensor


class LayoutMarkError(DSLError, ValueError):
    """A ``mark_*_dynamic`` call FlyDSL rejects (bad dimension, divisibility, no unit stride)."""


class HostStride(IntTuple):
    """A tensor's strides on the host: ``t.stride[0]`` (FlyDSL) and ``t.stride()`` /
    ``t.stride(0)`` (torch) both work."""

    __slots__ = ()

    def __call__(self, dim: Optional[int] = None):
        return self if dim is None else self[dim]


#: torch dtype -> flydsl dtype, as met.
_TORCH_DTYPES: dict = {}


def _read_layout(value) -> tuple:
    """``(shape, strides in elements, dtype)`` of a host tensor, read directly for torch
    and numpy (the common, per-call case) and through :func:`as_tensor` otherwise."""
    if is_torch_tensor(value):
        td = value.dtype
        d = _TORCH_DTYPES.get(td)
        if d is None:
            d = dt.dtype_from_torch(td)
            if d is not None:
                _TORCH_DTYPES[td] = d
        if d is not None:
            return tuple(value.shape), value.stride(), d
    elif type(value) is np.ndarray:
        d = dt.dtype_from_numpy(value.dtype)
        item = value.itemsize
        if d is not None and all(s % item == 0 for s in value.strides):
            return value.shape, tuple(s // item for s in value.strides), d
    t = as_tensor(value)
    if t is None:
        raise DSLTypeError(f"expected a tensor (torch, numpy, DLPack or CUDA array "
                           f"interface), got {type(value).__name__}")
    return t.shape, t.strides, t.dtype


def _int_tuple(values: Sequence[int], cls=IntTuple) -> IntTuple:
    return cls(StaticInt(int(v)) for v in values)


def _power_of_two(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


class TensorArgument:
    """A host tensor as a FlyDSL jit argument (see the module docstring).

    ``value``: the wrapped tensor; ``shape``/``stride``: host int tuples;
    ``element_type``: the flydsl dtype; ``assumed_align`` (bytes), ``use_32bit_stride``
    as given to ``from_torch_tensor``/``from_dlpack``.
    """

    __slots__ = ("value", "assumed_align", "use_32bit_stride", "_layout", "_marks")

    def __init__(self, value: Any, *, assumed_align: Optional[int] = None,
                 use_32bit_stride: bool = False, dynamic_layout: bool = False):
        if type(value) is TensorArgument:
            value = value.value
        if assumed_align is not None and not _power_of_two(int(assumed_align)):
            raise LayoutMarkError(f"assumed_align must be a power of two, got {assumed_align}")
        if not (is_torch_tensor(value) or type(value) is np.ndarray
                or hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")):
            raise DSLTypeError(f"expected a tensor (torch, numpy, DLPack or CUDA array "
                               f"interface), got {type(value).__name__}")
        self.value = value
        self.assumed_align = assumed_align
        self.use_32bit_stride = bool(use_32bit_stride)
        self._layout = None   # (shape, strides, dtype): read when first asked for
        # FlyDSL's encoding per dimension, (shape marks, stride marks): >= 0 static value,
        # -d dynamic (divisible by d). None: not built yet (FlyDSL's layout-dynamic default
        # for a plain tensor given to a @flyc.jit function, built when asked for).
        self._marks = None if dynamic_layout else (list(self._shape), list(self._stride))

    def _read(self) -> tuple:
        if self._layout is None:
            self._layout = _read_layout(self.value)
        return self._layout

    @property
    def _shape(self) -> tuple:
        return self._read()[0]

    @property
    def _stride(self) -> tuple:
        return self._read()[1]

    @property
    def _dtype(self) -> dt.DType:
        return self._read()[2]

    @property
    def _shape_marks(self) -> list:
        return self._built_marks()[0]

    @property
    def _stride_marks(self) -> list:
        return self._built_marks()[1]

    def _built_marks(self) -> tuple:
        if self._marks is None:
            self._marks = (list(self._shape), list(self._stride))
            if 1 in self._stride:
                self.mark_layout_dynamic()
        return self._marks

    # -- what a @flyc.jit body reads ---------------------------------------------------
    @property
    def shape(self) -> IntTuple:
        """The shape as an int tuple (``M, N = A.shape.unpack()``)."""
        return _int_tuple(self._shape)

    @property
    def stride(self) -> HostStride:
        """The strides in elements (``A.stride[0]``; ``A.stride()`` as in torch)."""
        return _int_tuple(self._stride, HostStride)

    @property
    def layout(self):
        """``fx.make_layout(shape, stride)`` of the tensor."""
        from ..expr.layout_algebra import make_layout
        return make_layout(tuple(self._shape), tuple(self._stride))

    @property
    def element_type(self) -> dt.DType:
        """The element type as a flydsl dtype (``fx.Float32``)."""
        return self._dtype

    @property
    def rank(self) -> int:
        return len(self._shape)

    def __getattr__(self, name: str):
        # Only reached for names not defined here: the wrapped tensor's (numel, dtype, ...).
        return getattr(object.__getattribute__(self, "value"), name)

    def __len__(self) -> int:
        return self._shape[0] if self._shape else 0

    def __array__(self, *args, **kwargs):
        import numpy as np
        return np.asarray(self.value, *args, **kwargs)

    def __dlpack__(self, *args, **kwargs):
        return self.value.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.value.__dlpack_device__()

    def __repr__(self) -> str:
        return (f"<flyc tensor {self._dtype!r} shape={tuple(self._shape)} "
                f"stride={tuple(self._stride)} layout={self.cache_signature()[3:]}>")

    # -- layout markers (FlyDSL's rules) -------------------------------------------------
    @property
    def is_layout_dynamic(self) -> bool:
        """Some dimension's size or stride is marked dynamic."""
        return any(v < 0 for v in (*self._shape_marks, *self._stride_marks))

    def _dims(self, dims, divisibility, what: str) -> list:
        dim_list = [dims] if isinstance(dims, int) else list(dims)
        if isinstance(divisibility, int):
            divs = [divisibility] * len(dim_list)
        else:
            if isinstance(dims, int):
                raise LayoutMarkError(f"{what}: divisibility must be an int when dims is an int")
            divs = list(divisibility)
            if len(divs) != len(dim_list):
                raise LayoutMarkError(f"{what}: {len(dim_list)} dims but {len(divs)} "
                                      "divisibilities")
        out = []
        for d, v in zip(dim_list, divs):
            i = int(d) + (self.rank if int(d) < 0 else 0)
            if not 0 <= i < self.rank:
                raise LayoutMarkError(f"{what}: dimension {d} is out of range for rank "
                                      f"{self.rank}")
            if not _power_of_two(int(v)):
                raise LayoutMarkError(f"{what}: divisibility {v} must be a power of two")
            out.append((i, int(v)))
        return out

    def mark_layout_dynamic(self, leading_dim: Optional[int] = None,
                            divisibility: int = 1) -> "TensorArgument":
        """Every size, and every stride but the leading (unit-stride) dimension's, is
        dynamic; strides are multiples of ``divisibility``. ``leading_dim`` defaults
        to the first dimension of stride 1. Returns self."""
        if leading_dim is None or leading_dim == -1:
            leading_dim = next((i for i, s in enumerate(self._stride) if s == 1), None)
            if leading_dim is None:
                raise LayoutMarkError(
                    f"mark_layout_dynamic: tensor of shape {tuple(self._shape)} and strides "
                    f"{tuple(self._stride)} has no dimension of stride 1")
        if not 0 <= leading_dim < self.rank:
            raise LayoutMarkError(f"mark_layout_dynamic: leading_dim {leading_dim} is out of "
                                  f"range for rank {self.rank}")
        if self._stride[leading_dim] != 1:
            raise LayoutMarkError(f"mark_layout_dynamic: leading_dim {leading_dim} has stride "
                                  f"{self._stride[leading_dim]}, not 1")
        if not _power_of_two(int(divisibility)):
            raise LayoutMarkError(f"mark_layout_dynamic: divisibility {divisibility} must be "
                                  "a power of two")
        self._check_divisible([(i, divisibility) for i in range(self.rank)
                               if i != leading_dim], self._stride, "stride")
        self._marks = ([-1] * self.rank, [1 if i == leading_dim else -int(divisibility)
                                          for i in range(self.rank)])
        return self

    def mark_shape_dynamic(self, dims, divisibility=1) -> "TensorArgument":
        """The sizes of ``dims`` (an int or ints, negative allowed) are dynamic, each a
        multiple of its ``divisibility`` (a power of two, one or one per dim). Returns self."""
        marks = self._dims(dims, divisibility, "mark_shape_dynamic")
        self._check_divisible(marks, self._shape, "size")
        for i, v in marks:
            self._shape_marks[i] = -v
        return self

    def mark_stride_dynamic(self, dims, divisibility=1) -> "TensorArgument":
        """The strides of ``dims`` are dynamic, each a multiple of its ``divisibility``.
        Returns self."""
        marks = self._dims(dims, divisibility, "mark_stride_dynamic")
        self._check_divisible(marks, self._stride, "stride")
        for i, v in marks:
            self._stride_marks[i] = -v
        return self

    def _check_divisible(self, marks, values, what: str) -> None:
        """A divisibility the tensor at hand does not have is a user error, not a
        promise flydsl would silently compile on."""
        for i, v in marks:
            if values[i] % v:
                raise LayoutMarkError(f"dimension {i}'s {what} {values[i]} is not a multiple "
                                      f"of the divisibility {v}")

    def cache_signature(self) -> tuple:
        """``(dtype, alignment, use_32bit_stride, shape marks, stride marks)``: each mark
        the static value, or ``-d`` for a dynamic one divisible by ``d`` (FlyDSL's
        encoding). Two arguments with different signatures compile separately in FlyDSL;
        flydsl's kernels do not depend on it (see the module docstring)."""
        align = self.assumed_align or max(self._dtype.bits // 8, 1)
        return (self._dtype, align, self.use_32bit_stride, tuple(self._shape_marks),
                tuple(self._stride_marks))

    __cache_signature__ = cache_signature   # FlyDSL's protocol name


def from_torch_tensor(tensor, *, assumed_align: Optional[int] = None,
                      use_32bit_stride: bool = False) -> TensorArgument:
    """A torch tensor as a static-layout FlyDSL argument (FlyDSL's
    ``flyc.from_torch_tensor``); chain ``.mark_layout_dynamic(leading_dim=...,
    divisibility=...)`` to mark it dynamic. Pass it to ``@flyc.jit`` functions and
    kernels in place of the tensor."""
    if not is_torch_tensor(tensor):
        raise DSLTypeError(f"from_torch_tensor needs a torch.Tensor, got {type(tensor).__name__}")
    return TensorArgument(tensor, assumed_align=assumed_align, use_32bit_stride=use_32bit_stride)


def from_dlpack(tensor, *, assumed_align: Optional[int] = None,
                use_32bit_stride: bool = False) -> TensorArgument:
    """Any DLPack (or CUDA array interface, or numpy) tensor as a static-layout FlyDSL
    argument (FlyDSL's ``flyc.from_dlpack``)."""
    return TensorArgument(tensor, assumed_align=assumed_align, use_32bit_stride=use_32bit_stride)


#: Elements a raw pointer argument is taken to span: its extent is unknown, so it is
#: assumed to overlap every other tensor argument (no ``noalias``) and debug-mode bounds
#: checks see it as large (but not wide: ``t.shape`` stays Int32).
POINTER_EXTENT = 2**31 - 1


class PointerArgument:
    """``flyc.from_c_void_p(dtype, address)``: a raw address as a kernel argument, for
    ``fx.Pointer`` parameters (the kernel sees a pointer to ``dtype`` at ``address``).
    ``device``: where the memory is (``"cpu"``, ``"cuda:0"``, ``"rocm:0"``); default
    ``"cpu"``, the CPU backend's memory."""

    __slots__ = ("address", "element_type", "address_space", "alignment", "device")

    def __init__(self, element_type, pointer, address_space=None,
                 alignment: Optional[int] = None, device: str = "cpu"):
        import ctypes
        if not isinstance(element_type, dt.DType):
            raise DSLTypeError(f"from_c_void_p needs an fx element type (fx.Float32, ...), got "
                               f"{element_type!r}")
        if isinstance(pointer, ctypes.c_void_p):
            pointer = pointer.value
        self.address = int(pointer or 0)
        self.element_type = element_type
        self.address_space = address_space
        self.alignment = alignment
        self.device = device

    def __flydsl_tensor_arg__(self):
        """The pointer as the one-dimensional tensor a kernel reads (see POINTER_EXTENT).
        A null pointer (FlyDSL's kernels pass one for an argument a variant does not
        read, e.g. an empty tensor's ``data_ptr()``) spans no elements: it launches, and
        any access through it is out of bounds."""
        from .tensors import TensorArg
        return TensorArg(self.address, (POINTER_EXTENT if self.address else 0,), (1,),
                         self.element_type, self.device, self)

    def with_address(self, pointer) -> "PointerArgument":
        """The same pointer type at another address (``int``, ``c_void_p`` or a
        PointerArgument)."""
        if isinstance(pointer, PointerArgument):
            return pointer
        return PointerArgument(self.element_type, pointer, self.address_space, self.alignment,
                               self.device)

    def __int__(self) -> int:
        return self.address

    def __repr__(self) -> str:
        return f"<flyc pointer {self.element_type!r} at {self.address:#x} on {self.device}>"


def from_c_void_p(element_type, pointer, *, address_space=None,
                  assumed_align: Optional[int] = None, device: str = "cpu") -> PointerArgument:
    """FlyDSL's ``flyc.from_c_void_p``: ``pointer`` (an int or ``ctypes.c_void_p``) as an
    ``fx.Pointer`` kernel argument to ``element_type`` elements. ``device`` (a flydsl
    extension) names the memory when it is not the host's."""
    return PointerArgument(element_type, pointer, address_space, assumed_align, device)


class JitArgumentRegistry:
    """FlyDSL's registry of host argument types. ``register(py_type)`` decorates a
    converter: a ``py_type`` value passed to a ``@flyc.jit`` function or a kernel is
    replaced by ``converter(value)`` (a tensor, a number or a constexpr object)::

        @flyc.JitArgumentRegistry.register(MyBuffer, dsl_type=fx.Tensor)
        def _(buf):
            return buf.array

    ``dsl_type`` is what the converted value stands for (``fx.Tensor``, ``fx.Stream``,
    a scalar type); registering a DSL type itself (``register(MyStream)(fx.Stream)``)
    makes it the converter. Subclasses of a registered type use its converter.
    """

    registry: Dict[type, Tuple[Callable, Any]] = {}

    @classmethod
    def register(cls, py_type: type, *, dsl_type: Any = None) -> Callable:
        if not isinstance(py_type, type):
            raise DSLTypeError(f"JitArgumentRegistry.register needs a type, got {py_type!r}")

        def decorator(converter: Callable) -> Callable:
            if py_type in cls.registry:
                raise DSLError(f"a jit argument converter for {py_type.__name__} is already "
                               "registered")
            if not callable(converter):
                raise DSLTypeError(f"the converter for {py_type.__name__} must be callable, "
                                   f"got {converter!r}")
            cls.registry[py_type] = (converter, dsl_type if dsl_type is not None else converter)
            _CONVERTED.clear()
            return converter
        return decorator

    @classmethod
    def unregister(cls, py_type: type) -> None:
        """Forget ``py_type``'s converter (tests, plugins reloading)."""
        cls.registry.pop(py_type, None)
        _CONVERTED.clear()

    @classmethod
    def get(cls, py_type: type) -> Tuple[Optional[Callable], Any]:
        """``(converter, dsl_type)`` for ``py_type`` or a base class, else ``(None, None)``."""
        hit = cls.registry.get(py_type)
        if hit is not None:
            return hit
        for registered, entry in cls.registry.items():
            if issubclass(py_type, registered):
                return entry
        return (None, None)


#: Types seen by :func:`host_value`: their converter (None: passed as they are).
_CONVERTED: Dict[type, Optional[Callable]] = {}


def _converter_for(t: type) -> Optional[Callable]:
    try:
        return _CONVERTED[t]
    except KeyError:
        pass
    if issubclass(t, TensorArgument):
        conv = _tensor_value
    elif issubclass(t, HostScalar):
        conv = _scalar_value
    elif issubclass(t, dt.Stream):
        conv = None
    else:
        conv = JitArgumentRegistry.get(t)[0]
        if conv is not None and isinstance(conv, type) and issubclass(conv, dt.Stream):
            conv = _stream_value(conv)
    if len(_CONVERTED) < 1024:
        _CONVERTED[t] = conv
    return conv


def _tensor_value(x: TensorArgument):
    return x.value


def _scalar_value(x: HostScalar):
    return x.value


def _stream_value(cls) -> Callable:
    return lambda x: cls(x).value


def host_value(x: Any) -> Any:
    """What a kernel receives for the host argument ``x``: the wrapped tensor of a
    :class:`TensorArgument`, the number of a :class:`HostScalar`, a registered
    type's converted value (converted again if that is itself a host argument), else
    ``x`` itself."""
    for _ in range(8):
        t = type(x)
        conv = _CONVERTED[t] if t in _CONVERTED else _converter_for(t)
        if conv is None:
            return x
        x = conv(x)
    raise DSLTypeError(f"jit argument converters loop on {type(x).__name__}")


def unwrap_args(args: tuple) -> tuple:
    """``args`` with each host argument replaced by :func:`host_value` (the same tuple
    when none needs it)."""
    known = _CONVERTED
    for a in args:
        t = type(a)
        if (known[t] if t in known else _converter_for(t)) is not None:
            return tuple(map(host_value, args))
    return args


__all__ = ["HostScalar", "HostStride", "JitArgumentRegistry", "LayoutMarkError", "POINTER_EXTENT",
           "PointerArgument", "TensorArgument", "from_c_void_p",
           "convert_host_scalar", "from_dlpack", "from_torch_tensor", "host_scalar", "host_value",
           "unwrap_args"]
