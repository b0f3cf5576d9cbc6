"""The GPU run kit (python -m flydsl.gpu_kit): built here without a GPU, then run as
on the GPU machine: its own copy of flydsl on PYTHONPATH, no MLIR or llvmlite
importable, another Python and numpy version, a stub libcuda standing in for the
driver. Every case must load from the bundle offline and launch, compiling nothing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
NO_COMPILER = os.path.join(HERE, "no_compiler")


@pytest.fixture(scope="module")
def kit(tmp_path_factory, session_cache_dir):
    """A kit built for sm_90a, the arch of the stub's (and H100/H200's) compute
    capability 9.0 (skips without ptxas, cuda-python or a C compiler)."""
    from flydsl.compiler.toolchain import find_ptxas
    from flydsl.errors import FlydslRuntimeError
    from flydsl.runtime.drivers import cuda
    try:
        cuda.bindings()
    except FlydslRuntimeError as e:
        pytest.skip(str(e))
    if find_ptxas() is None or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("needs ptxas (cubins) and a C compiler (the stub driver)")
    root = tmp_path_factory.mktemp("kit")
    out = root / "kit"
    # the tests' cache, not the user's ~/.cache/flydsl (a module fixture runs before
    # conftest's per-test one); it may already hold kernels of the kit that an earlier
    # test of this worker compiled for sm_90a (test_gemm_sm90's GEMMs)
    env = dict(os.environ, FLYDSL_CACHE_DIR=session_cache_dir)
    p = subprocess.run([sys.executable, "-m", "flydsl.gpu_kit", "build", "--arch", "sm_90a",
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    from flydsl.testing.stub_drivers import build_stub_libcuda
    build_stub_libcuda(str(root))
    return out


def run_kit(kit, results) -> tuple:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(kit), NO_COMPILER]),
               LD_LIBRARY_PATH=str(kit.parent))
    env.pop("FLYDSL_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-m", "flydsl.gpu_kit", "run", ".", "--stub-driver",
                        "--out", str(results)], cwd=kit, env=env, capture_output=True,
                       text=True, timeout=600)
    assert (results / "results.json").is_file(), p.stderr[-3000:]
    return p.returncode, json.loads((results / "results.json").read_text())


def test_the_kit_runs_every_case_from_its_bundle_with_no_compiler(kit, tmp_path):
    manifest = json.loads((kit / "manifest.json").read_text())
    assert manifest["bytes"] < 64 << 20 and manifest["arch"] == "sm_90a"
    status, report = run_kit(kit, tmp_path)
    assert status == 0
    assert report["python"] == "3.12.3" and report["versions"]["numpy"] == "1.26.4"
    assert report["compiled_here"] == [] and report["compiler_modules"] == []
    names = [case["case"] for case in manifest["cases"]]
    assert [row["case"] for row in report["rows"]] == names and len(names) >= 8
    # the TMA GEMMs (bf16, scaled fp8) build their descriptors from torch CUDA tensors,
    # flash attention takes bf16 torch tensors: their cubins are in the bundle, and only
    # a GPU launches them
    from flydsl.gpu_kit.cases import all_cases
    gpu_only = [c.name for c in all_cases("sm_90a") if c.gpu_only]
    tma = [case for case in manifest["cases"] if case["case"].startswith("TMA+wgmma")]
    assert [case["case"].split()[2] for case in tma] == ["bf16->f32", "fp8"]
    assert all(case["kernels"] == ["gemm_kernel"] and case["binary"] == ["cubin"]
               for case in tma)
    flash = [case for case in manifest["cases"] if case["case"].startswith("flash attention")]
    assert len(flash) == 6 and all(case["binary"] == ["cubin"] for case in flash)   # 2 FA3
    assert {*(case["case"] for case in tma + flash)} == set(gpu_only)
    rows = {row["case"]: row["status"] for row in report["rows"]}
    assert all(rows.pop(name) == "gpu only" for name in gpu_only)
    assert all(status == "launched" for status in rows.values()), report["rows"]
    table = (tmp_path / "results.md").read_text()
    assert all(f"| {name} | flydsl | launched |" in table for name in rows)


def test_a_kernel_changed_after_the_build_is_reported_not_compiled(kit, tmp_path):
    changed = tmp_path / "kit"
    shutil.copytree(kit, changed)
    softmax = changed / "examples" / "softmax.py"
    softmax.write_text(softmax.read_text().replace("import numpy as np", "import numpy as np\n"))
    shutil.copy(kit.parent / "libcuda.so.1", tmp_path)
    status, report = run_kit(changed, tmp_path / "results")
    rows = {row["case"]: row for row in report["rows"]}
    assert status == 1 and report["compiled_here"] == []
    [miss] = [row for name, row in rows.items() if name.startswith("row softmax")]
    assert miss["status"] == "skipped" and "'softmax_kernel'" in miss["reason"]
    assert "built from other sources" in miss["reason"]
    assert all(row["status"] in ("launched", "gpu only") for row in rows.values()
               if row is not miss)
