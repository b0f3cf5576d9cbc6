"""The random library's one implementation (FlyDSL's ``fx.random.universal``).

Philox 4x32 and 4x64 with Triton's constants, key layout and round order, and the
conversions of its words to uniform and normal ``Float32``. Every function works in
two modes with the same arithmetic:

* inside a kernel trace, on kernel values (and Python ints, which become constants):
  it emits the multiplies, shifts and xors;
* on the host, on Python ints and host scalars (``fx.Uint32(7)`` outside a kernel):
  it computes the words in Python and returns host scalars (``.value``, ``.dtype``),
  the reference the kernel code is tested against.

A 32-bit word's high half of a product comes from a 64-bit multiply, a 64-bit word's
from a 128-bit one (``fx.Uint128``), so no target intrinsic is needed.
"""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from ...expr import implementation as _impl
from ...expr.dtypes import Float32, Int32, Int64, UInt32, UInt64, UInt128
from ...expr.host_scalar import HostScalar, call_type

__all__ = ["randint", "randint4x", "rand", "rand4x", "randn", "randn4x"]

#: Philox 4x32: round multipliers and key increments (the golden ratio and sqrt(3) - 1).
PHILOX32_ROUND = (0xD2511F53, 0xCD9E8D57)
PHILOX32_KEY_STEP = (0x9E3779B9, 0xBB67AE85)
#: Philox 4x64 (Triton's constants).
PHILOX64_ROUND = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
PHILOX64_KEY_STEP = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
#: ``uint_to_uniform_float``'s scale per word width: just under 2**-31 and 2**-63, so
#: the largest folded word rounds to a Float32 below 1.0.
UNIFORM_SCALE = {32: 4.6566127342e-10, 64: 1.0842020432385337e-19}
#: Box-Muller's floor on its first uniform (keeps ``log`` finite) and 2*pi.
UNIFORM_FLOOR = 1.0e-7
TWO_PI = 6.283185307179586

Word = Any      # a kernel value, a host scalar or a Python int


def _in_kernel() -> bool:
    """Whether a kernel trace is in progress (then the functions emit code)."""
    return _impl._ops is not None and _impl._tracing() is not None


def _width(word: Word, what: str) -> int:
    """Bits of ``word``: its dtype's; a Python int is an Int32 when it fits, else an
    Int64 (``fx.as_numeric``'s rule). Only 32- and 64-bit words are accepted."""
    dtype = getattr(word, "dtype", None)
    if dtype is not None and hasattr(dtype, "bits"):
        width = dtype.bits
    elif isinstance(word, int) and not isinstance(word, bool):
        width = 32 if -(1 << 31) <= word < (1 << 31) else 64
    else:
        raise TypeError(f"{what}: expected an integer value, got {word!r}")
    if width not in (32, 64):
        raise NotImplementedError(f"{what} is only implemented for 32- or 64-bit words, "
                                  f"got a {width}-bit {getattr(dtype, 'name', 'value')}")
    return width


def _offset_words(offset: Word) -> Tuple[Word, Word]:
    """Counter words 0 and 1 from ``offset``: its low 32 bits, and its next 32 bits
    when it is wider than 32 bits (else a constant zero, leaving 32-bit streams as they
    are)."""
    low = call_type(UInt32, offset)
    if _width(offset, "randint4x offset") > 32:
        return low, call_type(UInt32, call_type(UInt64, offset) >> 32)
    return low, call_type(UInt32, 0)


def philox_impl(c0: Word, c1: Word, c2: Word, c3: Word, k0: Word, k1: Word,
                n_rounds: int = 10) -> Tuple[Word, Word, Word, Word]:
    """``n_rounds`` Philox rounds on the counter ``(c0, c1, c2, c3)`` with key
    ``(k0, k1)``; the width of ``c0`` (32 or 64 bits) picks Philox 4x32 or 4x64.

    Each round multiplies ``c0`` and ``c2`` into double-width products and keeps both
    halves (Triton's ``umulhi`` and wrapping ``mul``), then bumps the key.

    Returns: the four words, of type ``Uint32`` or ``Uint64``.
    """
    if _width(c0, "philox") == 32:
        word, wide, bits = UInt32, UInt64, 32
        (mul_a, mul_b), (step_a, step_b) = PHILOX32_ROUND, PHILOX32_KEY_STEP
    else:
        word, wide, bits = UInt64, UInt128, 64
        (mul_a, mul_b), (step_a, step_b) = PHILOX64_ROUND, PHILOX64_KEY_STEP

    def w(v):
        return call_type(word, v)

    c0, c1, c2, c3, k0, k1 = (w(v) for v in (c0, c1, c2, c3, k0, k1))
    # The multipliers widen from word constants (a 128-bit constant above 2**63 is not
    # one MLIR's Python bindings build).
    wide_b, wide_a = call_type(wide, w(mul_b)), call_type(wide, w(mul_a))
    for _ in range(n_rounds):
        prod_b = call_type(wide, c2) * wide_b
        prod_a = call_type(wide, c0) * wide_a
        c0, c1, c2, c3 = (w(w(prod_b >> bits) ^ c1 ^ k0), w(prod_b),
                          w(w(prod_a >> bits) ^ c3 ^ k1), w(prod_a))
        k0, k1 = w(k0 + step_a), w(k1 + step_b)
    return c0, c1, c2, c3


def philox(seed: Word, c0: Word, c1: Word, c2: Word, c3: Word,
           n_rounds: int = 10) -> Tuple[Word, Word, Word, Word]:
    """Philox keyed by ``seed``: for 32-bit counters the seed, widened to 64 bits (a
    signed seed sign-extends), gives key word 0 its low and key word 1 its high half;
    for 64-bit counters it is key word 0 and key word 1 is zero (Triton's layout)."""
    wide_seed = call_type(UInt64, seed)
    if _width(c0, "philox") == 32:
        k0, k1 = call_type(UInt32, wide_seed), call_type(UInt32, wide_seed >> 32)
    else:
        k0, k1 = wide_seed, call_type(UInt64, 0)
    return philox_impl(c0, c1, c2, c3, k0, k1, n_rounds)


def randint4x(seed: Word, offset: Word, n_rounds: int = 10) -> Tuple[Word, Word, Word, Word]:
    """Four ``Uint32`` random words for ``(seed, offset)`` (Triton's and FlyDSL's
    ``randint4x``): Philox 4x32 with ``n_rounds`` rounds on the counter ``(offset low,
    offset high, 0, 0)``.

    Example: ``r0, r1, r2, r3 = fx.random.randint4x(seed, fx.Uint32(i))``
    """
    low, high = _offset_words(offset)
    zero = call_type(UInt32, 0)
    return philox(seed, low, high, zero, zero, n_rounds)


def randint(seed: Word, offset: Word, n_rounds: int = 10) -> Word:
    """The first word of :func:`randint4x` (a ``Uint32``); use ``randint4x`` for
    four words per offset at the cost of one."""
    return randint4x(seed, offset, n_rounds)[0]


def uint_to_uniform_float(word: Word) -> Word:
    """A random 32- or 64-bit ``word`` as a ``Float32`` in ``[0, 1)``: read as a
    signed integer, negatives folded onto ``-w - 1``, times just under ``2**-31``
    (``2**-63``)."""
    bits = _width(word, "uniform conversion")
    signed_type = Int32 if bits == 32 else Int64
    scale = UNIFORM_SCALE[bits]
    if not _in_kernel():
        signed = call_type(signed_type, word).value
        folded = -signed - 1 if signed < 0 else signed
        return HostScalar(float(np.float32(folded) * np.float32(scale)), Float32)
    signed = call_type(signed_type, word)
    folded = (signed < 0).select(-signed - 1, signed)
    return call_type(Float32, folded) * call_type(Float32, scale)


def pair_uniform_to_normal(u1: Word, u2: Word) -> Tuple[Word, Word]:
    """Box-Muller: two uniforms to two independent standard normals
    ``r cos(2 pi u2)`` and ``r sin(2 pi u2)``, ``r = sqrt(-2 log(max(u1, 1e-7)))``."""
    if not _in_kernel():
        a = np.maximum(np.float32(float(u1)), np.float32(UNIFORM_FLOOR))
        theta = np.float32(TWO_PI) * np.float32(float(u2))
        r = np.sqrt(np.float32(-2.0) * np.log(a))
        return (HostScalar(float(r * np.cos(theta)), Float32),
                HostScalar(float(r * np.sin(theta)), Float32))
    from ...expr import builtins as fx
    u1 = fx.max(u1, call_type(Float32, UNIFORM_FLOOR))
    theta = call_type(Float32, TWO_PI) * u2
    r = fx.sqrt(call_type(Float32, -2.0) * fx.log(u1))
    return r * fx.cos(theta), r * fx.sin(theta)


def rand(seed: Word, offset: Word, n_rounds: int = 10) -> Word:
    """One ``Float32`` uniform in ``[0, 1)``: the first word of :func:`randint4x`
    through :func:`uint_to_uniform_float`."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


def rand4x(seed: Word, offset: Word, n_rounds: int = 10) -> Tuple[Word, Word, Word, Word]:
    """Four ``Float32`` uniforms in ``[0, 1)``, one per word of :func:`randint4x`."""
    return tuple(uint_to_uniform_float(w) for w in randint4x(seed, offset, n_rounds))


def randn(seed: Word, offset: Word, n_rounds: int = 10) -> Word:
    """One ``Float32`` standard normal: Box-Muller on the first two uniforms of
    :func:`rand4x` (the cosine one)."""
    w0, w1, _, _ = randint4x(seed, offset, n_rounds)
    return pair_uniform_to_normal(uint_to_uniform_float(w0), uint_to_uniform_float(w1))[0]


def randn4x(seed: Word, offset: Word, n_rounds: int = 10) -> Tuple[Word, Word, Word, Word]:
    """Four ``Float32`` standard normals: Box-Muller on uniforms 0, 1 and on 2, 3 of
    :func:`rand4x`."""
    u0, u1, u2, u3 = rand4x(seed, offset, n_rounds)
    return pair_uniform_to_normal(u0, u1) + pair_uniform_to_normal(u2, u3)
