"""FlyDSL's ``frag.store(Vec(x))`` and ``frag.fill(x)`` on register fragments (issue 31):
where the view is a run of consecutive registers, the store is one ``vector.store``
instead of an extract and a store per lane (upstream's gfx950 MoE GEMM spent 24,576 of
its 79,588 traced ops on those). Views that are not one run keep the element-wise
store; both give the same registers."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.expr.typing import Vector as Vec
from conftest import gpu_asm_or_skip

LANES = 8


@flydsl.kernel
def frag_runs(X: fx.Tensor, Y: fx.Tensor):
    """Per thread: a (4, 2) fragment whose column 1 is stored from a vector of X (one
    run), whose row 0 is then stored from a vector (2 registers 4 apart: not a run),
    an 8-register fragment filled with 7.5 and a 4 x i32 fragment stored from a vector;
    every register is written to Y."""
    tid = fx.thread_idx.x
    base = tid * LANES
    frag = fx.make_rmem_tensor(fx.make_layout((4, 2), (1, 4)), fx.Float32)
    frag.fill(-1.0)
    frag[(None, 1)].store(Vec.from_elements([X[base + i] for i in range(4)], fx.Float32))
    frag[(0, None)].store(Vec.from_elements([X[base + 4], X[base + 5]], fx.Float32))
    filled = fx.make_rmem_tensor(LANES, fx.Float32)
    filled.fill(7.5)
    ints = fx.make_rmem_tensor(4, fx.Int32)
    ints.store(Vec.filled(4, tid, fx.Int32))
    for i in range(LANES):
        Y[base + i] = frag[i] + filled[i]
    for i in range(4):
        Y[2 * LANES * fx.block_dim.x + base + i] = fx.cast(ints[i], fx.Float32)


def _args(threads: int):
    X = np.arange(threads * LANES, dtype=np.float32) * 0.5
    Y = np.full(3 * threads * LANES, np.nan, np.float32)
    return X, Y


def _expected(X: np.ndarray, threads: int) -> np.ndarray:
    Y = np.full(3 * threads * LANES, np.nan, np.float32)
    for t in range(threads):
        x = X[t * LANES:(t + 1) * LANES]
        regs = np.full(LANES, -1.0, np.float32)     # column-major (4, 2)
        regs[4:8] = x[0:4]                          # column 1
        regs[0], regs[4] = x[4], x[5]               # row 0: registers 0 and 4
        Y[t * LANES:(t + 1) * LANES] = regs + 7.5
        Y[2 * threads * LANES + t * LANES:2 * threads * LANES + t * LANES + 4] = t
    return Y


@pytest.fixture(scope="module")
def mlir() -> str:
    X, Y = _args(2)
    return flydsl.compile(frag_runs, X, Y, backend="cpu").asm["mlir"]


def test_runs_of_registers_are_one_vector_store_each(mlir):
    """Stored: the (4, 2) fill, its column 1, the 8-register fill and the 4 x i32 vector
    are one vector.store each; only row 0 (not a run) is 2 scalar stores."""
    stores = [line.strip() for line in mlir.splitlines()
              if "store" in line and "#gpu.address_space<private>" in line]
    vstores = [s for s in stores if s.startswith("vector.store")]
    scalar = [s for s in stores if s.startswith("memref.store")]
    assert len(vstores) == 4, stores
    assert sorted(s.rsplit("vector<", 1)[1] for s in vstores) == \
        ["4xf32>", "4xi32>", "8xf32>", "8xf32>"], vstores
    assert len(scalar) == 2, stores
    assert "alignment = 16" in next(s for s in vstores if "4xf32>" in s)   # offset 4 x 4 bytes


def test_vector_stores_into_registers_give_the_element_wise_result_on_the_cpu():
    threads = 3
    X, Y = _args(threads)
    frag_runs[1, threads](X, Y)
    np.testing.assert_array_equal(Y, _expected(X, threads))   # (NaN where unwritten)


def test_register_vector_stores_compile_for_gfx942():
    X, Y = _args(2)
    asm = gpu_asm_or_skip(frag_runs, (X, Y), "rocm", "gfx942")
    assert "scratch_" not in asm and "buffer_store" not in asm   # stayed in registers


@flydsl.kernel
def swizzled_and_local(X: fx.Tensor, Y: fx.Tensor):
    """A vector stored through a swizzled view of a fragment lands where the swizzle
    puts each element (not as one run), and a view of an fx.local_array (aligned as
    fragments are) is filled with one vector store."""
    frag = fx.make_rmem_tensor(4, fx.Float32)
    frag.fill(0.0)
    swz = fx.make_view(fx.get_iter(frag),
                       fx.make_composed_layout(fx.Swizzle(1, 0, 1), fx.make_layout(4, 1)))
    swz.store(Vec.from_elements([X[i] for i in range(4)], fx.Float32))
    local = fx.local_array((8,), fx.Float32)
    view = fx.make_view(fx.get_iter(local), fx.make_layout(8, 1))
    view.fill(2.5)
    for i in range(4):
        Y[i] = frag[i]
    for i in range(8):
        Y[4 + i] = local[i]


def test_a_swizzled_register_view_is_stored_element_by_element():
    X = np.arange(4, dtype=np.float32) + 1
    Y = np.zeros(12, np.float32)
    swizzled_and_local[1, 1](X, Y)
    np.testing.assert_array_equal(Y[:4], [1, 2, 4, 3])     # Swizzle(1, 0, 1): 2 <-> 3
    np.testing.assert_array_equal(Y[4:], 2.5)


def test_local_arrays_are_aligned_for_the_vector_stores_of_their_views():
    X, Y = np.zeros(4, np.float32), np.zeros(12, np.float32)
    mlir = flydsl.compile(swizzled_and_local, X, Y, backend="cpu").asm["mlir"]
    allocas = [line for line in mlir.splitlines() if "memref.alloca" in line]
    assert allocas and all("alignment = 16" in line for line in allocas), allocas
    assert any(line.strip().startswith("vector.store") and "vector<8xf32>" in line
               for line in mlir.splitlines()), "the local view's fill is one store"


@flydsl.kernel
def int4_fill(Y: fx.Tensor):
    """An Int4 fragment (a byte per element in memory) filled and read back."""
    frag = fx.make_rmem_tensor(8, fx.Int4)
    frag.fill(3)
    for i in range(8):
        Y[i] = fx.cast(frag[i], fx.Int32)


def test_sub_byte_fragments_are_filled_element_by_element():
    Y = np.zeros(8, np.int32)
    int4_fill[1, 1](Y)
    np.testing.assert_array_equal(Y, 3)
