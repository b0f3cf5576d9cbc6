"""The CPU backend's MMA atoms (MFMA, mma.sync): what a call costs in traced operations
and what it computes.

A call of ``fx.gemm`` over ``(values, m, k)`` fragments runs its ``rm * rn * rk`` atoms
as runtime loops: its traced size does not grow with the number of atoms (FlyDSL's
preshuffle GEMM issues 96 such calls of up to 32 atoms; unrolled, its kernel was past
FLYDSL_TRACE_OP_LIMIT). Numerics: every accumulator is ``fma(a, b, acc)`` over k in
order, products exact (f16, bf16 and fp8 products fit in f32), int8 in i32: checked
against a sequential numpy reference with values whose sums round."""
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError
from flydsl.expr import mma_layouts


@flydsl.kernel
def tiled_gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, op: fx.Constexpr,
               rm: fx.Constexpr[int], rn: fx.Constexpr[int], rk: fx.Constexpr[int],
               calls: fx.Constexpr[int]):
    """C = calls * (A @ B.T) over one tile of rm x rn atoms and rk atom K steps: the
    fragments are filled and read back by runtime loops (the atoms' lane tables), the
    product is ``calls`` calls of fx.gemm on the whole tile."""
    tid = fx.thread_idx.x
    atom = fx.make_mma_atom(op)
    a_tv, b_tv, c_tv = atom.layout_A_tv, atom.layout_B_tv, atom.layout_C_tv
    m, n, k = atom.shape_mnk.unpack()
    lanes = fx.size(a_tv[0])
    lane = tid % lanes
    na, nb, nc = fx.size(a_tv[1]), fx.size(b_tv[1]), fx.size(c_tv[1])
    fa = fx.make_rmem_tensor((na, rm, rk), atom.ab_dtype)
    fb = fx.make_rmem_tensor((nb, rn, rk), atom.ab_dtype)
    fc = fx.make_rmem_tensor((nc, rm, rn), C.dtype)
    for t in fx.range(na * rm * rk):
        v, i, kk = t % na, t // na % rm, t // (na * rm)
        x = a_tv((lane, v))
        fa[v, i, kk] = atom.ab_dtype(A[i * m + x % m, kk * k + x // m])
    for t in fx.range(nb * rn * rk):
        v, j, kk = t % nb, t // nb % rn, t // (nb * rn)
        x = b_tv((lane, v))
        fb[v, j, kk] = atom.ab_dtype(B[j * n + x % n, kk * k + x // n])
    fc.fill(0)
    for _ in fx.range_constexpr(calls):
        fx.gemm(atom, fc, fa, fb, fc)
    if tid < lanes:
        for t in fx.range(nc * rm * rn):
            v, i, j = t % nc, t // nc % rm, t // (nc * rm)
            x = c_tv((lane, v))
            C[i * m + x % m, j * n + x // m] = fc[v, i, j]


ATOMS = {   # name: (the op, its operand dtype's name in mma_layouts, threads)
    "f16": (lambda: fx.rocdl.MFMA(16, 16, 16, fx.Float16), "f16", 64),
    "bf16": (lambda: fx.rocdl.MFMA(32, 32, 8, fx.BFloat16), "bf16", 64),
    "fp8": (lambda: fx.rocdl.MFMA(16, 16, 32, fx.Float8E4M3FNUZ), "e4m3fnuz", 64),
    "int8": (lambda: fx.rocdl.MFMA(16, 16, 32, fx.Int8, fx.Int32), "i8", 64),
    "mma_sync_f16": (lambda: fx.nvvm.MMA(16, 8, 16, fx.Float32, ab_dtype=fx.Float16), "f16",
                     32),
}


def _shape(op) -> tuple:
    return tuple(int(x) for x in fx.make_mma_atom(op).shape_mnk.unpack())


def _traced_ops(monkeypatch, op, rm, rn, rk, calls, threads=64) -> int:
    """The kernel's traced operation count (the trace is refused past a limit of 1,
    and the refusal says how many it produced: nothing is compiled)."""
    M, N, K = _shape(op)
    A = np.zeros((rm * M, rk * K), np.float32)
    B = np.zeros((rn * N, rk * K), np.float32)
    C = np.zeros((rm * M, rn * N), np.float32)
    monkeypatch.setenv("FLYDSL_TRACE_OP_LIMIT", "1")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    with pytest.raises(DSLError, match="FLYDSL_TRACE_OP_LIMIT") as caught:
        tiled_gemm[1, threads](A, B, C, op, rm, rn, rk, calls)
    return int(re.search(r"tracing produced (\d+) operations", str(caught.value)).group(1))


def _call_cost(monkeypatch, op, rm, rn, rk, threads=64) -> int:
    """Traced operations of one more fx.gemm call on the same fragments."""
    return (_traced_ops(monkeypatch, op, rm, rn, rk, 2, threads)
            - _traced_ops(monkeypatch, op, rm, rn, rk, 1, threads))


@pytest.mark.parametrize("name", ["bf16", "fp8", "mma_sync_f16"])
def test_a_call_costs_the_same_few_operations_however_many_atoms_it_runs(monkeypatch, name):
    """32 atoms (4 x 4 x 2) per call cost no more than one and the loops over them:
    unrolled, a call of 32 atoms was 4,324 operations (bf16 32x32x8), 5,992 (fp8
    16x16x32: its decodes are ~20 operations a value) and 1,792 (mma.sync); now 285,
    203 and 153."""
    make, _, threads = ATOMS[name]
    one = _call_cost(monkeypatch, make(), 1, 1, 1, threads)
    many = _call_cost(monkeypatch, make(), 4, 4, 2, threads)
    assert many <= one + 100, (one, many)
    assert many < 450, many


def _values(name: str, shape, rng) -> np.ndarray:
    """Inputs exact in the atom's operand type whose products are exact in f32 (int8:
    the whole range, -128 * -128 included)."""
    if name == "int8":
        x = rng.integers(-128, 128, shape)
        x.flat[0] = -128
        return x.astype(np.float32)
    if name == "fp8":
        return rng.choice([-3.0, -1.5, -0.375, 0.0, 0.3125, 1.0, 2.5, 7.0, 0.0390625],
                          shape).astype(np.float32)
    q = np.vectorize(lambda v: mma_layouts.quantize(v, ATOMS[name][1]))
    return q(rng.standard_normal(shape) * 3).astype(np.float32)


def _sequential_reference(A, B, calls: int, integer: bool) -> np.ndarray:
    """acc = fma(a[t], b[t], acc) over t in order, ``calls`` times (the products are
    exact in f32, so each fma is one f32 addition); int8: exact in int64, then wrapped
    to int32 as the instruction's adders."""
    if integer:
        ref = calls * (A.astype(np.int64) @ B.astype(np.int64).T)
        return ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
    acc = np.zeros((A.shape[0], B.shape[0]), np.float32)
    prods = (A[:, None, :] * B[None, :, :]).astype(np.float32)
    for _ in range(calls):
        for t in range(A.shape[1]):
            acc = (acc + prods[:, :, t]).astype(np.float32)
    return acc


@pytest.mark.parametrize("name", sorted(ATOMS))
def test_a_tile_of_atoms_is_the_sequential_fma_sum_in_k_order(name):
    """Several atoms in M, N and K per call, two calls: each C element is the f32 sum
    of its products in k order, bit for bit (int8: the exact int32 sum)."""
    make, _, threads = ATOMS[name]
    op = make()
    M, N, K = _shape(op)
    rm, rn, rk, calls = 2, 2, 2, 2
    rng = np.random.default_rng(7)
    A = _values(name, (rm * M, rk * K), rng)
    B = _values(name, (rn * N, rk * K), rng)
    integer = name == "int8"
    C = np.full((rm * M, rn * N), -1 if integer else np.nan,
                np.int32 if integer else np.float32)
    tiled_gemm[1, threads](A, B, C, op, rm, rn, rk, calls)
    np.testing.assert_array_equal(C, _sequential_reference(A, B, calls, integer))
