"""Per-thread pointers and memrefs used across a barrier on the CPU backend.

The CPU backend runs a block's threads as loops between barriers, so a per-thread value
made before a barrier and used after it is recomputed in the later loop or kept in a
per-thread slot (``passes/simt_to_cpu.py``, ``passes/_simt_spill.py``):

* a raw ``!llvm.ptr`` (upstream FlyDSL's attention kernels build them with
  ``fly.extract_aligned_pointer_as_index`` and ``llvm.getelementptr``) as an i64, back
  in its own address space;
* a memref view (upstream's MoE GEMMs view a recast weight pointer) is made again after
  the barrier from its operands, so it views the same buffer; one that cannot be (a
  thread picks it in an ``scf.if``, or a loop carries it) keeps its descriptor in a slot,
  and a per-thread array whose view is kept so gets one copy per thread that lives
  through the barrier.
"""
from __future__ import annotations

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl._mlir import ir as fir
from flydsl._mlir.dialects import arith as rarith
from flydsl._mlir.dialects import fly, llvm as rllvm
from flydsl.errors import UnsupportedConstructError
from test_simt_to_cpu import compile_cpu, launch, lower_only

N = 8


# ---------------------------------------------------------------------------
# kernels written with flydsl


@flydsl.kernel
def recast_view_across(buf: fx.Tensor, out: fx.Tensor, scratch: fx.Tensor):
    """As upstream's MoE stage 1/2 B loads: a view of a tensor's pointer recast to Int32,
    read before and after a barrier."""
    t = fx.thread_idx.x
    words = fx.make_view(fx.recast_iter(fx.PointerType.get(fx.Int32, fx.AddressSpace.Global, 4),
                                        fx.get_iter(buf)), fx.make_layout(N, 1))
    scratch[t] = words[t]
    fx.barrier()
    out[t] = words[(t + 1) % N] * 100 + scratch[(t + 2) % N]


@flydsl.kernel
def thread_view_across(x: fx.Tensor, out: fx.Tensor, scratch: fx.Tensor):
    """A raw-pointer view starting at this thread's element, used after a barrier."""
    t = fx.thread_idx.x
    mine = fx.make_view(fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(x)) + 4 * t),
                        fx.make_layout(4, 1))
    scratch[t] = mine[0]
    fx.barrier()
    out[t] = mine[2] + scratch[(t + 1) % N] * 1000.0


def _gep(base, offset):
    """``llvm.getelementptr base[offset]`` over f32 (upstream's buffer_ops style)."""
    return rllvm.GEPOp(base.type, base, [offset], [-2147483648], fir.F32Type.get(), 0).result


@flydsl.kernel
def raw_pointer_across(x: fx.Tensor, perm: fx.Tensor, out: fx.Tensor, scratch: fx.Tensor):
    """As upstream's flash attention: an ``!llvm.ptr`` into ``x`` at an element read from
    ``perm`` (so it cannot be recomputed after the barrier, it is kept), loaded after."""
    t = fx.thread_idx.x
    base = fly.extract_aligned_pointer_as_index(fir.Type.parse("!llvm.ptr"), x)
    at = _gep(base, rarith.extsi(fir.IntegerType.get_signless(64), perm[t]))
    scratch[t] = perm[t]
    fx.barrier()
    loaded = fx.Float32(rllvm.LoadOp(fir.F32Type.get(), at).result)
    out[t] = loaded + fx.Float32(scratch[(t + 1) % N])


@flydsl.kernel
def raw_pointer_by_thread(x: fx.Tensor, out: fx.Tensor, scratch: fx.Tensor):
    """The same with the thread id as the element: recomputed after the barrier."""
    t = fx.thread_idx.x
    base = fly.extract_aligned_pointer_as_index(fir.Type.parse("!llvm.ptr"), x)
    at = _gep(base, rarith.extsi(fir.IntegerType.get_signless(64), t))
    scratch[t] = t
    fx.barrier()
    out[t] = fx.Float32(rllvm.LoadOp(fir.F32Type.get(), at).result) + scratch[(t + 3) % N]


def test_a_recast_tensor_view_is_read_on_both_sides_of_a_barrier():
    buf = (np.arange(N, dtype=np.int32) * 7 + 1)
    out = np.zeros(N, np.int32)
    scratch = np.zeros(N, np.int32)
    recast_view_across[1, N](buf.view(np.uint8), out, scratch)
    t = np.arange(N)
    np.testing.assert_array_equal(out, buf[(t + 1) % N] * 100 + buf[(t + 2) % N])


def test_a_per_thread_raw_view_is_used_after_a_barrier():
    x = np.arange(N + 3, dtype=np.float32) * 2
    out = np.zeros(N, np.float32)
    scratch = np.zeros(N, np.float32)
    thread_view_across[1, N](x, out, scratch)
    t = np.arange(N)
    np.testing.assert_array_equal(out, x[t + 2] + x[(t + 1) % N] * 1000)


def test_a_loaded_raw_pointer_is_kept_across_a_barrier():
    x = np.arange(N, dtype=np.float32) * 10 + 0.5
    perm = np.array([3, 0, 7, 7, 1, 6, 2, 5], np.int32)
    out = np.zeros(N, np.float32)
    scratch = np.zeros(N, np.int32)
    raw_pointer_across[1, N](x, perm, out, scratch)
    t = np.arange(N)
    np.testing.assert_array_equal(out, x[perm] + perm[(t + 1) % N])


def test_a_thread_indexed_raw_pointer_is_recomputed_after_a_barrier():
    x = np.arange(N, dtype=np.float32) * 3
    out = np.zeros(N, np.float32)
    scratch = np.zeros(N, np.float32)
    raw_pointer_by_thread[1, N](x, out, scratch)
    t = np.arange(N)
    np.testing.assert_array_equal(out, x + (t + 3) % N)


# ---------------------------------------------------------------------------
# what flydsl's front end does not build but raw MLIR can: hand-written kernels

_STRIDED = "memref<2xf32, strided<[1], offset: ?>>"

# a view chosen per thread by an scf.if (no op to remake it from): its descriptor is kept
PICKED = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @picked(%a: memref<?xf32>, %b: memref<?xf32>, %out: memref<?xf32>) kernel {
      %tid = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %low = arith.cmpi ult, %tid, %c4 : index
      %v = scf.if %low -> (S) {
        %sa = memref.subview %a[%tid] [2] [1] : memref<?xf32> to S
        scf.yield %sa : S
      } else {
        %sb = memref.subview %b[%tid] [2] [1] : memref<?xf32> to S
        scf.yield %sb : S
      }
      gpu.barrier
      %e = memref.load %v[%c1] : S
      memref.store %e, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''.replace("S", _STRIDED)

# two per-thread arrays swapped by a barrier loop that bumps the first one each time:
# each thread's arrays must survive every barrier
SWAPPED_ARRAYS = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @swapped(%x: memref<?xf32>, %o0: memref<?xf32>, %o1: memref<?xf32>,
                      %n: index) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %ten = arith.constant 10.0 : f32
      %one = arith.constant 1.0 : f32
      %p = memref.alloca() : memref<2xf32>
      %q = memref.alloca() : memref<2xf32>
      %v = memref.load %x[%tid] : memref<?xf32>
      %w = arith.mulf %v, %ten : f32
      memref.store %v, %p[%c0] : memref<2xf32>
      memref.store %w, %q[%c0] : memref<2xf32>
      %r:2 = scf.for %k = %c0 to %n step %c1 iter_args(%s = %p, %t = %q)
          -> (memref<2xf32>, memref<2xf32>) {
        gpu.barrier
        %old = memref.load %s[%c0] : memref<2xf32>
        %new = arith.addf %old, %one : f32
        memref.store %new, %s[%c0] : memref<2xf32>
        scf.yield %t, %s : memref<2xf32>, memref<2xf32>
      }
      %e0 = memref.load %r#0[%c0] : memref<2xf32>
      %e1 = memref.load %r#1[%c0] : memref<2xf32>
      memref.store %e0, %o0[%tid] : memref<?xf32>
      memref.store %e1, %o1[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''

# a raw pointer in address space 1, at a loaded element: kept as an i64
GLOBAL_POINTER = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @gptr(%a: memref<?xf32>, %idx: memref<?xindex>, %out: memref<?xf32>) kernel {
      %tid = gpu.thread_id x
      %base = memref.extract_aligned_pointer_as_index %a : memref<?xf32> -> index
      %bi = arith.index_cast %base : index to i64
      %p0 = llvm.inttoptr %bi : i64 to !llvm.ptr<1>
      %j = memref.load %idx[%tid] : memref<?xindex>
      %ji = arith.index_cast %j : index to i64
      %p = llvm.getelementptr %p0[%ji] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
      gpu.barrier
      %e = llvm.load %p : !llvm.ptr<1> -> f32
      memref.store %e, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''

# a per-thread array of run-time size lives until the next barrier only
DYNAMIC_ARRAY = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @dyn(%x: memref<?xf32>, %out: memref<?xf32>, %n: index) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %m = memref.alloca(%n) : memref<?xf32>
      %v = memref.load %x[%tid] : memref<?xf32>
      memref.store %v, %m[%c0] : memref<?xf32>
      gpu.barrier
      %e = memref.load %m[%c0] : memref<?xf32>
      memref.store %e, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''


def test_a_view_picked_per_thread_keeps_its_descriptor_across_a_barrier():
    art = compile_cpu(PICKED)
    a = np.arange(N + 1, dtype=np.float32)
    b = a * -100
    out = np.zeros(N, np.float32)
    launch(art, "picked", [a, b, out], (1,), (N,))
    t = np.arange(N)
    np.testing.assert_array_equal(out, np.where(t < 4, a[t + 1], b[t + 1]))


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_per_thread_arrays_carried_through_a_barrier_loop_keep_their_contents(n):
    art = _swapped()
    x = np.arange(N, dtype=np.float32) + 1
    o0 = np.zeros(N, np.float32)
    o1 = np.zeros(N, np.float32)
    launch(art, "swapped", [x, o0, o1, n], (1,), (N,))
    p, q = x + (n + 1) // 2, x * 10 + n // 2   # the first array of each step gets + 1
    if n % 2:
        p, q = q, p
    np.testing.assert_array_equal(o0, p)
    np.testing.assert_array_equal(o1, q)


_SWAPPED = []


def _swapped():
    """SWAPPED_ARRAYS compiled once for the module's cases."""
    if not _SWAPPED:
        _SWAPPED.append(compile_cpu(SWAPPED_ARRAYS))
    return _SWAPPED[0]


def test_a_pointer_keeps_its_address_space_in_its_slot():
    text = lower_only(GLOBAL_POINTER)
    assert "llvm.ptrtoint" in text and "to !llvm.ptr<1>" in text.split("scf.for")[-1]
    art = compile_cpu(GLOBAL_POINTER)
    a = np.arange(N, dtype=np.float32) * 5
    idx = np.array([7, 6, 5, 4, 3, 2, 1, 0], np.int64)
    out = np.zeros(N, np.float32)
    launch(art, "gptr", [a, idx, out], (1,), (N,))
    np.testing.assert_array_equal(out, a[idx])


def test_a_run_time_sized_per_thread_array_across_a_barrier_is_a_located_error():
    with pytest.raises(UnsupportedConstructError, match="run-time size used across a barrier"):
        compile_cpu(DYNAMIC_ARRAY)


# a loop-carried value of a type no slot holds (an LLVM struct)
CARRIED_STRUCT = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @pairs(%x: memref<?xi32>, %n: index) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %v = memref.load %x[%tid] : memref<?xi32>
      %u = llvm.mlir.undef : !llvm.struct<(i32, i32)>
      %s = llvm.insertvalue %v, %u[0] : !llvm.struct<(i32, i32)>
      %r = scf.for %k = %c0 to %n step %c1 iter_args(%a = %s) -> (!llvm.struct<(i32, i32)>) {
        gpu.barrier
        scf.yield %a : !llvm.struct<(i32, i32)>
      }
      %e = llvm.extractvalue %r[0] : !llvm.struct<(i32, i32)>
      memref.store %e, %x[%tid] : memref<?xi32>
      gpu.return
    }
  }
}
'''


def test_a_carried_value_no_slot_holds_is_a_located_error():
    with pytest.raises(UnsupportedConstructError,
                       match=r"in kernel 'pairs'.*struct.*carried by this 'scf.for'"):
        lower_only(CARRIED_STRUCT)
