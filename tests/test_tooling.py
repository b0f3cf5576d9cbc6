"""Debuggability: IR dumps, pass timing, print-after-all, reproducers, the CLI."""
import os
import subprocess
import sys

import mlir.ir as ir
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler import MlirCompiler
from flydsl.errors import CompilationError
from gpu_modules import VADD

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@flydsl.kernel
def twice(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = x[i] * 2


def test_dump_ir_writes_every_stage_with_readable_names(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_DUMP_IR", "1")
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    flydsl.compile(twice, np.zeros(4, np.float32), np.zeros(4, np.float32), backend="cuda",
                   arch="sm_90")
    [run_dir] = os.listdir(tmp_path)
    assert run_dir.startswith("twice.")
    files = sorted(os.listdir(tmp_path / run_dir))
    assert files[0] == "00-input.mlir"
    assert any("convert-gpu-to-nvvm" in f for f in files)
    assert any(f.endswith("-ptx.ptx") for f in files) and any(f.endswith(".cubin") for f in files)
    text = (tmp_path / run_dir / files[0]).read_text()
    assert "test_tooling.py" in text          # source locations are kept


def test_pass_timing_and_print_after_all(capfd, monkeypatch):
    monkeypatch.setenv("FLYDSL_PASS_TIMING", "1")
    monkeypatch.setenv("FLYDSL_PRINT_AFTER_ALL", "1")
    with ir.Context():
        MlirCompiler.compile(ir.Module.parse(VADD), backend="cuda", arch="sm_90")
    err = capfd.readouterr().err
    assert "Execution time report" in err
    assert "IR Dump After" in err


def test_pass_failure_writes_a_reproducer(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(tmp_path))
    src = VADD.replace("%n: i32) kernel", "%n: i32, %t: tensor<4xf32>) kernel")
    with ir.Context():
        with pytest.raises(CompilationError) as e:
            MlirCompiler.compile(ir.Module.parse(src), backend="cuda", arch="sm_90",
                                 func_name="vadd")
    path = e.value.ir_path
    assert path and os.path.exists(path) and path in str(e.value)
    text = open(path).read()
    assert "mlir_reproducer" in text and "convert-gpu-to-nvvm" in text
    assert "gpu.func @vadd" in text


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "flydsl.cli", *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), timeout=300)


def test_cli_help_everywhere():
    for args in ([], ["backends"], ["compile"], ["cache"], ["cache", "prune"]):
        out = run_cli(*args, "--help")
        assert out.returncode == 0 and "usage: flydsl" in out.stdout, args


def test_cli_backends_lists_the_builtins():
    out = run_cli("backends")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].split()[:5] == ["name", "tags", "arch", "device", "toolchain"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["cpu", "cuda", "rocm"]


@pytest.mark.parametrize("backend, arch, emit, check", [
    ("cuda", "sm_90", "ptx", lambda data: b".entry vadd_kernel" in data),
    ("cuda", "sm_80", "cubin", lambda data: data[:4] == b"\x7fELF"),
    ("rocm", "gfx942", "hsaco", lambda data: data[:4] == b"\x7fELF"),
    ("rocm", "gfx1100", "asm", lambda data: b"vadd_kernel" in data),
    ("cpu", None, "llir", lambda data: b"define" in data),
    ("cpu", None, "mlir", lambda data: b"gpu.func @vadd_kernel" in data),
])
def test_cli_compile_ahead_of_time(tmp_path, backend, arch, emit, check):
    out_file = tmp_path / "out"
    args = ["compile", os.path.join(ROOT, "examples", "vector_add.py") + "::vadd",
            "--backend", backend, "--emit", emit, "--signature", "f32[1],f32[1],f32[1],i32",
            "-o", str(out_file)]
    if arch:
        args += ["--arch", arch]
    out = run_cli(*args, env={"FLYDSL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert check(out_file.read_bytes())


def test_cli_compile_errors_are_messages_not_tracebacks(tmp_path):
    target = os.path.join(ROOT, "examples", "vector_add.py") + "::vadd"
    for args, needle in ((["compile", target], "--signature"),
                         (["compile", "nope.py::k", "--signature", "i32"], "no such file"),
                         (["compile", target, "--signature", "q7"], "unknown signature"),
                         (["compile", target, "--backend", "cuda", "--arch", "gfx942",
                           "--signature", "f32[1],f32[1],f32[1],i32"], "gfx942")):
        out = run_cli(*args)
        assert out.returncode == 1 and needle in out.stderr and "Traceback" not in out.stderr


@flydsl.kernel
def big_shared(x: fx.Tensor):
    buf = fx.shared_array((300_000,), fx.Float32)
    buf[fx.thread_idx.x] = 1.0
    x[0] = buf[0]


def test_launch_errors_point_at_the_launch_line():
    x = np.zeros(4, np.float32)
    cases = [
        (lambda: twice[(1, 1), 2048](x, x), "2048 threads"),
        (lambda: twice[0, 4](x, x), "must be > 0"),
        (lambda: twice[1, 4, 1 << 30](x, x), "bytes of shared memory"),
        (lambda: big_shared[1, 4](x), "1200000 static"),
        (lambda: twice[1, 4](x, [1, 2]), "argument 'y'"),
    ]
    for launch, needle in cases:
        with pytest.raises(flydsl.FlydslError) as e:
            launch()
        err = e.value
        assert needle in str(err)
        assert err.kernel in ("twice", "big_shared")
        assert err.filename == __file__ and err.lineno > 0 and err.source_line.strip()
