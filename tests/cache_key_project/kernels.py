"""One kernel per way of reading a value the cache key must follow."""
import os

import flydsl
import flydsl.expr as fx

import cached_helpers
import helpers
import settings


class Cfg:
    """A plain object: no content hash of its own."""

    def __init__(self, s):
        self.s = s


class Tools:
    K = 1.0

    @staticmethod
    def plus_one(v):
        return v + 1.0

    @classmethod
    def plus_k(cls, v):
        return v + cls.K


class Hashed:
    """An object that says what its content is."""

    def __init__(self, s):
        self.s = s

    def __flydsl_hash__(self):
        return self.s

    def __eq__(self, other):
        return isinstance(other, Hashed) and other.s == self.s

    def __hash__(self):
        return hash(self.s)


class Ctx:
    """An object a kernel makes while tracing and calls methods of (FlyDSL's attention
    kernels build their context objects so)."""

    def __init__(self, v):
        self.v = v * 1.0

    def scaled(self):
        return self.plus(self.v * 2.0)

    @flydsl.jit
    def plus(self, v):
        return v + 0.0


GLOBAL_OBJ = Cfg(2.0)
NESTED = ((((((((((2.0,),),),),),),),),),)


def with_closure(cfg):
    @flydsl.kernel
    def from_closure(x: fx.Tensor, y: fx.Tensor):
        y[0] = x[0] * cfg.s
    return from_closure


@flydsl.kernel
def from_constexpr(x: fx.Tensor, y: fx.Tensor, cfg: fx.Constexpr):
    y[0] = x[0] * cfg.s


@flydsl.kernel
def from_env_at_import(x: fx.Tensor, y: fx.Tensor):
    y[0] = x[0] * settings.SCALE


@flydsl.kernel
def from_other_module(x: fx.Tensor, y: fx.Tensor):
    y[0] = helpers.twice(x[0])


@flydsl.kernel
def from_staticmethod(x: fx.Tensor, y: fx.Tensor):
    y[0] = Tools.plus_one(x[0])


@flydsl.kernel
def from_classmethod(x: fx.Tensor, y: fx.Tensor):
    y[0] = Tools.plus_k(x[0])


@flydsl.kernel
def from_lru_cache(x: fx.Tensor, y: fx.Tensor):
    y[0] = cached_helpers.tripled(x[0])


@flydsl.kernel
def from_partial(x: fx.Tensor, y: fx.Tensor):
    y[0] = cached_helpers.by_partial(x[0])


@flydsl.kernel
def from_global_object(x: fx.Tensor, y: fx.Tensor):
    y[0] = x[0] * GLOBAL_OBJ.s


@flydsl.kernel
def from_deep_constant(x: fx.Tensor, y: fx.Tensor):
    y[0] = x[0] * NESTED[0][0][0][0][0][0][0][0][0][0]


@flydsl.kernel
def from_instance_method(x: fx.Tensor, y: fx.Tensor):
    y[0] = Ctx(x[0]).scaled()


def env_factor():
    return float(os.environ.get("CK_ENV", "2.0"))   # read while tracing (FlyDSL's kernels do)


@flydsl.kernel
def from_environment(x: fx.Tensor, y: fx.Tensor):
    y[0] = x[0] * env_factor()


@flydsl.kernel
def from_hashed_constexpr(x: fx.Tensor, y: fx.Tensor, h: fx.Constexpr):
    if h == Hashed(3.0):        # used as data: needs its content hash
        y[0] = x[0] * 3.0
    else:
        y[0] = x[0] * h.s


@flydsl.kernel
def from_unhashable(x: fx.Tensor, y: fx.Tensor, cfg: fx.Constexpr):
    if cfg == GLOBAL_OBJ:       # a plain object used as data: memory only
        y[0] = x[0]
    else:
        y[0] = x[0] * cfg.s
