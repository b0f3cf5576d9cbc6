"""Hand-built ``gpu.container_module`` sources shared by the backend tests."""

VADD = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @vadd(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %n: i32) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %ni = arith.index_cast %n : i32 to index
      %cond = arith.cmpi slt, %i, %ni : index
      scf.if %cond {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %z = arith.addf %x, %y : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
}
'''

# Each block reverses its 64-element chunk through workgroup memory.
BARRIER_SMEM = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @block_reverse(%a: memref<?xf32>, %c: memref<?xf32>)
        workgroup(%tile: memref<64xf32, #gpu.address_space<workgroup>>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %c64 = arith.constant 64 : index
      %c63 = arith.constant 63 : index
      %base = arith.muli %bid, %c64 : index
      %i = arith.addi %base, %tid : index
      %x = memref.load %a[%i] : memref<?xf32>
      memref.store %x, %tile[%tid] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = arith.subi %c63, %tid : index
      %y = memref.load %tile[%r] : memref<64xf32, #gpu.address_space<workgroup>>
      memref.store %y, %c[%i] : memref<?xf32>
      gpu.return
    }
  }
}
'''

MATH_EXP = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @vexp(%a: memref<?xf32>, %c: memref<?xf32>, %n: index) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %cond = arith.cmpi slt, %i, %n : index
      scf.if %cond {
        %x = memref.load %a[%i] : memref<?xf32>
        %e = math.exp %x : f32
        memref.store %e, %c[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
}
'''

ALL = {"vadd": VADD, "block_reverse": BARRIER_SMEM, "vexp": MATH_EXP}
