"""Software prefetch in block-level strided loops (``passes/_simt_prefetch.py``): a
grid-stride loop's rows lie ``step`` elements apart, so each row step prefetches, once
per cache line and outside the thread loop, the row some distance ahead. A prefetch
changes no result: every kernel here is checked against numpy, on sizes where the
prefetched row runs past the end of the buffer (clamped into it), and in debug mode,
whose bounds checks must not see a prefetch."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from test_cpu_thread_loops import simt_ir

rng = np.random.default_rng(11)


@pytest.fixture
def prefetch_always(monkeypatch, tmp_path):
    """Prefetch whatever the buffers' size (the rule skips buffers that fit in the
    host's cache, as every buffer here does), compiling afresh."""
    import flydsl.passes._simt_prefetch as prefetch
    monkeypatch.setattr(prefetch, "cached_bytes", lambda: 0)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    for kernel in (strided_partials, strided_copy):
        kernel.cache_clear()
    yield
    for kernel in (strided_partials, strided_copy):
        kernel.cache_clear()


@flydsl.kernel
def strided_partials(x: fx.Tensor, w: fx.Tensor, out: fx.Tensor, n: fx.Int32, k: fx.Int32):
    """Per-thread sums over a grid-stride loop reading ``x[j]``, ``x[j + 1]`` (a
    constant offset) and ``w[j + k]`` (an offset from outside the loop)."""
    t = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    acc = 0.0
    for j in range(t, n - k - 1, fx.grid_dim.x * fx.block_dim.x):
        acc += x[j] + x[j + 1] * w[j + k]
    out[t] = acc


def _partials(x, w, n, k, threads):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = np.zeros(threads)
    for t in range(threads):
        j = np.arange(t, max(n - k - 1, 0), threads)
        want[t] = (x64[j] + x64[j + 1] * w64[j + k]).sum()
    return want


@pytest.mark.parametrize("n,k,grid,block", [(0, 0, 2, 8), (3, 1, 2, 8), (1000, 3, 3, 64),
                                            (70_000, 5, 4, 32), (4099, 0, 1, 128)])
def test_prefetching_loops_compute_what_numpy_does(prefetch_always, n, k, grid, block):
    x = rng.standard_normal(max(n, 1), dtype=np.float32)[:n]
    w = rng.standard_normal(max(n, 1), dtype=np.float32)[:n]
    out = np.full(grid * block, np.nan, np.float32)
    strided_partials[(grid,), (block,)](x, w, out, n, k)
    np.testing.assert_allclose(out, _partials(x, w, n, k, grid * block), rtol=1e-4, atol=1e-4)


def test_debug_mode_keeps_the_prefetch_and_reports_nothing(prefetch_always, debug_build_o0,
                                                          monkeypatch, tmp_path):
    """Debug mode guards every access of the kernel's own (a report for any out of its
    tensor); the prefetches are not the kernel's accesses and stay, unguarded."""
    n, k, grid, block = 300, 2, 2, 16
    x = rng.standard_normal(n, dtype=np.float32)
    w = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(grid * block, np.float32)
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: strided_partials[(grid,), (block,)](x, w, out, n, k))
    assert text.count("memref.prefetch") == 2, text
    np.testing.assert_allclose(out, _partials(x, w, n, k, grid * block), rtol=1e-4, atol=1e-4)


@flydsl.kernel
def strided_copy(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    t = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    for j in range(t, n, fx.grid_dim.x * fx.block_dim.x):
        y[j] = x[j]


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int8, np.float16, np.uint16])
def test_every_element_width_copies_exactly(prefetch_always, dtype):
    """1-, 2- and 8-byte elements: a prefetch per 64, 32 or 8 elements."""
    n = 5000
    x = rng.integers(0, 100, n).astype(dtype)
    y = np.zeros_like(x)
    strided_copy[(3,), (64,)](x, y, n)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("view", ["offset", "every_other", "empty"])
def test_views_copy_exactly(prefetch_always, view):
    """A view that starts past its buffer's first element (its size is what the
    prefetch is clamped to), a strided one (not prefetched: not unit-stride) and an
    empty one (no index to clamp to: no prefetch)."""
    base = rng.standard_normal(9000).astype(np.float32)
    x = {"offset": base[7:], "every_other": base[::2], "empty": base[3:3]}[view]
    y = np.zeros(x.size, np.float32)
    strided_copy[(4,), (32,)](x, y, x.size)
    np.testing.assert_array_equal(y, x)


def _enclosing(lines: list, at: int) -> list:
    """The header lines of the ops whose regions enclose line ``at`` of printed MLIR,
    innermost first (a region opens with ``{`` at the end of its op's line)."""
    found, depth = [], 0
    for line in reversed(lines[:at]):
        depth += line.count("}") - line.count("{")
        if depth < 0:
            found.append(line.strip())
            depth = 0
    return found


def _defs(text: str) -> dict:
    """SSA name -> the line defining it."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(%[\w#]+)(?::\d+)? = .*$",
                                                         text, re.M)}


def _prefetch_lines(text: str) -> list:
    lines = text.splitlines()
    return lines, [i for i, line in enumerate(lines) if "memref.prefetch" in line]


def test_a_grid_stride_row_prefetches_outside_the_thread_loop(monkeypatch, tmp_path):
    """Where the prefetch sits and what guards it: per row, under the test made once
    per loop (rows apart, buffers bigger than the cache), a loop over the lines of
    the row ahead, the index clamped into the buffer."""
    import flydsl.passes._simt_prefetch as prefetch
    x = np.zeros(4096, np.float32)
    strided_partials.cache_clear()   # compiled by the tests above: compile it again
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: strided_partials[(2,), (64,)](x, x.copy(), x.copy(), 4096, 3))
    lines, at = _prefetch_lines(text)
    defs = _defs(text)
    # x[j] and x[j + 1]: one read of x (its row and one element more); w[j + k]: a
    # read of its own (k is a parameter)
    assert len(at) == 2, text
    for i in at:
        assert ", read, locality<3>, data" in lines[i]
        around = _enclosing(lines, i)
        # the line loop, the guard, the row loop, the loop over the blocks; no thread
        # loop (the z, y, x thread loops are a sibling inside the row loop)
        assert [a.split(" ")[0] for a in around] == ["scf.for", "scf.if", "scf.for",
                                                     "scf.for", "func.func", "module"], around
        assert re.search(r"step %c16(_\d+)? \{", around[0]), around   # 64-byte lines
        assert re.search(r"step %\d+ +: i32 \{", around[2]), around   # the grid stride
        # the index: max(min(first + i, size - 1), 0), in the line loop's body (SSA
        # names restart in each region: look there only)
        body = {m.group(1): m.group(0) for line in lines[i - 3:i]
                for m in [re.match(r"\s*(%\w+) = .*", line)] if m}
        index = re.search(r"memref.prefetch %\w+\[(%\w+)\]", lines[i]).group(1)
        assert "arith.maxsi" in body[index], body
        inner = re.search(r"arith.maxsi (%\w+),", body[index]).group(1)
        assert "arith.minsi" in body[inner], body
        # the guard: (step > block_dim.x) and (bytes read > the host's cache)
        cond = re.search(r"scf.if (%\w+)", around[1]).group(1)
        both = re.search(r"arith.andi (%\w+), (%\w+)", defs[cond])
        assert both, defs[cond]
        tests = [defs[v] for v in both.groups()]
        assert all("arith.cmpi sgt" in t for t in tests), tests
        assert any(re.search(rf"= arith.constant {prefetch.cached_bytes()} : index",
                             defs.get(re.search(r", (%\w+) :", t).group(1), ""))
                   for t in tests), tests
        # the distance, under the same test before the row loop: rows ahead (a
        # division by the row's bytes) times the step
        start = next(k for k, line in enumerate(lines) if f"scf.if {cond} -> (index)" in line)
        then = lines[start + 1:lines.index(next(x for x in lines[start:] if "} else {" in x))]
        assert any("arith.divui" in x for x in then), then
        assert re.search(r"scf.yield %\w+", then[-1]) and "arith.muli" in then[-2], then


@flydsl.kernel
def stencil(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    t = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    for j in range(t + 1, n - 1, fx.grid_dim.x * fx.block_dim.x):
        y[j] = x[j - 1] - 2.0 * x[j] + x[j + 1]


def test_a_stencil_prefetches_its_row_once(monkeypatch, tmp_path):
    """x[j - 1], x[j], x[j + 1]: one loop over the lines of x[row - 1 : row + lanes + 1]
    ahead (lanes + 2 elements, and the one more line), not three."""
    x = np.zeros(4096, np.float32)
    stencil.cache_clear()
    text = simt_ir(monkeypatch, tmp_path, lambda: stencil[(2,), (64,)](x, x.copy(), 4096))
    lines, at = _prefetch_lines(text)
    assert len(at) == 1, text
    count = re.search(r"scf.for %\w+ = %\w+ to (%\w+) step", _enclosing(lines, at[0])[0]).group(1)
    region = "\n".join(lines[:at[0]])
    # the trip count: select(size > 0, lanes + 2 + 15, 0)
    select = re.findall(rf"{count} = arith.select %\w+, (%\w+), %\w+", region)[-1]
    assert re.search(rf"{select} = arith.addi %\w+, %c17", region), region


@pytest.mark.parametrize("n,grid,block", [(3, 2, 8), (1000, 3, 64), (70_000, 4, 32)])
def test_a_stencil_computes_what_numpy_does(prefetch_always, n, grid, block):
    stencil.cache_clear()
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    stencil[(grid,), (block,)](x, y, n)
    want = np.zeros(n, np.float32)
    want[1:-1] = x[:-2] - 2.0 * x[1:-1] + x[2:]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,line", [(np.int8, 64), (np.float16, 32), (np.float64, 8)])
def test_one_prefetch_per_64_byte_line_of_each_element_type(monkeypatch, tmp_path, dtype,
                                                            line):
    x = np.zeros(4096, dtype)
    strided_copy.cache_clear()
    text = simt_ir(monkeypatch, tmp_path, lambda: strided_copy[(2,), (64,)](x, x.copy(), 4096))
    lines, at = _prefetch_lines(text)
    assert len(at) == 1, text
    assert re.search(rf"step %c{line}(_\d+)? \{{", _enclosing(lines, at[0])[0])


def test_a_strided_view_is_not_prefetched(monkeypatch, tmp_path):
    """Its row is not contiguous: a line of it is not 64 / 4 elements."""
    x = np.zeros(8192, np.float32)[::2]
    strided_copy.cache_clear()
    text = simt_ir(monkeypatch, tmp_path,
                   lambda: strided_copy[(2,), (64,)](x, np.zeros(4096, np.float32), 4096))
    assert "strided<[?]" in text and "memref.prefetch" not in text


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_the_prefetches_are_scalar_code_apart_from_the_vector_loop():
    """One prefetch instruction per line (LLVM may unroll their loop), none in the
    basic blocks that copy the row as vectors."""
    x = np.zeros(4096, np.float32)
    prog = flydsl.compile(strided_copy, x, x.copy(), 4096)
    asm = prog.backend.assembly(prog.asm)
    blocks = re.split(r"^\.?\w+:.*$", asm, flags=re.M)    # at each label
    with_prefetch = [b for b in blocks if re.search(r"^\s*prefetcht0\s", b, re.M)]
    assert with_prefetch, asm
    assert not any(re.search(r"%[xyz]mm", b) for b in with_prefetch), with_prefetch
    assert any(re.search(r"vmovups\s[^\n]*%[yz]mm", b) for b in blocks), "no vector copy"


@flydsl.kernel
def unit_stride_rows(x: fx.Tensor, out: fx.Tensor, ncols: fx.Int32, BLOCK: fx.Constexpr[int]):
    """A block-stride loop: its rows are adjacent, one stream the hardware follows."""
    acc = 0.0
    for j in range(fx.thread_idx.x, ncols, BLOCK):
        acc += x[fx.block_idx.x, j]
    out[fx.block_idx.x, fx.thread_idx.x] = acc


def test_two_dimensional_reads_are_not_prefetched(monkeypatch, tmp_path):
    """Only 1-D unit-stride buffers: a row of a 2-D tensor has its own stride."""
    x = np.ones((2, 100), np.float32)
    out = np.zeros((2, 8), np.float32)
    unit_stride_rows.cache_clear()
    text = simt_ir(monkeypatch, tmp_path, lambda: unit_stride_rows[(2,), (8,)](x, out, 100, 8))
    assert "memref.prefetch" not in text
    np.testing.assert_allclose(out.sum(axis=1), [100, 100])
