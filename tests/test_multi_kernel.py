"""Programs that launch several kernels: ``flydsl.compile(...).kernels``, ``.kernel(name)``,
``.asm`` with every kernel, and ``flydsl compile --kernel`` (a three-launch prefix scan)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import KernelSelectionError

NAMES = ["scan_block", "scan_sums", "add_offsets"]


@flydsl.kernel
def scan_block(x: fx.Tensor, y: fx.Tensor, sums: fx.Tensor, n: fx.Int32,
               BLOCK: fx.Constexpr[int]):
    """Inclusive scan of each block's BLOCK elements (Hillis-Steele); its total to sums."""
    tid = fx.thread_idx.x
    i = fx.block_idx.x * BLOCK + tid
    buf = fx.shared_array((BLOCK,), fx.Float32)
    v = fx.Float32(0.0)
    if i < n:
        v = x[i]
    buf[tid] = v
    fx.barrier()
    offset = 1
    while offset < BLOCK:
        add = fx.Float32(0.0)
        if tid >= offset:
            add = buf[tid - offset]
        fx.barrier()
        buf[tid] = buf[tid] + add
        fx.barrier()
        offset *= 2
    if i < n:
        y[i] = buf[tid]
    if tid == BLOCK - 1:
        sums[fx.block_idx.x] = buf[tid]


@flydsl.kernel
def scan_sums(sums: fx.Tensor, m: fx.Int32):
    """Inclusive scan of the block totals, by one thread."""
    if fx.thread_idx.x == 0:
        acc = fx.Float32(0.0)
        for b in range(m):
            acc = acc + sums[b]
            sums[b] = acc


@flydsl.kernel
def add_offsets(y: fx.Tensor, sums: fx.Tensor, n: fx.Int32, BLOCK: fx.Constexpr[int]):
    """Add the total of the blocks before to each block's elements."""
    b = fx.block_idx.x
    i = b * BLOCK + fx.thread_idx.x
    if b > 0 and i < n:
        y[i] = y[i] + sums[b - 1]


@flydsl.jit
def prefix_sum(x, y, sums, n: fx.Int32, BLOCK: fx.Constexpr[int] = 64):
    blocks = (n + BLOCK - 1) // BLOCK
    scan_block(x, y, sums, n, BLOCK).launch(grid=(blocks, 1, 1), block=(BLOCK, 1, 1))
    scan_sums(sums, blocks).launch(grid=(1, 1, 1), block=(1, 1, 1))
    add_offsets(y, sums, n, BLOCK).launch(grid=(blocks, 1, 1), block=(BLOCK, 1, 1))


def scan_args(n: int = 1000):
    x = np.random.default_rng(0).random(n).astype(np.float32)
    return x, np.zeros_like(x), np.zeros(64, np.float32), n


def test_the_three_launch_scan_runs_on_the_cpu():
    x, y, sums, n = scan_args()
    prefix_sum(x, y, sums, n)
    np.testing.assert_allclose(y, np.cumsum(x, dtype=np.float64), rtol=1e-5)


#: backend, arch, text stage, the text that starts each kernel in it
TARGETS = [("cpu", None, "llir", "define void @{}("),
           ("cuda", "sm_90", "ptx", ".entry {}("),
           ("rocm", "gfx942", "amdgcn", ".amdhsa_kernel {}\n")]
HEADER = {"llir": "; ===== kernel {} =====", "ptx": "// ===== kernel {} =====",
          "amdgcn": "; ===== kernel {} ====="}


@pytest.mark.parametrize("backend, arch, stage, marker", TARGETS, ids=["cpu", "cuda", "rocm"])
def test_asm_shows_every_kernel_under_its_name(backend, arch, stage, marker):
    prog = flydsl.compile(prefix_sum, *scan_args(), backend=backend, arch=arch)
    assert [k.kernel_name for k in prog.kernels] == NAMES == prog.kernel_names
    text = prog.asm[stage]
    starts = [text.index(HEADER[stage].format(name)) for name in NAMES]
    assert starts == sorted(starts) and starts[0] == 0
    sections = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
    for name, section in zip(NAMES, sections):
        own = prog.kernel(name).asm[stage]
        assert marker.format(name) in own and own.rstrip() in section
        assert all(marker.format(other) not in own for other in NAMES if other != name)
    assert prog.asm_by_kernel[NAMES[1]] is prog.kernel(NAMES[1]).asm
    assert set(prog.asm) >= {"mlir", "llir", stage} and "mlir" in prog.asm


@pytest.mark.parametrize("backend, arch, binary", [("cpu", None, "so"),
                                                   ("cuda", "sm_90", "cubin"),
                                                   ("rocm", "gfx942", "hsaco")])
def test_a_binary_of_several_kernels_needs_a_kernel_name(backend, arch, binary):
    prog = flydsl.compile(prefix_sum, *scan_args(), backend=backend, arch=arch)
    assert binary in prog.asm
    for read in (lambda: prog.asm[binary], lambda: prog.asm.get(binary),
                 lambda: dict(prog.asm)):
        with pytest.raises(KernelSelectionError, match="prog.kernel") as info:
            read()
        assert info.value.names == NAMES and all(n in str(info.value) for n in NAMES)
    assert prog.kernel("scan_sums").asm[binary][:4] == b"\x7fELF"


def test_an_unknown_kernel_name_lists_the_names():
    prog = flydsl.compile(prefix_sum, *scan_args(), backend="cpu")
    with pytest.raises(KernelSelectionError, match="no kernel 'scan'.*scan_block, scan_sums, "
                                                   "add_offsets") as info:
        prog.kernel("scan")
    assert isinstance(info.value, LookupError) and info.value.names == NAMES


@flydsl.kernel
def fill(x: fx.Tensor, v: fx.Float32, K: fx.Constexpr[int] = 1):
    x[fx.thread_idx.x] = v * K


@flydsl.jit
def fill_twice(x, same: fx.Constexpr[bool]):
    fill(x, 1.0).launch(grid=(1, 1, 1), block=(4, 1, 1))
    fill(x, 2.0, 1 if same else 2).launch(grid=(1, 1, 1), block=(4, 1, 1))


def test_one_kernel_keeps_its_plain_stages():
    x = np.zeros(4, np.float32)
    prog = flydsl.compile(fill_twice, x, True, backend="cuda", arch="sm_90")
    assert prog.kernel_names == ["fill"] and len(prog.kernels) == 1   # one specialization
    assert prog.asm is prog.kernels[0].asm and "=====" not in prog.asm["ptx"]
    assert prog.asm["cubin"][:4] == b"\x7fELF"


def test_specializations_of_one_kernel_are_numbered():
    x = np.zeros(4, np.float32)
    prog = flydsl.compile(fill_twice, x, False, backend="cpu")
    assert prog.kernel_names == ["fill#1", "fill#2"]
    assert [s.value for k in prog.kernels for s in k.specs if s.name == "K"] == [1, 2]
    assert "; ===== kernel fill#2 =====" in prog.asm["llir"]
    with pytest.raises(KernelSelectionError, match="pick one of fill#1, fill#2"):
        prog.kernel("fill")
    assert prog.kernel("fill#2") is prog.kernels[1]


# -- flydsl compile ---------------------------------------------------------------

SIGNATURE = ["--signature", "f32[1],f32[1],f32[1],i32"]


def run_cli(tmp_path, *args):
    target = f"{os.path.abspath(__file__)}::prefix_sum"
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "flydsl.cli", "compile", target, *SIGNATURE,
                           *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("backend, arch, stage, marker", TARGETS, ids=["cpu", "cuda", "rocm"])
def test_cli_writes_every_kernel_or_the_one_asked_for(tmp_path, backend, arch, stage, marker):
    where = ["--backend", backend] + (["--arch", arch] if arch else [])
    out = run_cli(tmp_path, *where, "--emit", stage)
    assert out.returncode == 0, out.stderr
    headers = re.findall(r"^\S+ ===== kernel (\w+) =====$", out.stdout, re.M)
    assert headers == NAMES
    assert all(marker.format(name) in out.stdout for name in NAMES)
    one = run_cli(tmp_path, *where, "--emit", stage, "--kernel", "scan_sums")
    assert one.returncode == 0, one.stderr
    assert marker.format("scan_sums") in one.stdout and "=====" not in one.stdout
    assert all(marker.format(n) not in one.stdout for n in ("scan_block", "add_offsets"))


def test_cli_kernel_errors(tmp_path):
    unknown = run_cli(tmp_path, "--backend", "cuda", "--emit", "ptx", "--kernel", "scan")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "no kernel 'scan'" in unknown.stderr and "scan_block, scan_sums, add_offsets" \
        in unknown.stderr
    binary = run_cli(tmp_path, "--backend", "cuda", "--emit", "cubin", "-o",
                     str(tmp_path / "out.cubin"))
    assert binary.returncode == 1 and "--kernel NAME" in binary.stderr
    assert not (tmp_path / "out.cubin").exists()
    picked = run_cli(tmp_path, "--backend", "cuda", "--emit", "cubin", "--kernel",
                     "add_offsets", "-o", str(tmp_path / "out.cubin"))
    assert picked.returncode == 0 and (tmp_path / "out.cubin").read_bytes()[:4] == b"\x7fELF"


def test_cli_writes_one_file_per_kernel_into_a_directory(tmp_path):
    folder = tmp_path / "kernels"
    folder.mkdir()
    out = run_cli(tmp_path, "--backend", "rocm", "--arch", "gfx942", "--emit", "hsaco",
                  "-o", str(folder))
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(folder)) == sorted(f"{n}.hsaco" for n in NAMES)
    assert all((folder / f"{n}.hsaco").read_bytes()[:4] == b"\x7fELF" for n in NAMES)
