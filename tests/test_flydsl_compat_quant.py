"""FlyDSL's per-token quant test on flydsl (issue 31): stateful buffer-copy atoms
(``CopyAtom.set_value("soffset", n)``, ``fx.atom_set_value``) and the ``@flyc.jit``
call's GPU module (``CompilationContext.get_current().gpu_module_body``), which its
launcher enters around ``SmemAllocator.finalize()``."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.kernel_function import CompilationContext
from flydsl.utils.smem_allocator import SmemAllocator, SmemPtr

ROWS, N, VEC = 3, 16, 8          # one block per row, N // VEC threads per block
THREADS = N // VEC

_alloc = SmemAllocator(None, arch="gfx942")
_RED = _alloc._align(_alloc.ptr, 16)
_alloc.ptr = _RED + THREADS * 4


@flydsl.kernel
def row_scale(X: fx.Tensor, Y: fx.Tensor, S: fx.Tensor):
    """Row ``bid`` of X (f16) read through atoms whose soffset is the row's start:
    Y = 2 * X, S[bid] = the row's first element + the number of threads (summed in
    shared memory)."""
    bid, tid = fx.block_idx.x, fx.thread_idx.x
    row = bid * N
    x_atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), 16).set_value("soffset", row)
    y_atom = fx.atom_set_value(fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float16),
                               {"soffset": row})
    s_atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), 32).set_value("soffset", bid)
    x_row = fx.logical_divide(fx.slice(fx.rocdl.make_buffer_tensor(X), (0, None)),
                              fx.make_layout(VEC, 1))
    y_row = fx.logical_divide(fx.slice(fx.rocdl.make_buffer_tensor(Y), (0, None)),
                              fx.make_layout(VEC, 1))
    r = fx.make_rmem_tensor(VEC, fx.Float16)
    fx.copy_atom_call(x_atom, fx.slice(x_row, (None, tid)), r)
    r.store(r.load() * 2.0)
    fx.copy_atom_call(y_atom, r, fx.slice(y_row, (None, tid)))

    red = SmemPtr(_alloc.get_base(), _RED, fx.Float32, shape=(THREADS,))
    red.store(fx.Float32(1.0), [tid])
    fx.barrier()
    if tid == 0:
        total = fx.Float32(r[0]) * 0.5
        for t in fx.range_constexpr(THREADS):
            total = total + red.load([t])
        s = fx.make_rmem_tensor(1, fx.Float32)
        s[0] = total
        s_div = fx.logical_divide(fx.rocdl.make_buffer_tensor(S), fx.make_layout(1, 1))
        fx.copy_atom_call(s_atom, s, fx.slice(s_div, (None, 0)))


@flydsl.jit
def launch_row_scale(X: fx.Tensor, Y: fx.Tensor, S: fx.Tensor, rows: fx.Int32):
    """FlyDSL's launcher shape: the allocator finalized in the call's GPU module."""
    import flydsl._mlir.ir as ir
    _alloc.finalized = False
    ctx = CompilationContext.get_current()
    with ir.InsertionPoint(ctx.gpu_module_body):
        _alloc.finalize()
    row_scale(X, Y, S).launch(grid=(rows, 1, 1), block=(THREADS, 1, 1))


def test_soffset_atoms_read_and_write_each_blocks_row():
    X = (np.arange(ROWS * N, dtype=np.float16) - 20).reshape(ROWS, N)
    Y = np.zeros((ROWS, N), np.float16)
    S = np.zeros(ROWS, np.float32)
    launch_row_scale(X, Y, S, ROWS)
    np.testing.assert_array_equal(Y, X * 2)
    np.testing.assert_array_equal(S, X[:, 0].astype(np.float32) + THREADS)
    assert _alloc.finalized


@flydsl.kernel
def copy_with_both_soffsets(x: fx.Tensor, y: fx.Tensor, k: fx.Int32):
    i = fx.thread_idx.x
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32).set_value("soffset", 4)
    src = fx.flat_divide(fx.rocdl.make_buffer_tensor(x), (4,))[None, i]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs, soffset=k)            # the call's soffset replaces the atom's
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32), regs,
            fx.flat_divide(y, (4,))[None, i])
    fx.copy(atom, src, regs)                       # the atom's own: 4
    fx.copy(fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32), regs,
            fx.flat_divide(y, (4,))[None, i + 2])


def test_a_copy_soffset_replaces_the_atoms():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(16, np.float32)
    copy_with_both_soffsets[1, 2](x, y, 12)
    np.testing.assert_array_equal(y, np.concatenate([x[12:20], x[4:12]]))


def test_set_value_is_functional_and_checked():
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
    moved = atom.set_value("soffset", 8)
    assert (atom.get_value("soffset"), moved.get_value("soffset")) == (0, 8)
    assert moved.set_value("soffset", 2).state == (("soffset", 2),)
    assert repr(moved) == "CopyAtom(BufferCopy32b, Float32, soffset=8)" and moved != atom
    lds = fx.make_copy_atom(fx.rocdl.BufferCopyLDS(32), fx.Float32)
    assert fx.atom_set_value(lds, "soffset", 1).get_value("soffset") == 1
    with pytest.raises(flydsl.DSLError, match="no state field 'soffset'.*only buffer copies"):
        fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32).set_value("soffset", 1)
    with pytest.raises(flydsl.DSLError, match="no state field 'imm'; its fields are soffset"):
        atom.set_value("imm", 1)
    with pytest.raises(flydsl.DSLError, match="integer element offset"):
        atom.set_value("soffset", 1.5)
    with pytest.raises(flydsl.DSLError, match="not an atom with state"):
        fx.atom_set_value(fx.make_mma_atom(fx.UniversalFMA(fx.Float32)), "soffset", 1)


def test_set_value_error_names_the_kernel_and_line():
    @flydsl.kernel
    def bad(x: fx.Tensor):
        fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32).set_value("soffset", 1)

    with pytest.raises(flydsl.DSLError, match=r"in kernel 'bad'.*no state field 'soffset'") \
            as info:
        bad[1, 1](np.zeros(4, np.float32))
    assert 'set_value("soffset", 1)' in str(info.value)


def test_gpu_module_body_is_the_jit_calls_gpu_module():
    import flydsl._mlir.ir as ir
    from flydsl._mlir.dialects import memref

    seen = []

    @flydsl.jit
    def launcher(build: bool):
        ctx = CompilationContext.get_current()
        assert ctx is CompilationContext.get_current()     # one context per call
        body = ctx.gpu_module_body
        assert body.owner.name == "gpu.module" and ctx.gpu_module_op == body.owner
        seen.append((ctx, len(list(body.operations))))
        if build:    # a module-level op, as FlyDSL's SmemAllocator.finalize builds one
            with ir.Location.unknown(body.owner.context), ir.InsertionPoint(body):
                memref.GlobalOp("scratch", ir.TypeAttr.get(ir.MemRefType.get(
                    [4], ir.F32Type.get(body.owner.context))), sym_visibility="private")
            assert len(list(body.operations)) == 1

    launcher(True)
    launcher(False)                 # a new call starts from an empty module
    assert seen[0][0] is not seen[1][0] and seen[1][1] == 0
    with pytest.raises(AttributeError, match="gpu_module_body: no GPU module outside a "
                                             "@flyc.jit call"):
        CompilationContext.get_current().gpu_module_body


# -- an MMA atom the target lacks: built freely, refused at its first fx.gemm --------------

@flydsl.kernel
def k8_gemm_beside_a_k16_atom(C: fx.Tensor, use_k16: fx.Constexpr[bool]):
    """Upstream's generic flash attention on gfx942: it builds the gfx950-only
    MFMA 32x32x16 bf16 atom (and here a tiled MMA of it, and reads its layouts) but
    multiplies with the gfx942 32x32x8 one."""
    one = fx.make_layout((1, 1, 1), (0, 0, 0))
    k16 = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 16, fx.BFloat16)), one)
    k8 = fx.make_tiled_mma(fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 8, fx.BFloat16)), one)
    k16_thr = k16.thr_slice(fx.thread_idx.x)
    assert k16.atom.shape_mnk == (32, 32, 16) and k16.num_threads == 64
    mma = k16 if fx.const_expr(use_k16) else k8
    thr = mma.thr_slice(fx.thread_idx.x)
    tile = fx.make_view(C, fx.make_layout((32, 32), (32, 1)))
    ab = fx.make_layout((32, 16), (16, 1))
    fa = thr.make_fragment_A(ab)
    fb = thr.make_fragment_B(ab)
    fc = thr.make_fragment_C(tile)
    k16_thr.make_fragment_A(ab).fill(0.0)
    fa.fill(1.0)
    fb.fill(2.0)
    fc.fill(0.5)
    fx.gemm(mma, fc, fa, fb, fc)  # mark: the gemm
    fx.copy(fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32), fc, thr.partition_C(tile))


def test_an_atom_the_target_lacks_builds_and_its_gemm_is_the_located_error():
    C = np.zeros((32, 32), np.float32)
    text = flydsl.compile(k8_gemm_beside_a_k16_atom, C, False, backend="rocm",
                          arch="gfx942").asm["amdgcn"]
    assert "v_mfma_f32_32x32x8_bf16" in text and "32x32x16" not in text
    with pytest.raises(flydsl.DSLError, match=r"in kernel 'k8_gemm_beside_a_k16_atom'.*"
                                              r"32x32x16 bf16->f32 on gfx942.*gfx950") as info:
        flydsl.compile(k8_gemm_beside_a_k16_atom, C, True, backend="rocm", arch="gfx942")
    assert "mark: the gemm" in info.value.source_line
    with pytest.raises(flydsl.DSLError, match="no mfma instruction 32x32x12"):
        fx.make_mma_atom(fx.rocdl.MFMA(32, 32, 12, fx.BFloat16))   # no arch has it: at once


def test_the_cpu_runs_the_k16_atom():
    C = np.zeros((32, 32), np.float32)
    k8_gemm_beside_a_k16_atom[1, 64](C, True)
    np.testing.assert_array_equal(C, np.full((32, 32), 16 * 2.0 + 0.5, np.float32))
