"""Every math function of issue 17 in Float16, BFloat16, Float32 and Float64, on every
backend:

* CPU: run, and its error in ulps asserted against numpy (Float64: numpy in long
  double, mpmath for erf/erfc) over every binade, the special values (+-0, +-inf, NaN,
  denormals), the overflow and underflow edges and near the function's zeros.
* ROCm: the same, run on the CPU through a backend whose pipeline is the CPU's plus
  the ROCm backend's own math pass (:mod:`flydsl.passes.math_portable`, IEEE
  arithmetic that rounds identically on an AMD GPU), so its bounds are measured, not
  assumed; and compiled for gfx942 down to a linked HSACO with no ``__ocml`` call.
* CUDA: compiled to PTX and accepted by ``ptxas`` (libdevice: not run here).

BOUNDS is the README's table ("Math" in the kernel language reference)."""
from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.backends import register_backend, unregister_backend
from flydsl.compiler.backends.base import GPUTarget, PythonPass
from flydsl.compiler.backends.cpu import CPU_WARP_SIZE, CpuBackend, host_arch
from ulps import ulp_error, worst

UNARY = ("exp2", "log2", "log1p", "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh",
         "erf", "erfc")
BINARY = ("pow", "atan2", "hypot", "copysign", "fmod")
NAMES = UNARY + BINARY
DTYPES = ("float16", "bfloat16", "float32", "float64")

#: Max error in ulps against the correctly rounded result: (backend, dtype) -> function
#: -> bound (the README's table). copysign and fmod are exact; Float16/BFloat16 are
#: computed in Float32 and rounded once.
_BOUND = {**dict.fromkeys(NAMES, 1), "copysign": 0, "fmod": 0}
#: On ROCm, Float32 (and so 16-bit) exp2 and log2 are the GPU's instructions (v_exp_f32,
#: v_log_f32): the CPU cannot run them, so they have no bound here.
ROCM_HARDWARE = ("exp2", "log2")
BOUNDS = {
    **{("cpu", dtype): _BOUND for dtype in DTYPES},
    **{("rocm", dtype): {name: bound for name, bound in _BOUND.items()
                         if dtype == "float64" or name not in ROCM_HARDWARE}
       for dtype in DTYPES},
}


@flydsl.kernel
def every_function(x: fx.Tensor, z: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        for k in fx.range_constexpr(len(UNARY)):
            y[k, i] = getattr(fx, UNARY[k])(x[k, i])
        for k in fx.range_constexpr(len(BINARY)):
            y[len(UNARY) + k, i] = getattr(fx, BINARY[k])(x[len(UNARY) + k, i],
                                                          z[len(UNARY) + k, i])


# -- a CPU backend running the ROCm backend's math ----------------------------------------

class CpuWithRocmMath(CpuBackend):
    """The CPU pipeline with fp-flags, then the ROCm backend's math pass, ahead of the
    CPU's own math: the ROCm code, flags and all, runs on the host."""

    name = "cpu_rocm_math"

    @classmethod
    def supports_target(cls, target):
        return target.backend == cls.name

    @classmethod
    def make_target(cls, arch):
        return GPUTarget(cls.name, host_arch(), CPU_WARP_SIZE)

    @classmethod
    def detect_target(cls):
        return cls.make_target(host_arch())

    def pipeline_fragments(self, options=None):
        out = []
        for fragment in super().pipeline_fragments(options):
            name = getattr(fragment, "name", None)
            if name == "fp-flags":
                continue
            if name == "math-approx":
                out += [PythonPass("fp-flags", "flydsl.passes.fp_flags:run"),
                        PythonPass("portable-math", "flydsl.passes.math_portable:run")]
            out.append(fragment)
        assert "portable-math" in [getattr(f, "name", None) for f in out]
        return out


@pytest.fixture(scope="module")
def rocm_math_on_cpu():
    register_backend(CpuWithRocmMath, name=CpuWithRocmMath.name)
    yield CpuWithRocmMath.name
    unregister_backend(CpuWithRocmMath.name)


# -- floats of each dtype as bit patterns ----------------------------------------------------

class Format:
    """A float format: its values as float64, from and to bit patterns."""

    def __init__(self, name: str):
        self.name = name
        self.bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}[name]
        self.uint = np.dtype(f"u{self.bits // 8}")

    def from_bits(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, self.uint)
        if self.name == "bfloat16":
            return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return b.view({16: np.float16, 32: np.float32, 64: np.float64}[self.bits]) \
            .astype(np.float64)

    def round(self, v) -> np.ndarray:
        """float64 (or long double) values rounded to this format, as float64."""
        v = np.asarray(v)
        if self.name == "bfloat16":
            return round_to_bfloat16(v.astype(np.float64))
        return v.astype(self.name).astype(np.float64)

    def to_bits(self, v: np.ndarray) -> np.ndarray:
        v = self.round(v)
        if self.name == "bfloat16":
            return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return v.astype(self.name).view(self.uint)

    def tensor(self, v: np.ndarray):
        """``v`` as the kernel's argument: numpy, or a torch tensor for bfloat16."""
        if self.name == "bfloat16":
            import torch
            return torch.from_numpy(self.to_bits(v).view(np.int16)).view(torch.bfloat16)
        return v.astype(self.name)

    def values(self, t) -> np.ndarray:
        if self.name == "bfloat16":
            return t.float().numpy().astype(np.float64)
        return t.astype(np.float64)

    def neighbours(self, v: np.ndarray) -> np.ndarray:
        """``v`` rounded, and the floats just above and below (finite ones)."""
        b = self.to_bits(v[np.isfinite(v)]).astype(np.int64)
        sign = 1 << (self.bits - 1)
        near = np.concatenate([b, b + 1, b - 1])
        near = near[(near >= 0) & (near < (1 << self.bits)) & ((near & (sign - 1)) != 0)]
        return np.concatenate([self.from_bits(near.astype(self.uint)), v[~np.isfinite(v)]])

    @property
    def info(self):
        return np.finfo(np.float32 if self.name == "bfloat16" else self.name)

    @property
    def mant(self) -> int:
        return {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[self.name]

    @property
    def max(self) -> float:
        return float(self.from_bits(np.array([(1 << (self.bits - 1)) - (1 << self.mant) - 1]))[0])

    @property
    def tiny(self) -> float:
        """The smallest denormal."""
        return float(self.from_bits(np.array([1]))[0])


def round_to_bfloat16(v: np.ndarray) -> np.ndarray:
    """float64 values rounded once to bfloat16 (8 significant bits, float32's exponent
    range, denormals down to 2^-133), ties to even."""
    with np.errstate(over="ignore", invalid="ignore"):
        quantum = np.maximum(np.frexp(v)[1], -125) - 8
        r = np.ldexp(np.rint(np.ldexp(v, -quantum)), quantum)
        r = np.where(np.abs(r) > 3.3895313892515355e38, np.copysign(np.inf, v), r)
    return np.where(np.isfinite(v), r, v)


# -- the inputs ---------------------------------------------------------------------------

def rng(*key) -> np.random.Generator:
    """Random numbers that depend only on ``key``, not on which tests ran before."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def every_binade(f: Format, per_binade: int) -> np.ndarray:
    """Random mantissas in every exponent (denormals included), both signs; every
    value of a 16-bit format."""
    if f.bits == 16:
        return f.from_bits(np.arange(1 << 16))
    exp_bits = f.bits - 1 - f.mant
    exps = np.repeat(np.arange((1 << exp_bits) - 1, dtype=np.uint64), per_binade)
    mants = rng(f.name).integers(0, 1 << f.mant, exps.size, dtype=np.uint64)
    pos = f.from_bits(((exps << np.uint64(f.mant)) | mants).astype(f.uint))
    return np.concatenate([pos, -pos])


def specials(f: Format) -> np.ndarray:
    smallest_normal = float(f.info.smallest_normal)
    v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 10.0, f.tiny,
                  -f.tiny, 3 * f.tiny, smallest_normal, -smallest_normal,
                  smallest_normal * (1 - 2.0 ** -f.mant), f.max, -f.max])
    return np.concatenate([f.neighbours(v), [np.nan, np.inf, -np.inf]])


def near_half_pi_multiples(f: Format) -> np.ndarray:
    """The floats nearest k pi/2 for k up to 2^1000 (within range), and the double
    nearest a multiple of pi/2 of all (its remainder is 2^-61 of it)."""
    import mpmath
    mpmath.mp.dps = 400
    ks = [2 ** j + d for j in range(0, 1020, 7) for d in (-1, 0, 1)] + list(range(1, 64))
    near = [float(k * mpmath.pi / 2) for k in ks if k * 1.5707963 < f.max]
    return f.neighbours(np.array(near + [6381956970095103 * 2.0 ** 797]))


def _edges(name: str, f: Format) -> tuple[list, tuple]:
    """Where ``name`` overflows, underflows, switches formula or is 0 (and their
    negatives), and a range to sample densely."""
    lo_exp, hi_exp = math.log(f.tiny), math.log(f.max)
    log_like = ([1.0, 2.0, 0.5, 0.7071067811865476, 1.4142135623730951], (0, 4))
    return {
        "exp2": ([math.log2(f.max), math.log2(f.tiny), math.log2(f.tiny) - 1,
                  math.log2(float(f.info.smallest_normal)), 0.5],
                 (math.log2(f.tiny) - 2, math.log2(f.max) + 2)),
        "exp": ([hi_exp, lo_exp, lo_exp - 1, 0.35], (lo_exp - 2, hi_exp + 2)),
        "expm1": ([hi_exp, lo_exp, -17.0, -37.0, -40.0, 0.35, 0.7, 1e-8], (-40, hi_exp + 1)),
        "log2": log_like, "log": log_like, "log10": log_like,
        "log1p": ([-1.0, -0.5, 1e-8, 0.4142135623730951, -0.2928932188134524], (-1, 2)),
        "tan": ([], (-8, 8)), "sin": ([], (-8, 8)), "cos": ([], (-8, 8)),
        "asin": ([0.5, 0.999, 1e-8], (-1, 1)), "acos": ([0.5, 0.999, 1e-8], (-1, 1)),
        "atan": ([7 / 16, 11 / 16, 19 / 16, 39 / 16, 1e8], (-4, 4)),
        "sinh": ([hi_exp + math.log(2), 22.0, 1.0, 1e-8], (-hi_exp - 1.5, hi_exp + 1.5)),
        "cosh": ([hi_exp + math.log(2), 22.0, 1.0], (-hi_exp - 1.5, hi_exp + 1.5)),
        "tanh": ([22.0, 1e-8, 0.5], (-25, 25)),
        "asinh": ([2.0 ** 28, 1e-8, 1.0], (-20, 20)),
        "acosh": ([1.0, 2.0, 2.0 ** 28], (1, 10)),
        "atanh": ([0.5, 1.0, 0.999, 1e-8], (-1, 1)),
        "erf": ([0.84375, 1.25, 2.5, 6.0, 3.92, 1e-8], (-6.5, 6.5)),
        "erfc": ([0.5, 0.84375, 1.25, 2.5, 6.0, 10.05, 26.55, 27.2, 28.0],
                 (-6.5, 28.5 if f.bits == 64 else 11)),
        "rsqrt": ([1.0, 4.0, f.tiny], (0, 100)),
    }[name]


def unary_inputs(name: str, f: Format) -> np.ndarray:
    """Every binade (every value of a 16-bit format), the special values, the edges of
    ``name`` and their neighbours, and a dense sample where it is not flat."""
    edges, dense = _edges(name, f)
    base = [every_binade(f, {32: 160, 64: 16}.get(f.bits, 0)), specials(f),
            f.neighbours(np.array(edges + [-e for e in edges]))]
    if name in ("tan", "sin", "cos"):
        base.append(near_half_pi_multiples(f))
    if f.bits > 16:
        base.append(f.round(rng(name, f.name).uniform(*dense, 20000)))
    return np.concatenate(base)


def binary_inputs(name: str, f: Format, count: int) -> tuple[np.ndarray, np.ndarray]:
    every = every_binade(f, {32: 160, 64: 16}.get(f.bits, 0))
    random = rng(name, f.name)
    s = specials(f)
    sx, sz = (a.ravel() for a in np.meshgrid(s, s))   # every pair of special values
    x = [f.round(random.choice(every, count)), sx]
    z = [f.round(random.choice(every, count)), sz]
    if name == "pow":
        pos = np.abs(random.choice(every, count))
        pos = pos[(pos > 0) & np.isfinite(pos) & (pos != 1)]
        # results across the whole range, up to |y log x| = 745 (needs log x to 2^-64)
        target = random.uniform(math.log(f.tiny) - 2, math.log(f.max) + 2, pos.size)
        x += [pos, -pos[: pos.size // 4]]
        with np.errstate(divide="ignore"):
            z += [f.round(target / np.log(pos)), np.round(random.uniform(-60, 60, pos.size // 4))]
        x.append(f.round(random.uniform(0, 4, count)))
        z.append(f.round(random.uniform(-30, 30, count)))
    if name == "fmod":   # quotients of all sizes, and exact multiples (a zero remainder)
        q = np.round(random.uniform(1, 2 ** min(f.mant, 20), count))
        d = f.round(random.uniform(0.5, 3, count))
        x.append(f.round(q * d))
        z.append(d)
    if name in ("atan2", "hypot"):
        x.append(f.round(random.uniform(-3, 3, count)))
        z.append(f.round(random.uniform(-3, 3, count)))
    return np.concatenate(x), np.concatenate(z)


def all_inputs(f: Format, names: tuple) -> tuple[np.ndarray, np.ndarray]:
    """One row of x (and z) per function of ``names``, padded to one length."""
    count = 30000 if f.bits == 64 else 60000
    rows = [binary_inputs(n, f, count) if n in BINARY else (unary_inputs(n, f), None)
            for n in names]
    width = max(r[0].size for r in rows)
    x = np.stack([np.resize(r[0], width) for r in rows])
    z = np.stack([np.resize(r[1], width) if r[1] is not None else np.zeros(width)
                  for r in rows])
    return x, z


# -- the references -------------------------------------------------------------------------

_NUMPY = {"exp2": np.exp2, "log2": np.log2, "log1p": np.log1p, "expm1": np.expm1,
          "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
          "sinh": np.sinh, "cosh": np.cosh, "pow": np.power, "atan2": np.arctan2,
          "hypot": np.hypot, "copysign": np.copysign, "fmod": np.fmod, "exp": np.exp,
          "log": np.log, "log10": np.log10, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
          "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
          "rsqrt": lambda v: 1 / np.sqrt(v)}
_LONG_DOUBLE = np.finfo(np.longdouble).nmant >= 63   # x86's 80-bit long double


def _mp_erf(name: str, x: np.ndarray) -> np.ndarray:
    """erf/erfc to 30 digits (mpmath), only where the result is not saturated."""
    import mpmath
    mpmath.mp.dps = 30
    fn = mpmath.erf if name == "erf" else mpmath.erfc
    out = np.empty(x.size)
    with np.errstate(invalid="ignore"):
        if name == "erf":
            out[:] = np.where(np.abs(x) < 1e-30, x * (2 / math.sqrt(math.pi)), np.sign(x))
            todo = (np.abs(x) >= 1e-30) & (np.abs(x) < 7)
        else:
            out[:] = np.where(x < -7, 2.0, np.where(np.abs(x) < 1e-30, 1.0, 0.0))
            todo = (np.abs(x) >= 1e-30) & (x < 28) & (x > -7)
    out[np.isnan(x)] = np.nan
    values, where = np.unique(x[todo], return_inverse=True)
    out[todo] = np.array([float(fn(mpmath.mpf(float(v)))) for v in values])[where]
    return out


def exact(name: str, f: Format, x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The result to more than ``f``'s precision: numpy in float64 for the narrower
    formats, in long double (11 more bits) for float64; erf and erfc from math or
    mpmath."""
    with np.errstate(all="ignore"):
        if name in ("erf", "erfc"):
            if f.bits == 64:
                return _mp_erf(name, x)
            return np.frompyfunc(getattr(math, name), 1, 1)(x).astype(np.float64)
        wide = np.longdouble if f.bits == 64 and _LONG_DOUBLE else np.float64
        args = (x.astype(wide), z.astype(wide)) if name in BINARY else (x.astype(wide),)
        return _NUMPY[name](*args)


def flush(f: Format, v: np.ndarray) -> np.ndarray:
    """``v`` with the values below ``f``'s smallest normal made +-0."""
    return np.where(np.abs(v) < float(f.info.smallest_normal), np.copysign(0.0, v), v)


# -- running -------------------------------------------------------------------------------

def run(kernel, f: Format, x: np.ndarray, z: np.ndarray) -> np.ndarray:
    y = f.tensor(np.zeros_like(x))
    n = x.shape[1]
    kernel[(n + 255) // 256, 256](f.tensor(x), f.tensor(z), y, n)
    return f.values(y)


def errors(f: Format, names: tuple, x, z, got) -> dict:
    """name -> (max error in ulps against the correctly rounded result, where)."""
    out = {}
    for k, name in enumerate(names):
        want = f.round(exact(name, f, x[k], z[k]))
        err = _ulps(f, got[k], want)
        if f.name == "bfloat16":
            # the CPU's bfloat16 conversions (AVX512-BF16) flush denormals to zero, of
            # the operands and of the Float32 result: either way is right here
            ftz = exact(name, f, flush(f, x[k]), flush(f, z[k]))
            for alternative in (f.round(flush(f, want)), f.round(ftz), f.round(flush(f, ftz))):
                err = np.minimum(err, _ulps(f, got[k], alternative))
        where = (x[k], z[k]) if name in BINARY else x[k]
        out[name] = (float(err.max()), worst(name, where, got[k], want, err))
    return out


def _ulps(f: Format, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if f.name == "bfloat16":   # ulps of the float32 holding the bfloat16 values
        return ulp_error(got.astype(np.float32), want.astype(np.float32)) / 2 ** 16
    return ulp_error(got.astype(f.name), want.astype(f.name))


def assert_within(measured: dict, bounds: dict) -> None:
    """Every function of ``bounds`` within its bound."""
    over = [measured[name][1] for name, bound in bounds.items() if measured[name][0] > bound]
    assert not over, "\n".join(over)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", ["cpu", "rocm"])
def test_accuracy_in_ulps(backend, dtype, rocm_math_on_cpu, monkeypatch):
    if backend == "rocm":
        monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", rocm_math_on_cpu)
    f = Format(dtype)
    x, z = all_inputs(f, NAMES)
    assert_within(errors(f, NAMES, x, z, run(every_function, f, x, z)),
                  BOUNDS[(backend, dtype)])


#: Other functions computed with IEEE arithmetic (no AMDGPU instruction, no libm call on
#: the CPU): (backend, dtype) -> function -> bound. (On the CPU, Float64 exp, log, log10,
#: sin, cos, tanh are libm's.)
_INVERSE_HYPERBOLIC = {"asinh": 1, "acosh": 1, "atanh": 1}
OTHERS = {
    ("rocm", "float64"): {"exp": 1, "log": 1, "log10": 1, "sin": 1, "cos": 1, "tanh": 2,
                          "rsqrt": 1, **_INVERSE_HYPERBOLIC, "acosh": 2},
    ("rocm", "float32"): _INVERSE_HYPERBOLIC,
    ("cpu", "float64"): {**_INVERSE_HYPERBOLIC, "acosh": 2},
    ("cpu", "float32"): _INVERSE_HYPERBOLIC,
}


@flydsl.kernel
def other_functions(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, NAMES: fx.Constexpr):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        for k in fx.range_constexpr(len(NAMES)):
            y[k, i] = getattr(fx, NAMES[k])(x[k, i])


@pytest.mark.parametrize("backend,dtype", sorted(OTHERS))
def test_accuracy_of_the_other_functions(backend, dtype, rocm_math_on_cpu, monkeypatch):
    if backend == "rocm":
        monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", rocm_math_on_cpu)
    f, names = Format(dtype), tuple(OTHERS[(backend, dtype)])
    x, z = all_inputs(f, names)
    y = np.zeros(x.shape, dtype)
    other_functions[(x.shape[1] + 255) // 256, 256](x.astype(dtype), y, x.shape[1], names)
    assert_within(errors(f, names, x, z, y.astype(np.float64)), OTHERS[(backend, dtype)])


# -- GPU code: PTX that ptxas accepts; AMDGPU code with nothing left to link ------------------

def _arguments(f: Format, rows: int = len(NAMES), n: int = 64) -> tuple:
    x = np.zeros((rows, n))
    return f.tensor(x), f.tensor(x), f.tensor(x), n


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_compiles_every_function_and_ptxas_accepts_it(dtype):
    prog = flydsl.compile(every_function, *_arguments(Format(dtype)), backend="cuda",
                          arch="sm_90")
    ptx = prog.asm["ptx"]
    assert ".entry" in ptx and not re.search(r"\.extern\s+\.func", ptx)   # libdevice linked
    assert prog.asm["cubin"][:4] == b"\x7fELF"   # ptxas compiled it


@pytest.mark.parametrize("dtype", DTYPES)
def test_rocm_compiles_every_function_without_device_libraries(dtype):
    prog = flydsl.compile(every_function, *_arguments(Format(dtype)), backend="rocm",
                          arch="gfx942")
    gcn = prog.asm["amdgcn"]
    assert "v_fma_f64" in gcn or dtype != "float64"
    assert not re.search(r"__ocml|__ockl|s_swappc", gcn), "a call is left"
    assert prog.asm["hsaco"][:4] == b"\x7fELF"   # linked with --no-undefined


def test_rocm_pass_rewrites_vectors_too():
    """Vector math (from fragments) gets the same code: only ops with an AMDGPU
    instruction are left, and the result lowers to LLVM."""
    import mlir.ir as ir
    from mlir.passmanager import PassManager

    from flydsl.passes import math_portable
    lines = []
    for k, (name, width) in enumerate(math_portable.ROCM_TABLE):
        operands = f"%a{width}, %a{width}" if name in ("math.atan2", "math.powf",
                                                       "arith.remf") else f"%a{width}"
        lines.append(f"%r{k} = {name} {operands} : vector<2xf{width}>\n"
                     f"vector.print %r{k} : vector<2xf{width}>")
    src = ("func.func @f(%a16: vector<2xf16>, %a32: vector<2xf32>, %a64: vector<2xf64>) {\n"
           + "\n".join(lines) + "\nreturn\n}")
    with ir.Context():
        module = ir.Module.parse(src)
        math_portable.run(module)
        assert module.operation.verify()
        left = set(re.findall(r"\b(math\.\w+|arith\.remf)", str(module)))
        assert left <= {"math.absf", "math.copysign", "math.fma", "math.sqrt", "math.trunc",
                        "math.roundeven"}, left
        PassManager.parse("builtin.module(convert-scf-to-cf,convert-vector-to-llvm,"
                          "convert-math-to-llvm,convert-to-llvm,reconcile-unrealized-casts)"
                          ).run(module.operation)


# -- FLYDSL_FAST_MATH: compensated formulas keep their rounding ---------------------------------

@flydsl.kernel
def compensated(x: fx.Tensor, z: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[0, i] = fx.expm1(x[0, i])
        y[1, i] = fx.log1p(x[1, i])
        y[2, i] = fx.hypot(x[2, i], z[2, i])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_math_keeps_compensated_math_exact(dtype, monkeypatch):
    """``fast`` (reassociation, no NaN/inf) on expm1's and log1p's error terms made
    log1p millions of ulps wrong; their ops carry their own flags, which fp_flags keeps.
    Finite arguments and results only: fast math may change the special values."""
    monkeypatch.setenv("FLYDSL_FAST_MATH", "1")
    f, names = Format(dtype), ("expm1", "log1p", "hypot")
    x, z = all_inputs(f, names)
    y = np.zeros(x.shape, dtype)
    compensated[(x.shape[1] + 255) // 256, 256](x.astype(dtype), z.astype(dtype), y, x.shape[1])
    want = np.stack([f.round(exact(name, f, x[k], z[k])) for k, name in enumerate(names)])
    finite = np.isfinite(x) & np.isfinite(z) & np.isfinite(want)
    measured = errors(f, names, np.where(finite, x, 0.0), np.where(finite, z, 0.0),
                      np.where(finite, y.astype(np.float64), 0.0))
    assert_within(measured, dict.fromkeys(names, 1))


@flydsl.kernel
def erfc_kernel(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    out[i] = fx.erfc(x[i])


@pytest.mark.parametrize("backend", ["cpu", "rocm"])
def test_erfc_where_one_minus_erf_is_zero(backend, rocm_math_on_cpu, monkeypatch):
    if backend == "rocm":
        monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", rocm_math_on_cpu)
    x = np.array([10.0, 26.0, -3.0, 0.0])
    out = np.zeros_like(x)
    erfc_kernel[1, 4](x, out)
    want = np.array([2.088487583762545e-45, 5.663192408856143e-296, 1.9999779095030015, 1.0])
    assert ulp_error(out, want).max() <= 1, out   # 1 - erf(x) would be 0 for the first two
