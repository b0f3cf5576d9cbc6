"""Debugging inside kernels: ``fx.printf``, ``fx.device_assert`` and ``fx.static_assert``.

On the CPU backend the kernels really print (C stdio, captured with ``capfd``) and
failed device assertions raise ``DeviceAssertError``; CUDA and ROCm are compiled and
their assembly checked.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler.options import CompileOptions
from flydsl.errors import (CompileTimeValueRequired, DSLError, DSLTypeError, FlydslRuntimeError,
                           UnsupportedConstructError)
from flydsl.runtime.debug_checks import DeviceAssertError, OutOfBoundsError
from conftest import marked_line

DEBUG = CompileOptions(debug=True)


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def c_string(ptx: str, name_prefix: str) -> list[str]:
    """The NUL-terminated byte arrays of a PTX module whose names start with ``name_prefix``."""
    found = re.findall(rf"\.b8 {name_prefix}\w*\[\d+\] = \{{([\d, ]+)\}}", ptx)
    return [bytes(int(b) for b in f.split(",")).rstrip(b"\0").decode() for f in found]


# ---------------------------------------------------------------------------
# fx.printf on the CPU: values, formats, order


@flydsl.kernel
def print_values(x: fx.Tensor, k: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.printf("b%d t%d: x=%.4f k=%d e=%e\n", fx.block_idx.x, fx.thread_idx.x, x[i], k[i],
                  x[i] * 1000.0)


def expected_values(x, k, grid, block, n):
    lines = []
    for b in range(grid):
        for t in range(block):
            i = b * block + t
            if i < n:
                lines.append("b%d t%d: x=%.4f k=%d e=%e\n" % (b, t, x[i], k[i],
                                                             np.float32(x[i] * np.float32(1000))))
    return "".join(lines)


@pytest.mark.parametrize("grid, block, n", [(1, 32, 32), (3, 64, 150), (2, 48, 90),
                                            (4, 5, 17)])
def test_printf_prints_every_thread_in_order(capfd, grid, block, n):
    rng = np.random.default_rng(grid * 100 + block)
    x = rng.standard_normal(grid * block).astype(np.float32)
    k = rng.integers(-10**9, 10**9, grid * block).astype(np.int32)
    print_values[grid, block](x, k, n)
    out, _ = capfd.readouterr()
    assert out == expected_values(x, k, grid, block, n)


@flydsl.kernel
def print_kinds(x: fx.Tensor, h: fx.Tensor):
    i = fx.thread_idx.x
    big = fx.Int64(x[i]) * 3000000000
    fx.printf("%d|%5d|%-4d|%u|%x|%lld|%ld|%c|%+.2f|%g|%s|%5s|%d|%f%%\n",
              i, i, i, -1 - i, 255 + i, big, big, 65 + i, x[i], h[i], "txt", "ab", 7, 2)
    fx.printf("{} {} {} {} {} {} {} {}% {{}} {}\n", i, big, x[i], x[i] > 0.0, "name",
              fx.Float32, 1.5, NP_SCALE, 42)


NP_SCALE = np.int16(-3)


def test_printf_conversions_and_placeholders(capfd):
    x = np.array([1.25, -2.5, 3.0], np.float32)
    h = np.array([0.5, -0.25, 1e4], np.float16)
    print_kinds[1, 3](x, h)
    out, _ = capfd.readouterr()
    lines = out.splitlines()
    for i in range(3):
        big = int(x[i]) * 3000000000
        assert lines[2 * i] == ("%d|%5d|%-4d|%u|%x|%d|%d|%c|%+.2f|%g|txt|   ab|7|%f%%" % (
            i, i, i, (-1 - i) & 0xFFFFFFFF, 255 + i, big, big, chr(65 + i), x[i], h[i], 2.0))
        assert lines[2 * i + 1] == "%d %d %f %d name Float32 %f -3%% {} 42" % (
            i, big, x[i], int(x[i] > 0), 1.5)   # a Python int literal under {} is an int


@flydsl.kernel
def print_around_barrier(x: fx.Tensor):
    t = fx.thread_idx.x
    tile = fx.shared_array(8, fx.Float32)
    tile[t] = x[t]
    fx.printf("a%d ", t)
    fx.barrier()
    fx.printf("b%d=%g ", t, tile[7 - t])


def test_printf_order_follows_the_barrier_phases(capfd):
    print_around_barrier[1, 8](np.arange(8, dtype=np.float32))
    out, _ = capfd.readouterr()
    assert out == "".join(f"a{t} " for t in range(8)) + "".join(f"b{t}={7 - t} "
                                                              for t in range(8))


@flydsl.kernel
def print_block_rows(n: fx.Int32):
    fx.printf("[%d:%d]", fx.block_idx.x, fx.thread_idx.x)
    if fx.thread_idx.x == fx.block_dim.x - 1:
        fx.printf("\n")


def test_printf_blocks_on_host_threads_stay_contiguous(capfd, monkeypatch):
    monkeypatch.setenv("FLYDSL_CPU_THREADS", "4")
    print_block_rows[160, 128](0)          # 20480 threads: blocks run on several host threads
    out, _ = capfd.readouterr()
    rows = out.splitlines()
    assert len(rows) == 160
    seen = set()
    for row in rows:
        ids = [tuple(map(int, m)) for m in re.findall(r"\[(\d+):(\d+)\]", row)]
        assert len({b for b, _ in ids}) == 1 and [t for _, t in ids] == list(range(128))
        seen.add(ids[0][0])
    assert seen == set(range(160))


def test_printf_output_is_in_order_with_python_prints(capfd):
    for rep in range(3):                   # the second and third launches are warm
        print(f"python {rep}")
        print_block_rows[2, 4](0)
    print("done")
    out, _ = capfd.readouterr()
    block_rows = "[0:0][0:1][0:2][0:3]\n[1:0][1:1][1:2][1:3]\n"
    assert out == "".join(f"python {rep}\n" + block_rows for rep in range(3)) + "done\n"
    print_block_rows.cache_clear()         # loaded again (from the disk cache): still flushed
    print("again")
    print_block_rows[1, 2](0)
    assert capfd.readouterr()[0] == "again\n[0:0][0:1]\n"


ORDER_SCRIPT = """
import flydsl, flydsl.expr as fx

@flydsl.kernel
def rows(n: fx.Int32):
    fx.printf("[%d:%d]", fx.block_idx.x, fx.thread_idx.x)
    if fx.thread_idx.x == fx.block_dim.x - 1:
        fx.printf("\\n")

for rep in range(3):
    print("python", rep)
    rows[2, 3](0)
print("done")
"""


def test_printf_order_with_buffered_stdio_in_a_pipe(tmp_path):
    # Python and C both buffer a pipe: only the launch's flushes keep the order.
    script = tmp_path / "order.py"
    script.write_text(ORDER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, check=True).stdout
    rows = "[0:0][0:1][0:2]\n[1:0][1:1][1:2]\n"
    assert out == "".join(f"python {rep}\n" + rows for rep in range(3)) + "done\n"


# ---------------------------------------------------------------------------
# fx.printf: format checks while tracing


@flydsl.kernel
def bad_printf(x: fx.Tensor, CASE: fx.Constexpr[int]):
    i = fx.thread_idx.x
    v = x[i]
    if CASE == 0:
        fx.printf("%d %d\n", i)  # BAD-PRINTF
    elif CASE == 1:
        fx.printf("%d\n", i, v)
    elif CASE == 2:
        fx.printf("%d %d\n", i, v)
    elif CASE == 3:
        fx.printf("%f\n", i)
    elif CASE == 4:
        fx.printf("%q\n", i)
    elif CASE == 5:
        fx.printf("%*d\n", i)
    elif CASE == 6:
        fx.printf("%s\n", i)
    elif CASE == 7:
        fx.printf("{}\n", x)
    elif CASE == 8:
        fx.printf("{x} {}\n", i)
    elif CASE == 9:
        fx.printf(i)
    elif CASE == 10:
        fx.printf("100%")
    elif CASE == 11:
        fx.printf("%d\n", "text")


@pytest.mark.parametrize("case, message", [
    (0, "fx.printf format '%d %d\\n' has 2 conversions but 1 value was given"),
    (1, "has 1 conversion but 2 values were given"),
    (2, "fx.printf argument 2 (a Float32 value) does not match the conversion '%d', "
        "which prints an integer"),
    (3, "fx.printf argument 1 (an Int32 value) does not match the conversion '%f', "
        "which prints a float"),
    (4, "conversion '%q' is not supported"),
    (5, "'*' widths and precisions"),
    (6, "fx.printf argument 1 (an Int32 value) does not match the conversion '%s', "
        "which prints a Python str"),
    (7, "fx.printf argument 1 is a tensor"),
    (8, "placeholders are written {}"),
    (9, "fx.printf needs a format string (a Python str) first, got an Int32 value"),
    (10, "a '%' at the end"),
    (11, "fx.printf argument 1 (the str 'text') does not match the conversion '%d', "
        "which prints an integer"),
])
def test_printf_format_errors_name_the_argument(case, message):
    x = np.zeros(4, np.float32)
    with pytest.raises(DSLTypeError) as info:
        bad_printf[1, 4](x, case)
    e = info.value
    assert message in str(e)
    assert e.filename == __file__ and e.kernel == "bad_printf"
    assert e.lineno == line_of("BAD-PRINTF") + 2 * case
    for internal in ("TensorValue", "Value object", "ir."):
        assert internal not in str(e)


# ---------------------------------------------------------------------------
# fx.printf on the GPU backends


@flydsl.kernel
def gpu_print(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.printf("{} {} {}\n", i, fx.Int64(i), x[i])  # GPU-PRINTF


def test_printf_on_cuda_calls_vprintf():
    x = np.zeros(8, np.float32)
    ptx = flydsl.compile(gpu_print, x, 8, backend="cuda", arch="sm_90").asm["ptx"]
    assert re.search(r"call\.uni \(retval0\), vprintf", ptx)
    assert "%d %lld %f\n" in c_string(ptx, "printfFormat")


def test_printf_on_rocm_is_a_clear_error():
    x = np.zeros(8, np.float32)
    with pytest.raises(UnsupportedConstructError) as info:
        flydsl.compile(gpu_print, x, 8, backend="rocm", arch="gfx942")
    e = info.value
    assert "fx.printf is not supported on the rocm backend" in str(e)
    assert "__ockl_printf" in str(e)
    assert (e.filename, e.lineno) == (__file__, line_of("GPU-PRINTF"))


# ---------------------------------------------------------------------------
# fx.device_assert


@flydsl.kernel
def checked_sqrt(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.device_assert(x[i] >= 0.0, "x must be non-negative")  # ASSERT-X
        y[i] = fx.sqrt(x[i])


def first_failure(x, grid, block, n):
    """(block, thread, count) of the first thread (linear block order, tx fastest) whose x < 0."""
    bad = np.flatnonzero(x[:n] < 0)
    return (int(bad[0]) // block, int(bad[0]) % block), len(bad)


def test_device_assert_is_off_by_default():
    x = np.array([4.0, -1.0, 9.0], np.float32)
    y = np.zeros(3, np.float32)
    checked_sqrt[1, 3](x, y, 3)           # no error: the assertion is not compiled
    np.testing.assert_array_equal(y[[0, 2]], [2.0, 3.0])
    prog = flydsl.compile(checked_sqrt, x, y, 3, backend="cuda", arch="sm_90")
    assert "cf.assert" not in prog.asm["mlir"] and "__assertfail" not in prog.asm["ptx"]
    amdgcn = flydsl.compile(checked_sqrt, x, y, 3, backend="rocm", arch="gfx942").asm["amdgcn"]
    assert "s_trap" not in amdgcn


@pytest.mark.parametrize("grid, block, n", [(1, 32, 32), (3, 64, 150), (5, 7, 33)])
def test_device_assert_in_debug_mode_raises_with_the_first_failing_thread(monkeypatch, grid,
                                                                          block, n):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    rng = np.random.default_rng(n)
    x = rng.random(grid * block).astype(np.float32)
    x[rng.choice(n, 3, replace=False)] *= -1
    y = np.zeros_like(x)
    with pytest.raises(DeviceAssertError) as info:
        checked_sqrt[grid, block](x, y, n)
    e = info.value
    (b, t), count = first_failure(x, grid, block, n)
    assert e.block == (b, 0, 0) and e.thread == (t, 0, 0) and e.count == count == 3
    assert e.kernel == "checked_sqrt" and e.assert_message == "x must be non-negative"
    assert (e.filename, e.lineno) == (__file__, line_of("ASSERT-X"))
    assert str(e) == (
        f"device assertion failed in kernel 'checked_sqrt' at {__file__}:{e.lineno}\n"
        "    fx.device_assert(x[i] >= 0.0, \"x must be non-negative\")  # ASSERT-X\n"
        "  x must be non-negative\n"
        f"  block ({b}, 0, 0), thread ({t}, 0, 0)\n"
        "  (2 more assertion failures in this launch)")
    assert isinstance(e, FlydslRuntimeError) and isinstance(e, AssertionError)
    good = x[:n] >= 0                      # the launch ran to its end
    np.testing.assert_allclose(y[:n][good], np.sqrt(x[:n][good]))
    x = np.abs(x)                          # the record was cleared: a clean launch passes
    checked_sqrt[grid, block](x, y, n)
    np.testing.assert_allclose(y[:n], np.sqrt(x[:n]))


@flydsl.kernel
def assert_in_range(idx: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.y * fx.block_dim.x + fx.thread_idx.x
    fx.device_assert(idx[i] < out.shape[0])  # ASSERT-BARE
    out[idx[i]] = 1.0  # OOB-AFTER


def test_device_assert_without_message_quotes_the_source(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    idx = np.arange(12, dtype=np.int32)
    idx[7] = 40
    out = np.zeros(12, np.float32)
    with pytest.raises(DeviceAssertError) as info:
        assert_in_range[1, (4, 3)](idx, out)
    e = info.value
    assert e.thread == (3, 1, 0) and e.count == 1
    assert e.assert_message == "fx.device_assert(idx[i] < out.shape[0])  # ASSERT-BARE"
    assert str(e).count("fx.device_assert(idx[i] < out.shape[0])") == 1
    assert e.lineno == line_of("ASSERT-BARE")
    assert out.sum() == 11                 # the out-of-bounds store after it was skipped


def test_the_first_failure_is_reported_whatever_its_kind(monkeypatch):
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    idx = np.arange(12, dtype=np.int32)
    out = np.zeros(12, np.float32)
    small = out[:10]                       # threads 10 and 11 fail the assertion, then store OOB
    with pytest.raises(DeviceAssertError) as info:
        assert_in_range[1, (4, 3)](idx, small)
    assert info.value.thread == (2, 2, 0) and info.value.count == 2
    assert out[10:].sum() == 0
    with pytest.raises(OutOfBoundsError) as info:
        oob_then_assert[1, 8](np.zeros(6, np.float32), 7)
    e = info.value                         # threads 6, 7 load out of bounds, 7 fails after
    assert e.thread == (6, 0, 0) and e.count == 2 and e.op == "load"


@flydsl.kernel
def oob_then_assert(x: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    v = x[i]
    fx.device_assert(i < n - v, "i < n")


@flydsl.kernel
def constant_assert(y: fx.Tensor, N: fx.Constexpr[int]):
    fx.device_assert(N > 2, "N too small")  # ASSERT-CONST
    y[fx.thread_idx.x] = 1.0


def test_device_assert_on_a_compile_time_condition(monkeypatch):
    y = np.zeros(4, np.float32)
    constant_assert[1, 4](y, 1)            # debug off: nothing
    monkeypatch.setenv("FLYDSL_DEBUG", "1")
    constant_assert[1, 4](y, 3)
    with pytest.raises(DSLError) as info:
        constant_assert[1, 4](y, 1)
    assert "fx.device_assert failed while compiling" in str(info.value)
    assert "N too small" in str(info.value)
    assert info.value.lineno == line_of("ASSERT-CONST")


def test_device_assert_on_cuda_calls_assertfail():
    x = np.zeros(8, np.float32)
    ptx = flydsl.compile(checked_sqrt, x, x, 8, backend="cuda", arch="sm_90",
                         options=DEBUG).asm["ptx"]
    assert re.search(r"call\.uni __assertfail", ptx)
    assert c_string(ptx, "assert_message") == ["x must be non-negative"]
    assert c_string(ptx, "assert_file") == [__file__]


def test_device_assert_on_rocm_traps():
    x = np.zeros(8, np.float32)
    amdgcn = flydsl.compile(checked_sqrt, x, x, 8, backend="rocm", arch="gfx942",
                            options=DEBUG).asm["amdgcn"]
    assert re.search(r"^\s*s_trap 2", amdgcn, re.M)


# ---------------------------------------------------------------------------
# fx.static_assert


@flydsl.kernel
def tiled(y: fx.Tensor, BLOCK: fx.Constexpr[int]):
    fx.static_assert(BLOCK % fx.warp_size() == 0, "BLOCK must be whole warps")  # STATIC-WARPS
    y[fx.thread_idx.x] = 2.0


def test_static_assert_passes_and_fails_while_tracing():
    y = np.zeros(64, np.float32)
    tiled[1, 64](y, 64)
    assert (y == 2.0).all()
    with pytest.raises(DSLError) as info:
        tiled[1, 48](y, 48)
    e = info.value
    assert "fx.static_assert failed: BLOCK must be whole warps" in str(e)
    assert (e.filename, e.lineno) == (__file__, line_of("STATIC-WARPS"))


@flydsl.kernel
def dynamic_static_assert(y: fx.Tensor):
    fx.static_assert(fx.thread_idx.x < 4)  # STATIC-DYNAMIC


def test_static_assert_needs_a_compile_time_value():
    with pytest.raises(CompileTimeValueRequired) as info:
        dynamic_static_assert[1, 4](np.zeros(4, np.float32))
    assert "fx.static_assert needs a compile-time condition" in str(info.value)
    assert "got a Bool value" in str(info.value)
    assert info.value.lineno == line_of("STATIC-DYNAMIC")
