"""Keys for the warm launch path: arguments, env and launch dims.

A warm launch must not bind signatures, build strings or classify tensors.
A kernel first tries the generated launch of its last specialization
(:mod:`flydsl.runtime.fastpath`, whose guards mirror these keys); otherwise it
hashes a tuple made of: the codegen-relevant environment, each argument's *type
signature* (type, dtype, rank, innermost contiguity, device; for ints their bit
length and sign) and the values of the constexpr arguments. That tuple picks the
generated launch of another specialization seen before.
"""
from __future__ import annotations

import numbers
import operator
import os
from functools import partial
from typing import Callable, Optional

import numpy as np

from ..errors import LaunchError
from ..expr.dtypes import DType
from .packing import numpy_data
from .specialization import DIVISIBILITY, WIDE_ELEMENTS, tensor_aligned
from .tensors import cai_key, is_torch_tensor

#: Environment variables that change what gets compiled or where it runs.
ENV_KEYS = ("FLYDSL_COMPILE_BACKEND", "FLYDSL_GPU_ARCH", "FLYDSL_OPT_LEVEL", "FLYDSL_DEBUG",
            "FLYDSL_FAST_MATH", "FLYDSL_FP_CONTRACT", "FLYDSL_RACECHECK", "FLYDSL_PROFILE",
            "FLYDSL_CPU_WARP_SIZE", "HSA_OVERRIDE_GFX_VERSION")

_ENV_DATA = getattr(os.environ, "_data", None)   # CPython's raw dict: ~40x faster lookups
if _ENV_DATA is not None and os.environ.encodekey("X") == b"X":
    _ENV_BYTES = tuple(os.environ.encodekey(k) for k in ENV_KEYS)

    def env_token(_get=_ENV_DATA.get, _k=_ENV_BYTES) -> tuple:
        return (_get(_k[0]), _get(_k[1]), _get(_k[2]), _get(_k[3]), _get(_k[4]), _get(_k[5]),
                _get(_k[6]), _get(_k[7]), _get(_k[8]), _get(_k[9]))
    #: ``(dict, keys)`` env_token reads (``dict.get`` of each key, in order), for the
    #: native warm launch (runtime.native_launch); None where env_token reads otherwise.
    ENV_SOURCE: Optional[tuple] = (_ENV_DATA, _ENV_BYTES)
else:  # pragma: no cover - other platforms
    def env_token() -> tuple:
        return tuple(map(os.environ.get, ENV_KEYS))
    ENV_SOURCE = None


def env_reader(name: str) -> Callable[[], object]:
    """A reader of the environment variable ``name`` for hot paths: ``None`` when it is
    unset, else its value (bytes from CPython's raw dict, ~10x faster than
    ``os.environ.get``; str elsewhere). Compare it through :func:`env_text`."""
    if ENV_SOURCE is not None:
        return partial(_ENV_DATA.get, os.environ.encodekey(name))
    return partial(os.environ.get, name)


def env_text(raw, _decode=getattr(os.environ, "decodevalue", None)) -> str:
    """An :func:`env_reader` value (not None) as text (decoded as ``os.environ`` did
    when this module was imported: a test may replace ``os.environ`` by a dict)."""
    return raw if isinstance(raw, str) else _decode(raw)


# the unrolled fast form must read every key (a key it skipped would let a warm launch
# reuse code compiled for another setting)
assert len(env_token()) == len(ENV_KEYS), "env_token misses an ENV_KEYS entry"

_ndarray = np.ndarray
#: Argument classes other than ndarray/int/float/bool, classified once each (the
#: probing in is_torch_tensor and the numpy isinstance checks cost more than a key).
_kinds: dict = {}


def _kind(t: type, a) -> str:
    if is_torch_tensor(a):
        kind = "torch"
    elif issubclass(t, np.integer):
        kind = "npint"
    elif issubclass(t, (np.floating, np.bool_)):
        kind = "npscalar"
    elif getattr(a, "__cuda_array_interface__", None) is not None:
        kind = "cai"
    else:
        kind = "other"
    if len(_kinds) < 1024:
        _kinds[t] = kind
    return kind


def arg_key(a) -> object:
    """What about ``a`` decides its specialization and its launch-time checks.

    Tensors: type, dtype (byte order included), rank, innermost contiguity,
    device, 16-byte alignment and width (:mod:`~flydsl.runtime.specialization`);
    ``__cuda_array_interface__`` arrays likewise, read from the interface.
    Ints: bit length and sign (so a value that needs range checking
    for a narrower declared type never reuses a check made for another) and
    divisibility by 16.
    Constexpr values are keyed separately (see :func:`constexpr_token`).
    """
    t = type(a)
    if t is _ndarray:
        nd = a.ndim
        st = a.strides
        return (t, a.dtype, nd, nd == 0 or st[-1] == a.itemsize or a.shape[-1] == 1,
                tensor_aligned(numpy_data(a), st), a.size >= WIDE_ELEMENTS)
    if t is int:
        return (t, a.bit_length(), a < 0, not a % DIVISIBILITY)
    if t is float or t is bool:
        return t
    kind = _kinds.get(t) or _kind(t, a)
    if kind == "torch":
        st = a.stride()   # the tuple: ~2x cheaper than a.stride(-1)
        item = a.element_size()
        return (t, a.dtype, len(st), not st or st[-1] == 1 or a.shape[-1] == 1, a.device,
                tensor_aligned(a.data_ptr(), [s * item for s in st]),
                a.numel() >= WIDE_ELEMENTS)
    if kind == "cai":   # CuPy, Numba, ...: keyed by the interface, not the object
        cai = a.__cuda_array_interface__
        if cai is not None:
            return cai_key(a, cai)
    elif kind == "npint":
        return (t, int(a).bit_length(), a < 0, not int(a) % DIVISIBILITY)
    elif kind == "npscalar":
        return t
    return (t, a)  # anything else: keyed by value (and by identity if unhashable-by-value)


_PLAIN_CONSTEXPR = (int, float, bool, str, bytes, type(None))


class Identity:
    """An object compared by identity, held (so its id is never reused meanwhile)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return type(other) is Identity and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<identity of {type(self.obj).__name__} at {id(self.obj):#x}>"


def plain_constexpr(value) -> bool:
    """A number, string, bytes, None or flydsl dtype, or a tuple of them: its repr is
    its whole content."""
    if type(value) in _PLAIN_CONSTEXPR or isinstance(value, DType):
        return True
    return type(value) is tuple and all(map(plain_constexpr, value))


def constexpr_token(value) -> tuple:
    """What a warm launch compares a constexpr argument by: plain values by type and
    repr (``0.0``/``-0.0`` and ``(1, 2)``/``(1.0, 2)`` differ), any other object by
    identity. (The compiled specialization keys objects by content where it can:
    :meth:`~flydsl.compiler.frontend.params.ParamSpec.key`.)"""
    if plain_constexpr(value):
        return (type(value), repr(value))
    return (type(value), Identity(value))


def check_smem_arg(smem, kernel: str) -> None:
    """Dynamic shared memory must be a non-negative int (checked before any launch)."""
    if not isinstance(smem, (int, np.integer)) or isinstance(smem, bool) or smem < 0:
        raise LaunchError(f"smem must be a non-negative int, got {smem!r}", kernel=kernel)


#: Launch limits every backend accepts (CUDA's, the tightest; HIP and the CPU
#: emulation allow at least as much), so a launch that runs on one runs on all.
MAX_BLOCK_THREADS = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
#: Threads along one dimension that ``block_idx * block_dim + thread_idx`` (Int32)
#: can number without wrapping.
MAX_THREADS_PER_DIM = 2**31 - 1
_DIMS: dict = {}


def dim3(value, what: str, kernel: str) -> tuple:
    """``value`` (int or up to 3 ints) as a validated 3-tuple; memoized for warm launches."""
    # the memo compares by ==: `grid=True`, `grid=2.0` or a host scalar equal to an int
    # would find that int's entry and skip the checks that refuse (or convert) it
    cls = value.__class__
    if lookalike(cls) or (cls is tuple and holds_lookalike(value)):
        return _dim3(value, what, kernel)
    try:
        hit = _DIMS.get((what, value))
    except TypeError:   # a list: unhashable, validate without memo
        return _dim3(value, what, kernel)
    if hit is not None:
        return hit
    dims = _dim3(value, what, kernel)
    if len(_DIMS) > 4096:
        _DIMS.clear()
    _DIMS[(what, value)] = dims
    return dims


_BOOL_TYPES = (bool, np.bool_)
_LOOKALIKE: dict = {int: False, type(None): False, tuple: False}


def lookalike(cls) -> bool:
    """Whether instances of ``cls`` are numbers that are not ints yet may compare (and
    hash) equal to one: bools, floats, numpy scalars, flydsl host scalars. A memo keyed
    by == must not answer for them. Cached per class."""
    hit = _LOOKALIKE.get(cls)
    if hit is None:
        hit = _LOOKALIKE[cls] = cls is not int and (
            issubclass(cls, (numbers.Number, np.generic))
            or hasattr(cls, "__index__") or hasattr(cls, "__float__"))
    return hit


def holds_lookalike(value) -> bool:
    """Whether a launch config, or one of its parts, is or holds a :func:`lookalike`
    number (one tuple level per call)."""
    cls = value.__class__
    if cls is not tuple:
        return lookalike(cls)
    for v in value:   # a loop, not any(<generator>): 2-3x faster on the warm path
        cls = v.__class__
        if lookalike(cls) or (cls is tuple and holds_lookalike(v)):
            return True
    return False


def _host_int(v) -> bool:
    """An integer host scalar other than int: FlyDSL's launchers compute grids as
    ``fx.Int64(n) // fx.Int64(c)`` outside the kernel (it has ``__index__``)."""
    if isinstance(v, (tuple, list, str, bytes, float)) or not hasattr(v, "__index__"):
        return False
    try:
        operator.index(v)
    except (TypeError, ValueError):
        return False
    return True


def _refuse_bool(value, what: str, kernel: str) -> None:
    raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, not bools: got "
                      f"{value!r}", kernel=kernel)


def _dim3(value, what: str, kernel: str) -> tuple:
    # A bool is refused where it is seen before the memo (equal ints share its entries).
    if isinstance(value, _BOOL_TYPES) or (
            isinstance(value, (tuple, list)) and any(isinstance(v, _BOOL_TYPES) for v in value)):
        _refuse_bool(value, what, kernel)
    if isinstance(value, (int, np.integer)) or _host_int(value):
        value = (value,)
    ok = isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(
        isinstance(v, (int, np.integer)) or _host_int(v) for v in value)
    if not ok:
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}",
                          kernel=kernel)
    dims = tuple(operator.index(v) for v in value) + (1,) * (3 - len(value))
    if any(d <= 0 for d in dims):
        raise LaunchError(f"every {what} dimension must be > 0, got {dims}", kernel=kernel)
    limits = MAX_GRID_DIMS if what == "grid" else MAX_BLOCK_DIMS
    for axis, d, limit in zip("xyz", dims, limits):
        if d > limit:
            raise LaunchError(f"{what}.{axis} = {d} is more than the {limit} every backend "
                              f"allows ({what} limits: x <= {limits[0]}, y <= {limits[1]}, "
                              f"z <= {limits[2]})", kernel=kernel)
    if what == "block" and dims[0] * dims[1] * dims[2] > MAX_BLOCK_THREADS:
        raise LaunchError(f"block {dims} has {dims[0] * dims[1] * dims[2]} threads; every "
                          f"backend allows at most {MAX_BLOCK_THREADS} per block", kernel=kernel)
    return dims


def check_extent(grid: tuple, block: tuple, kernel: str) -> None:
    """Refuse launches whose threads along one dimension Int32 indices cannot number:
    ``block_idx.x * block_dim.x + thread_idx.x`` would wrap negative and pass
    ``if i < n`` checks, silently."""
    for axis, g, b in zip("xyz", grid, block):
        if g * b > MAX_THREADS_PER_DIM:
            raise LaunchError(
                f"grid.{axis} * block.{axis} = {g} * {b} = {g * b} threads along {axis}, more "
                f"than the {MAX_THREADS_PER_DIM} that Int32 indices can count "
                f"(fx.block_idx.{axis} * fx.block_dim.{axis} + fx.thread_idx.{axis} would "
                "wrap); split the work over several launches or another grid dimension, "
                f"and compute wide indices with fx.Int64(fx.block_idx.{axis}) * "
                f"fx.block_dim.{axis}", kernel=kernel)
