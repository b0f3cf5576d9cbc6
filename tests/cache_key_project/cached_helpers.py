"""Helpers behind functools decorators."""
import functools


@functools.lru_cache(maxsize=None)
def tripled(v):
    return v * 3.0


def scaled(v, s):
    return v * s


by_partial = functools.partial(scaled, s=2.0)
