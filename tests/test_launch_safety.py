"""Launches that would crash the interpreter or corrupt memory are refused with
located errors: out-of-range grids, Int32 index overflow, writes into read-only
arrays; kernels with non-ASCII names compile and run on every backend."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import LaunchError


@flydsl.kernel
def fill(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        x[i] = 1.0


@flydsl.kernel
def add_one(x: fx.Tensor, y: fx.Tensor):
    i = fx.thread_idx.x
    y[i] = x[i] + 1.0


@pytest.mark.parametrize("grid, axis", [((2**64, 1, 1), "grid.x"), ((2**40,), "grid.x"),
                                        ((1, 2**33, 1), "grid.y"), ((1, 1, 65536), "grid.z")])
def test_grids_beyond_every_backends_limits_are_refused_before_running(grid, axis):
    x = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match=rf"{axis} = \d+ is more than") as info:
        fill[grid, 1](x, 4)
    assert info.value.filename == __file__ and "fill" in str(info.value)
    assert not x.any()


@pytest.mark.parametrize("block", [(2048, 1, 1), (1, 1, 65), (32, 32, 2)])
def test_blocks_beyond_the_limits_are_refused(block):
    with pytest.raises(LaunchError, match="block"):
        fill[1, block](np.zeros(4, np.float32), 4)


def test_grids_whose_int32_index_would_wrap_are_refused():
    """2^31 threads along x: block_idx.x * block_dim.x + thread_idx.x wraps negative
    and `if i < n` would let it write out of bounds."""
    x = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match=r"2147483648 threads along x.*fx.Int64"):
        fill[2**23, 256](x, 4)
    with pytest.raises(LaunchError, match="threads along x"):
        fill(x, 4).launch(grid=(2**23, 1, 1), block=(256, 1, 1))
    assert not x.any()


def test_the_largest_int32_safe_grid_is_accepted():
    x = np.zeros(4, np.float32)
    fill[(2**31 - 1) // 1024, 1024](x, 4)
    assert x.all()


def test_wide_indices_with_int64_arithmetic():
    @flydsl.kernel
    def wide(x: fx.Tensor, n: fx.Int64):
        i = fx.Int64(fx.block_idx.x) * fx.block_dim.x + fx.thread_idx.x
        if i < n:
            x[i] = 1.0
    x = np.zeros(300, np.float32)
    wide[3, 128](x, 300)
    assert x.all()


READ_ONLY = {
    "frombuffer": lambda: np.frombuffer(bytes(16), np.float32),
    "broadcast_to": lambda: np.broadcast_to(np.float32(0), (4,)),
}


@pytest.mark.parametrize("kind", sorted(READ_ONLY))
def test_read_only_numpy_arrays_are_refused_where_the_kernel_writes(kind):
    src = np.zeros(4, np.float32)
    add_one[1, 4](src, np.zeros(4, np.float32))       # warm: the fast path guards too
    out = READ_ONLY[kind]()
    before = out.copy()
    with pytest.raises(LaunchError, match=r"argument 'y' is read-only.*np.array\(y\)") as info:
        add_one[1, 4](src, out)
    assert info.value.filename == __file__
    assert np.array_equal(out, before)
    fresh = np.zeros(4, np.float32)
    add_one[1, 4](READ_ONLY[kind](), fresh)          # reading one is fine
    assert np.array_equal(fresh, np.ones(4, np.float32))


def test_a_read_only_memmap_is_refused_not_a_segfault(tmp_path):
    script = tmp_path / "memmap_write.py"
    script.write_text(textwrap.dedent(f'''
        import numpy as np
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_launch_safety import add_one
        path = {str(tmp_path / "data.bin")!r}
        np.zeros(4, np.float32).tofile(path)
        ro = np.memmap(path, np.float32, mode="r")
        try:
            add_one[1, 4](np.zeros(4, np.float32), ro)
        except Exception as e:
            print(type(e).__name__)
    '''))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "LaunchError"


def test_torch_inference_tensors_are_written_only_in_inference_mode():
    torch = pytest.importorskip("torch")
    with torch.inference_mode():
        out = torch.zeros(4)
    add_one[1, 4](torch.zeros(4), torch.zeros(4))
    with pytest.raises(LaunchError, match="inference"):
        add_one[1, 4](torch.zeros(4), out)
    with torch.inference_mode():
        add_one[1, 4](torch.zeros(4), out)
    assert out.tolist() == [1.0] * 4


UNICODE = '''
import flydsl, flydsl.expr as fx

@flydsl.kernel
def ядро(x: fx.Tensor):
    x[fx.thread_idx.x] = 2.0
'''


@pytest.mark.parametrize("backend, arch, stage, symbol", [
    ("cpu", None, "llir", "k__u44f__u434__u440__u43e_"),
    ("cuda", "sm_90", "ptx", ".entry k__u44f__u434__u440__u43e_"),
    ("rocm", "gfx942", "amdgcn", "k__u44f__u434__u440__u43e_:"),
])
def test_unicode_kernel_names_get_ascii_symbols(tmp_path, monkeypatch, backend, arch, stage,
                                                symbol):
    (tmp_path / "unicode_kernel.py").write_text(UNICODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import unicode_kernel
    kern = getattr(unicode_kernel, "ядро")
    x = np.zeros(4, np.float32)
    prog = flydsl.compile(kern, x, backend=backend, arch=arch)
    assert symbol in prog.asm[stage]
    if backend == "cpu":
        kern[1, 4](x)
        assert x.tolist() == [2.0] * 4
