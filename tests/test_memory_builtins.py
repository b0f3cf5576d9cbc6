"""Memory builtins: dynamic shared memory, multi-dimensional shared arrays, atomics,
per-thread local arrays and constant (module-level numpy) arrays.

Each feature runs on the CPU backend against a numpy reference and compiles for sm_90
and gfx942, where the expected instructions must appear in the assembly.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import CompileTimeValueRequired, DSLTypeError, LaunchError

GPUS = {"cuda": ("sm_90", "ptx"), "rocm": ("gfx942", "amdgcn")}


def gpu_asm(kernel, *args, backend: str) -> str:
    """The assembly of ``kernel`` compiled for ``backend``'s default test arch."""
    arch, stage = GPUS[backend]
    return flydsl.compile(kernel, *args, backend=backend, arch=arch).asm[stage]


def instructions(asm: str) -> set:
    """The opcodes of an assembly listing (directives, labels and comments left out)."""
    ops = set()
    for line in asm.splitlines():
        words = line.split()
        if words and not words[0].startswith((".", "//", ";")) and not words[0].endswith(":"):
            ops.add(words[0])
    return ops


def blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


# ----------------------------------------------------------------------------------
# Dynamic shared memory
# ----------------------------------------------------------------------------------

@flydsl.kernel
def reverse_through_dynamic(x: fx.Tensor, y: fx.Tensor, bits: fx.Tensor, info: fx.Tensor,
                            n: fx.Int32):
    """Reverse each block's slice of ``x`` through dynamic shared memory. The launch
    gives 2 * block * 4 bytes: Float32 values, then Int32 ids at a runtime offset; an
    Int32 view of the first bytes (numba's spelling) reads the values' bits."""
    t = fx.thread_idx.x
    nt = fx.block_dim.x
    base = fx.block_idx.x * nt
    i = base + t
    vals = fx.dynamic_shared_array(fx.Float32)
    same_bytes = fx.shared_array(0, fx.Int32)
    ids = fx.dynamic_shared_array(fx.Int32, offset=nt * 4)
    static = fx.shared_array(2, fx.Int32)
    if t == 0:
        static[0] = 7
    if i < n:
        vals[t] = x[i]
    ids[t] = i
    fx.barrier()
    valid = fx.min(nt, n - base)
    if i < n:
        y[i] = vals[valid - 1 - t]
        bits[i] = same_bytes[t]
        info[2, i] = ids[valid - 1 - t] + static[0]
    if i == 0:
        info[0, 0] = vals.shape[0]
        info[1, 0] = ids.shape[0]


@flydsl.jit
def reverse_through_dynamic_jit(x, y, bits, info, n: fx.Int32, BLOCK: fx.Constexpr[int]):
    reverse_through_dynamic(x, y, bits, info, n).launch(
        grid=(n + BLOCK - 1) // BLOCK, block=BLOCK, smem=2 * BLOCK * 4)


LAUNCH_FORMS = {
    "kernel[grid, block, smem]": lambda g, b, smem: reverse_through_dynamic[g, b, smem],
    "numba kernel[grid, block, 0, smem]": lambda g, b, smem: reverse_through_dynamic[g, b, 0, smem],
    "numba kernel[grid, block, stream, smem]":
        lambda g, b, smem: reverse_through_dynamic[g, b, None, smem],
    "CUDA kernel[grid, block, smem, stream]":
        lambda g, b, smem: reverse_through_dynamic[g, b, smem, None],
}


@pytest.mark.parametrize("form", list(LAUNCH_FORMS) + ["launch(smem=...)"])
@pytest.mark.parametrize("n,block", [(1000, 128), (77, 32), (300, 96), (5, 64)])
def test_dynamic_shared_array_is_sized_by_the_launch(form, n, block):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y, bits = np.zeros_like(x), np.zeros(n, np.int32)
    info = np.zeros((3, n), np.int32)
    if form == "launch(smem=...)":
        reverse_through_dynamic_jit(x, y, bits, info, n, block)
    else:
        LAUNCH_FORMS[form](blocks(n, block), block, 2 * block * 4)(x, y, bits, info, n)
    expect = np.concatenate([part[::-1] for part in np.split(x, range(block, n, block))])
    np.testing.assert_array_equal(y, expect)
    np.testing.assert_array_equal(bits, x.view(np.int32))        # the same bytes
    assert info[0, 0] == 2 * block and info[1, 0] == block        # (smem - offset) // 4
    ids = np.concatenate([part[::-1] for part in np.split(np.arange(n), range(block, n, block))])
    np.testing.assert_array_equal(info[2], ids + 7)               # static array untouched


def test_dynamic_shared_memory_over_the_device_limit_is_a_launch_error():
    x = np.zeros(32, np.float32)
    info = np.zeros((3, 32), np.int32)
    with pytest.raises(LaunchError, match=r"reverse_through_dynamic.*shared memory"):
        reverse_through_dynamic[1, 32, 0, 4 << 20](x, x, info[0], info, 32)


@pytest.mark.parametrize("config", [(None, None), (None, -4), (1.5,), ("x", None)])
def test_launch_config_without_a_valid_smem_is_a_launch_error(config):
    with pytest.raises(LaunchError, match="smem must be a non-negative int"):
        reverse_through_dynamic[(1, 32) + config]


@flydsl.kernel
def dynamic_offset_kernel(y: fx.Tensor, OFFSET: fx.Constexpr[int]):
    buf = fx.dynamic_shared_array(fx.Float32, offset=OFFSET)
    y[0] = buf[0]


@pytest.mark.parametrize("offset,match", [(2, "multiple of the element size"),
                                          (-4, "non-negative"), (1.5, "non-negative")])
def test_dynamic_shared_array_offset_errors(offset, match):
    with pytest.raises(DSLTypeError, match=f"fx.dynamic_shared_array offset.*{match}"):
        dynamic_offset_kernel[1, 1, 64](np.zeros(1, np.float32), offset)


def test_dynamic_shared_memory_on_cuda_is_extern_shared_sized_by_its_register():
    x = np.zeros(8, np.float32)
    ptx = gpu_asm(reverse_through_dynamic, x, x, x.view(np.int32), np.zeros((3, 8), np.int32),
                  8, backend="cuda")
    # external (not a demoted static variable): it starts after every static array
    assert re.search(r"\.extern \.shared \.align 16 \.b8 __flydsl_dynamic_shared\[\];", ptx)
    assert "%dynamic_smem_size" in ptx
    assert re.search(r"\.shared \.align 4 \.\w+ __wg_reverse_through_dynamic_0", ptx)


def test_dynamic_shared_memory_on_rocm_reads_hidden_dynamic_lds_size():
    x = np.zeros(8, np.float32)
    asm = gpu_asm(reverse_through_dynamic, x, x, x.view(np.int32), np.zeros((3, 8), np.int32),
                  8, backend="rocm")
    # the runtime fills the kernel argument only when the metadata lists it
    field = re.search(r"\.offset:\s+(\d+)\n\s+\.size:\s+4\n\s+\.value_kind:\s+"
                      r"hidden_dynamic_lds_size", asm)
    assert field, "hidden_dynamic_lds_size is missing from the kernel's metadata"
    assert re.search(rf"s_load_dword s\d+, s\[\d+:\d+\], {int(field.group(1)):#x}\b", asm)
    assert "ds_write_b32" in asm and "ds_read_b32" in asm


def test_numba_launch_form_reaches_the_cuda_driver(fake_cuda, monkeypatch):
    """``kernel[grid, block, 0, smem]`` passes ``smem`` as sharedMemBytes, and opts the
    kernel in beyond 48 KiB."""
    from fake_gpu import DevArray, compile_cuda, register
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    host = np.zeros(64, np.float32)
    register(fake_cuda, compile_cuda(reverse_through_dynamic, host, host, host.view(np.int32),
                                     np.zeros((3, 64), np.int32), 64))
    x, bits, info = DevArray(host), DevArray(host.view(np.int32)), DevArray(np.zeros((3, 64),
                                                                                     np.int32))
    try:
        reverse_through_dynamic[1, 64, 0, 100 * 1024](x, x, bits, info, 64)
        assert fake_cuda.launches[-1]["smem"] == 100 * 1024
        sets = [args for name, args in fake_cuda.calls if name == "cuFuncSetAttribute"]
        assert [s[2] for s in sets] == [100 * 1024]
        reverse_through_dynamic[1, 64, None, 512](x, x, bits, info, 64)
        assert fake_cuda.launches[-1]["smem"] == 512
        with pytest.raises(LaunchError, match=r"reverse_through_dynamic.*shared memory"):
            reverse_through_dynamic[1, 64, 0, 300 * 1024](x, x, bits, info, 64)
    finally:
        reverse_through_dynamic.cache_clear()   # its launcher holds the fake driver


# ----------------------------------------------------------------------------------
# Multi-dimensional shared arrays
# ----------------------------------------------------------------------------------

TILE = 16


@flydsl.kernel
def transpose_padded(a: fx.Tensor, b: fx.Tensor):
    """b = a.T through a (TILE, TILE + 1) tile: the padding column avoids bank conflicts."""
    tile = fx.shared_array((TILE, TILE + 1), fx.Float32)
    tx, ty = fx.thread_idx.x, fx.thread_idx.y
    row, col = fx.block_idx.y * TILE + ty, fx.block_idx.x * TILE + tx
    if row < a.shape[0] and col < a.shape[1]:
        tile[ty, tx] = a[row, col]
    fx.barrier()
    row, col = fx.block_idx.x * TILE + ty, fx.block_idx.y * TILE + tx
    if row < b.shape[0] and col < b.shape[1]:
        b[row, col] = tile[tx, ty]


@pytest.mark.parametrize("shape", [(37, 50), (16, 16), (1, 70), (65, 3)])
def test_padded_transpose_through_a_2d_shared_array(shape):
    a = np.random.default_rng(sum(shape)).random(shape).astype(np.float32)
    b = np.zeros(shape[::-1], np.float32)
    transpose_padded[(blocks(shape[1], TILE), blocks(shape[0], TILE)), (TILE, TILE)](a, b)
    np.testing.assert_array_equal(b, a.T)


@pytest.mark.parametrize("backend,expect", [
    ("cuda", [r"\.shared \.align 4 \.b8 __wg_transpose_padded_0\[1088\];",
              r"st\.shared\.b32", r"ld\.shared\.b32"]),
    ("rocm", [r"\.group_segment_fixed_size:\s+1088", r"ds_write_b32", r"ds_read_b32"]),
])
def test_padded_transpose_compiles_to_shared_memory(backend, expect):
    a = np.zeros((4, 4), np.float32)
    asm = gpu_asm(transpose_padded, a, a, backend=backend)
    for pattern in expect:
        assert re.search(pattern, asm), pattern


@flydsl.kernel
def reverse_cube(x: fx.Tensor, y: fx.Tensor):
    cube = fx.shared_array((2, 4, 8), fx.Int64)
    tx, ty, tz = fx.thread_idx.x, fx.thread_idx.y, fx.thread_idx.z
    cube[tz, ty, tx] = x[fx.block_idx.x, tz, ty, tx]
    fx.barrier()
    y[fx.block_idx.x, tz, ty, tx] = cube[1 - tz, 3 - ty, 7 - tx]


def test_3d_shared_array():
    x = np.random.default_rng(3).integers(-2**40, 2**40, (3, 2, 4, 8))
    y = np.zeros_like(x)
    reverse_cube[3, (8, 4, 2)](x, y)
    np.testing.assert_array_equal(y, x[:, ::-1, ::-1, ::-1])
    assert ".shared .align 8 .b8 __wg_reverse_cube_0[512];" in gpu_asm(reverse_cube, x, y,
                                                                         backend="cuda")
    assert re.search(r"\.group_segment_fixed_size:\s+512", gpu_asm(reverse_cube, x, y,
                                                                    backend="rocm"))


# ----------------------------------------------------------------------------------
# Atomics
# ----------------------------------------------------------------------------------

@flydsl.kernel
def rmw_family(x: fx.Tensor, acc: fx.Tensor, olds: fx.Tensor, n: fx.Int32):
    """Every thread updates the same five words; ``olds`` keeps what each update saw."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        v = x[i]
        olds[0, i] = fx.atomic_max(acc, 0, v)
        olds[1, i] = fx.atomic_min(acc, 1, v)
        olds[2, i] = fx.atomic_add(acc, 2, v)
        olds[3, i] = fx.atomic_sub(acc, 3, v)
        olds[4, i] = fx.atomic_exch(acc, 4, v)


def _values(dtype, n: int, seed: int) -> np.ndarray:
    """Random values; unsigned ones beyond the signed range (unsigned comparison
    matters), floats integral (exact sums)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    if info is not None and info.min == 0:
        return rng.integers(0, info.max, n, dtype=dtype, endpoint=True)
    if info is not None:
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return rng.integers(-1000, 1000, n).astype(dtype)


def _assert_chain(olds, values, start, final, op) -> None:
    """Atomicity: the updates form one chain from ``start`` to ``final``, each one seeing
    the value the previous one left (so no update was lost or seen twice)."""
    seen = np.sort(np.append(olds, final))
    made = np.sort(np.append(op(olds, values), start))
    np.testing.assert_array_equal(seen, made)


DTYPES = [np.int32, np.int64, np.float32, np.float64, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("n,block", [(100_000, 256), (1000, 100)])
def test_atomic_rmw_family_under_contention(dtype, n, block):
    x = _values(dtype, n, seed=n)
    start = _values(dtype, 5, seed=1)
    acc, olds = start.copy(), np.zeros((5, n), dtype)
    with np.errstate(over="ignore"):
        rmw_family[blocks(n, block), block](x, acc, olds, n)
        assert acc[0] == max(start[0], x.max()) and acc[1] == min(start[1], x.min())
        assert np.all(olds[0] <= acc[0]) and np.all(olds[1] >= acc[1])
        _assert_chain(olds[2], x, start[2], acc[2], np.add)
        _assert_chain(olds[3], x, start[3], acc[3], np.subtract)
        _assert_chain(olds[4], x, start[4], acc[4], lambda old, v: v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_float_atomic_max_min_treat_nan_as_missing(dtype):
    nan = np.nan
    x = np.array([nan, 1.5, 5.0, nan, -2.0, nan], dtype)
    acc = np.array([nan, nan, 0, 0, 0], dtype)            # NaN in memory: replaced
    rmw_family[1, 32](x, acc, np.zeros((5, 6), dtype), 6)
    assert acc[0] == 5.0 and acc[1] == -2.0
    acc = np.array([3.0, 3.0, 0, 0, 0], dtype)            # NaN values: ignored
    rmw_family[2, 32](np.full(40, nan, dtype), acc, np.zeros((5, 40), dtype), 40)
    assert acc[0] == 3.0 and acc[1] == 3.0


@flydsl.kernel
def bitwise_and_cas(x: fx.Tensor, acc: fx.Tensor, slots: fx.Tensor, won: fx.Tensor,
                    n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.atomic_and(acc, 0, x[i])
        fx.atomic_or(acc, 1, x[i])
        fx.atomic_xor(acc, 2, x[i])
        # a counter incremented with compare-and-swap retries (a lost update shows)
        guess = acc[3]
        seen = fx.atomic_cas(acc, 3, guess, guess + 1)
        while seen != guess:
            guess = seen
            seen = fx.atomic_cas(acc, 3, guess, guess + 1)
        # first come, first served: one winner per slot
        won[i] = fx.atomic_cas(slots, i % slots.shape[0], 0, i + 1)


@pytest.mark.parametrize("dtype", [np.int32, np.uint64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n,block", [(50_000, 256), (300, 64)])
def test_bitwise_atomics_and_compare_and_swap(dtype, n, block):
    x = _values(dtype, n, seed=7)
    ones = np.array(-1).astype(dtype)
    acc = np.array([ones, 0, 0, 0], dtype)
    slots, won = np.zeros(37, dtype), np.zeros(n, dtype)
    bitwise_and_cas[blocks(n, block), block](x, acc, slots, won, n)
    assert acc[0] == np.bitwise_and.reduce(x) and acc[1] == np.bitwise_or.reduce(x)
    assert acc[2] == np.bitwise_xor.reduce(x) and acc[3] == n
    winners = np.flatnonzero(won == 0)                  # saw 0: they swapped
    assert len(winners) == len(slots)
    np.testing.assert_array_equal(np.sort(slots), np.sort(winners + 1))
    np.testing.assert_array_equal(slots[winners % len(slots)], winners + 1)


@flydsl.kernel
def wrapping_counters(ctr: fx.Tensor, limit: fx.Tensor, olds: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        olds[0, i] = fx.atomic_inc(ctr, 0, limit[0])
        olds[1, i] = fx.atomic_dec(ctr, 1, limit[0])


def _cuda_inc(old, limit):
    return 0 if old >= limit else old + 1


def _cuda_dec(old, limit):
    return limit if old == 0 or old > limit else old - 1


def _sequence(step, start, limit, n):
    """The values n identical updates see, in order, and what they leave."""
    seen, v = [], start
    for _ in range(n):
        seen.append(v)
        v = step(v, limit)
    return seen, v


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("start,limit,n,block", [
    ((0, 3), 9, 20_000, 128),         # wrap after the limit, from below
    ((15, 15), 9, 333, 32),           # start above the limit: inc wraps to 0, dec to limit
    ((5, 0), 0, 100, 64),             # limit 0: inc always 0, dec always the limit
])
def test_atomic_inc_dec_wrap_like_cuda(dtype, start, limit, n, block):
    ctr = np.array(start, dtype)
    olds = np.zeros((2, n), dtype)
    wrapping_counters[blocks(n, block), block](ctr, np.array([limit], dtype), olds, n)
    for k, step in enumerate((_cuda_inc, _cuda_dec)):
        seen, final = _sequence(step, start[k], limit, n)
        assert ctr[k] == final
        np.testing.assert_array_equal(np.sort(olds[k]), np.sort(np.array(seen, dtype)))


def test_atomic_inc_with_the_largest_limit_never_wraps():
    top = np.iinfo(np.uint32).max
    ctr = np.array([top - 100, 0], np.uint32)
    olds = np.zeros((2, 300), np.uint32)
    wrapping_counters[3, 100](ctr, np.array([top], np.uint32), olds, 300)
    assert ctr[0] == _sequence(_cuda_inc, top - 100, top, 300)[1] == 199


@flydsl.kernel
def block_histogram(x: fx.Tensor, hist: fx.Tensor, peak: fx.Tensor, n: fx.Int32):
    """Per-block counts and maxima in shared memory, merged into global memory."""
    counts = fx.shared_array(16, fx.UInt32)
    top = fx.shared_array(16, fx.Int32)
    t = fx.thread_idx.x
    if t < 16:
        counts[t] = 0
        top[t] = -2**31
    fx.barrier()
    i = fx.block_idx.x * fx.block_dim.x + t
    if i < n:
        fx.atomic_inc(counts, x[i] & 15, 2**32 - 1)
        fx.atomic_max(top, x[i] & 15, x[i])
    fx.barrier()
    if t < 16:
        fx.atomic_add(hist, t, counts[t])
        fx.atomic_max(peak, t, top[t])


@pytest.mark.parametrize("n,block", [(10_000, 256), (50, 32), (1000, 48)])
def test_atomics_on_shared_arrays(n, block):
    x = np.random.default_rng(n).integers(0, 10**6, n).astype(np.int32)
    hist, peak = np.zeros(16, np.uint32), np.full(16, -1, np.int32)
    block_histogram[blocks(n, block), block](x, hist, peak, n)
    np.testing.assert_array_equal(hist, np.bincount(x & 15, minlength=16))
    expect = [x[(x & 15) == k].max(initial=-1) for k in range(16)]
    np.testing.assert_array_equal(peak, expect)


def _i32():
    return np.zeros(4, np.int32)


#: (kernel arguments, {backend: regexes the assembly must match}). ROCm's integer
#: max/min/and/or/xor are compare-and-swap loops at the system scope MLIR gives atomics
#: (native global_atomic_smax & co need agent scope), so either is accepted there.
ATOMIC_ASM = {
    "rmw int32": (rmw_family, lambda: (_i32(), _i32(), np.zeros((5, 4), np.int32), 4), {
        "cuda": [r"atom\.global\.max\.s32", r"atom\.global\.min\.s32", r"atom\.global\.add\.u32",
                 r"atom\.global\.exch\.b32"],
        "rocm": [r"global_atomic_(smax|cmpswap)\b", r"global_atomic_add\b",
                 r"global_atomic_swap\b"]}),
    "rmw uint64": (rmw_family, lambda: (np.zeros(4, np.uint64), np.zeros(5, np.uint64),
                                        np.zeros((5, 4), np.uint64), 4), {
        "cuda": [r"atom\.global\.max\.u64", r"atom\.global\.min\.u64", r"atom\.global\.exch\.b64"],
        "rocm": [r"global_atomic_(umax_x2|cmpswap_x2)\b", r"global_atomic_swap_x2\b"]}),
    "rmw float32": (rmw_family, lambda: (np.zeros(4, np.float32), np.zeros(5, np.float32),
                                         np.zeros((5, 4), np.float32), 4), {
        "cuda": [r"atom\.[a-z_.]*global\.cas\.b32", r"atom\.global\.add\.f32",
                 r"atom\.global\.exch\.b32"],
        "rocm": [r"global_atomic_cmpswap\b", r"global_atomic_swap\b"]}),
    "bitwise and cas": (bitwise_and_cas, lambda: (_i32(), _i32(), _i32(), _i32(), 4), {
        "cuda": [r"atom\.global\.and\.b32", r"atom\.global\.or\.b32", r"atom\.global\.xor\.b32",
                 r"atom\.[a-z_.]*global\.cas\.b32"],
        "rocm": [r"global_atomic_(and|cmpswap)\b", r"global_atomic_cmpswap\b"]}),
    "inc dec": (wrapping_counters, lambda: (np.zeros(2, np.uint32), np.zeros(1, np.uint32),
                                            np.zeros((2, 4), np.uint32), 4), {
        "cuda": [r"atom\.[a-z_.]*global\.cas\.b32"],
        "rocm": [r"global_atomic_cmpswap\b"]}),
    "shared arrays": (block_histogram, lambda: (_i32(), np.zeros(16, np.uint32), _i32(), 4), {
        "cuda": [r"atom\.[a-z_.]*shared\.cas\.b32", r"atom\.shared\.max\.s32"],
        "rocm": [r"ds_(cmpst|cmpswap)_rtn_b32", r"ds_(max_rtn_)?i32|ds_max_i32|ds_cmpst"]}),
}


@pytest.mark.parametrize("backend", list(GPUS))
@pytest.mark.parametrize("case", list(ATOMIC_ASM))
def test_atomics_compile_to_gpu_atomic_instructions(case, backend):
    kernel, args, expect = ATOMIC_ASM[case]
    asm = gpu_asm(kernel, *args(), backend=backend)
    for pattern in expect[backend]:
        assert re.search(pattern, asm), (pattern, sorted(instructions(asm)))


@flydsl.kernel
def misused_atomic(t: fx.Tensor, OP: fx.Constexpr[str]):
    if OP == "scalar":
        fx.atomic_max(t[0], 0, 1)
    elif OP == "cas":
        fx.atomic_cas(t, 0, 1, 2)
    else:
        getattr(fx, OP)(t, 0, 1)


@pytest.mark.parametrize("dtype,op,message", [
    (np.float16, "atomic_max", "fx.atomic_max works on Int32, Int64, UInt32, UInt64, Float32 "
                               "and Float64 elements; tensor 't' holds Float16"),
    (np.int8, "atomic_exch", "fx.atomic_exch works on .* tensor 't' holds Int8"),
    (np.float32, "atomic_and", "fx.atomic_and works on Int32, Int64, UInt32 and UInt64 "
                               "elements; tensor 't' holds Float32"),
    (np.float64, "cas", "fx.atomic_cas works on Int32, Int64, UInt32 and UInt64 elements"),
    (np.int32, "atomic_inc", "fx.atomic_inc works on UInt32 and UInt64 elements; tensor 't' "
                             "holds Int32"),
    (np.float32, "atomic_dec", "fx.atomic_dec works on UInt32 and UInt64"),
    (np.int32, "scalar", "fx.atomic_max needs a tensor or shared array as first argument, "
                         "got an Int32 value"),
])
def test_atomic_misuse_is_a_clear_error(dtype, op, message):
    with pytest.raises(DSLTypeError, match=message) as e:
        misused_atomic[1, 1](np.zeros(4, dtype), op)
    assert "Value" not in str(e.value) and "misused_atomic" in str(e.value)


# ----------------------------------------------------------------------------------
# Per-thread local arrays
# ----------------------------------------------------------------------------------

@flydsl.kernel
def gather_through_local(x: fx.Tensor, perm: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    """Each thread keeps its row (doubled) and a 2-D scratch in private arrays across a
    barrier, then reads them back at data-dependent positions."""
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    row = fx.local_array(8, fx.Float32)
    pair = fx.local_array((2, 8), fx.Int32)
    if i < n:
        for k in range(8):
            row[k] = x[i, k] * 2.0
            pair[k % 2, k] = perm[i, k]
    fx.barrier()
    if i < n:
        for k in range(8):
            scratch = fx.local_array(1, fx.Float32)    # declared in a loop: one per thread
            scratch[0] = row[pair[k % 2, k]]
            y[i, k] = scratch[0] + fx.Float32(fx.thread_idx.x)


@pytest.mark.parametrize("n,block", [(1000, 128), (33, 32), (5, 64), (200, 96)])
def test_local_arrays_are_per_thread_across_barriers_and_loops(n, block):
    rng = np.random.default_rng(n)
    x = rng.random((n, 8)).astype(np.float32)
    perm = np.argsort(rng.random((n, 8)), axis=1).astype(np.int32)
    y = np.zeros_like(x)
    gather_through_local[blocks(n, block), block](x, perm, y, n)
    tid = (np.arange(n) % block).astype(np.float32)[:, None]
    np.testing.assert_array_equal(y, np.take_along_axis(x * 2, perm, axis=1) + tid)


@pytest.mark.parametrize("backend,stage,expect", [
    ("cuda", "ptx", [r"\.local \.align \d+ \.b8\s+__local_depot0\[\d+\]", r"st\.local\.",
                     r"ld\.local\."]),
    # AMD private memory is address space 5 (LLVM may then keep small arrays in registers)
    ("rocm", "llir", [r"= alloca float, i64 8, align \d+, addrspace\(5\)",
                      r"= alloca i32, i64 16, align \d+, addrspace\(5\)"]),
])
def test_local_arrays_compile_to_private_memory(backend, stage, expect):
    x, perm = np.zeros((4, 8), np.float32), np.zeros((4, 8), np.int32)
    arch = GPUS[backend][0]
    text = flydsl.compile(gather_through_local, x, perm, x, 4, backend=backend,
                          arch=arch).asm[stage]
    for pattern in expect:
        assert re.search(pattern, text), pattern


@flydsl.kernel
def local_with_runtime_shape(y: fx.Tensor, n: fx.Int32):
    a = fx.local_array(n, fx.Float32)
    y[0] = a[0]


def test_local_array_shape_must_be_constant():
    with pytest.raises(CompileTimeValueRequired, match="fx.local_array shape must be constant"):
        local_with_runtime_shape[1, 1](np.zeros(1, np.float32), 4)


# ----------------------------------------------------------------------------------
# Constant memory: module-level numpy arrays
# ----------------------------------------------------------------------------------

LUT = np.random.default_rng(11).integers(-1000, 1000, 256).astype(np.int32)
TABLE = np.random.default_rng(12).random((5, 7))                  # float64, 2-D
FLAGS = np.array([True, False, True, True])
BYTES = np.arange(200, 216, dtype=np.uint8)                       # beyond Int8's range
HALVES = np.linspace(-2, 2, 8).astype(np.float16)


@flydsl.kernel
def table_lookups(x: fx.Tensor, ints: fx.Tensor, floats: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        k = x[i]
        ints[0, i] = LUT[k & 255] + int(LUT[3])       # LUT[3] folds while tracing
        ints[1, i] = fx.Int32(BYTES[k % 16])
        ints[2, i] = fx.select(FLAGS[k % 4], 1, 0)
        floats[0, i] = TABLE[k % 5, (k // 5) % 7]
        floats[1, i] = fx.Float64(HALVES[k % 8])
        floats[2, i] = TABLE[-1, k % 7]               # a constant index beside a runtime one


@pytest.mark.parametrize("n,block", [(1000, 256), (31, 32), (3, 64)])
def test_numpy_arrays_read_with_runtime_indices(n, block):
    x = np.random.default_rng(n).integers(0, 10**6, n).astype(np.int32)
    ints, floats = np.zeros((3, n), np.int32), np.zeros((3, n), np.float64)
    table_lookups[blocks(n, block), block](x, ints, floats, n)
    np.testing.assert_array_equal(ints[0], LUT[x & 255] + LUT[3])
    np.testing.assert_array_equal(ints[1], BYTES[x % 16])
    np.testing.assert_array_equal(ints[2], FLAGS[x % 4])
    np.testing.assert_array_equal(floats[0], TABLE[x % 5, (x // 5) % 7])
    np.testing.assert_array_equal(floats[1], HALVES[x % 8].astype(np.float64))
    np.testing.assert_array_equal(floats[2], TABLE[-1, x % 7])


def test_constant_arrays_are_embedded_as_constant_memory():
    x, ints, floats = np.zeros(4, np.int32), np.zeros((3, 4), np.int32), np.zeros((3, 4))
    ptx = gpu_asm(table_lookups, x, ints, floats, 4, backend="cuda")
    assert re.search(r"\.const \.align 16 \.b8 __flydsl_const\d\[1024\] = \{", ptx)   # LUT
    assert re.search(r"ld\.const\.b32", ptx) and re.search(r"ld\.const\.b64", ptx)
    amdgcn = gpu_asm(table_lookups, x, ints, floats, 4, backend="rocm")
    assert re.search(r"\.size\s+\.?L?__flydsl_const\d, 1024", amdgcn)
    assert "__flydsl_const" in amdgcn and re.search(r"(global|s)_load_dword", amdgcn)


BIG = np.arange(20_000, dtype=np.float32)                           # 80 KB


@flydsl.kernel
def big_lookup(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = BIG[x[i]] + fx.Float32(LUT[x[i] & 255])


def test_arrays_beyond_cudas_constant_bank_are_read_only_globals():
    x = np.array([0, 19_999, 12_345], np.int32)
    y = np.zeros(3, np.float32)
    big_lookup[1, 3](x, y)
    np.testing.assert_array_equal(y, BIG[x] + LUT[x & 255])
    ptx = gpu_asm(big_lookup, x, y, backend="cuda")
    assert re.search(r"\.global \.align 16 \.b8 __flydsl_const0\[80000\]", ptx)
    assert re.search(r"ld\.global\.nc\.b32", ptx)
    # a small array after it still fits the constant bank
    assert re.search(r"\.const \.align 16 \.b8 __flydsl_const1\[1024\]", ptx)
    assert re.search(r"ld\.const\.b32", ptx)


EDITED = np.arange(8, dtype=np.int32)


@flydsl.kernel
def read_edited(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = EDITED[x[i]]


def test_editing_the_array_compiles_again():
    """The array's content is part of the cache key: after an edit, the next compile
    (here after ``cache_clear()``; a new process looks it up again too) embeds the new
    values instead of loading the old binary."""
    x, y = np.arange(8, dtype=np.int32)[::-1].copy(), np.zeros(8, np.int32)
    read_edited[1, 8](x, y)
    np.testing.assert_array_equal(y, EDITED[x])
    saved = EDITED.copy()
    try:
        EDITED[:] = np.arange(8) * 100
        read_edited.cache_clear()
        read_edited[1, 8](x, y)
        np.testing.assert_array_equal(y, EDITED[x])
    finally:
        EDITED[:] = saved
        read_edited.cache_clear()
    read_edited[1, 8](x, y)                     # back to the first content (and binary)
    np.testing.assert_array_equal(y, saved[x])


def make_closure_kernel(table: np.ndarray):
    @flydsl.kernel
    def read_closure(x: fx.Tensor, y: fx.Tensor):
        i = fx.thread_idx.x
        y[i] = table[x[i], x[i] % 2]
    return read_closure


def test_closure_arrays_of_any_rank_and_content():
    x, y = np.array([0, 1, 2, 3], np.int32), np.zeros(4, np.float64)
    for table in (np.arange(8.0).reshape(4, 2), np.arange(8.0).reshape(4, 2) * -3):
        make_closure_kernel(table)[1, 4](x, y)
        np.testing.assert_array_equal(y, table[x, x % 2])


@flydsl.kernel
def only_constant_index(y: fx.Tensor):
    y[0] = int(LUT[5]) + int(LUT[-1])


def test_constant_indices_still_fold_while_tracing():
    y = np.zeros(1, np.int32)
    only_constant_index[1, 1](y)
    assert y[0] == LUT[5] + LUT[-1]
    assert "memref.global" not in flydsl.compile(only_constant_index, y).asm["mlir"]


COMPLEX = np.ones(4, np.complex64)


@flydsl.kernel
def misread_array(x: fx.Tensor, y: fx.Tensor, HOW: fx.Constexpr[str]):
    i = x[0]
    if HOW == "dtype":
        y[0] = COMPLEX[i]
    elif HOW == "rank":
        y[0] = TABLE[i]
    else:
        y[0] = TABLE[i, 1.5]


@pytest.mark.parametrize("how,message", [
    ("dtype", "`COMPLEX` is a numpy array of complex64; kernels can read numpy arrays of "
              "bool, int, uint and float"),
    ("rank", "`TABLE` is a numpy array of rank 2; index every dimension"),
    ("index", r"`TABLE` \(a numpy array\) can be indexed with integers"),
])
def test_misreading_a_numpy_array_is_a_clear_error(how, message):
    with pytest.raises(DSLTypeError, match=message):
        misread_array[1, 1](np.zeros(1, np.int32), np.zeros(1, np.float64), how)


@flydsl.kernel
def store_into_numpy(x: fx.Tensor):
    LUT[x[0]] = 1


def test_storing_into_a_numpy_array_is_a_clear_error():
    with pytest.raises(DSLTypeError, match="`LUT` is a numpy array the kernel reads as "
                                           "constant memory; kernels cannot write it"):
        store_into_numpy[1, 1](np.zeros(1, np.int32))
