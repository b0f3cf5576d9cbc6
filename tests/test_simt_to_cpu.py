"""Tests of the SIMT-to-CPU pass (``flydsl.passes.simt_to_cpu``).

Kernels are hand-written ``gpu.container_module``s compiled with the whole CPU
pipeline (``MlirCompiler.compile(..., backend="cpu")``) and run through the
ExecutionEngine's packed interface against numpy.
"""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import mlir.ir as ir

import gpu_modules
from flydsl.compiler.mlir_compiler import MlirCompiler
from flydsl.errors import DivergentBarrierWarning, UnsupportedConstructError
from flydsl.passes import simt_to_cpu


# ---------------------------------------------------------------------------
# helpers

def compile_cpu(src: str):
    with ir.Context():
        return MlirCompiler.compile(ir.Module.parse(src), backend="cpu")


def lower_only(src: str) -> str:
    """Run just the pass; return the verified module text."""
    with ir.Context():
        m = ir.Module.parse(src)
        simt_to_cpu.run(m, None, None)
        m.operation.verify()
        return str(m)


def pack_args(args, grid, block, begin, end):
    """The packed-interface argument array: one pointer per (expanded) argument.

    numpy arrays expand to allocated ptr, aligned ptr, offset, sizes..., strides...
    (strides in elements); ctypes scalars are passed as they are, Python ints as index.
    """
    holders = []
    for a in args:
        if isinstance(a, np.ndarray):
            p = ctypes.c_void_p(a.ctypes.data)
            holders += [p, p, ctypes.c_int64(0)]
            holders += [ctypes.c_int64(s) for s in a.shape]
            holders += [ctypes.c_int64(s // a.itemsize) for s in a.strides]
        elif isinstance(a, ctypes._SimpleCData):
            holders.append(a)
        else:
            holders.append(ctypes.c_int64(int(a)))
    holders += [ctypes.c_int64(v) for v in (*grid, *block, begin, end, 0)]  # no dynamic smem
    packed = (ctypes.c_void_p * len(holders))(
        *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
    return packed, holders  # keep holders alive while calling


def _dim3(d):
    d = tuple(d)
    return d + (1,) * (3 - len(d))


def kernel_fn(art, name):
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p)(art.engine.raw_lookup(name))


def launch(art, name, args, grid, block, begin=0, end=None):
    grid, block = _dim3(grid), _dim3(block)
    if end is None:
        end = grid[0] * grid[1] * grid[2]
    packed, holders = pack_args(args, grid, block, begin, end)
    kernel_fn(art, name)(packed)


def launch_threads(art, name, args, grid, block, nthreads=2):
    """Split the grid's blocks over ``nthreads`` host threads (like the launcher)."""
    grid, block = _dim3(grid), _dim3(block)
    nblocks = grid[0] * grid[1] * grid[2]
    fn = kernel_fn(art, name)
    bounds = [nblocks * k // nthreads for k in range(nthreads + 1)]
    packs = [pack_args(args, grid, block, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    threads = [threading.Thread(target=fn, args=(p[0],)) for p in packs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


rng = np.random.default_rng(1234)


# ---------------------------------------------------------------------------
# kernels
SCALE3D = r'''
#s3 = strided<[?, ?, ?], offset: ?>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @scale3d(%a: memref<?x?x?xf32, #s3>, %c: memref<?x?x?xf32, #s3>, %s: f32) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %d0 = memref.dim %a, %c0 : memref<?x?x?xf32, #s3>
      %d1 = memref.dim %a, %c1 : memref<?x?x?xf32, #s3>
      %d2 = memref.dim %a, %c2 : memref<?x?x?xf32, #s3>
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %tz = gpu.thread_id z
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %bz = gpu.block_id z
      %dx = gpu.block_dim x
      %dy = gpu.block_dim y
      %dz = gpu.block_dim z
      %k0 = arith.muli %bx, %dx : index
      %k = arith.addi %k0, %tx : index
      %j0 = arith.muli %by, %dy : index
      %j = arith.addi %j0, %ty : index
      %i0 = arith.muli %bz, %dz : index
      %i = arith.addi %i0, %tz : index
      %ok0 = arith.cmpi ult, %i, %d0 : index
      %ok1 = arith.cmpi ult, %j, %d1 : index
      %ok2 = arith.cmpi ult, %k, %d2 : index
      %ok01 = arith.andi %ok0, %ok1 : i1
      %ok = arith.andi %ok01, %ok2 : i1
      scf.if %ok {
        %x = memref.load %a[%i, %j, %k] : memref<?x?x?xf32, #s3>
        %y = arith.mulf %x, %s : f32
        %ki = arith.index_cast %k : index to i32
        %kf = arith.sitofp %ki : i32 to f32
        %z = arith.addf %y, %kf : f32
        memref.store %z, %c[%i, %j, %k] : memref<?x?x?xf32, #s3>
      }
      gpu.return
    }
  }
}
'''

# Block sum: tree reduction in workgroup memory, barrier inside a uniform scf.for,
# uniform iter_arg (stride) and per-thread iter_arg (accumulator) crossing barriers.
BLOCK_SUM = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @block_sum(%a: memref<?xf32>, %out: memref<?xf32>, %lane_sums: memref<?xf32>, %n: index)
        workgroup(%buf: memref<256xf32, #gpu.address_space<workgroup>>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c8 = arith.constant 8 : index
      %c128 = arith.constant 128 : index
      %zero = arith.constant 0.0 : f32
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %inb = arith.cmpi ult, %i, %n : index
      %v = scf.if %inb -> f32 {
        %x = memref.load %a[%i] : memref<?xf32>
        scf.yield %x : f32
      } else {
        scf.yield %zero : f32
      }
      memref.store %v, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r:2 = scf.for %k = %c0 to %c8 step %c1 iter_args(%s = %c128, %acc = %v) -> (index, f32) {
        %lt = arith.cmpi ult, %tid, %s : index
        %acc2 = scf.if %lt -> f32 {
          %j = arith.addi %tid, %s : index
          %o = memref.load %buf[%j] : memref<256xf32, #gpu.address_space<workgroup>>
          %sum = arith.addf %acc, %o : f32
          memref.store %sum, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
          scf.yield %sum : f32
        } else {
          scf.yield %acc : f32
        }
        gpu.barrier
        %s2 = arith.divui %s, %c2 : index
        scf.yield %s2, %acc2 : index, f32
      }
      %is0 = arith.cmpi eq, %tid, %c0 : index
      scf.if %is0 {
        %t = memref.load %buf[%c0] : memref<256xf32, #gpu.address_space<workgroup>>
        memref.store %t, %out[%bid] : memref<?xf32>
      }
      memref.store %r#1, %lane_sums[%i] : memref<?xf32>
      gpu.return
    }
  }
}
'''

#  C = A @ B with 16x16 tiles in workgroup memory.
MATMUL = r'''
#s2 = strided<[?, ?], offset: ?>
#wg = #gpu.address_space<workgroup>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @matmul(%A: memref<?x?xf32, #s2>, %B: memref<?x?xf32, #s2>, %C: memref<?x?xf32, #s2>)
        workgroup(%As: memref<16x16xf32, #wg>, %Bs: memref<16x16xf32, #wg>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c16 = arith.constant 16 : index
      %zero = arith.constant 0.0 : f32
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %M = memref.dim %A, %c0 : memref<?x?xf32, #s2>
      %K = memref.dim %A, %c1 : memref<?x?xf32, #s2>
      %N = memref.dim %B, %c1 : memref<?x?xf32, #s2>
      %r0 = arith.muli %by, %c16 : index
      %row = arith.addi %r0, %ty : index
      %q0 = arith.muli %bx, %c16 : index
      %col = arith.addi %q0, %tx : index
      %row_ok = arith.cmpi ult, %row, %M : index
      %col_ok = arith.cmpi ult, %col, %N : index
      %acc = scf.for %k0 = %c0 to %K step %c16 iter_args(%acc_in = %zero) -> f32 {
        %ka = arith.addi %k0, %tx : index
        %ka_ok = arith.cmpi ult, %ka, %K : index
        %a_ok = arith.andi %row_ok, %ka_ok : i1
        %av = scf.if %a_ok -> f32 {
          %x = memref.load %A[%row, %ka] : memref<?x?xf32, #s2>
          scf.yield %x : f32
        } else {
          scf.yield %zero : f32
        }
        memref.store %av, %As[%ty, %tx] : memref<16x16xf32, #wg>
        %kb = arith.addi %k0, %ty : index
        %kb_ok = arith.cmpi ult, %kb, %K : index
        %b_ok = arith.andi %kb_ok, %col_ok : i1
        %bv = scf.if %b_ok -> f32 {
          %y = memref.load %B[%kb, %col] : memref<?x?xf32, #s2>
          scf.yield %y : f32
        } else {
          scf.yield %zero : f32
        }
        memref.store %bv, %Bs[%ty, %tx] : memref<16x16xf32, #wg>
        gpu.barrier
        %acc2 = scf.for %kk = %c0 to %c16 step %c1 iter_args(%p = %acc_in) -> f32 {
          %x = memref.load %As[%ty, %kk] : memref<16x16xf32, #wg>
          %y = memref.load %Bs[%kk, %tx] : memref<16x16xf32, #wg>
          %p2 = math.fma %x, %y, %p : f32
          scf.yield %p2 : f32
        }
        gpu.barrier
        scf.yield %acc2 : f32
      }
      %ok = arith.andi %row_ok, %col_ok : i1
      scf.if %ok {
        memref.store %acc, %C[%row, %col] : memref<?x?xf32, #s2>
      }
      gpu.return
    }
  }
}
'''

# scf.if on a uniform kernel argument containing a barrier, with a per-thread result.
UNIFORM_IF = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @maybe_reverse(%a: memref<?xf32>, %c: memref<?xf32>, %flag: i32)
        workgroup(%tile: memref<64xf32, #gpu.address_space<workgroup>>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %c64 = arith.constant 64 : index
      %c63 = arith.constant 63 : index
      %zero = arith.constant 0 : i32
      %base = arith.muli %bid, %c64 : index
      %i = arith.addi %base, %tid : index
      %x = memref.load %a[%i] : memref<?xf32>
      %on = arith.cmpi ne, %flag, %zero : i32
      %r = scf.if %on -> f32 {
        memref.store %x, %tile[%tid] : memref<64xf32, #gpu.address_space<workgroup>>
        gpu.barrier
        %j = arith.subi %c63, %tid : index
        %y = memref.load %tile[%j] : memref<64xf32, #gpu.address_space<workgroup>>
        scf.yield %y : f32
      } else {
        scf.yield %x : f32
      }
      memref.store %r, %c[%i] : memref<?xf32>
      gpu.return
    }
  }
}
'''

# Warp sums with gpu.shuffle xor: unrolled butterfly and the same in a uniform scf.for.
WARP_SUM = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @warp_sum(%a: memref<?xf32>, %out: memref<?xf32>, %out2: memref<?xi32>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %x = memref.load %a[%i] : memref<?xf32>
      %w = arith.constant 32 : i32
      %m16 = arith.constant 16 : i32
      %m8 = arith.constant 8 : i32
      %m4 = arith.constant 4 : i32
      %m2 = arith.constant 2 : i32
      %m1 = arith.constant 1 : i32
      %s1, %v1 = gpu.shuffle xor %x, %m16, %w : f32
      %x1 = arith.addf %x, %s1 : f32
      %s2, %v2 = gpu.shuffle xor %x1, %m8, %w : f32
      %x2 = arith.addf %x1, %s2 : f32
      %s3, %v3 = gpu.shuffle xor %x2, %m4, %w : f32
      %x3 = arith.addf %x2, %s3 : f32
      %s4, %v4 = gpu.shuffle xor %x3, %m2, %w : f32
      %x4 = arith.addf %x3, %s4 : f32
      %s5, %v5 = gpu.shuffle xor %x4, %m1, %w : f32
      %x5 = arith.addf %x4, %s5 : f32
      memref.store %x5, %out[%i] : memref<?xf32>
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c5 = arith.constant 5 : index
      %ti = arith.index_cast %i : index to i32
      %r:2 = scf.for %k = %c0 to %c5 step %c1 iter_args(%m = %m16, %v = %ti) -> (i32, i32) {
        %s, %ok = gpu.shuffle xor %v, %m, %w : i32
        %vn = arith.addi %v, %s : i32
        %mh = arith.shrui %m, %m1 : i32
        scf.yield %mh, %vn : i32, i32
      }
      memref.store %r#1, %out2[%i] : memref<?xi32>
      gpu.return
    }
  }
}
'''

ATOMIC_SUM = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @atomic_sum(%a: memref<?xf32>, %out: memref<?xf32>, %cnt: memref<?xi64>, %n: index) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %c0 = arith.constant 0 : index
      %one = arith.constant 1 : i64
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %inb = arith.cmpi ult, %i, %n : index
      scf.if %inb {
        %x = memref.load %a[%i] : memref<?xf32>
        %old = memref.atomic_rmw addf %x, %out[%c0] : (f32, memref<?xf32>) -> f32
        %old2 = memref.atomic_rmw addi %one, %cnt[%c0] : (i64, memref<?xi64>) -> i64
      }
      gpu.return
    }
  }
}
'''

# A barrier under a thread-dependent scf.if; locations point at line 12 of {path}.
DIVERGENT = r'''
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @bad(%a: memref<?xf32>) kernel {{
      %tid = gpu.thread_id x loc("{path}":9:5)
      %c0 = arith.constant 0 : index
      %c = arith.cmpi eq, %tid, %c0 : index loc("{path}":11:5)
      scf.if %c {{
        gpu.barrier loc("{path}":12:3)
      }} loc("{path}":11:5)
      gpu.return
    }}
  }}
}}
'''

# A shuffle under an scf.for with thread-dependent bounds.
DIVERGENT_SHUFFLE = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @bad_shfl(%a: memref<?xf32>) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %w = arith.constant 32 : i32
      %m = arith.constant 1 : i32
      %x = memref.load %a[%tid] : memref<?xf32>
      %r = scf.for %k = %c0 to %tid step %c1 iter_args(%v = %x) -> f32 {
        %s, %ok = gpu.shuffle xor %v, %m, %w : f32 loc("shfl.py":4:13)
        scf.yield %s : f32
      }
      memref.store %r, %a[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''


# CUB-style block reduce: warp sums, lane 0 writes smem, barrier, warp 0 reduces again
# (its shuffles sit under a thread-dependent scf.if and run predicated).
BLOCK_REDUCE_SHFL = r'''
#wg = #gpu.address_space<workgroup>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @block_reduce(%a: memref<?xf32>, %out: memref<?xf32>)
        workgroup(%sm: memref<32xf32, #wg>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %c0 = arith.constant 0 : index
      %c32 = arith.constant 32 : index
      %zero = arith.constant 0.0 : f32
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %x = memref.load %a[%i] : memref<?xf32>
      %w = arith.constant 32 : i32
      %m16 = arith.constant 16 : i32
      %m8 = arith.constant 8 : i32
      %m4 = arith.constant 4 : i32
      %m2 = arith.constant 2 : i32
      %m1 = arith.constant 1 : i32
      %s1, %v1 = gpu.shuffle xor %x, %m16, %w : f32
      %x1 = arith.addf %x, %s1 : f32
      %s2, %v2 = gpu.shuffle xor %x1, %m8, %w : f32
      %x2 = arith.addf %x1, %s2 : f32
      %s3, %v3 = gpu.shuffle xor %x2, %m4, %w : f32
      %x3 = arith.addf %x2, %s3 : f32
      %s4, %v4 = gpu.shuffle xor %x3, %m2, %w : f32
      %x4 = arith.addf %x3, %s4 : f32
      %s5, %v5 = gpu.shuffle xor %x4, %m1, %w : f32
      %x5 = arith.addf %x4, %s5 : f32
      %lane = arith.remui %tid, %c32 : index
      %warp = arith.divui %tid, %c32 : index
      %is_l0 = arith.cmpi eq, %lane, %c0 : index
      scf.if %is_l0 {
        memref.store %x5, %sm[%warp] : memref<32xf32, #wg>
      }
      gpu.barrier
      %nw = arith.divui %bdim, %c32 : index
      %is_w0 = arith.cmpi eq, %warp, %c0 : index
      %res = scf.if %is_w0 -> f32 {
        %has = arith.cmpi ult, %lane, %nw : index
        %y = scf.if %has -> f32 {
          %t = memref.load %sm[%lane] : memref<32xf32, #wg>
          scf.yield %t : f32
        } else {
          scf.yield %zero : f32
        }
        %t1, %u1 = gpu.shuffle xor %y, %m16, %w : f32
        %y1 = arith.addf %y, %t1 : f32
        %t2, %u2 = gpu.shuffle xor %y1, %m8, %w : f32
        %y2 = arith.addf %y1, %t2 : f32
        %t3, %u3 = gpu.shuffle xor %y2, %m4, %w : f32
        %y3 = arith.addf %y2, %t3 : f32
        %t4, %u4 = gpu.shuffle xor %y3, %m2, %w : f32
        %y4 = arith.addf %y3, %t4 : f32
        %t5, %u5 = gpu.shuffle xor %y4, %m1, %w : f32
        %y5 = arith.addf %y4, %t5 : f32
        scf.yield %y5 : f32
      } else {
        scf.yield %zero : f32
      }
      %is_t0 = arith.cmpi eq, %tid, %c0 : index
      scf.if %is_t0 {
        memref.store %res, %out[%bid] : memref<?xf32>
      }
      gpu.return
    }
  }
}
'''

# Nested barrier loops with per-thread iter_args at both levels, a private
# attribution and an alloca that live across barriers, and a device helper.
NESTED = r'''
#wg = #gpu.address_space<workgroup>
#pv = #gpu.address_space<private>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    func.func @twice(%x: f32) -> f32 {
      %y = arith.addf %x, %x : f32
      return %y : f32
    }
    gpu.func @nested(%a: memref<?xf32>, %out: memref<?xf32>, %outer_n: index, %inner_n: index)
        workgroup(%sm: memref<2x32xf32, #wg>) private(%pr: memref<2xf32, #pv>)
        kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c31 = arith.constant 31 : index
      %c32 = arith.constant 32 : index
      %base = arith.muli %bid, %c32 : index
      %i = arith.addi %base, %tid : index
      %x = memref.load %a[%i] : memref<?xf32>
      %loc = memref.alloca() : memref<4xf32>
      memref.store %x, %loc[%c0] : memref<4xf32>
      memref.store %x, %pr[%c1] : memref<2xf32, #pv>
      %r = scf.for %k = %c0 to %outer_n step %c1 iter_args(%acc = %x) -> f32 {
        %r2 = scf.for %j = %c0 to %inner_n step %c1 iter_args(%v = %acc) -> f32 {
          memref.store %v, %sm[%c0, %tid] : memref<2x32xf32, #wg>
          gpu.barrier
          %rt = arith.subi %c31, %tid : index
          %o = memref.load %sm[%c0, %rt] : memref<2x32xf32, #wg>
          gpu.barrier
          %d = func.call @twice(%o) : (f32) -> f32
          %s = arith.addf %v, %d : f32
          scf.yield %s : f32
        }
        %p = memref.load %pr[%c1] : memref<2xf32, #pv>
        %q = memref.load %loc[%c0] : memref<4xf32>
        %pq = arith.addf %p, %q : f32
        %n1 = arith.addf %r2, %pq : f32
        scf.yield %n1 : f32
      }
      memref.store %r, %out[%i] : memref<?xf32>
      gpu.return
    }
  }
  gpu.module @more {
    gpu.func @fill(%out: memref<?xi32>, %v: i32) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %gdim = gpu.grid_dim x
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %g = arith.index_cast %gdim : index to i32
      %w = arith.addi %v, %g : i32
      memref.store %w, %out[%i] : memref<?xi32>
      gpu.return
    }
  }
}
'''

WHILE_BARRIER = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @spin(%a: memref<?xi32>) kernel {
      %c0 = arith.constant 0 : index
      %z = arith.constant 0 : i32
      scf.while : () -> () {
        %v = memref.load %a[%c0] : memref<?xi32>
        %c = arith.cmpi ne, %v, %z : i32
        scf.condition(%c)
      } do {
        gpu.barrier loc("spin.py":7:9)
        scf.yield
      }
      gpu.return
    }
  }
}
'''

LOADED_BOUND = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @lb(%a: memref<?xindex>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.load %a[%c0] : memref<?xindex>
      scf.for %k = %c0 to %n step %c1 {
        gpu.barrier loc("lb.py":5:9)
      }
      gpu.return
    }
  }
}
'''

GLOBAL_SMEM = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    memref.global "private" @tile : memref<64xf32, #gpu.address_space<workgroup>>
    gpu.func @rev(%a: memref<?xf32>, %c: memref<?xf32>) kernel {
      %tile = memref.get_global @tile : memref<64xf32, #gpu.address_space<workgroup>>
      %tid = gpu.thread_id x
      %gid = gpu.global_id x
      %lane = gpu.lane_id
      %c63 = arith.constant 63 : index
      %x = memref.load %a[%gid] : memref<?xf32>
      memref.store %x, %tile[%tid] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = arith.subi %c63, %tid : index
      %y = memref.load %tile[%r] : memref<64xf32, #gpu.address_space<workgroup>>
      %l = arith.index_cast %lane : index to i32
      %lf = arith.sitofp %l : i32 to f32
      %z = arith.addf %y, %lf : f32
      memref.store %z, %c[%gid] : memref<?xf32>
      gpu.return
    }
  }
}
'''


# A value computed from a loop-carried value before the carried value is updated,
# used after a barrier (the carried slot must not be re-read there).
CARRIED = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @carried(%a: memref<?xf32>, %out: memref<?xf32>, %n: index) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %two = arith.constant 2.0 : f32
      %x = memref.load %a[%tid] : memref<?xf32>
      %r:2 = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %x, %w_prev = %x) -> (f32, f32) {
        %w = arith.mulf %acc, %two : f32
        %acc2 = arith.addf %acc, %x : f32
        gpu.barrier
        %w2 = arith.addf %w, %w_prev : f32
        scf.yield %acc2, %w2 : f32, f32
      }
      %s = arith.addf %r#0, %r#1 : f32
      memref.store %s, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
'''


# iter args yielded into each other's slots (``a, b, c = b + a, c, a``) and
# one carried unchanged: every old value is read before any slot is written
SWAP_CARRIED = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @swap(%a: memref<?xf32>, %out: memref<?xf32>, %n: index) kernel {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      %c64 = arith.constant 64 : index
      %c96 = arith.constant 96 : index
      %one = arith.constant 1.0 : f32
      %x = memref.load %a[%tid] : memref<?xf32>
      %y = arith.addf %x, %one : f32
      %r:4 = scf.for %k = %c0 to %n step %c1
          iter_args(%p = %x, %q = %y, %s = %one, %u = %x) -> (f32, f32, f32, f32) {
        gpu.barrier
        %pq = arith.addf %q, %p : f32
        scf.yield %pq, %s, %p, %u : f32, f32, f32, f32
      }
      memref.store %r#0, %out[%tid] : memref<?xf32>
      %i1 = arith.addi %tid, %c32 : index
      memref.store %r#1, %out[%i1] : memref<?xf32>
      %i2 = arith.addi %tid, %c64 : index
      memref.store %r#2, %out[%i2] : memref<?xf32>
      %i3 = arith.addi %tid, %c96 : index
      memref.store %r#3, %out[%i3] : memref<?xf32>
      gpu.return
    }
  }
}
'''


# ---------------------------------------------------------------------------
# the launch ABI and the shape of the output

def test_abi_and_cleanup():
    text = lower_only(gpu_modules.BARRIER_SMEM)
    assert "gpu." not in text and "gpu.container_module" not in text
    assert "#gpu" not in text  # workgroup memory is in the default memory space
    with ir.Context():
        m = ir.Module.parse(text)
        funcs = [op for op in m.body.operations if op.operation.name == "func.func"]
        assert [f.name.value for f in funcs] == ["block_reverse"]
        ftype = funcs[0].type
        assert [str(t) for t in ftype.inputs] == ["memref<?xf32>"] * 2 + ["index"] * 9
        assert list(ftype.results) == []
        entry = funcs[0].regions[0].blocks[0]
        allocas = [op for op in entry.operations if op.operation.name == "memref.alloca"]
        assert str(allocas[0].result.type) == "memref<64xf32>"
    # every memref.alloca sits at the function entry (none per block or per thread)
    for line in text.splitlines():
        if "memref.alloca" in line:
            assert line.startswith("    %"), line


def test_the_cpu_pipeline_starts_with_the_pass():
    from flydsl.compiler.backends.cpu import CpuBackend
    from flydsl.compiler.options import CompileOptions
    backend = CpuBackend(CpuBackend.make_target("host"))
    fragments = backend.pipeline_fragments(CompileOptions())
    # FlyDSL's raw AMD buffer ops become checked loads/stores and its AMD inline asm
    # barriers and waits first; then the threads
    assert [f.name for f in fragments[:3]] == ["rocdl-buffers", "amd-inline-asm", "simt-to-cpu"]
    run = fragments[2].resolve() if hasattr(fragments[2], "resolve") else fragments[2].run
    assert run is simt_to_cpu.run


# ---------------------------------------------------------------------------
# simple kernels from gpu_modules

@pytest.mark.parametrize("n", [1000, 4096])
def test_vadd(n):
    art = compile_cpu(gpu_modules.VADD)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.full(n + 8, -1.0, np.float32)
    launch(art, "vadd", [a, b, c[:n], ctypes.c_int32(n)], ((n + 255) // 256,), (256,))
    np.testing.assert_array_equal(c[:n], a + b)
    assert (c[n:] == -1.0).all()


def test_block_reverse_barrier_smem():
    art = compile_cpu(gpu_modules.BARRIER_SMEM)
    a = rng.random(64 * 10, dtype=np.float32)
    c = np.zeros_like(a)
    launch(art, "block_reverse", [a, c], (10,), (64,))
    np.testing.assert_array_equal(c, a.reshape(10, 64)[:, ::-1].ravel())


def test_math_exp():
    art = compile_cpu(gpu_modules.MATH_EXP)
    n = 777
    a = rng.random(n, dtype=np.float32) * 4 - 2
    c = np.zeros(n, np.float32)
    launch(art, "vexp", [a, c, n], ((n + 127) // 128,), (128,))
    np.testing.assert_allclose(c, np.exp(a), rtol=1e-6)


def test_block_range_subset():
    """Only the blocks in [block_begin, block_end) run."""
    art = compile_cpu(gpu_modules.BARRIER_SMEM)
    a = rng.random(64 * 10, dtype=np.float32)
    c = np.zeros_like(a)
    launch(art, "block_reverse", [a, c], (10,), (64,), begin=3, end=7)
    expect = a.reshape(10, 64)[:, ::-1].copy()
    expect[:3] = 0
    expect[7:] = 0
    np.testing.assert_array_equal(c, expect.ravel())


# ---------------------------------------------------------------------------
# multi-dimensional grids and strided memrefs

def test_3d_grid_block_strided_views():
    art = compile_cpu(SCALE3D)
    base = rng.random((5, 9, 40), dtype=np.float32)
    a = base[:, ::2, 1::2]                       # (5, 5, 20), non-contiguous
    out = np.full((5, 12, 21), -7.0, np.float32)
    c = out[:, 1:6, :20]                         # non-contiguous destination
    launch(art, "scale3d", [a, c, ctypes.c_float(3.0)], (3, 2, 3), (8, 4, 2))
    np.testing.assert_allclose(c, a * 3 + np.arange(20, dtype=np.float32), rtol=1e-6)
    mask = np.ones(out.shape, bool)
    mask[:, 1:6, :20] = False
    assert (out[mask] == -7.0).all()


def test_2d_transposed_matmul_views():
    art = compile_cpu(MATMUL)
    A = rng.random((48, 64), dtype=np.float32).T
    B = rng.random((80, 48), dtype=np.float32).T
    C = np.zeros((80, 64), np.float32).T
    launch(art, "matmul", [A, B, C], (5, 4), (16, 16))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


# ---------------------------------------------------------------------------
# barriers inside uniform control flow

def test_block_sum_tree_loop():
    art = compile_cpu(BLOCK_SUM)
    n, nb = 1000, 4
    a = rng.random(n, dtype=np.float32)
    out = np.zeros(nb, np.float32)
    lane_sums = np.zeros(nb * 256, np.float32)
    launch(art, "block_sum", [a, out, lane_sums, n], (nb,), (256,))
    padded = np.zeros(nb * 256, np.float32)
    padded[:n] = a
    np.testing.assert_allclose(out, padded.reshape(nb, 256).sum(1), rtol=1e-5)
    # thread 0's loop-carried accumulator (kept per thread across barriers) is the sum too
    np.testing.assert_array_equal(lane_sums[::256], out)


@pytest.mark.parametrize("shape", [(64, 48, 80), (50, 37, 70)])
def test_tiled_matmul(shape):
    M, K, N = shape
    art = compile_cpu(MATMUL)
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    launch(art, "matmul", [A, B, C], ((N + 15) // 16, (M + 15) // 16), (16, 16))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


@pytest.mark.parametrize("flag", [0, 1])
def test_uniform_if_with_barrier(flag):
    art = compile_cpu(UNIFORM_IF)
    a = rng.random(640, dtype=np.float32)
    c = np.zeros_like(a)
    launch(art, "maybe_reverse", [a, c, ctypes.c_int32(flag)], (10,), (64,))
    expect = a.reshape(10, 64)[:, ::-1].ravel() if flag else a
    np.testing.assert_array_equal(c, expect)


def test_nested_barrier_loops_private_memory_and_helpers():
    art = compile_cpu(NESTED)
    a = rng.random(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    outer_n, inner_n = 3, 2
    launch(art, "nested", [a, out, outer_n, inner_n], (2,), (32,))
    ref = a.reshape(2, 32).astype(np.float64)
    acc = ref.copy()
    for _ in range(outer_n):
        v = acc.copy()
        for _ in range(inner_n):
            v = v + 2 * v[:, ::-1]
        acc = v + 2 * ref
    np.testing.assert_allclose(out, acc.ravel(), rtol=1e-5)
    # second gpu.module of the same container: grid_dim and scalars
    o = np.zeros(96, np.int32)
    launch(art, "fill", [o, ctypes.c_int32(5)], (3,), (32,))
    assert (o == 8).all()


def test_loop_carried_values_across_barriers():
    art = compile_cpu(CARRIED)
    a = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    launch(art, "carried", [a, out, 3], (1,), (32,))
    acc, w_prev = a.copy(), a.copy()
    for _ in range(3):
        w = acc * 2
        acc = acc + a
        w_prev = w + w_prev
    np.testing.assert_array_equal(out, acc + w_prev)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
def test_loop_carried_values_yielded_into_each_other(n):
    art = compile_cpu(SWAP_CARRIED)
    a = np.arange(32, dtype=np.float32)
    out = np.zeros(128, np.float32)
    launch(art, "swap", [a, out, n], (1,), (32,))
    p, q, s, u = a.copy(), a + 1, np.ones(32, np.float32), a.copy()
    for _ in range(n):
        p, q, s, u = q + p, s, p, u
    np.testing.assert_array_equal(out, np.concatenate([p, q, s, u]))


def test_workgroup_global_lane_and_global_id():
    art = compile_cpu(GLOBAL_SMEM)
    a = rng.random(640, dtype=np.float32)
    c = np.zeros_like(a)
    launch(art, "rev", [a, c], (10,), (64,))
    expect = a.reshape(10, 64)[:, ::-1] + np.arange(64) % 32
    np.testing.assert_allclose(c, expect.ravel(), rtol=1e-6)


# ---------------------------------------------------------------------------
# warp shuffles and atomics

def test_shuffle_xor_warp_sum():
    art = compile_cpu(WARP_SUM)
    a = rng.random(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    out2 = np.zeros(256, np.int32)
    launch(art, "warp_sum", [a, out, out2], (2,), (128,))
    # xor butterfly: every lane ends with its warp's sum
    np.testing.assert_allclose(out, np.repeat(a.reshape(8, 32).sum(1), 32), rtol=1e-5)
    np.testing.assert_array_equal(out2, np.repeat(np.arange(256).reshape(8, 32).sum(1), 32))


def test_block_reduce_with_shuffles_under_thread_dependent_if():
    art = compile_cpu(BLOCK_REDUCE_SHFL)
    a = rng.random(4 * 256, dtype=np.float32)
    out = np.zeros(4, np.float32)
    launch(art, "block_reduce", [a, out], (4,), (256,))
    np.testing.assert_allclose(out, a.reshape(4, 256).sum(1), rtol=1e-5)


def test_atomic_add_from_concurrent_block_ranges():
    art = compile_cpu(ATOMIC_SUM)
    n = 20000
    a = rng.random(n, dtype=np.float32)
    out = np.zeros(1, np.float32)
    cnt = np.zeros(1, np.int64)
    launch_threads(art, "atomic_sum", [a, out, cnt, n], ((n + 127) // 128,), (128,),
                   nthreads=4)
    assert cnt[0] == n
    np.testing.assert_allclose(out[0], a.astype(np.float64).sum(), rtol=1e-4)


# ---------------------------------------------------------------------------
# concurrency: disjoint block ranges from several host threads

def test_concurrent_block_ranges():
    art = compile_cpu(MATMUL)
    M, K, N = 96, 64, 112
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    for _ in range(3):
        C = np.zeros((M, N), np.float32)
        launch_threads(art, "matmul", [A, B, C], (N // 16, M // 16), (16, 16), nthreads=2)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    art = compile_cpu(BLOCK_SUM)
    n = 256 * 64
    a = rng.random(n, dtype=np.float32)
    out = np.zeros(64, np.float32)
    lanes = np.zeros(n, np.float32)
    launch_threads(art, "block_sum", [a, out, lanes, n], (64,), (256,), nthreads=2)
    np.testing.assert_allclose(out, a.reshape(64, 256).sum(1), rtol=1e-5)


# ---------------------------------------------------------------------------
# errors

def test_divergent_barrier_error_location(tmp_path):
    src = tmp_path / "kern.py"
    src.write_text("".join(f"line {i}\n" for i in range(1, 12)) + "    fx.barrier()\n")
    with ir.Context():
        m = ir.Module.parse(DIVERGENT.format(path=str(src)))
        with pytest.raises(UnsupportedConstructError) as info:
            simt_to_cpu.run(m, None, None)
    err = info.value
    assert err.lineno == 12
    assert err.filename == str(src)
    assert err.source_line.strip() == "fx.barrier()"
    assert err.kernel == "bad"
    assert "barrier under an 'if' whose condition depends on the thread id" in str(err)


def test_divergent_barrier_error_through_compile():
    with pytest.raises(UnsupportedConstructError) as info:
        compile_cpu(DIVERGENT.format(path="kern.py"))
    assert info.value.kernel == "bad"
    assert "barrier under an 'if' whose condition depends on the thread id" in str(info.value)


def test_divergent_barrier_line_through_compile():
    with pytest.raises(UnsupportedConstructError) as info:
        compile_cpu(DIVERGENT.format(path="kern.py"))
    assert (info.value.filename, info.value.lineno) == ("kern.py", 12)


@pytest.mark.parametrize("src, kernel, where, words", [
    (WHILE_BARRIER, "spin", ("spin.py", 7), "barrier under a 'while' loop whose condition "
                                             "depends on loaded values"),
    (DIVERGENT_SHUFFLE, "bad_shfl", ("shfl.py", 4),
     "divergent control flow is not supported on the CPU backend"),
])
def test_other_divergent_synchronisation_errors(src, kernel, where, words):
    with ir.Context():
        m = ir.Module.parse(src)
        with pytest.raises(UnsupportedConstructError) as info:
            simt_to_cpu.run(m, None, None)
    assert info.value.kernel == kernel
    assert (info.value.filename, info.value.lineno) == where
    assert words in str(info.value)


def test_a_barrier_loop_with_a_loaded_range_takes_thread_0s_range_with_a_warning():
    with ir.Context():
        m = ir.Module.parse(LOADED_BOUND)
        with pytest.warns(DivergentBarrierWarning, match="thread 0's value") as record:
            simt_to_cpu.run(m, None, None)
        text = str(m)
    assert (record[0].filename, record[0].lineno) == ("lb.py", 5)
    assert "barrier under a 'for' loop whose range depends on loaded values" in \
        str(record[0].message)
    assert "gpu." not in text and "scf.for" in text


# ---------------------------------------------------------------------------
# debug bounds checks (CompileOptions.debug)

POKE = r"""
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @poke(%m: memref<?x?xf32>, %r: index, %c: index) kernel {{
      %v = arith.constant 1.0 : f32
      memref.store %v, %m[%r, %c] : memref<?x?xf32> loc("{path}":3:5)
      gpu.return
    }}
  }}
}}
"""


def compile_debug(src: str):
    from flydsl.compiler.options import CompileOptions
    with ir.Context():
        return MlirCompiler.compile(ir.Module.parse(src), backend="cpu",
                                    options=CompileOptions(debug=True))


def lower_debug(src: str):
    """Run just the pass in debug mode: (module text, site table)."""
    import json
    from flydsl.compiler.options import CompileOptions
    with ir.Context():
        m = ir.Module.parse(src)
        simt_to_cpu.run(m, None, CompileOptions(debug=True))
        m.operation.verify()
        attrs = m.operation.attributes
        sites = (json.loads(ir.StringAttr(attrs["flydsl.debug_sites"]).value)
                 if "flydsl.debug_sites" in attrs else [])
        return str(m), sites


def oob_record(art) -> list:
    from flydsl.runtime.debug_checks import oob_record
    return list(oob_record(art.engine.lib))


def test_debug_mode_off_adds_nothing():
    from flydsl.compiler.options import CompileOptions
    for options in (None, CompileOptions()):
        with ir.Context():
            m = ir.Module.parse(gpu_modules.BARRIER_SMEM)
            simt_to_cpu.run(m, None, options)
            text = str(m)
        assert text == lower_only(gpu_modules.BARRIER_SMEM)
        assert "__flydsl_oob" not in text and "debug_sites" not in text
        assert "scf.if" not in text


def test_debug_sites_and_error_record():
    text, sites = lower_debug(gpu_modules.BARRIER_SMEM)
    assert [(s["op"], s.get("arg"), s.get("tensor")) for s in sites] == [
        ("load", 0, None), ("store", None, "shared array 0"),
        ("load", None, "shared array 0"), ("store", 1, None),
        # the shared array's accesses are race-checked too
        ("race", None, "shared array 0"), ("race", None, "shared array 0")]
    assert {s["kernel"] for s in sites} == {"block_reverse"}
    assert sites[1]["type"] == "memref<64xf32>"
    assert [(s["access"], s["shape"]) for s in sites[4:]] == [("store", [64]), ("load", [64])]
    # a public (exported) record, a private report helper, no assert/abort
    assert "memref.global @__flydsl_oob : memref<20xi64> = dense<0>" in text
    assert "func.func private @__flydsl_oob_report" in text
    # four bounds checks, and the race-check helper's report
    assert text.count("call @__flydsl_oob_report") == 5
    assert text.count("call @__flydsl_race_check") == 2
    assert "cf.assert" not in text and "gpu." not in text


def test_debug_bounds_checks_pass_in_bounds_accesses():
    art = compile_debug(MATMUL)
    assert "cf.assert" not in art.asm["llvm-mlir"] and "abort" not in art.asm["llvm-mlir"]
    assert "@__flydsl_oob = global [20 x i64] zeroinitializer" in art.asm["llir"]
    assert "define internal void @__flydsl_oob_report" in art.asm["llir"]
    A = rng.random((50, 37), dtype=np.float32)
    B = rng.random((37, 70), dtype=np.float32)
    C = np.zeros((50, 70), np.float32)
    launch(art, "matmul", [A, B, C], (5, 4), (16, 16))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    assert not any(oob_record(art))


def test_debug_record_is_exported_per_library():
    from flydsl.runtime.debug_checks import OOB_SYMBOL
    from flydsl.runtime.shared_object import load_shared_object
    art = compile_debug(gpu_modules.BARRIER_SMEM)
    lib1, lib2 = art.engine.lib, load_shared_object(art.asm["so"])
    rec1 = (ctypes.c_int64 * 16).in_dll(lib1, OOB_SYMBOL)
    rec2 = (ctypes.c_int64 * 16).in_dll(lib2, OOB_SYMBOL)
    assert ctypes.addressof(rec1) != ctypes.addressof(rec2)
    with pytest.raises(AttributeError):
        getattr(lib1, "__flydsl_oob_report")          # the helper is not exported
    a = np.zeros(704, np.float32)
    c = np.zeros(640, np.float32)
    launch(art, "block_reverse", [a[:640], c], (11,), (64,))   # block 10 reads past the end
    assert rec1[0] == 128 and rec2[0] == 0


def test_debug_out_of_bounds_is_recorded_and_skipped():
    from flydsl.runtime import debug_checks as dc
    art = compile_debug(gpu_modules.BARRIER_SMEM)
    a = np.arange(704, dtype=np.float32)
    c = np.full(704, -1.0, np.float32)
    launch(art, "block_reverse", [a[:640], c[:640]], (11,), (64,))   # does not abort
    rec = oob_record(art)
    # the first failure: block 10's thread 0 loading a[640] (each of its 64 threads
    # fails a load of a and a store to c)
    assert rec[dc.COUNT] == 128 and rec[dc.SITE] == 0
    assert rec[dc.BLOCK_LINEAR] == 10 and rec[dc.BLOCK:dc.BLOCK + 3] == [10, 0, 0]
    assert rec[dc.THREAD:dc.THREAD + 3] == [0, 0, 0]
    assert rec[dc.DIM:dc.SIZE + 1] == [0, 640, 640]
    np.testing.assert_array_equal(c[:640], a[:640].reshape(10, 64)[:, ::-1].ravel())
    assert (c[640:] == -1.0).all()           # nothing stored past the end
    with pytest.raises(dc.OutOfBoundsError) as info:
        dc.check_oob(art.engine.lib, _sites_json(gpu_modules.BARRIER_SMEM), "block_reverse",
                     ("a", "c"))
    assert info.value.tensor == "tensor 'a' (argument 0)"
    assert not any(oob_record(art))           # cleared by the check
    dc.check_oob(art.engine.lib, "[]", "block_reverse")


def _sites_json(src: str) -> str:
    import json
    return json.dumps(lower_debug(src)[1])


def test_debug_thread_ids_after_barrier_loops():
    """The failing store comes after an scf.for holding barriers (a later thread loop)
    and stores a value carried per thread across them."""
    from flydsl.runtime import debug_checks as dc
    art = compile_debug(BLOCK_SUM)
    n, nb = 1000, 4
    a = rng.random(n, dtype=np.float32)
    out = np.zeros(nb, np.float32)
    lanes = np.full(n + 8, -1.0, np.float32)
    launch(art, "block_sum", [a, out, lanes[:n], n], (nb,), (256,))
    rec = oob_record(art)
    assert rec[dc.COUNT] == nb * 256 - n
    assert rec[dc.BLOCK:dc.BLOCK + 3] == [3, 0, 0] and rec[dc.THREAD:dc.THREAD + 3] == [232, 0, 0]
    assert rec[dc.DIM:dc.SIZE + 1] == [0, 1000, 1000]
    padded = np.zeros(nb * 256, np.float32)
    padded[:n] = a
    np.testing.assert_allclose(out, padded.reshape(nb, 256).sum(1), rtol=1e-5)
    assert (lanes[n:] == -1.0).all()


@pytest.mark.parametrize("r, c, dim, index", [(1, 9, 1, 9), (7, 9, 0, 7), (-3, 0, 0, -3)])
def test_debug_report_names_the_line_and_dimension(tmp_path, r, c, dim, index):
    from flydsl.runtime import debug_checks as dc
    path = tmp_path / "poke.py"
    path.write_text("def poke(m, r, c):\n    v = 1.0\n    m[r, c] = v\n")
    src = POKE.format(path=str(path))
    art = compile_debug(src)
    m = np.zeros((3, 4), np.float32)
    launch(art, "poke", [m, r, c], (1,), (1,))
    assert not m.any()
    with pytest.raises(dc.OutOfBoundsError) as info:
        dc.check_oob(art.engine.lib, _sites_json(src), "poke")
    e = info.value
    assert (e.filename, e.lineno, e.source_line) == (str(path), 3, "    m[r, c] = v")
    assert (e.dim, e.index, e.size) == (dim, index, (3, 4)[dim])
    assert e.tensor == "argument 0" and e.op == "store"
    assert str(e).splitlines()[:3] == [
        f"out-of-bounds store in kernel 'poke' at {path}:3",
        "    m[r, c] = v",
        f"  argument 0, dimension {dim}: index {index} is out of range for size {(3, 4)[dim]}"]


def test_debug_names_arguments_from_the_ir():
    src = gpu_modules.VADD.replace(
        "%n: i32) kernel {", '%n: i32) kernel attributes {flydsl.arg_names = ["a", "b", "c", "n"]} {')
    _, sites = lower_debug(src)
    assert [(s["arg"], s["name"]) for s in sites] == [(0, "a"), (1, "b"), (2, "c")]


@pytest.mark.parametrize("test, kwargs", [
    ("test_vadd", {"n": 1000}), ("test_block_reverse_barrier_smem", {}),
    ("test_block_range_subset", {}), ("test_3d_grid_block_strided_views", {}),
    ("test_2d_transposed_matmul_views", {}), ("test_block_sum_tree_loop", {}),
    ("test_tiled_matmul", {"shape": (50, 37, 70)}), ("test_uniform_if_with_barrier", {"flag": 1}),
    ("test_nested_barrier_loops_private_memory_and_helpers", {}),
    ("test_loop_carried_values_across_barriers", {}),
    ("test_workgroup_global_lane_and_global_id", {}), ("test_shuffle_xor_warp_sum", {}),
    ("test_block_reduce_with_shuffles_under_thread_dependent_if", {}),
    ("test_atomic_add_from_concurrent_block_ranges", {}), ("test_concurrent_block_ranges", {}),
])
def test_debug_mode_gives_the_same_results(monkeypatch, test, kwargs):
    """The kernel tests above, compiled in debug mode: same results, no report."""
    arts = []

    def compile_and_keep(src):
        arts.append(compile_debug(src))
        return arts[-1]
    monkeypatch.setitem(globals(), "compile_cpu", compile_and_keep)
    globals()[test](**kwargs)
    assert arts
    for art in arts:
        assert not any(oob_record(art))


# ---------------------------------------------------------------------------
# performance

def test_vadd_speed_vs_numpy():
    """2^24 float32, block 256, blocks split over 2 host threads: >= 0.5x numpy."""
    art = compile_cpu(gpu_modules.VADD)
    n = 1 << 24
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    grid = (n // 256,)

    def best(fn, k=5):
        fn()
        times = []
        for _ in range(k):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    t_numpy = best(lambda: np.add(a, b, out=c))
    c[:] = 0
    t_kernel = best(lambda: launch_threads(art, "vadd", [a, b, c, ctypes.c_int32(n)],
                                           grid, (256,), nthreads=2))
    np.testing.assert_array_equal(c, a + b)
    assert t_numpy / t_kernel >= 0.5, (t_numpy, t_kernel)
