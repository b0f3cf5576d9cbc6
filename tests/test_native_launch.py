"""The native warm launch (flydsl.runtime.native_launch): every guard of the generated
Python warm launch still fires, in C, for torch CPU tensors and Python scalars; its
packing launches what the Python one would; its fallbacks (no shim, multi-block
grids, dynamic shared memory, an unloaded library, Ctrl-C) keep behaviour."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import LaunchError
from flydsl.runtime import native_launch

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
G1, B4 = (1, 1, 1), (4, 1, 1)


@flydsl.kernel
def add(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


@flydsl.kernel
def axpb(x: fx.Tensor, y: fx.Tensor, alpha: fx.Float32, beta, K: fx.Constexpr[int] = 0):
    i = fx.thread_idx.x
    if i < x.shape[0]:
        y[i] = x[i] * alpha + beta + K


def _native_or_skip():
    if native_launch.load() is None:
        pytest.skip(f"no native launch module here: {native_launch.problem()}")


@pytest.fixture(params=["shim", "python-api"])
def reader(request, monkeypatch):
    """Tensors read through torch's C shim, or through its Python API from C."""
    _native_or_skip()
    if request.param == "shim":
        if not native_launch.torch_shim(native_launch.load()):
            pytest.skip("torch's C shim is not usable here")
    else:
        monkeypatch.setattr(native_launch, "_dtype_code", lambda module, sample: -1)
    add.cache_clear()
    axpb.cache_clear()
    return request.param


def primed():
    a, b, c = torch.arange(4.0), torch.ones(4), torch.zeros(4)
    add[1, 4](a, b, c, 4)
    add[1, 4](a, b, c, 4)
    fast = add._last
    assert type(fast).__name__ == "NativeFastLaunch"
    return fast, (a, b, c, 4)


def both(fast, args, grid=G1, block=B4, smem=0):
    """The native answer, checked against its Python twin's."""
    native = fast(args, grid, block, smem, None)
    assert fast.flydsl_python(args, grid, block, smem, None) is native
    return native


def test_native_launch_is_used_for_torch_cpu_tensors_and_writes_the_result(reader):
    fast, (a, b, c, n) = primed()
    assert add.warm_launch_source().startswith("# native")
    a2, b2, c2 = torch.full((4,), 5.0), torch.full((4,), 2.0), torch.zeros(4)
    assert fast((a2, b2, c2, 3), G1, B4, 0, None) is True
    assert c2.tolist() == [7.0, 7.0, 7.0, 0.0]
    add[1, 4](a, b, c2, 4)
    assert c2.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_each_tensor_guard_fires_on_the_native_path(reader):
    fast, (a, b, c, n) = primed()
    x = torch.arange(8.0)
    refused = {
        "dtype": (a.double(), b, c, n),
        "device": (torch.empty(4, device="meta"), b, c, n),
        "rank": (a.reshape(2, 2), b, c, n),
        "inner stride": (x[::2], b, c, n),
        "alignment": (x[1:5], b, c, n),
        "type (numpy)": (a.numpy(), b, c, n),
        "type (subclass)": (torch.nn.Parameter(a), b, c, n),
        "overlap (c is a)": (a, b, a, n),
        "argument count": (a, b, c),
    }
    for what, args in refused.items():
        assert both(fast, args) is False, what
    with torch.inference_mode():
        frozen = torch.zeros(4)
    assert both(fast, (a, b, frozen, n)) is False            # not writable here
    with torch.inference_mode():
        assert both(fast, (a, b, frozen, n)) is True         # writable in inference mode
    assert frozen.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(LaunchError, match="inference"):       # the cold path says why
        add[1, 4](a, b, frozen, n)


def test_each_scalar_and_env_guard_fires_on_the_native_path(reader, monkeypatch):
    fast, (a, b, c, n) = primed()
    for what, value in {"out of int32": 2 ** 31, "divisible by 16": 16,
                        "numpy int": np.int32(4), "float": 4.0, "bool": True}.items():
        assert both(fast, (a, b, c, value)) is False, what
    assert both(fast, (a, b, c, -3)) is True                  # same facts: accepted
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "1")               # compiles differently
    assert both(fast, (a, b, c, n)) is False
    monkeypatch.delenv("FLYDSL_OPT_LEVEL")
    assert both(fast, (a, b, c, n)) is True


def test_a_tensor_that_is_not_strided_is_read_as_the_python_path_reads_it(reader):
    """The shim answers for strided tensors only: a sparse one (torch.Tensor, float32,
    on the CPU) is read through torch's Python API, with the Python path's answer."""
    fast, (a, b, c, n) = primed()
    assert both(fast, (a.to_sparse(), b, c, n)) is False


def test_floats_constexprs_and_defaults_are_guarded_and_packed(reader):
    x, y = torch.arange(4.0), torch.zeros(4)
    axpb[1, 4](x, y, 2.0, 1)
    axpb[1, 4](x, y, 2.0, 1)
    fast = axpb._last
    assert type(fast).__name__ == "NativeFastLaunch"
    assert fast((x, y, 0.5, 3), G1, B4, 0, None) is True      # K omitted: its default
    assert y.tolist() == [3.0, 3.5, 4.0, 4.5]
    assert both(fast, (x, y, 0.5, 3, 0)) is False             # K given: 5 arguments
    assert both(fast, (x, y, 1, 3)) is False                  # int for the float
    with pytest.raises(OverflowError):                        # as struct.pack("<f") says
        fast((x, y, 1e40, 3), G1, B4, 0, None)
    with pytest.raises(OverflowError):
        fast.flydsl_python((x, y, 1e40, 3), G1, B4, 0, None)
    axpb[1, 4](x, y, 2.0, 1, 7)
    axpb[1, 4](x, y, 2.0, 1, 7)
    fast7 = axpb._last
    assert both(fast7, (x, y, 2.0, 1, 7)) is True and y.tolist() == [8.0, 10.0, 12.0, 14.0]
    assert both(fast7, (x, y, 2.0, 1, 6)) is False            # another constexpr value
    assert both(fast7, (x, y, 2.0, 1, True)) is False         # True == 1, not the same type


def test_multi_block_grids_and_dynamic_shared_memory_go_through_the_python_submit(reader):
    fast, (a, b, c, n) = primed()
    big_a, big_b, big_c = torch.arange(600.0), torch.ones(600), torch.zeros(600)
    assert fast((big_a, big_b, big_c, 600), (3, 1, 1), (256, 1, 1), 0, None) is True
    assert torch.equal(big_c, big_a + 1)
    c.zero_()
    assert fast((a, b, c, n), G1, B4, 64, None) is True
    assert c.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(LaunchError):                          # more than the CPU's limit
        fast((a, b, c, n), G1, B4, 1 << 30, None)


def test_an_unloaded_or_idle_library_is_loaded_again_before_the_call(reader):
    fast, (a, b, c, n) = primed()
    library = next(iter(add._compiled.values())).launcher.library
    loads = library.loads
    library._unload()                                          # as the sweep would
    c.zero_()
    assert fast((a, b, c, n), G1, B4, 0, None) is True
    assert c.tolist() == [1.0, 2.0, 3.0, 4.0] and library.loads == loads + 1
    library.call = library._probe                              # the sweep's second chance
    assert fast((a, b, c, n), G1, B4, 0, None) is True
    assert library.call is library.acquire()[1]                # counted as used again


def test_disabled_native_launches_generate_the_python_one(monkeypatch):
    monkeypatch.setenv("FLYDSL_NATIVE_LAUNCH", "0")
    add.cache_clear()
    a, b, c = torch.arange(4.0), torch.ones(4), torch.zeros(4)
    add[1, 4](a, b, c, 4)
    assert type(add._last).__name__ == "function" and c.tolist() == [1.0, 2.0, 3.0, 4.0]
    add.cache_clear()


def test_numpy_arguments_take_the_native_warm_launch():
    add.cache_clear()
    a, b, c = np.arange(4, dtype=np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)
    add[1, 4](a, b, c, 4)
    add[1, 4](a, b, c, 4)
    assert type(add._last).__name__ == "NativeFastLaunch"
    assert c.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_ctrl_c_stops_a_native_one_block_launch(tmp_path):
    """The kernel's entry is called from C: its interrupt flag still raises
    KeyboardInterrupt, and the next launch runs."""
    _native_or_skip()
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "interrupt_worker.py"), "1",
                             "native"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == ("interrupted still_writing=False next_launch_ok=True "
                           "team=True native=True")   # torch loaded libgomp


def test_the_launcher_tries_the_last_warm_launch_once_before_the_keyed_lookup():
    """kernel[grid, block](...) calls the last warm launch itself (one Python frame
    less); a refusal goes on to the keyed lookup without asking it again."""
    add.cache_clear()
    a, b, c = torch.arange(4.0), torch.ones(4), torch.zeros(4)
    add[1, 4](a, b, c, 4)
    real, calls = add._last, []

    def counting(*args):
        calls.append(args)
        return False                       # refuse: the keyed entry launches instead
    add._last = counting
    c.zero_()
    add[1, 4](a, b, c, 4)
    assert len(calls) == 1 and c.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert add._last is real               # the keyed hit ran, and is tried first again


def test_threads_launching_at_once_each_pack_their_own_arguments(reader):
    """The native launch packs on the C stack and releases the GIL in the kernel:
    concurrent launches from several threads never see each other's arguments."""
    import threading
    fast, _ = primed()
    failures = []

    def work(k: int) -> None:
        a, b = torch.full((4,), float(k)), torch.full((4,), 100.0)
        for _ in range(300):
            c = torch.zeros(4)
            add[1, 4](a, b, c, 4)
            if c.tolist() != [k + 100.0] * 4:
                failures.append((k, c.tolist()))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert type(add._last).__name__ == "NativeFastLaunch"


def test_dynamic_shared_memory_past_int64_is_refused_as_the_python_submit_refuses_it(reader):
    fast, (a, b, c, n) = primed()
    for f in (fast, fast.flydsl_python):
        with pytest.raises(LaunchError):
            f((a, b, c, n), G1, B4, 1 << 70, None)


class _Sub(np.ndarray):
    pass


def test_each_numpy_guard_fires_on_the_native_path():
    _native_or_skip()
    if not native_launch.numpy_layout(native_launch.load()):
        pytest.skip("numpy's ndarray layout is not the one checked here")
    add.cache_clear()
    a, b, c = np.arange(4, dtype=np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)
    add[1, 4](a, b, c, 4)
    add[1, 4](a, b, c, 4)
    fast = add._last
    assert type(fast).__name__ == "NativeFastLaunch"
    x = np.arange(8, dtype=np.float32)
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    record = np.zeros(4, np.dtype([("v", np.float32), ("pad", np.int8)]))
    refused = {
        "dtype": (a.astype(np.float64), b, c, 4),
        "byte order": (a.astype(">f4"), b, c, 4),
        "rank": (a.reshape(2, 2), b, c, 4),
        "inner stride": (x[::2], b, c, 4),
        "reversed": (x[3::-1], b, c, 4),
        "alignment": (x[1:5], b, c, 4),
        "strides of no whole element": (b, record["v"], c, 4),
        "read-only output": (a, b, frozen, 4),
        "type (subclass)": (a.view(_Sub), b, c, 4),
        "type (torch)": (torch.from_numpy(a), b, c, 4),
        "overlap (c is a)": (a, b, a, 4),
    }
    for what, args in refused.items():
        assert both(fast, args) is False, what
    ok = (x[4:8], np.full(4, 2.0, np.float32), np.zeros(4, np.float32), 3)
    assert both(fast, ok) is True and ok[2].tolist() == [6.0, 7.0, 8.0, 0.0]


FALLBACK = '''
import sys, torch
from flydsl.runtime import native_launch
sys.path.insert(0, {examples!r})
from vector_add import vadd_kernel
a, b, c = torch.arange(4.0), torch.ones(4), torch.zeros(4)
vadd_kernel[1, 4](a, b, c, 4)
vadd_kernel[1, 4](a, b, c, 4)
print(native_launch.load() is None, "group or others" in native_launch.problem(),
      type(vadd_kernel._last).__name__, c.tolist())
'''


def test_an_untrusted_cache_folder_keeps_the_python_warm_launch(tmp_path):
    """The module is code loaded from the cache folder: a folder others may write is
    not used, and launches take the Python warm launch."""
    bad = tmp_path / "shared"
    bad.mkdir()
    os.chmod(bad, 0o777)
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(bad), FLYDSL_COMPILE_BACKEND="cpu")
    out = subprocess.run([sys.executable, "-c", FALLBACK.format(
        examples=os.path.join(os.path.dirname(HERE), "examples"))],
        capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "True True function [1.0, 2.0, 3.0, 4.0]"


DEFAULT_TENSOR = '''
import numpy as np
import flydsl, flydsl.expr as fx
OUT = np.zeros(4, np.float32)

@flydsl.kernel
def fill(v: fx.Float32, out: fx.Tensor = OUT):
    i = fx.thread_idx.x
    if i < out.shape[0]:
        out[i] = v

fill[1, 4](1.0)
fill[1, 4](2.0)
OUT.resize(1 << 22, refcheck=False)   # its data moves (the old block is freed)
OUT[:] = 0
fill[1, 4](3.0)
print(type(fill._last).__name__, OUT[:5].tolist())
'''


def test_a_tensor_default_is_packed_at_each_launch_not_once(tmp_path):
    """A default array may move (resize, in place): the warm launch packs its current
    pointer, as the Python one does, never the one it had when first launched (which
    wrote into freed memory)."""
    _native_or_skip()
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"),
               FLYDSL_COMPILE_BACKEND="cpu")
    script = tmp_path / "default_tensor.py"     # kernels need a source file
    script.write_text(DEFAULT_TENSOR)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "function [3.0, 3.0, 3.0, 3.0, 0.0]"


def test_a_thread_waits_for_the_torch_shim_check_another_thread_is_running(monkeypatch):
    """The module reads tensors through the shim from the moment it is pointed at it,
    before the sample tensors are checked: a second thread must not take the shim's
    dtype codes (and launch with them) until that check has passed or failed."""
    import threading
    _native_or_skip()
    module, real = native_launch.load(), native_launch._install_shim
    inside, done = threading.Event(), threading.Event()

    def slow_install(m) -> None:
        inside.set()
        time.sleep(0.3)
        try:
            real(m)
        finally:
            done.set()
    monkeypatch.setattr(native_launch, "_shim_tried", False)
    monkeypatch.setattr(native_launch, "_install_shim", slow_install)
    first = threading.Thread(target=native_launch.torch_shim, args=(module,))
    first.start()
    assert inside.wait(60)
    native_launch.torch_shim(module)
    assert done.is_set()       # it waited for the check
    first.join()


def test_the_shim_is_looked_up_in_the_loaded_libtorch_never_a_second_copy(
        tmp_path, monkeypatch):
    """A libtorch_cpu.so beside torch's package that is not the one loaded is not
    loaded (its initializers would run): the shim is then not used."""
    _native_or_skip()
    (tmp_path / "lib").mkdir()
    source = tmp_path / "fake.c"
    source.write_text('#include <stdio.h>\n#include <stdlib.h>\n'
                      '__attribute__((constructor)) static void mark(void) {\n'
                      '    FILE *f = fopen(getenv("FLYDSL_TEST_MARK"), "w");\n'
                      '    if (f) fclose(f);\n}\n')
    subprocess.run([*native_launch._compilers()[0], "-shared", "-fPIC", str(source), "-o",
                    str(tmp_path / "lib" / "libtorch_cpu.so")], check=True, timeout=300)
    mark = tmp_path / "initialized"
    monkeypatch.setenv("FLYDSL_TEST_MARK", str(mark))
    monkeypatch.setattr(torch, "__file__", str(tmp_path / "__init__.py"))
    with pytest.raises(OSError):
        native_launch._install_shim(native_launch.load())
    assert not mark.exists()


def test_a_damaged_module_in_the_cache_is_built_again(tmp_path):
    """A cache folder copied or cut short leaves a file that does not load: it is
    built again, not left to keep every later process on the Python warm launch."""
    _native_or_skip()
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    probe = ("from flydsl.runtime import native_launch\n"
             "print(native_launch.load() is not None, native_launch.problem())\n")

    def loads() -> str:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split("\n")[-2]
    assert loads() == "True None"
    built = list((tmp_path / "cache" / "native").glob("*.so"))
    assert len(built) == 1
    built[0].write_bytes(b"\x7fELF cut short")
    assert loads() == "True None"
