"""The docs/ pages say what the code does: their commands run, and each row of the
"what is not supported" tables fails as it says.

* In docs/gpu-profiling.md, docs/cpu-performance.md, docs/jit-vs-triton.md and
  docs/memory-profiler.md, every
  ```python and ```bash block runs, in page order, in one folder (with ``examples/``
  linked in), except a block right after a ``<!-- not run: REASON -->`` line. Python
  blocks run in this process (kernels need their source in a file, so each block is
  written to one first); bash blocks run with ``bash -e -o pipefail``.
* Each row of a docs/not-supported.md table headed ``| not supported | example |
  backend | error |`` puts its example in a kernel body and compiles it for the
  backend named: the error named must be raised ("none" in the cell: no error).
"""
import os
import re
import runpy
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flydsl
from flydsl.compiler.toolchain import find_ptxas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
RUN_PAGES = ["gpu-profiling.md", "cpu-performance.md", "jit-vs-triton.md", "memory-profiler.md"]
_BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*?) -->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```",
                    re.S)


def code_blocks(page: str) -> list:
    """``(language, code, reason it is not run or None)`` of each fenced block."""
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        text = f.read()
    return [(m["lang"], m["code"], m["why"]) for m in _BLOCK.finditer(text)]


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_commands_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(os.path.join(ROOT, "examples"))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "0")   # compile candidates in-process
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    ran, not_run = 0, []
    for k, (lang, code, why) in enumerate(code_blocks(page)):
        if lang not in ("python", "bash"):
            continue
        if why:
            not_run.append(f"block {k}: {why}")
            continue
        if "ptxas" in code and find_ptxas() is None:
            not_run.append(f"block {k}: ptxas is not installed")
            continue
        if lang == "python":
            script = tmp_path / f"{page[:-3].replace('-', '_')}_block{k}.py"
            script.write_text(code)
            runpy.run_path(str(script), run_name=script.stem)
        else:
            out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"{page} block {k} failed:\n{code}\n{out.stderr}"
        ran += 1
    assert ran >= 2, f"{page}: only {ran} blocks ran"
    if any("ptxas" in reason for reason in not_run):
        pytest.skip(f"{page}: {ran} blocks ran; not run: {not_run}")


def test_blocks_that_are_not_run_are_the_ones_that_cannot_run_here():
    # the Triton side of the comparison, and the one recipe that needs a real GPU
    assert [w for _, _, w in code_blocks("jit-vs-triton.md") if w] == [
        "Triton is not a dependency of flydsl"] * 2
    assert [w for _, _, w in code_blocks("gpu-profiling.md") if w] == ["needs an NVIDIA GPU"]
    assert not [w for _, _, w in code_blocks("cpu-performance.md") if w]


# -- docs/not-supported.md ---------------------------------------------------------------

HEADER = "| not supported | example | backend | error |"


def not_supported_rows() -> list:
    """``(example, backend, arch, error or None)`` of every row of the checked tables."""
    with open(os.path.join(DOCS, "not-supported.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows, in_table = [], False
    for line in lines:
        if line.strip() == HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"not a 4-cell row: {line}"
        example = re.fullmatch(r"`([^`]+)`", cells[1])
        assert example, f"the example cell must be one code span: {line}"
        backend, _, arch = cells[2].partition(" ")
        error = re.match(r"`(\w+)`", cells[3])
        assert error or cells[3].startswith("none"), f"no error class named: {line}"
        rows.append((example[1], backend, arch or None, error[1] if error else None))
    return rows


ROWS = not_supported_rows()


def test_not_supported_tables_are_found():
    assert len(ROWS) >= 20
    assert {backend for _, backend, _, _ in ROWS} == {"cpu", "cuda", "rocm"}


@pytest.fixture(scope="module")
def not_supported_kernels(tmp_path_factory):
    """A module with one kernel per row, ``row_<k>``, its body the row's example."""
    folder = tmp_path_factory.mktemp("not_supported")
    src = ["import math", "import numpy as np", "import flydsl", "import flydsl.expr as fx"]
    for k, (example, _, _, _) in enumerate(ROWS):
        src.append(f"@flydsl.kernel\ndef row_{k}(x: fx.Tensor, y: fx.Tensor, h: fx.Tensor, "
                   f"n: fx.Int32):\n    i = fx.thread_idx.x\n{textwrap.indent(example, '    ')}\n")
    path = folder / "not_supported_rows.py"
    path.write_text("\n\n".join(src))
    return runpy.run_path(str(path), run_name="not_supported_rows")


@pytest.mark.parametrize("k", range(len(ROWS)), ids=[r[0][:40] for r in ROWS])
def test_not_supported_row_fails_as_documented(k, not_supported_kernels, monkeypatch):
    example, backend, arch, error = ROWS[k]
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "0")
    x, y = np.ones(64, np.float32), np.ones(64, np.float32)
    h = np.ones(64, np.float16)
    stage = {"cpu": "so", "cuda": "ptx", "rocm": "amdgcn"}[backend]

    def compile_row():
        prog = flydsl.compile(not_supported_kernels[f"row_{k}"], x, y, h, 64,
                              backend=backend, arch=arch)
        return prog.asm[stage]

    if error is None:
        assert compile_row()
        return
    with pytest.raises(Exception) as info:
        compile_row()
    names = [c.__name__ for c in type(info.value).__mro__]
    assert error in names, f"{example!r} on {backend}: expected {error}, got {info.value!r}"
