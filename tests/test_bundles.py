"""Bundles of precompiled kernels: written by `flydsl compile --bundle`, read through
FLYDSL_CACHE_BUNDLE or flydsl.load_bundle, with no compiler work at run time."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.compiler import bundle as bundles
from flydsl.compiler import kernel_compiler
from flydsl.compiler.cache import DiskCache, entry_relpath

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "shared_cache_child.py")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    """The build machine's cache, shared by this module's bundle builds: the first
    `flydsl compile --bundle` compiles, the later ones write their bundles from it."""
    return tmp_path_factory.mktemp("build-cache")


def cli_in_process(*args, env=None, code=1) -> str:
    """What `flydsl ARGS` printed to stderr, run by the CLI's ``main`` in this process
    (what ``python -m flydsl.cli`` runs) with ``env`` set; it must exit with ``code``."""
    from flydsl.cli import main
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        assert main(list(args)) == code, err.getvalue()
    return err.getvalue()


def make_bundle(stem, cache_dir, suffix=""):
    """Two bundles: add_kernel, and scale_kernel with S = 2 and 3, written by the CLI
    in this process (the build side; the processes that load them are the point)."""
    env = {"FLYDSL_CACHE_DIR": str(cache_dir), "FLYDSL_COMPILE_BACKEND": "cpu"}
    paths = [f"{stem}-add{suffix}", f"{stem}-scale{suffix}"]
    cli_in_process("compile", f"{CHILD}::add_kernel", "--signature", "f32[1],f32[1],f32[1],i32",
                   "--bundle", paths[0], env=env, code=0)
    err = cli_in_process("compile", f"{CHILD}::scale_kernel", "--signature", "f32[1],f32[1],i32",
                         "--configs", "[{'S': 2}, {'S': 3}]", "--bundle", paths[1], env=env,
                         code=0)
    assert "wrote 2 kernel(s)" in err
    return paths


def run_child(cache_dir, bundle_paths, *kernels):
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(cache_dir), FLYDSL_COMPILE_BACKEND="cpu",
               FLYDSL_CACHE_BUNDLE=os.pathsep.join(bundle_paths))
    p = subprocess.run([sys.executable, CHILD, *kernels], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("suffix", ["", ".tar.gz"])
def test_a_process_with_a_bundle_compiles_nothing_and_never_imports_the_compiler(
        tmp_path, build_cache, suffix):
    paths = make_bundle(tmp_path / "bundle", build_cache, suffix)
    if suffix:
        assert all(os.path.isfile(p) for p in paths)
    else:
        assert os.path.isdir(os.path.join(paths[0], "entries"))
    got = run_child(tmp_path / "empty-cache", paths, "add", "scale2", "scale3")
    assert got["ok"] and got["compiled"] == []
    assert not got["imported_mlir"] and not got["imported_llvmlite"]
    assert got["warnings"] == []
    # what the bundle lacks (scale4) is compiled as usual
    more = run_child(tmp_path / "empty-cache2", paths, "scale4")
    assert more["ok"] and len(more["compiled"]) == 1


def test_a_corrupt_file_in_a_bundle_is_skipped_and_the_kernel_compiled(tmp_path, build_cache):
    paths = make_bundle(tmp_path / "bundle", build_cache)
    entries = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(paths[0], "entries"))
               for f in fs]
    assert len(entries) == 1
    with open(entries[0], "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    got = run_child(tmp_path / "empty-cache", paths, "add")
    assert got["ok"] and len(got["compiled"]) == 1
    assert any("is corrupt" in w for w in got["warnings"])


@flydsl.kernel
def offset_kernel(a: fx.Tensor, c: fx.Tensor, n: fx.Int32, D: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + D


def test_load_bundle_in_process(tmp_path, monkeypatch):
    d = time.time_ns() % 100000 + 7
    a = np.arange(64, dtype=np.float32)
    c = np.zeros_like(a)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "build"))
    prog = flydsl.compile(offset_kernel, a, c, 64, d)
    k = prog.kernels[0]
    assert k.cache_key and k.base_key
    count = bundles.write_bundle(str(tmp_path / "b.tar"), DiskCache(), [(k.base_key, k.cache_key)])
    assert count == 1
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(bundles, "_loaded", [])
    offset_kernel.cache_clear()
    loaded = flydsl.load_bundle(str(tmp_path / "b.tar"))
    assert loaded.get(k.cache_key) is not None
    before = len(kernel_compiler.compiled_keys)
    offset_kernel[1, 64](a, c, 64, d)
    assert np.array_equal(c, a + d)
    assert len(kernel_compiler.compiled_keys) == before


def offset_bundle(tmp_path, monkeypatch, name: str) -> tuple:
    """A bundle ``name`` of offset_kernel with a fresh constant; a fresh, empty local
    cache for what follows. Returns (path, cache key, constant)."""
    d = time.time_ns() % 100000 + 7
    a = np.arange(64, dtype=np.float32)
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "build"))
    [k] = flydsl.compile(offset_kernel, a, np.zeros_like(a), 64, d).kernels
    path = str(tmp_path / name)
    bundles.write_bundle(path, DiskCache(), [(k.base_key, k.cache_key)])
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(bundles, "_loaded", [])
    offset_kernel.cache_clear()
    return path, k.cache_key, d


def launch_offset(d: int) -> list:
    """Launch offset_kernel; the warnings it gave."""
    a = np.arange(64, dtype=np.float32)
    c = np.zeros_like(a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        offset_kernel[1, 64](a, c, 64, d)
    assert np.array_equal(c, a + d)
    return [str(w.message) for w in caught]


def test_a_truncated_archive_is_skipped_with_one_warning(tmp_path, monkeypatch):
    path, _, d = offset_bundle(tmp_path, monkeypatch, "b.tar.gz")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    monkeypatch.setenv("FLYDSL_CACHE_BUNDLE", path)
    before = len(kernel_compiler.compiled_keys)
    messages = launch_offset(d)
    assert len(kernel_compiler.compiled_keys) == before + 1
    assert len(messages) == 1 and "damaged archive" in messages[0], messages
    with pytest.raises(ValueError, match="damaged archive"):
        flydsl.load_bundle(path)
    with open(path, "r+b") as f:
        f.truncate(20)                  # inside the first block
    with pytest.raises(ValueError, match="damaged archive"):
        flydsl.load_bundle(path)


def test_a_bundle_file_over_the_size_cap_is_skipped_unread(tmp_path, monkeypatch):
    path, key, d = offset_bundle(tmp_path, monkeypatch, "folder-bundle")
    monkeypatch.setattr(bundles, "MAX_FILE_BYTES", 200)
    loaded = flydsl.load_bundle(path)
    before = len(kernel_compiler.compiled_keys)
    messages = launch_offset(d)
    assert len(kernel_compiler.compiled_keys) == before + 1     # compiled instead
    assert any("over the 200-byte limit" in m for m in messages), messages
    monkeypatch.setattr(bundles, "MAX_FILE_BYTES", 1 << 20)
    assert loaded.get(key) is not None


def test_an_archive_holding_a_file_over_the_size_cap_is_skipped_unread(tmp_path):
    key = "ab" * 32
    member = tarfile.TarInfo(entry_relpath(key))
    member.size = bundles.MAX_FILE_BYTES + 1
    path = tmp_path / "huge.tar"
    with open(path, "wb") as f:
        f.write(member.tobuf())
        f.truncate(512 + -(-member.size // 512) * 512 + 1024)   # sparse: nothing written
    with pytest.raises(ValueError, match="damaged archive .*over the [0-9]+-byte limit"):
        flydsl.load_bundle(str(path))


def test_bundle_errors(tmp_path):
    with pytest.raises(ValueError, match="neither a folder nor a tar archive"):
        flydsl.load_bundle(str(tmp_path / "missing"))
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep")
    # the CLI's checks, run in this process (`main` is what `python -m flydsl.cli` runs)
    err = cli_in_process("compile", f"{CHILD}::add_kernel", "--signature",
                         "f32[1],f32[1],f32[1],i32", "--bundle", str(tmp_path / "precious"))
    assert "not a bundle folder" in err
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep"
    err = cli_in_process("compile", f"{CHILD}::scale_kernel", "--signature", "f32[1],f32[1],i32",
                         "--configs", "[{'S': 2}, {'S': 3}]")
    assert "add --bundle PATH" in err
    err = cli_in_process("compile", f"{CHILD}::scale_kernel", "--signature", "f32[1],f32[1],i32",
                         "--configs", "S=2")
    assert "list of dicts" in err
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        os.environ["FLYDSL_CACHE_BUNDLE"] = str(tmp_path / "nope")
        try:
            assert all(b.path != str(tmp_path / "nope") for b in bundles.active_bundles())
        finally:
            del os.environ["FLYDSL_CACHE_BUNDLE"]


def test_the_readme_bundle_commands_run_as_written(tmp_path):
    """README 'Shipping precompiled kernels': the bash block, run in an empty folder."""
    import re
    root = os.path.dirname(HERE)
    text = open(os.path.join(root, "README.md")).read()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "--bundle" in b)
    script = block.replace("examples/", os.path.join(root, "examples") + "/")
    venv_bin = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=venv_bin + os.pathsep + os.environ["PATH"],
               FLYDSL_CACHE_DIR=str(tmp_path / "build-cache"), FLYDSL_COMPILE_BACKEND="cpu")
    # the run (second line) gets its own empty cache: it must write nothing to it
    script = script.replace("FLYDSL_CACHE_BUNDLE=",
                            f"FLYDSL_CACHE_DIR={tmp_path / 'run-cache'} FLYDSL_CACHE_BUNDLE=")
    p = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "elements OK" in p.stdout
    assert (tmp_path / "vadd-bundle.tar.gz").is_file()
    assert DiskCache(str(tmp_path / "run-cache")).entries() == []


# -- capturing what runs, offline mode, merging --------------------------------------
@pytest.fixture
def fresh_run(tmp_path, monkeypatch):
    """An empty local cache, no loaded bundle, online, offset_kernel out of memory,
    no warning given yet."""
    from flydsl.compiler import cache, deploy
    monkeypatch.setattr(cache, "_warned", set())
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("FLYDSL_OFFLINE", raising=False)
    monkeypatch.setattr(bundles, "_loaded", [])
    monkeypatch.setattr(deploy, "_offline", None)
    offset_kernel.cache_clear()


def capture_offsets(tmp_path, monkeypatch, path, constants) -> None:
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "build"))
    offset_kernel.cache_clear()
    with flydsl.capture(str(path)):
        for d in constants:
            launch_offset(d)


def test_a_capture_holds_what_ran_and_an_offline_process_runs_it_without_compiling(
        tmp_path, monkeypatch, fresh_run):
    d = time.time_ns() % 100000 + 7
    capture_offsets(tmp_path, monkeypatch, tmp_path / "run.tar.gz", [d, d + 1])
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    offset_kernel.cache_clear()
    flydsl.load_bundle(str(tmp_path / "run.tar.gz"))
    flydsl.set_offline()
    before = len(kernel_compiler.compiled_keys)
    assert launch_offset(d) == [] and launch_offset(d + 1) == []
    assert len(kernel_compiler.compiled_keys) == before
    with pytest.raises(flydsl.NotPrecompiled) as caught:
        launch_offset(d + 2)
    message = str(caught.value)
    assert isinstance(caught.value, flydsl.FlydslError)
    assert "'offset_kernel'" in message and f"D={d + 2}" in message
    assert "the nearest the bundles have is" in message and f"D={d}" in message
    assert len(kernel_compiler.compiled_keys) == before


def test_a_kernel_the_bundle_lacks_compiles_with_one_warning_per_kernel(
        tmp_path, monkeypatch, fresh_run):
    d = time.time_ns() % 100000 + 7
    capture_offsets(tmp_path, monkeypatch, tmp_path / "b", [d])
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    offset_kernel.cache_clear()
    flydsl.load_bundle(str(tmp_path / "b"))
    first, second = launch_offset(d + 1), launch_offset(d + 2)
    assert len(first) == 1 and "the bundles lack kernel 'offset_kernel'" in first[0]
    assert f"D={d + 1}" in first[0] and second == []


def test_writing_over_a_bundle_of_other_kernels_is_refused_unless_asked_and_merge_joins(
        tmp_path, monkeypatch, fresh_run, capsys):
    from flydsl.cli import main
    d = time.time_ns() % 100000 + 7
    one, two = tmp_path / "one.tar", tmp_path / "two"
    capture_offsets(tmp_path, monkeypatch, one, [d])
    with pytest.raises(bundles.BundleOverwriteError, match="holds 1 kernel.*merge"):
        capture_offsets(tmp_path, monkeypatch, one, [d + 1])
    capture_offsets(tmp_path, monkeypatch, one, [d])             # the same kernels: fine
    capture_offsets(tmp_path, monkeypatch, two, [d + 1])
    assert main(["bundle", "merge", str(one), str(two)]) == 1    # would lose one's kernel
    assert "holds 1 kernel" in capsys.readouterr().err
    assert main(["bundle", "merge", str(tmp_path / "both.tgz"), str(one), str(two)]) == 0
    assert main(["bundle", "info", str(tmp_path / "both.tgz")]) == 0
    info = capsys.readouterr().out
    assert "2 kernel(s)" in info and info.count("offset_kernel") == 2
    assert f"D={d})" in info and f"D={d + 1})" in info and "cpu/" in info
    with flydsl.capture(str(one), overwrite=True):            # asked: replaced
        launch_offset(d + 2)
    assert main(["bundle", "info", str(one)]) == 0
    assert "1 kernel(s)" in capsys.readouterr().out
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "run"))
    offset_kernel.cache_clear()
    flydsl.load_bundle(str(tmp_path / "both.tgz"))
    flydsl.set_offline()
    assert launch_offset(d) == [] and launch_offset(d + 1) == []


def test_FLYDSL_CAPTURE_writes_the_run_at_exit_and_FLYDSL_OFFLINE_runs_it_compiler_free(
        tmp_path):
    capture = tmp_path / "fleet.tgz"
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "build"),
               FLYDSL_COMPILE_BACKEND="cpu", FLYDSL_CAPTURE=str(capture))
    p = subprocess.run([sys.executable, CHILD, "add", "scale2"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and capture.is_file(), p.stderr[-3000:]
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "run"),
               FLYDSL_COMPILE_BACKEND="cpu", FLYDSL_CACHE_BUNDLE=str(capture),
               FLYDSL_OFFLINE="1")
    p = subprocess.run([sys.executable, CHILD, "add", "scale2"], env=env,
                       capture_output=True, text=True, timeout=300)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["compiled"] == [] and got["warnings"] == []
    assert not got["imported_mlir"] and not got["imported_llvmlite"]
    p = subprocess.run([sys.executable, CHILD, "scale3"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode != 0 and "NotPrecompiled" in p.stderr and "S=3" in p.stderr
    # a second capture to the same path keeps the first and writes beside it
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "build"),
               FLYDSL_COMPILE_BACKEND="cpu", FLYDSL_CAPTURE=str(capture))
    p = subprocess.run([sys.executable, CHILD, "scale3"], env=env, capture_output=True,
                       text=True, timeout=300)
    [aside] = [f for f in os.listdir(tmp_path) if f.startswith("fleet-")]
    assert aside.endswith(".tgz") and f"went to {tmp_path / aside}" in p.stderr
    assert len(bundles.Bundle(str(capture)).entry_keys()) == 2
    assert len(bundles.Bundle(str(tmp_path / aside)).entry_keys()) == 1


def test_a_signature_can_give_real_shapes_and_unsigned_dtypes():
    from flydsl.cli import parse_signature
    a, b, n = parse_signature("f32(1000),u8(100, 64):1,i32")
    assert a.shape == (1000,) and a.dtype == np.float32
    assert b.shape == (100, 64) and b.dtype == np.uint8 and b.ctypes.data % 16
    a16, = parse_signature("u8[2]")
    assert a16.shape == (1, 16) and a16.dtype == np.uint8


# -- bundle keys: what changes the binary, and nothing else ---------------------------
KEY_CHILD = os.path.join(HERE, "portable_key_child.py")
PORTABLE_KERNELS = '''
import math
import flydsl
import flydsl.expr as fx

SCALE = 3.0


@flydsl.kernel
def simple(a: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + 1.0


def twice(x):
    return x * 2.0


@flydsl.kernel
def with_helpers(a: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = twice(a[i]) * SCALE + math.pi
'''


def kernel_keys(tmp_path, kernel_file, *changes) -> dict:
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, KEY_CHILD, str(kernel_file), *changes], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_bundle_keys_ignore_the_python_and_library_versions_but_follow_the_sources(
        tmp_path):
    import shutil
    kernels = tmp_path / "kernels.py"
    kernels.write_text(PORTABLE_KERNELS)
    keys = kernel_keys(tmp_path, kernels)
    assert kernel_keys(tmp_path, kernels, "versions") == keys  # Python 3.13, numpy 1.26, no MLIR
    edited = tmp_path / "edited" / "kernels.py"   # same name: where a kernel sits counts
    edited.parent.mkdir()
    edited.write_text(PORTABLE_KERNELS.replace("* 2.0", "* 2.5"))
    changed = kernel_keys(tmp_path, edited)
    assert changed["simple"] == keys["simple"] and changed["with_helpers"] != keys["with_helpers"]
    copy = tmp_path / "flydsl-copy"
    shutil.copytree(os.path.dirname(flydsl.__file__), copy,
                    ignore=shutil.ignore_patterns("__pycache__", "passes"))
    with open(copy / "kernel.py", "a") as f:
        f.write("\n# an edit of flydsl\n")
    moved = kernel_keys(tmp_path, kernels, f"flydsl-source={copy}")
    assert all(moved[name] != keys[name] for name in keys)


def test_a_kernel_built_by_other_tools_is_rebuilt_where_a_compiler_is_and_used_where_none_is(
        tmp_path, monkeypatch, fresh_run):
    from flydsl.compiler.backends.base import BaseBackend
    d = time.time_ns() % 100000 + 7
    launch_offset(d)                                   # built and stamped by these tools
    offset_kernel.cache_clear()
    stamp = BaseBackend.toolchain_stamp
    monkeypatch.setattr(BaseBackend, "toolchain_stamp", lambda self: stamp(self) + "-new")
    monkeypatch.setattr(BaseBackend, "can_compile", staticmethod(lambda: False))
    before = len(kernel_compiler.compiled_keys)
    launch_offset(d)                                   # no compiler here: used as built
    assert len(kernel_compiler.compiled_keys) == before
    offset_kernel.cache_clear()
    monkeypatch.setattr(BaseBackend, "can_compile", staticmethod(lambda: True))
    launch_offset(d)                                   # a compiler, other tools: rebuilt
    assert len(kernel_compiler.compiled_keys) == before + 1
    offset_kernel.cache_clear()
    launch_offset(d)                                   # ...and stamped by them
    assert len(kernel_compiler.compiled_keys) == before + 1
    monkeypatch.setattr(BaseBackend, "toolchain_stamp", stamp)
    offset_kernel.cache_clear()
    launch_offset(d)                                   # both builds are kept, side by side
    assert len(kernel_compiler.compiled_keys) == before + 1


def test_a_helper_is_keyed_by_its_source_not_by_the_bytecode_an_interpreter_made(tmp_path):
    """Each Python version compiles the same source to other bytecode; here optimize=2
    (asserts stripped) stands in for another interpreter."""
    from flydsl.compiler.content_hash import content_hash
    path = tmp_path / "helper_source.py"
    path.write_text("def epilogue(x):\n    assert x is not None\n    return x * 2\n")
    made = []
    for optimize in (0, 2):
        scope = {"__name__": "helper_source"}
        exec(compile(path.read_text(), str(path), "exec", optimize=optimize), scope)
        made.append(scope["epilogue"])
    assert made[0].__code__.co_code != made[1].__code__.co_code
    assert content_hash(made[0]) == content_hash(made[1])
    path.write_text("def epilogue(x):\n    assert x is not None\n    return x * 3\n")
    scope = {"__name__": "helper_source"}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    assert content_hash(scope["epilogue"]) != content_hash(made[0])


def test_a_capture_whose_run_fails_keeps_what_ran_and_writes_nothing_if_nothing_did(
        tmp_path, monkeypatch, fresh_run):
    d = time.time_ns() % 100000 + 7
    with pytest.raises(ZeroDivisionError):
        with flydsl.capture(str(tmp_path / "none.tar")):
            1 / 0
    assert not (tmp_path / "none.tar").exists()
    with pytest.raises(ZeroDivisionError):
        with flydsl.capture(str(tmp_path / "some.tar")):
            launch_offset(d)
            1 / 0
    assert len(bundles.Bundle(str(tmp_path / "some.tar")).entry_keys()) == 1
