"""FlyDSL's memory API on the CPU backend: ``@fx.struct`` / ``fx.Array`` allocated by
``fx.SharedAllocator``, ``fx.memref_load``/``memref_store`` (and ``_vec``),
``fx.make_rmem_tensor``, and pointers (``fx.get_iter``, ``add_offset``, ``recast_iter``,
``ptr_load``/``ptr_store``, ``ptrtoint``/``inttoptr``, ``fx.make_view(ptr, layout)``,
``fx.get_dyn_shared``). Kernels run and are checked against numpy; the shared-memory
ones also compile for sm_90 and gfx942, and FLYDSL_DEBUG=1 bounds and race checks see
the arrays an allocator made, by their field names.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError
from flydsl.runtime.debug_checks import OutOfBoundsError, SharedMemoryRaceError
from conftest import marked_line

WARPS = 4


@fx.struct
class Smem:
    s_red: fx.Array[fx.Float32, WARPS, 16]
    count: fx.Int32


@flydsl.kernel
def block_sum(x: fx.Tensor, out: fx.Tensor):
    """Sum of a block's 4 x 8 values: per-"warp" partial sums through a struct's array
    (as upstream's softmax block_reduce), then thread 0 adds them."""
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(Smem).peek()
    red = lds.s_red.view(fx.make_layout(WARPS, 1))
    if tid < WARPS:
        acc = 0.0
        for k in fx.range_constexpr(8):
            acc += x[fx.block_idx.x * 32 + tid * 8 + k]
        fx.memref_store(acc, red, tid)
    fx.barrier()
    if tid == 0:
        total = fx.memref_load(red, 0)
        for w in fx.range_constexpr(1, WARPS):
            total = total + fx.memref_load(red, w)
        out[fx.block_idx.x] = total


def test_struct_array_view_memref_load_store():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(2, np.float32)
    block_sum[2, 32](x, out)
    np.testing.assert_array_equal(out, x.reshape(2, 32).sum(axis=1))


def test_struct_layout_follows_c_rules():
    assert fx.Array[fx.Float32, 4, 16].__dsl_size_of__() == 16
    assert fx.Array[fx.Float32, 4, 16].__dsl_align_of__() == 16

    @fx.struct
    class Mixed:
        a: fx.Int8
        b: fx.Array[fx.Float32, 3, 16]
        c: fx.Int16

    # a at 0, b at 16 (12 bytes), c at 28: 30 bytes, rounded up to the alignment 16
    assert Mixed.__dsl_size_of__() == 32 and Mixed.__dsl_align_of__() == 16
    assert Mixed(a=1, b=2, c=3).replace(c=4).c == 4


def test_storable_protocol():
    """flydsl.compiler.protocol, as FlyDSL's kernels and tests import it."""
    from flydsl.compiler.protocol import dsl_align_of, dsl_size_of
    for dtype, size in ((fx.Int8, 1), (fx.Int32, 4), (fx.Float32, 4), (fx.Float64, 8)):
        assert (dsl_size_of(dtype), dsl_align_of(dtype)) == (size, size)
    tile = fx.Array[fx.Float32, 32, 16]
    assert (tile.size, tile.align, dsl_size_of(tile), dsl_align_of(tile)) == (32, 16, 128, 16)
    assert fx.Array[fx.Int32, 64] is fx.Array[fx.Int32, 64]
    assert fx.Array[fx.Int32, 64] is not fx.Array[fx.Int32, 64, 8]
    assert (dsl_size_of(Smem), dsl_align_of(Smem)) == (32, 16)   # 16 + 4, rounded up
    with pytest.raises(TypeError, match="sub-byte"):
        dsl_size_of(fx.Bool)
    with pytest.raises(TypeError, match="sub-byte"):
        fx.Array[fx.Bool, 8]
    with pytest.raises(TypeError, match="not Storable"):
        dsl_size_of(fx.Tensor)


def test_array_and_struct_mistakes_are_clear():
    with pytest.raises(TypeError, match="positive int"):
        fx.Array[fx.Float32, 0]
    with pytest.raises(TypeError, match="power of two"):
        fx.Array[fx.Float32, 4, 12]
    with pytest.raises(TypeError, match="cannot be stored"):
        @fx.struct
        class Bad:
            a: int
    with pytest.raises(DSLError, match="inside a @flydsl.kernel"):
        fx.SharedAllocator()


@flydsl.kernel
def reverse_through_array(x: fx.Tensor, y: fx.Tensor):
    """An array allocated directly; its elements through a[i] and its pointer."""
    t = fx.thread_idx.x
    a = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 16]).peek()
    a[t] = x[t]
    fx.barrier()
    p = fx.add_offset(a.ptr, 15 - t)
    y[t] = fx.ptr_load(p) + a.ptr[0]


def test_array_indexing_and_pointer_arithmetic():
    x = np.arange(16, dtype=np.float32) + 1
    y = np.zeros(16, np.float32)
    reverse_through_array[1, 16](x, y)
    np.testing.assert_array_equal(y, x[::-1] + x[0])


@flydsl.kernel
def bytes_as_ints(x: fx.Tensor, y: fx.Tensor):
    """A raw byte allocation written as Float32 and read back as Int32 (its bits)."""
    t = fx.thread_idx.x
    raw = fx.SharedAllocator().allocate(64).peek()
    f = fx.recast_iter(fx.Float32, raw.ptr)
    fx.ptr_store(x[t], f + t)
    fx.barrier()
    i = fx.recast_iter(fx.Int32, raw.ptr)
    y[t] = i[t]


def test_recast_iter_reinterprets_shared_bytes():
    x = np.linspace(-2, 3, 16, dtype=np.float32)
    y = np.zeros(16, np.int32)
    bytes_as_ints[1, 16](x, y)
    np.testing.assert_array_equal(y, x.view(np.int32))


def test_vector_pointer_accesses_are_bounds_checked(monkeypatch):
    """x has 14 elements: thread 0's second 4-wide load (x[16:20]) is the first access
    past the end."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(OutOfBoundsError) as info:
        vector_through_pointers[1, 4](np.zeros(14, np.float32), np.zeros(32, np.float32))
    assert (info.value.index, info.value.size, info.value.thread) == (16, 14, (0, 0, 0))


def test_a_recast_view_is_bounds_checked(monkeypatch):
    """The 64 bytes seen as Float32 hold 16 of them: thread 16 stores past the end."""
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(OutOfBoundsError) as info:
        bytes_as_ints[1, 17](np.zeros(17, np.float32), np.zeros(17, np.int32))
    assert (info.value.index, info.value.size) == (16, 16)


@fx.struct
class AB:
    a: fx.Array[fx.Float32, 8, 16]
    b: fx.Array[fx.Float32, 8, 16]


@fx.union
class Overlay:
    ab: AB
    c: fx.Array[fx.Int32, 16, 16]


@fx.struct
class WithScalar:
    total: fx.Float32
    pad: fx.Array[fx.Int8, 3]


@flydsl.kernel
def union_overlay(x: fx.Tensor, y: fx.Tensor, z: fx.Tensor):
    """A union's members share bytes (upstream's GEMM: A/B stages, then C, in one
    allocation); a struct's scalar field is peeked and poked."""
    t = fx.thread_idx.x
    storage = fx.SharedAllocator().allocate(Overlay)
    c = storage.c.peek()
    c[t] = t * 10
    fx.barrier()
    a, b = storage.ab.a.peek(), storage.ab.b.peek()
    y[t] = fx.cast(a.ptr[t] if t < 8 else b[t - 8], fx.Float32)  # bytes of c, as floats
    s = fx.SharedAllocator().allocate(WithScalar)
    if t == 0:
        s.total.poke(x[0] + x[1])
    fx.barrier()
    z[t] = s.total.peek() + s.peek().total


def test_union_members_share_bytes_and_scalars_peek_poke():
    x = np.array([1.5, 2.0] + [0.0] * 14, np.float32)
    y = np.zeros(16, np.float32)
    z = np.zeros(16, np.float32)
    union_overlay[1, 16](x, y, z)
    np.testing.assert_array_equal(y, (np.arange(16, dtype=np.int32) * 10).view(np.float32))
    np.testing.assert_array_equal(z, np.full(16, 7.0, np.float32))
    assert Overlay.__dsl_size_of__() == 64 and WithScalar.__dsl_size_of__() == 8


class DynamicArena(fx.Arena):
    """An arena over the launch's dynamic shared memory (FlyDSL's Arena subclassing)."""

    @property
    def base_ptr(self):
        return fx.get_dyn_shared(fx.Float32)


@flydsl.kernel
def arena_pair(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    arena = DynamicArena()
    a = arena.allocate(fx.Array[fx.Int8, 3]).peek()       # bytes 0..2
    b = arena.allocate(fx.Array[fx.Float32, 8]).peek()    # bytes 4..35, aligned
    if t == 0:
        a[0] = 7
    b[t] = x[t]
    fx.barrier()
    raw = fx.get_dyn_shared(fx.Float32)
    y[t] = raw[1 + t] + fx.cast(a[0], fx.Float32)


def test_an_arena_subclass_carves_bytes_from_its_base():
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    arena_pair[1, 8, 64](x, y)
    np.testing.assert_array_equal(y, x + 7)


@flydsl.kernel
def lds_addresses(x: fx.Tensor, y: fx.Tensor):
    """FlyDSL's attention kernels keep LDS addresses in an Int32 and make pointers from
    them again (fx.inttoptr with a Shared pointer type)."""
    t = fx.thread_idx.x
    a = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 16]).peek()
    a[t] = x[t]
    fx.barrier()
    addr = fx.Int32(fx.ptrtoint(a.ptr)) + (15 - t) * 4
    p = fx.inttoptr(fx.PointerType.get(fx.Float32, fx.AddressSpace.Shared, 4), addr)
    y[t] = p.load()


def test_32_bit_shared_addresses_round_trip():
    x = np.arange(16, dtype=np.float32)
    y = np.zeros(16, np.float32)
    lds_addresses[1, 16](x, y)
    np.testing.assert_array_equal(y, x[::-1])

    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor):
        lds_addresses(x, y).launch(grid=(1, 1, 1), block=(16, 1, 1))

    gcn = flydsl.compile(run, x, y, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "ds_read_b32" in gcn or "ds_read2" in gcn


@flydsl.kernel
def scale_in_registers(x: fx.Tensor, y: fx.Tensor):
    """make_rmem_tensor + memref_load_vec/store_vec, fragment arithmetic."""
    t = fx.thread_idx.x
    r = fx.make_rmem_tensor(4, fx.Float32)
    for k in fx.range_constexpr(4):
        fx.memref_store(x[t * 4 + k], r, k)
    v = fx.memref_load_vec(r)
    fx.memref_store_vec(v * 2.0 + 1.0, r)
    w = fx.memref_load_vec(r)
    for k in fx.range_constexpr(4):
        y[t * 4 + k] = w[k]


def test_register_tensor_vectors():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    scale_in_registers[1, 8](x, y)
    np.testing.assert_array_equal(y, x * 2 + 1)


@flydsl.kernel
def tiled_add(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, THREADS: fx.Constexpr[int]):
    """Upstream's vec_add shape: 128-bit buffer copies into register tensors, the sum
    of the two loaded vectors stored back with memref_store_vec."""
    tid, bid = fx.thread_idx.x, fx.block_idx.x
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy128b(), fx.Float32)
    tiles = []
    for t in (a, b, c):
        block = fx.slice(fx.logical_divide(fx.rocdl.make_buffer_tensor(t),
                                           fx.make_layout(THREADS * 4, 1)), (None, bid))
        tiles.append(fx.slice(fx.logical_divide(block, fx.make_layout(4, 1)), (None, tid)))
    ra, rb, rc = (fx.make_rmem_tensor(4, fx.Float32) for _ in range(3))
    fx.copy(atom, tiles[0], ra)
    fx.copy(atom, tiles[1], rb)
    fx.memref_store_vec(fx.memref_load_vec(ra) + fx.memref_load_vec(rb), rc)
    fx.copy(atom, rc, tiles[2])


def test_register_vectors_between_buffer_copies():
    a = np.random.default_rng(0).random(3 * 256, dtype=np.float32)
    b = np.random.default_rng(1).random(3 * 256, dtype=np.float32)
    c = np.zeros_like(a)
    tiled_add[3, 64](a, b, c, 64)
    np.testing.assert_array_equal(c, a + b)

    @flydsl.jit
    def run(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor):
        tiled_add(a, b, c, 64).launch(grid=(3, 1, 1), block=(64, 1, 1))

    gcn = flydsl.compile(run, a, b, c, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert gcn.count("buffer_load_dwordx4") == 2 and "buffer_store_dwordx4" in gcn


@flydsl.kernel
def global_pointers(x: fx.Tensor, y: fx.Tensor):
    """get_iter of tensors, a view from a pointer, ptrtoint/inttoptr round trip."""
    t = fx.thread_idx.x
    src = fx.get_iter(x)
    row = fx.make_view(src + 8, fx.make_layout(8, 1))      # x[8:16]
    addr = fx.ptrtoint(fx.get_iter(y))
    ty = fx.PointerType(fx.get_iter(y).type)                # FlyDSL's PointerType(p.type)
    dst = fx.inttoptr(fx.PointerType.get(ty.element_type, ty.address_space), addr)
    fx.ptr_store(row[t] * 10.0, dst + t)
    bits = fx.recast_iter(fx.Int32, src)                   # a raw pointer
    y[8 + t] = fx.Float32(fx.ptr_load(bits + t) & 0xFF)


def test_global_pointers():
    x = np.arange(16, dtype=np.float32) + 0.5
    y = np.zeros(16, np.float32)
    global_pointers[1, 8](x, y)
    np.testing.assert_array_equal(y[:8], x[8:] * 10)
    np.testing.assert_array_equal(y[8:], (x[:8].view(np.int32) & 0xFF).astype(np.float32))


@flydsl.kernel
def pointer_params(Input: fx.Pointer, Output: fx.Pointer, N: fx.Constexpr[int]):
    """FlyDSL's pointer parameters (layernorm's ABI): one address per argument, views
    rebuilt from a layout; a tensor argument passes the pointer to its first element."""
    row = fx.block_idx.x
    t = fx.thread_idx.x
    src = (Input + fx.Int64(row) * N).view(fx.make_layout(N, 1))
    dst = fx.make_view(Output + row * N, fx.make_layout(N, 1))
    dst[t] = src[t] * 2.0 + Input[0]


def test_pointer_parameters():
    x = np.arange(24, dtype=np.float32).reshape(3, 8) + 1
    y = np.zeros_like(x)
    pointer_params[3, 8](x, y, 8)
    np.testing.assert_array_equal(y, x * 2 + x[0, 0])


@flydsl.kernel
def vector_through_pointers(x: fx.Tensor, y: fx.Tensor):
    """ptr_load with a vector result type and ptr_store of a vector: 4 consecutive
    elements each, through memory pointers and raw ones."""
    t = fx.thread_idx.x
    v = fx.ptr_load(fx.get_iter(x) + t * 4, _F32X4)
    fx.ptr_store(v * 2.0, fx.get_iter(y) + t * 4)
    raw = fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(y)) + 64 + t * 16)
    fx.ptr_store(fx.ptr_load(fx.get_iter(x) + 16 + t * 4, _F32X4) + 1.0, raw)


class _F32X4:
    """A vector type as FlyDSL's Float32x4 describes one (lanes and element dtype)."""
    dtype, lanes = fx.Float32, 4


def test_vector_loads_and_stores_through_pointers():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    vector_through_pointers[1, 4](x, y)
    np.testing.assert_array_equal(y[:16], x[:16] * 2)
    np.testing.assert_array_equal(y[16:], x[16:] + 1)

    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor):
        vector_through_pointers(x, y).launch(grid=(1, 1, 1), block=(4, 1, 1))

    ptx = flydsl.compile(run, x, y, backend="cuda", arch="sm_90").asm["ptx"]
    assert "st.global.v4" in ptx


@flydsl.kernel
def vector_alias_loads(x: fx.Tensor, y: fx.Tensor):
    """FlyDSL's ``ptr.load(fx.Int32x4)``: a vector type alias as the result type."""
    t = fx.thread_idx.x
    v = (fx.get_iter(x) + t * 4).load(fx.Int32x4)
    fx.ptr_store(v + 1, fx.get_iter(y) + t * 4)


def test_pointer_load_of_a_vector_alias():
    x = np.arange(16, dtype=np.int32)
    y = np.zeros(16, np.int32)
    vector_alias_loads[1, 4](x, y)
    np.testing.assert_array_equal(y, x + 1)


@flydsl.kernel
def dynamic_words(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    buf = fx.make_view(fx.get_dyn_shared(fx.Float32), fx.make_layout(32, 1))
    buf[t] = x[t]
    fx.barrier()
    y[t] = buf[31 - t]


def test_get_dyn_shared():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    dynamic_words[1, 32, 128](x, y)
    np.testing.assert_array_equal(y, x[::-1])


# -- GPU targets -----------------------------------------------------------------------

def test_struct_arrays_compile_for_gpus():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(2, np.float32)

    @flydsl.jit
    def run(x: fx.Tensor, out: fx.Tensor):
        block_sum(x, out).launch(grid=(2, 1, 1), block=(32, 1, 1))

    ptx = flydsl.compile(run, x, out, backend="cuda", arch="sm_90").asm["ptx"]
    llir = flydsl.compile(run, x, out, backend="rocm", arch="gfx942").asm["llir"]
    assert ".shared .align 16 .b8" in ptx and "st.shared.b32" in ptx
    assert "addrspace(3) global [16 x i8] undef, align 16" in llir


def test_pointers_compile_for_gpus():
    x = np.arange(16, dtype=np.float32)
    y = np.zeros(16, np.float32)

    @flydsl.jit
    def run(x: fx.Tensor, y: fx.Tensor):
        global_pointers(x, y).launch(grid=(1, 1, 1), block=(8, 1, 1))
        bytes_as_ints(x, y).launch(grid=(1, 1, 1), block=(16, 1, 1))

    ptx = flydsl.compile(run, x, y, backend="cuda", arch="sm_90").asm["ptx"]
    # the raw pointers (inttoptr, a recast global pointer) load and store global memory
    assert "ld.global" in ptx and "st.global" in ptx and "st.shared" in ptx
    gcn = flydsl.compile(run, x, y, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "global_load_dword" in gcn and "global_store_dword" in gcn and "ds_write" in gcn


# -- debug mode --------------------------------------------------------------------------

@flydsl.kernel
def past_the_array(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(Smem).peek()
    red = lds.s_red.view(fx.make_layout(WARPS, 1))
    fx.memref_store(x[t], red, t)  # OOB-FIELD
    fx.barrier()
    y[t] = fx.memref_load(red, 0)


def test_out_of_bounds_on_an_allocated_field_is_reported(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(OutOfBoundsError) as info:
        past_the_array[1, 8](np.zeros(8, np.float32), np.zeros(8, np.float32))
    e = info.value
    assert "s_red" in e.tensor and e.op == "store"
    assert e.lineno == marked_line(__file__, "OOB-FIELD")


@flydsl.kernel
def racy_sum(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    a = fx.SharedAllocator().allocate(Smem).peek().s_red
    a[t] = x[t]  # RACE
    out[t] = a[3 - t]


def test_a_race_on_an_allocated_field_is_reported(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    with pytest.raises(SharedMemoryRaceError) as info:
        racy_sum[1, 4](np.zeros(4, np.float32), np.zeros(4, np.float32))
    assert "s_red" in info.value.tensor
    assert info.value.lineno == marked_line(__file__, "RACE")
