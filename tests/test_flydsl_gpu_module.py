"""FlyDSL's fx.gpu module, flydsl.expr.enum, the primitive/derived module paths,
fx.const_expr, index-triple unpacking and @flydsl.kernel(known_block_size=...)."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import LaunchError


# -- module paths and enums -------------------------------------------------------------

def test_module_paths():
    from flydsl.expr import derived, enum, gpu, primitive
    assert fx.gpu is gpu and fx.SyncScope is enum.SyncScope
    assert primitive.make_layout is fx.make_layout and primitive.const_expr is fx.const_expr
    assert derived.make_tiled_copy is fx.make_tiled_copy
    assert set(primitive.__all__) <= set(primitive.FLYDSL_NAMES)
    with pytest.raises(AttributeError, match="not implemented by flydsl"):
        primitive.CoordSwizzleType   # a FlyDSL name flydsl lacks (if it ever lands, pick another)
    assert callable(gpu.shuffle_idx) and callable(gpu.known_block_size)


def test_enums():
    assert fx.SyncScope.System == "" and fx.SyncScope.SingleThread == "singlethread"
    assert [m.name for m in fx.AtomicOp] == ["Add", "Max", "Min", "And", "Or", "Inc", "Dec"]
    assert str(fx.AtomicOp.Max) == "max"
    assert fx.AtomicOrdering.monotonic.name == "monotonic"
    atom = fx.UniversalAtomicAdd(fx.Float32, syncscope=fx.SyncScope.System)
    assert atom.op == "add"
    assert fx.UniversalAtomic(fx.AtomicOp.Max, fx.Int32).op == "max"
    assert fx.GemmTraversalOrder.KNM.value == 1 and len(fx.GemmTraversalOrder) == 12
    from flydsl.expr import primitive
    assert primitive.GemmTraversalOrder is fx.GemmTraversalOrder


# -- kernels ----------------------------------------------------------------------------

@flydsl.kernel(known_block_size=[32, 1, 1])
def _warp_sums(x: fx.Tensor, out: fx.Tensor, meta: fx.Tensor):
    bid_x, bid_y, _ = fx.block_idx
    tid = fx.gpu.thread_idx.x
    i = bid_x * 32 + tid
    v = x[i]
    for s in fx.range_constexpr(5):
        v = v + fx.gpu.shuffle_xor(v, 1 << s, 32)
    out[i] = v
    bx, by, bz = fx.gpu.known_block_size()
    if fx.const_expr(bx == 32 and by == 1):
        meta[i] = fx.gpu.lane_id() + fx.gpu.num_warp_threads() * 100 + bid_y * 10000 \
            + fx.block_idx[0] * 1000000


def test_known_block_size_kernel_runs():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    meta = np.zeros(64, np.int32)
    _warp_sums[(2, 1, 1), (32, 1, 1)](x, out, meta)
    assert (out[:32] == x[:32].sum()).all() and (out[32:] == x[32:].sum()).all()
    lanes = np.tile(np.arange(32), 2)
    assert (meta == lanes + 3200 + np.repeat([0, 1000000], 32)).all()


def test_known_block_size_checked_at_launch():
    x = np.zeros(64, np.float32)
    with pytest.raises(LaunchError, match=r"known_block_size=\[32, 1, 1\]"):
        _warp_sums[2, 64](x, x.copy(), np.zeros(64, np.int32))
    with pytest.raises(LaunchError, match="known_block_size"):
        _warp_sums(x, x.copy(), np.zeros(64, np.int32)).launch(grid=2, block=(16, 2, 1))


@pytest.mark.parametrize("bad,err,msg", [
    ([256, 1], ValueError, "exactly 3 elements"), (512, TypeError, "sequence of 3 positive"),
    ([64.0, 1, 1], TypeError, "must be an int"), ([0, 1, 1], ValueError, "must be positive")])
def test_known_block_size_validation(bad, err, msg):
    with pytest.raises(err, match=msg):
        @flydsl.kernel(known_block_size=bad)
        def _bad(x: fx.Tensor):
            pass


@flydsl.kernel
def _no_size(x: fx.Tensor):
    x[0] = fx.Float32(fx.gpu.known_block_size()[0])


@flydsl.kernel
def _launch_width(out: fx.Tensor):
    bx, by, _ = fx.known_block_size()
    out[fx.thread_idx.y * bx + fx.thread_idx.x] = fx.Int32(bx * 100 + by)


def test_known_block_size_without_a_declaration_is_the_launch_block():
    # FlyDSL: the launch's static block; the kernel is compiled once per block
    for block in ((32, 1, 1), (16, 2, 1), (32, 1, 1)):
        out = np.zeros(32, np.int32)
        _launch_width[1, block](out)
        assert (out == block[0] * 100 + block[1]).all(), (block, out)
    x = np.zeros(1, np.float32)
    _no_size[1, 8](x)
    assert x[0] == 8.0
    ptx = flydsl.compile(_launch_width, np.zeros(32, np.int32), backend="cuda",
                         arch="sm_90").asm["ptx"]
    assert ".maxntid 1, 1, 1" in ptx   # flydsl.compile launches one thread


def test_known_block_size_from_the_launch_is_in_the_cache_key():
    from flydsl.compiler import kernel_compiler
    from flydsl.kernel import KernelFunction
    out = np.zeros(16, np.int32)
    _launch_width[1, 16](out)
    fresh = KernelFunction(_launch_width.fn)   # a new process's kernel: the disk cache only
    before = len(kernel_compiler.compiled_keys)
    fresh[1, 16](out)
    assert (out == 1601).all() and len(kernel_compiler.compiled_keys) == before
    fresh[1, (8, 2, 1)](out)    # another block: not the entry of 16 threads
    assert (out == 802).all() and len(kernel_compiler.compiled_keys) == before + 1


def _fill_2d(y: fx.Tensor, rows: fx.Int32, cols: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    j = fx.block_idx.y * fx.block_dim.y + fx.thread_idx.y
    if i < rows and j < cols:
        y[i, j] = 3.0


def test_kernels_of_one_function_that_declare_two_block_sizes_compile_apart():
    """Two ``flydsl.kernel(known_block_size=...)`` of one function shared compiled code,
    in a process and through the disk cache (the declaration was an attribute of the
    function and not in the key): the second ran with the first's block size and
    wrote 64 of 4096 elements, silently."""
    from flydsl.kernel import KernelFunction
    wide = flydsl.kernel(known_block_size=[64, 1, 1])(_fill_2d)
    tall = flydsl.kernel(known_block_size=[1, 64, 1])(_fill_2d)   # declared before any launch
    for k, block in ((wide, (64, 1)), (tall, (1, 64)), (wide, (64, 1))):
        y = np.zeros((64, 64), np.float32)
        k[(64 // block[0], 64 // block[1]), block](y, 64, 64)
        assert (y == 3.0).all(), block
    # a new process's kernel: from the disk cache, each its own entry
    again = KernelFunction(_fill_2d, known_block_size=[1, 64, 1])
    y = np.zeros((64, 64), np.float32)
    again[(64, 1), (1, 64)](y, 64, 64)
    assert (y == 3.0).all()


def test_known_block_size_without_any_block_is_an_error():
    with pytest.raises(Exception, match="no compile-time block size"):
        _no_size.prepare((np.zeros(1, np.float32),), grid=1, block=1)


@flydsl.kernel(known_block_size=[64, 1, 1])
def _k64(x: fx.Tensor):
    x[fx.thread_idx.x] = 1.0


@flydsl.kernel
def _k_free(x: fx.Tensor):
    x[fx.thread_idx.x] = 1.0


def test_known_block_size_reaches_the_backends():
    x = np.zeros(64, np.float32)
    ptx = flydsl.compile(_k64, x, backend="cuda", arch="sm_90").asm["ptx"]
    assert ".maxntid 64, 1, 1" in ptx
    free = flydsl.compile(_k_free, x, backend="cuda", arch="sm_90").asm["ptx"]
    assert ".maxntid 64, 1, 1" not in free
    ll = flydsl.compile(_k64, x, backend="rocm", arch="gfx942").asm["llir"]
    assert '"amdgpu-flat-work-group-size"="64,64"' in ll


@flydsl.kernel
def _shuffles(x: fx.Tensor, up: fx.Tensor, down: fx.Tensor, idx: fx.Tensor, xr: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    up[i] = fx.gpu.shuffle_up(v, 1, 16)
    down[i] = fx.gpu.shuffle_down(v, 2, fx.Int32(16))
    idx[i] = fx.gpu.shuffle_idx(v, 3, 8)
    xr[i] = fx.gpu.shuffle(v, fx.Int32(1), 32, mode="xor")


def test_shuffles_with_width():
    x = np.arange(32, dtype=np.float32)
    up, down, idx, xr = (np.zeros(32, np.float32) for _ in range(4))
    _shuffles[1, 32](x, up, down, idx, xr)
    lane = np.arange(32)
    seg16 = lane % 16
    assert (up == np.where(seg16 >= 1, x - 1, x)).all()
    assert (down == np.where(seg16 < 14, x + 2, x)).all()
    assert (idx == (lane // 8) * 8 + 3).all()
    assert (xr == (lane ^ 1)).all()


def test_bad_shuffle_mode():
    @flydsl.kernel
    def bad(x: fx.Tensor):
        x[0] = fx.gpu.shuffle(x[0], 1, 32, mode="rotate")
    with pytest.raises(Exception, match="invalid shuffle mode"):
        bad[1, 32](np.zeros(32, np.float32))


@flydsl.kernel
def _fx_level(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    v = x[i]
    out[i] = fx.shuffle_xor(v, 4, 8) + fx.shuffle_idx(v, 0, 32) + fx.as_numeric(0.0) \
        + fx.num_warp_threads() * 0


def test_fx_level_names_take_flydsl_signatures():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    _fx_level[1, 32](x, out)
    assert (out == (np.arange(32) ^ 4) + 0).all()


@flydsl.kernel
def _scoped_adds(c: fx.Tensor):
    fx.atomic_add(c, 0, 1, scope=fx.SyncScope.System, ordering=fx.AtomicOrdering.monotonic)
    fx.atomic_add(c, 1, 2, scope="agent")


def test_atomic_add_takes_scope_and_ordering():
    c = np.zeros(2, np.int32)
    _scoped_adds[4, 32](c)
    assert c.tolist() == [128, 256]
    with pytest.raises(TypeError, match="ordering"):
        fx.enum.check_atomic_options(ordering="strongest")
    with pytest.raises(TypeError, match="scope"):
        fx.enum.check_atomic_options(scope=3)


def test_num_warp_threads_outside_a_kernel_is_the_current_targets(monkeypatch):
    """FlyDSL's host code sizes blocks with fx.gpu.num_warp_threads(): the warp of the
    target launches compile for now (the CPU backend's 32, or 64 with
    FLYDSL_CPU_WARP_SIZE=64)."""
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cpu")
    monkeypatch.delenv("FLYDSL_CPU_WARP_SIZE", raising=False)
    assert fx.gpu.num_warp_threads() == 32
    monkeypatch.setenv("FLYDSL_CPU_WARP_SIZE", "64")
    assert fx.gpu.num_warp_threads() == 64
