"""Errors in ulps, for the math accuracy tests."""
import numpy as np


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulps of their float type: the distance between their bit patterns
    in float order (-0 and +0 are one point). NaN matches only NaN, an infinity only
    itself (an error of inf otherwise)."""
    def ordered(a):
        b = a.view(f"i{a.itemsize}").astype(np.int64)
        return np.where(b < 0, -(b & (2 ** (8 * a.itemsize - 1) - 1)), b)
    err = np.abs(ordered(got) - ordered(want)).astype(np.float64)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    err[nan_got | nan_want] = np.where(nan_got & nan_want, 0.0, np.inf)[nan_got | nan_want]
    inf_mismatch = (np.isinf(got) | np.isinf(want)) & (got != want) & ~(nan_got | nan_want)
    err[inf_mismatch] = np.inf
    return err


def worst(name, x, got, want, err) -> str:
    """The input, result and reference where ``err`` is largest."""
    i = int(np.argmax(err))
    where = ", ".join(repr(v[i]) for v in (x if isinstance(x, tuple) else (x,)))
    return f"{name}: {err[i]} ulp at ({where}): got {got[i]!r}, want {want[i]!r}"
