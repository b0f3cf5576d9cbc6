"""What a user sees when something is wrong: tracebacks without flydsl's own frames
(FLYDSL_TRACEBACK=full keeps them), the fix suggested for numpy/torch/typo'd names in
kernels, and CLI errors located in the user's file."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import traceback

import numpy
import numpy as np
import pytest
import torch

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLNameError, DSLTypeError, is_internal_file
from flydsl.tracebacks import TRIMMED_NOTE
from conftest import marked_line


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def frames_of(exc: BaseException) -> list:
    return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]


@pytest.fixture(autouse=True)
def _trimmed_tracebacks(monkeypatch):
    monkeypatch.delenv("FLYDSL_TRACEBACK", raising=False)


@flydsl.kernel
def broken(a: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    a[i] = undefined_name + a[i]  # kernel line


@flydsl.kernel
def scale(a: fx.Tensor, n: fx.Int32):
    a[fx.thread_idx.x] = a[fx.thread_idx.x] * 2.0


@flydsl.kernel
def no_len(a: fx.Tensor, n: fx.Int32):
    a[fx.thread_idx.x] = len(a[fx.thread_idx.x])  # len line


@flydsl.jit
def run_broken(a, n: fx.Int32):
    broken(a, n).launch(grid=(1, 1, 1), block=(4, 1, 1))  # broken launch


@flydsl.jit
def run_scale(a, n):
    scale(a, n).launch(grid=(1, 1, 1), block=(4, 1, 1))  # scale launch


@flydsl.jit
def run_no_len(a, n: fx.Int32):
    no_len(a, n).launch(grid=(1, 1, 1), block=(4, 1, 1))


def test_a_kernel_error_shows_the_call_sites_and_the_kernel_line():
    with pytest.raises(DSLNameError) as info:
        run_broken(np.ones(4, np.float32), 4)  # user call
    here = __file__
    assert frames_of(info.value) == [
        (here, line_of("user call"), "test_a_kernel_error_shows_the_call_sites_and_the_kernel_line"),
        (here, line_of("broken launch"), "run_broken"),
        (here, line_of("kernel line"), "broken")]
    assert TRIMMED_NOTE in info.value.__notes__
    assert info.value.lineno == line_of("kernel line") and info.value.kernel == "broken"


def test_flydsl_traceback_full_keeps_every_frame(monkeypatch):
    monkeypatch.setenv("FLYDSL_TRACEBACK", "full")
    with pytest.raises(DSLNameError) as info:
        run_broken(np.ones(4, np.float32), 4)
    frames = frames_of(info.value)
    assert sum(is_internal_file(f) for f, _, _ in frames) >= 10
    assert frames[-1][0] != __file__ and not getattr(info.value, "__notes__", [])


def test_flydsl_compile_and_compiled_calls_are_trimmed():
    a = np.ones(4, np.float32)
    with pytest.raises(DSLNameError) as info:
        flydsl.compile(run_broken, a, 4)
    assert [line for _, line, _ in frames_of(info.value)[1:]] == [line_of("broken launch"),
                                                                 line_of("kernel line")]
    prog = flydsl.compile(run_scale, a, 4)
    with pytest.raises(DSLTypeError) as info:
        prog(a, [1])
    assert not any(is_internal_file(f) for f, _, _ in frames_of(info.value))


def test_a_launch_argument_error_ends_at_the_launch():
    with pytest.raises(DSLTypeError, match="argument 'n'") as info:
        run_scale(np.ones(4, np.float32), "four")
    frames = frames_of(info.value)
    assert not any(is_internal_file(f) for f, _, _ in frames)
    assert frames[-1][:2] == (__file__, line_of("scale launch"))
    assert (info.value.filename, info.value.lineno) == frames[-1][:2]


def test_chained_causes_lose_their_internal_frames_too(monkeypatch):
    with pytest.raises(DSLTypeError, match="has no len") as info:
        run_no_len(np.ones(4, np.float32), 4)
    cause = info.value.__cause__
    assert isinstance(cause, TypeError)
    assert not any(is_internal_file(f) for f, _, _ in frames_of(cause))
    assert frames_of(info.value)[-1][1] == line_of("len line")
    monkeypatch.setenv("FLYDSL_TRACEBACK", "full")
    with pytest.raises(DSLTypeError) as info:
        run_no_len(np.ones(4, np.float32), 4)
    assert any(is_internal_file(f) for f, _, _ in frames_of(info.value.__cause__))


SCRIPT = '''\
import numpy as np
import flydsl
import flydsl.expr as fx

@flydsl.kernel
def bad_kernel(a: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    a[i] = undefined_thing + a[i]

@flydsl.jit
def run(a, n: fx.Int32):
    bad_kernel(a, n).launch(grid=(1, 1, 1), block=(4, 1, 1))

run(np.ones(4, np.float32), 4)
'''


def test_the_printed_traceback_is_the_users(tmp_path):
    """As Python prints it at the top level: three frames (the call, the launch, the
    kernel line), none of flydsl's and no ^ markers; FLYDSL_TRACEBACK=full: all."""
    script = tmp_path / "bug.py"
    script.write_text(SCRIPT)

    def run(**env):
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env={**os.environ, "FLYDSL_CACHE_DIR": str(tmp_path / "c"),
                                   **env}, timeout=300).stderr
    trimmed = run(FLYDSL_TRACEBACK="")
    files = [line for line in trimmed.splitlines() if line.lstrip().startswith("File ")]
    assert files == [f'  File "{script}", line 14, in <module>',
                     f'  File "{script}", line 12, in run',
                     f'  File "{script}", line 8, in bad_kernel'], trimmed
    assert "^" not in trimmed and TRIMMED_NOTE in trimmed
    assert "DSLNameError" in trimmed and "'undefined_thing' is not defined" in trimmed
    full = run(FLYDSL_TRACEBACK="full")
    assert full.count("File ") > 10 and "flydsl/compiler/frontend/codegen.py" in full


# -- suggestions -------------------------------------------------------------------

@flydsl.kernel
def np_exp(a: fx.Tensor):
    a[fx.thread_idx.x] = np.exp(a[fx.thread_idx.x])  # np.exp


@flydsl.kernel
def numpy_sqrt(a: fx.Tensor):
    a[fx.thread_idx.x] = numpy.sqrt(a[fx.thread_idx.x])  # numpy.sqrt


@flydsl.kernel
def torch_exp(a: fx.Tensor):
    a[fx.thread_idx.x] = torch.exp(a[fx.thread_idx.x])  # torch.exp


@flydsl.kernel
def np_arctan2(a: fx.Tensor):
    a[fx.thread_idx.x] = np.arctan2(a[fx.thread_idx.x], 1.0)  # np.arctan2


@flydsl.kernel
def fx_typo(a: fx.Tensor):
    a[fx.thread_idx.x] = fx.erfx(a[fx.thread_idx.x])  # fx.erfx


@flydsl.kernel
def attribute_typo(a: fx.Tensor):
    a[fx.thread_idx.x] = a.shap[0]  # a.shap


@pytest.mark.parametrize("kernel, marker, expected", [
    (np_exp, "np.exp", "np.exp() is a numpy function: it cannot compute on kernel values; "
                       "use fx.exp"),
    (numpy_sqrt, "numpy.sqrt", "numpy.sqrt() is a numpy function: it cannot compute on "
                               "kernel values; use fx.sqrt"),
    (torch_exp, "torch.exp", "torch.exp() is a torch function: it cannot compute on kernel "
                             "values; use fx.exp"),
    (np_arctan2, "np.arctan2", "use fx.atan2"),
    (fx_typo, "fx.erfx", "fx has no attribute 'erfx'; did you mean fx.erf"),
    (attribute_typo, "a.shap", "has no attribute 'shap'; did you mean a.shape?"),
], ids=["np.exp", "numpy.sqrt", "torch.exp", "np.arctan2", "fx.erfx", "a.shap"])
def test_known_names_suggest_the_fx_spelling(kernel, marker, expected):
    with pytest.raises(DSLTypeError) as info:
        kernel[1, 4](np.ones(4, np.float32))
    err = info.value
    assert expected in str(err)
    assert (err.kernel, err.filename, err.lineno) == (kernel.name, __file__, line_of(marker))


def test_fx_typos_outside_kernels_list_close_names():
    with pytest.raises(AttributeError, match=r"has no attribute 'erfx'; did you mean fx\.erf"):
        fx.erfx
    with pytest.raises(AttributeError, match=r"did you mean .*fx\.atomic_add\b"):
        fx.atomic_ad
    assert not hasattr(fx, "no_such_builtin") and hasattr(fx, "exp")


# -- the CLI -------------------------------------------------------------------------

KERNEL_FILE = '''\
import flydsl
import flydsl.expr as fx


@flydsl.kernel
def k(a: fx.Tensor, n: fx.Int32):
    a[fx.thread_idx.x] = a[fx.thread_idx.x] * 2.0
'''


def cli_launchers() -> list:
    """``python -m flydsl.cli`` and, when installed, the ``flydsl`` script."""
    out = [[sys.executable, "-m", "flydsl.cli"]]
    script = shutil.which("flydsl", path=os.path.dirname(sys.executable))
    if script:
        out.append([script])
    return out


@pytest.mark.parametrize("launcher", cli_launchers(), ids=lambda argv: os.path.basename(argv[-1]))
def test_cli_errors_point_at_the_users_file(tmp_path, launcher):
    source = tmp_path / "kern.py"
    source.write_text(KERNEL_FILE)
    out = subprocess.run([*launcher, "compile", f"{source}::k", "--backend", "cpu",
                          "--signature", "f32[1],f32"], capture_output=True, text=True,
                         env={**os.environ, "FLYDSL_CACHE_DIR": str(tmp_path / "c")},
                         timeout=300)
    assert out.returncode == 1
    assert out.stderr.startswith(f"flydsl: error: {source}:6: in kernel 'k': argument 'n'"), \
        out.stderr
    assert "def k(a: fx.Tensor, n: fx.Int32):" in out.stderr and "Traceback" not in out.stderr
    source.write_text(KERNEL_FILE.replace("* 2.0", "* two"))
    out = subprocess.run([*launcher, "compile", f"{source}::k", "--backend", "cpu",
                          "--signature", "f32[1],i32"], capture_output=True, text=True,
                         env={**os.environ, "FLYDSL_CACHE_DIR": str(tmp_path / "c")},
                         timeout=300)
    assert out.stderr.startswith(f"flydsl: error: {source}:7: in kernel 'k': name 'two'")



def test_direct_launches_are_trimmed_too():
    """Needs the boundary in flydsl/kernel.py (KernelCall.launch, kernel[grid, block])."""
    with pytest.raises(DSLNameError) as info:
        broken[1, 4](np.ones(4, np.float32), 4)  # direct launch
    assert [line for _, line, _ in frames_of(info.value)] == [line_of("direct launch"),
                                                             line_of("kernel line")]
    with pytest.raises(DSLNameError) as info:
        broken(np.ones(4, np.float32), 4).launch(grid=(1, 1, 1), block=(4, 1, 1))  # .launch
    assert [line for _, line, _ in frames_of(info.value)] == [line_of(".launch"),
                                                             line_of("kernel line")]
