"""Review of the CPU's buffer-tensor copies (``fx.rocdl.make_buffer_tensor`` +
``fx.rocdl.BufferCopy*``) against the hardware's raw-buffer range check.

The reference is the AMDGPU rule (LLVM's AMDGPUUsage, "buffer OOB"; the CDNA3 ISA's
range checking for raw buffers, stride 0): the byte offset ``voffset`` (32 bits,
unsigned) of each 32-bit word of an access is checked on its own, a word is inside when
its last byte lies below ``num_records``; a load gives 0 for a word outside, a store
does not write it. Each thread copies tile ``tiles[t]`` (W elements, the atom's width;
negative tiles are a negative voffset) of ``a`` to its registers, the registers to a
plain output, and the registers to tile ``tiles[t]`` of ``c``.

Plausible bugs these catch: an element-wise check where the hardware's is per word (a
16-bit element whose word is cut reads its value instead of 0), a negative offset taken
as small, a store past the records written, the memory-profiled build checking
differently from the normal one.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

torch = pytest.importorskip("torch")

#: values are the point: LLVM -O0 (conftest.llvm_o0), a shorter compile
pytestmark = pytest.mark.usefixtures("llvm_o0")

#: (name, flydsl dtype, torch dtype, bytes) of the element types checked
DTYPES = {"f32": (fx.Float32, torch.float32, 4), "f16": (fx.Float16, torch.float16, 2),
          "bf16": (fx.BFloat16, torch.bfloat16, 2), "i8": (fx.Int8, torch.int8, 1),
          "fp8": (fx.Float8E4M3FNUZ, torch.float8_e4m3fnuz, 1)}

TILES = 8           # tiles of a and c
THREADS = 12        # thread t copies tile TILE_OF[t]
TILE_OF = np.array([0, 1, 2, 3, 4, 5, 6, 7, -1, -2, 8, 9], np.int32)


@flydsl.kernel
def tile_copies(a: fx.Tensor, out: fx.Tensor, c: fx.Tensor, tiles: fx.Tensor,
                a_bytes: fx.Int32, c_bytes: fx.Int32, dtype_name: fx.Constexpr[str],
                bits: fx.Constexpr[int]):
    t = fx.thread_idx.x
    dtype, _, size = DTYPES[dtype_name]
    w = max(bits // (8 * size), 1)
    ga = fx.rocdl.make_buffer_tensor(a, max_size=False, num_records_bytes=fx.Int64(a_bytes))
    gc = fx.rocdl.make_buffer_tensor(c, max_size=False, num_records_bytes=fx.Int64(c_bytes))
    atom = fx.make_copy_atom(fx.rocdl.BufferCopy(bits), dtype)
    i = tiles[t]
    src = fx.flat_divide(ga, fx.make_tile(w))[None, i]
    regs = fx.make_fragment_like(src)
    fx.copy(atom, src, regs)
    for j in fx.range_constexpr(w):
        out[t * w + j] = regs[j]
    fx.copy(atom, regs, fx.flat_divide(gc, fx.make_tile(w))[None, i])


def _words_inside(offset: int, nbytes: int, records: int) -> list:
    """Per byte of an access at byte ``offset`` (an i32, taken unsigned): whether its
    32-bit word lies inside ``records`` bytes."""
    v = offset & 0xFFFFFFFF
    inside = []
    for byte in range(nbytes):
        k = byte // 4
        end = v + 4 * k + min(4, nbytes - 4 * k)
        inside.append(end <= records)
    return inside


def _expected(a_bits: np.ndarray, c_bits: np.ndarray, w: int, size: int, a_bytes: int,
              c_bytes: int):
    """(out, c) bytes after the kernel, from the per-word rule."""
    nbytes = w * size
    out = np.zeros((THREADS, nbytes), np.uint8)
    c = c_bits.copy()
    # records are whole elements (make_buffer_tensor drops a partial one), bounded by the
    # tensor's own bytes on the CPU
    a_rec = min(a_bytes // size * size, a_bits.size)
    c_rec = min(c_bytes // size * size, c_bits.size)
    for t, tile in enumerate(TILE_OF):
        off = int(tile) * nbytes
        for byte, ok in enumerate(_words_inside(off, nbytes, a_rec)):
            if ok:
                out[t, byte] = a_bits[(off & 0xFFFFFFFF) + byte]
        for byte, ok in enumerate(_words_inside(off, nbytes, c_rec)):
            if ok:
                c[(off & 0xFFFFFFFF) + byte] = out[t, byte]
    return out.ravel(), c


def _run(dtype_name: str, bits: int, a_bytes: int, c_bytes: int):
    _, tdt, size = DTYPES[dtype_name]
    w = max(bits // (8 * size), 1)
    n = TILES * w
    rng = np.random.default_rng(bits + size)
    a_bits = rng.integers(1, 127, n * size).astype(np.uint8)   # no NaN/negative-zero codes
    c_bits = np.full(n * size, 0x3C, np.uint8)
    a = torch.from_numpy(a_bits.copy()).view(tdt)
    c = torch.from_numpy(c_bits.copy()).view(tdt)
    out = torch.zeros(THREADS * w * size, dtype=torch.uint8).view(tdt)
    tile_copies[1, THREADS](a, out, c, torch.from_numpy(TILE_OF), a_bytes, c_bytes,
                            dtype_name, bits)
    want_out, want_c = _expected(a_bits, c_bits, w, size, a_bytes, c_bytes)
    return (out.view(torch.uint8).numpy(), c.view(torch.uint8).numpy()), (want_out, want_c)


#: (dtype, atom bits, a's records in bytes, c's): records cutting a word of a tile,
#: ending on a word, covering less than one word, past the tensor
CASES = [("f16", 128, 3 * 16 + 10, 5 * 16 + 6), ("f16", 128, 16 + 2, 1 << 20),
         ("bf16", 32, 3 * 4 + 2, 5 * 4 + 2), ("f16", 16, 5 * 2, 3 * 2), ("i8", 8, 5, 3),
         ("i8", 64, 13, 6), ("i8", 64, 2, 9), ("fp8", 128, 2 * 16 + 7, 3 * 16 + 13),
         ("f32", 128, 16 + 12, 3 * 16 + 4), ("f32", 64, 3 * 8 + 4, 8 * 8 + 100),
         ("f32", 32, 1 << 20, 2 * 4)]


@pytest.mark.parametrize("dtype_name,bits,a_bytes,c_bytes", CASES)
def test_buffer_copies_check_each_word_as_the_hardware(dtype_name, bits, a_bytes, c_bytes):
    (out, c), (want_out, want_c) = _run(dtype_name, bits, a_bytes, c_bytes)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(c, want_c)


@pytest.mark.parametrize("dtype_name,bits,a_bytes,c_bytes", [CASES[0], CASES[2], CASES[7]])
def test_the_memory_profiled_build_gives_the_same_values(monkeypatch, dtype_name, bits,
                                                          a_bytes, c_bytes):
    monkeypatch.setenv("FLYDSL_PROFILE", "memory")
    (out, c), (want_out, want_c) = _run(dtype_name, bits, a_bytes, c_bytes)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(c, want_c)


@flydsl.kernel
def atomic_adds(v: fx.Tensor, c: fx.Tensor, c_bytes: fx.Int32):
    """Thread t atomically adds v[t] to element t of c (16 threads) through a buffer
    resource of ``c_bytes``."""
    t = fx.thread_idx.x
    gc = fx.rocdl.make_buffer_tensor(c, max_size=False, num_records_bytes=fx.Int64(c_bytes))
    atom = fx.make_copy_atom(fx.rocdl.BufferAtomicAdd(fx.Float32), fx.Float32)
    fx.copy(atom, fx.flat_divide(v, fx.make_tile(1))[None, t],
            fx.flat_divide(gc, fx.make_tile(1))[None, t])


@pytest.mark.parametrize("c_bytes,updated", [(5 * 4, 5), (64 * 4, 8)])
def test_buffer_atomics_stop_at_the_records_and_the_tensors_memory(c_bytes, updated):
    """Records past the tensor: the atomics past its 8 elements are dropped, as the
    buffer copies' are on the CPU (they wrote the host memory after it before)."""
    whole = np.full(32, 5.0, np.float32)
    atomic_adds[1, 16](np.arange(1, 17, dtype=np.float32), whole[:8], c_bytes)
    want = np.full(32, 5.0, np.float32)
    want[:updated] += np.arange(1, updated + 1)
    np.testing.assert_array_equal(whole, want)


@flydsl.kernel
def strided_resource(x: fx.Tensor, y: fx.Tensor, stride: fx.Constexpr[int]):
    """A raw resource with a nonzero stride (a structured/swizzled buffer: the hardware
    indexes it by stride and index, which the CPU does not model)."""
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import arith as std_arith
    from flydsl._mlir.dialects import fly, rocdl
    from flydsl._mlir.extras import types as T
    base = fly.extract_aligned_pointer_as_index(ir.Type.parse("!llvm.ptr"), x)
    rsrc = rocdl.MakeBufferRsrcOp(ir.Type.parse("!llvm.ptr<8>"), base,
                                  std_arith.constant(T.i16(), stride),
                                  std_arith.constant(T.i64(), 64),
                                  std_arith.constant(T.i32(), (7 << 12) | (4 << 15))).result
    y[fx.thread_idx.x] = fx.Float32(rocdl.raw_ptr_buffer_load(
        T.f32(), rsrc, fx.thread_idx.x * 4, 0, 0))


def test_a_strided_raw_resource_is_a_located_error():
    from flydsl.errors import DSLError
    x = np.arange(16, dtype=np.float32)
    with pytest.raises(DSLError, match="stride 0") as caught:
        strided_resource[1, 4](x, np.zeros(4, np.float32), 16)
    assert "test_review_buffers.py" in str(caught.value)
    assert "strided_resource" in str(caught.value)


@flydsl.kernel
def lds_pairs(x: fx.Tensor, y: fx.Tensor, x_bytes: fx.Int32):
    """Lane l loads float16 pairs 2l, 2l + 1 of x to LDS with one 32-bit buffer-to-LDS
    copy (x's resource covers ``x_bytes``), then y = the LDS tile."""
    t = fx.thread_idx.x
    tile = fx.shared_array((128,), fx.Float16)
    gx = fx.rocdl.make_buffer_tensor(x, max_size=False, num_records_bytes=fx.Int64(x_bytes))
    atom = fx.make_copy_atom(fx.rocdl.BufferCopyLDS32b(), fx.Float16)
    fx.copy(atom, fx.flat_divide(gx, (2,))[None, t],
            fx.flat_divide(tile, (2,))[None, fx.rocdl.readfirstlane(0)])
    fx.rocdl.s_waitcnt(vmcnt=0)
    fx.barrier()
    y[2 * t] = tile[2 * t]
    y[2 * t + 1] = tile[2 * t + 1]


@pytest.mark.parametrize("profiled", [False, True])
def test_buffer_loads_to_lds_check_each_word(monkeypatch, profiled):
    """Records of 45 float16 (90 bytes): pair 22 (bytes 88..91) is a word cut by the
    records: 0 for both halves, though element 44 lies inside; in both builds."""
    if profiled:
        monkeypatch.setenv("FLYDSL_PROFILE", "memory")
    x = np.arange(1, 129, dtype=np.float16)
    y = np.full(128, -1.0, np.float16)
    lds_pairs[1, 64](x, y, 45 * 2 + 1)
    want = x.copy()
    want[44:] = 0
    np.testing.assert_array_equal(y, want)
