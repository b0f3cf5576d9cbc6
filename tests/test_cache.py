"""The compile cache: what the key covers, disk hits across processes, crash and
corruption safety, degraded modes, eviction, and the CLI. (What the trace reads,
edited between processes, is in test_cache_key.py.)"""
import contextlib
import importlib.util
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import flydsl
from flydsl.compiler import cache as disk_cache
from flydsl.compiler import fingerprint
from flydsl.compiler.backends import get_backend
from flydsl.compiler.frontend.params import ParamSpec
from flydsl.compiler.options import CompileOptions
import flydsl.expr as fx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL_TEMPLATE = '''
import flydsl
import flydsl.expr as fx

SCALE = {scale}


def helper(v):
    return v * {helper_factor}


@flydsl.kernel
def scale(x: fx.Tensor, y: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        y[i] = helper(x[i]) * SCALE{extra}
'''


def load_kernel(tmp_path, name="kmod", scale=2.0, helper_factor=3, extra=""):
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL_TEMPLATE.format(scale=scale, helper_factor=helper_factor,
                                           extra=extra))
    spec = importlib.util.spec_from_file_location(f"{name}_{abs(hash(path.read_text()))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scale


F32_VECTOR = ParamSpec("x", "tensor", dtype=fx.Float32, rank=1, inner_contiguous=True)
VEC = np.zeros(4, np.float32)


def base_of(kern, *, arch=None, backend="cpu", options=None, specs=(F32_VECTOR,)):
    be = get_backend(backend, arch=arch)
    return fingerprint.base_key(kern.fn, specs, be, options or CompileOptions())


def key_of(kern, *args):
    """The full cache key the kernel is stored under (compiled, not launched)."""
    [compiled] = flydsl.compile(kern, *(args or (VEC, VEC, 4))).kernels
    assert compiled.cache_key
    return compiled.cache_key


def test_each_input_of_the_base_key_changes_it_and_nothing_else_does(tmp_path, monkeypatch):
    base = base_of(load_kernel(tmp_path, "a"))
    assert base_of(load_kernel(tmp_path, "a")) == base                    # nothing changed
    assert base_of(load_kernel(tmp_path, "a", extra=" + 0.0")) != base     # kernel source
    k = load_kernel(tmp_path, "f")
    assert base_of(k, specs=(ParamSpec("x", "tensor", dtype=fx.Float32, rank=2),)) != base
    assert base_of(k, backend="cuda", arch="sm_80") != base_of(k, backend="cuda", arch="sm_90")
    assert base_of(k, options=CompileOptions(opt_level=1)) != base         # codegen option
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "2")
    assert base_of(k, options=CompileOptions.from_env()) != base          # ... from the env
    monkeypatch.setattr(fingerprint, "flydsl_sources_hash", lambda: "patched")
    assert base_of(k) != base                                              # compiler sources


def test_what_the_trace_reads_is_in_the_full_key(tmp_path):
    base = key_of(load_kernel(tmp_path, "t"))
    assert key_of(load_kernel(tmp_path, "t")) == base                      # nothing changed
    assert key_of(load_kernel(tmp_path, "t", helper_factor=4)) != base     # helper source
    assert key_of(load_kernel(tmp_path, "t", scale=2.5)) != base           # global constant


def test_flydsl_version_is_in_the_key(tmp_path, monkeypatch):
    k = load_kernel(tmp_path, "v")
    before = base_of(k)
    monkeypatch.setattr(flydsl.version, "__version__", "999.0")
    assert base_of(k) != before


def test_closure_constants_are_in_the_key(tmp_path):
    def make(factor):
        @flydsl.kernel
        def closure_kernel(x: fx.Tensor):
            x[0] = x[0] * factor
        return closure_kernel

    assert key_of(make(2.0), VEC) != key_of(make(3.0), VEC)
    assert key_of(make(2.0), VEC) == key_of(make(2.0), VEC)


def write_module(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_module_attributes_defaults_and_classes_are_in_the_key(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_module(tmp_path, "fp_cfg", "VAL = 2.0\n")
    kern_src = """
        import flydsl, flydsl.expr as fx
        import fp_cfg

        class Cfg:
            SCALE = {scale}

        def helper(v, s={default}):
            return v * s

        @flydsl.kernel
        def k(x: fx.Tensor):
            x[0] = helper(x[0]) * fp_cfg.VAL * Cfg.SCALE
    """

    def key(scale=2.0, default=2.0):   # the same module, edited and loaded afresh
        path = write_module(tmp_path, "fp_kern", kern_src.format(scale=scale, default=default))
        spec = importlib.util.spec_from_file_location("fp_kern", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return key_of(module.k, VEC)

    base = key()
    assert key() == base
    assert key(scale=3.0) != base                            # class attribute
    assert key(default=3.0) != base                          # helper default argument
    import fp_cfg
    monkeypatch.setattr(fp_cfg, "VAL", 3.0)                  # a user module's attribute
    assert key() != base


def test_function_constexprs_have_a_stable_key():
    def make():
        def scale(v):
            return v * 2
        return scale
    spec_a = ParamSpec("f", "constexpr", value=make())
    spec_b = ParamSpec("f", "constexpr", value=make())
    assert fingerprint.specialization_text([spec_a]) == fingerprint.specialization_text([spec_b])
    assert "0x" not in fingerprint.specialization_text([spec_a])


def test_the_key_hashes_the_source_that_was_traced(tmp_path):
    k = load_kernel(tmp_path, "traced")
    before = base_of(k)
    flydsl.compile(k, np.zeros(4, np.float32), np.zeros(4, np.float32), 4)  # parses the source
    (tmp_path / "traced.py").write_text("# edited after tracing\n" + (tmp_path / "traced.py")
                                        .read_text().replace("SCALE{extra}", "SCALE"))
    assert base_of(k) == before      # what this process compiles is what it stores


WORKER = textwrap.dedent('''
    import json, sys
    import numpy as np
    sys.path.insert(0, {examples!r})
    import vector_add
    from flydsl.compiler import cache
    n = 1000
    a = np.arange(n, dtype=np.float32); b = np.ones(n, np.float32); c = np.zeros(n, np.float32)
    vector_add.vadd(a, b, c, n)
    assert np.array_equal(c, a + b)
    print(json.dumps({{"stats": cache.stats,
                       "mlir_imported": any(m == "mlir" or m.startswith("mlir.")
                                            for m in sys.modules)}}))
''').format(examples=os.path.join(ROOT, "examples"))


def run_worker(code, cache_dir, extra_env=None):
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(cache_dir), FLYDSL_COMPILE_BACKEND="cpu")
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.fixture(scope="module")
def cold_cache(tmp_path_factory):
    """One cold worker run (under umask 0o002) into an empty cache folder: (the folder,
    the worker's result). Tests that need a cache holding vadd copy the folder
    (:func:`cache_copy`) rather than compiling it again in a process of their own."""
    folder = tmp_path_factory.mktemp("cold") / "cache"
    result, _ = run_worker("import os; os.umask(0o002)\n" + WORKER, folder)
    return folder, result


def cache_copy(cold_cache, dest):
    """A copy of the cold worker's cache folder at ``dest`` (modes kept: it is private)."""
    shutil.copytree(cold_cache[0], dest, dirs_exist_ok=True)
    return dest


def test_warm_process_hits_disk_and_never_imports_mlir(cold_cache, tmp_path):
    cold = cold_cache[1]
    assert cold["stats"]["compiles"] == 1 and cold["mlir_imported"]
    warm, _ = run_worker(WORKER, cache_copy(cold_cache, tmp_path))
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["disk_hits"] == 1
    assert not warm["mlir_imported"]


def test_corrupt_entry_is_detected_removed_and_rebuilt(cold_cache, tmp_path):
    cache_copy(cold_cache, tmp_path)
    [(path, size, _)] = disk_cache.DiskCache(str(tmp_path)).entries()
    with open(path, "r+b") as f:          # a crash mid-write would leave a short file
        f.truncate(size // 2)
    result, stderr = run_worker(WORKER, tmp_path)
    assert result["stats"]["corrupt"] == 1 and result["stats"]["compiles"] == 1
    assert "corrupt" in stderr
    again, _ = run_worker(WORKER, tmp_path)
    assert again["stats"]["compiles"] == 0


def test_flipped_byte_is_detected(tmp_path):
    store = disk_cache.DiskCache(str(tmp_path))
    entry = disk_cache.CacheEntry({"a": 1}, {"bin": b"\x00" * 100})
    store.put("ab" * 32, entry)
    [(path, _, _)] = store.entries()
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert store.get("ab" * 32) is None
    assert not os.path.exists(path)


def test_unusable_cache_dir_degrades_to_memory_with_one_warning(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    code = WORKER.replace("vector_add.vadd(a, b, c, n)",
                          "vector_add.vadd(a, b, c, n); vector_add.vadd(a, b, c, n)")
    result, stderr = run_worker(code, blocker / "cache")
    assert stderr.count("compiled kernels stay in memory") == 1
    assert result["stats"]["compiles"] == 1


def test_cache_disable(tmp_path):
    result, _ = run_worker(WORKER, tmp_path, {"FLYDSL_CACHE_DISABLE": "1"})
    assert result["stats"]["compiles"] == 1
    assert disk_cache.DiskCache(str(tmp_path)).entries() == []


def test_lru_eviction_keeps_the_cache_under_its_cap(tmp_path):
    store = disk_cache.DiskCache(str(tmp_path))
    for i in range(6):
        store.put(f"{i:02d}" * 32, disk_cache.CacheEntry({}, {"b": os.urandom(2000)}))
        os.utime(store._entry_path(f"{i:02d}" * 32), (1000 + i, 1000 + i))
    store.get("00" * 32)                                  # a hit makes it recent
    assert store.prune(3 * 2200) == 3
    left = {os.path.basename(p)[:4] for p, _, _ in store.entries()}
    assert left == {"0000", "0404", "0505"}


STRESS = textwrap.dedent('''
    import json, sys
    import numpy as np
    import flydsl, flydsl.expr as fx
    from flydsl.compiler import cache, kernel_compiler

    @flydsl.kernel
    def add_k(x: fx.Tensor, y: fx.Tensor, K: fx.Constexpr[int]):
        i = fx.thread_idx.x
        y[i] = x[i] + K

    x = np.arange(32, dtype=np.float32)
    ok = True
    for k in range({kernels}):
        y = np.zeros(32, np.float32)
        add_k[1, 32](x, y, k)
        ok = ok and bool(np.array_equal(y, x + k))
    print(json.dumps({{"ok": ok, "compiled": kernel_compiler.compiled_keys,
                       "corrupt": cache.stats["corrupt"]}}))
''')


@pytest.mark.slow
def test_stress_4_processes_12_kernels_one_empty_cache(tmp_path):
    """Processes start together on one empty cache: each kernel is compiled by one of
    them, the others wait for it and load it. (Four processes already outnumber a CI
    machine's two cores: they race as eight did, for half the interpreter start-ups.)"""
    processes, kernels = 4, 12
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path), FLYDSL_COMPILE_BACKEND="cpu",
               FLYDSL_CPU_THREADS="1")
    script = tmp_path / "stress_worker.py"     # kernels need a source file
    script.write_text(STRESS.format(kernels=kernels))
    cache_dir = tmp_path / "cache"
    env["FLYDSL_CACHE_DIR"] = str(cache_dir)
    procs = [subprocess.Popen([sys.executable, str(script)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    compiled = [k for r in results for k in r["compiled"]]
    assert len(compiled) == kernels and len(set(compiled)) == kernels  # each key compiled once
    assert all(r["corrupt"] == 0 for r in results)
    assert len(disk_cache.DiskCache(str(cache_dir)).entries()) == kernels


def cache_cli(monkeypatch, folder, *args) -> str:
    """What `flydsl cache ARGS` printed for the cache folder ``folder``, run by the
    CLI's ``main`` in this process (what ``python -m flydsl.cli`` runs)."""
    from flydsl.cli import main
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(folder))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["cache", *args]) == 0
    return out.getvalue()


def test_cli_cache_commands(cold_cache, tmp_path, monkeypatch):
    cache_copy(cold_cache, tmp_path)
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path))
    info = subprocess.run([sys.executable, "-m", "flydsl.cli", "cache", "info"],
                          capture_output=True, text=True, env=env)     # the command itself
    assert "entries:   1" in info.stdout and str(tmp_path) in info.stdout
    assert "vadd_kernel cpu/" in cache_cli(monkeypatch, tmp_path, "list")
    assert "evicted 1 entries" in cache_cli(monkeypatch, tmp_path, "prune", "--max-bytes", "0")
    cache_copy(cold_cache, tmp_path)
    assert "removed 1 entries" in cache_cli(monkeypatch, tmp_path, "clear")
    assert disk_cache.DiskCache(str(tmp_path)).entries() == []


# -- locks, leftovers, bad files, permissions ------------------------------------------

LOCK_HOLDER = textwrap.dedent('''
    import os, signal, sys
    from flydsl.compiler.cache import DiskCache
    with DiskCache(sys.argv[1]).lock(sys.argv[2]):
        print("locked", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)     # like Ctrl-Z or a debugger
''')


def hold_lock_stopped(tmp_path, key):
    script = tmp_path / "lock_holder.py"
    script.write_text(LOCK_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), key],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_stopped_lock_holder_is_named_and_worked_around(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_LOCK_TIMEOUT", "600")   # stopped: given up sooner
    proc = hold_lock_stopped(tmp_path, "k" * 64)
    try:
        store = disk_cache.DiskCache(str(tmp_path))
        start = time.monotonic()
        with pytest.warns(RuntimeWarning, match=rf"process {proc.pid} \(stopped\)"):
            with store.lock("k" * 64, "kernel 'x'") as held:
                assert held is False
        assert time.monotonic() - start < 30
    finally:
        proc.kill()
        proc.wait()


def test_a_kernel_compiles_while_a_stopped_process_holds_its_lock(tmp_path, monkeypatch):
    """End to end: the base key of a kernel is locked by a stopped process; a launch
    still finishes, correct, and the next process finds it on disk."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path))
    k = load_kernel(tmp_path, "locked")
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    specs, _ = k.specialize(k.bind((x, y, 4), {}))
    base = base_of(k, specs=specs)
    proc = hold_lock_stopped(tmp_path, base)
    try:
        with pytest.warns(RuntimeWarning, match=str(proc.pid)):
            k[1, 4](x, y, 4)
        assert np.array_equal(y, x * 3 * 2.0)
    finally:
        proc.kill()
        proc.wait()
    assert len(disk_cache.DiskCache(str(tmp_path)).entries()) == 1


def test_compiles_leave_no_lock_or_temp_files(cold_cache):
    folder = cold_cache[0]                    # as the compiling process left it
    assert os.listdir(folder / "locks") == []
    leftovers = [n for _, _, files in os.walk(folder) for n in files if n.startswith(".tmp")]
    assert leftovers == []


def test_temp_files_of_dead_writers_are_swept(tmp_path):
    folder = tmp_path / "entries" / "ab"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = folder / f".tmp-{dead}-xyz.part"            # a kill -9 mid-write
    live = folder / f".tmp-{os.getpid()}-abc.part"      # a write in progress
    stale.write_bytes(b"x" * 100)
    live.write_bytes(b"x")
    assert disk_cache.DiskCache(str(tmp_path)).remove_stale_temp_files() == 1
    assert not stale.exists() and live.exists()


def test_cache_clear_leaves_nothing_that_info_does_not_count(cold_cache, tmp_path, monkeypatch):
    cache_copy(cold_cache, tmp_path)
    assert "entries:   1" in cache_cli(monkeypatch, tmp_path, "info")
    assert "removed 1 entries; 0 bytes left" in cache_cli(monkeypatch, tmp_path, "clear")
    info = cache_cli(monkeypatch, tmp_path, "info")
    assert "entries:   0" in info and "bytes:     0 " in info
    assert [n for _, _, files in os.walk(tmp_path) for n in files] == []


def test_a_well_formed_entry_with_bad_contents_is_removed_and_rebuilt(cold_cache, tmp_path):
    cache_copy(cold_cache, tmp_path)
    store = disk_cache.DiskCache(str(tmp_path))
    [(path, _, _)] = store.entries()
    key = os.path.basename(path)[:-len(disk_cache.SUFFIX)]
    entry = disk_cache.CacheEntry.decode(open(path, "rb").read(), key)
    entry.meta["stages"] = 7                                   # valid checksum, bad meta
    with open(path, "wb") as f:
        f.write(entry.encode(key))
    result, stderr = run_worker(WORKER, tmp_path)
    assert result["stats"]["compiles"] == 1 and "unusable contents" in stderr
    again, stderr = run_worker(WORKER, tmp_path)
    assert again["stats"]["compiles"] == 0 and "unusable" not in stderr


def test_an_entry_copied_under_another_key_is_rejected(tmp_path):
    store = disk_cache.DiskCache(str(tmp_path))
    store.put("aa" * 32, disk_cache.CacheEntry({"a": 1}, {"bin": b"evil"}))
    os.makedirs(os.path.dirname(store._entry_path("bb" * 32)), exist_ok=True)
    os.replace(store._entry_path("aa" * 32), store._entry_path("bb" * 32))
    with pytest.warns(RuntimeWarning, match="another key"):
        assert store.get("bb" * 32) is None
    assert not os.path.exists(store._entry_path("bb" * 32))


def test_a_failed_write_does_not_stop_reads(tmp_path, monkeypatch):
    store = disk_cache.DiskCache(str(tmp_path))
    store.put("cc" * 32, disk_cache.CacheEntry({"a": 1}, {"bin": b"ok"}))
    import tempfile as tf

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tf, "mkstemp", full_disk)
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        store.put("dd" * 32, disk_cache.CacheEntry({}, {"bin": b"lost"}))
    assert store.get("cc" * 32).blobs["bin"] == b"ok"          # still read


def test_cache_files_are_private_whatever_the_umask(cold_cache):
    for dirpath, dirnames, files in os.walk(cold_cache[0]):     # written under umask 0o002
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, name)).st_mode) == 0o600


@pytest.mark.parametrize("problem", ["group-writable", "other-owner"])
def test_an_untrusted_cache_folder_is_not_used(cold_cache, tmp_path, problem):
    folder = cache_copy(cold_cache, tmp_path / "cache")         # an entry is there
    if problem == "group-writable":
        os.chmod(folder, 0o775)
        reason = "writable by group or others"
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the folder to another user")
        os.chown(folder, 65534, 65534)
        reason = "owned by uid 65534"
    result, stderr = run_worker(WORKER, folder)
    assert reason in stderr and "stay in memory" in stderr
    assert result["stats"]["compiles"] == 1 and result["stats"]["disk_hits"] == 0


def test_a_symlink_planted_as_a_lock_file_leaves_its_target_alone(tmp_path):
    store = disk_cache.DiskCache(str(tmp_path / "cache"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    locks = tmp_path / "cache" / "locks"
    locks.mkdir(parents=True, mode=0o700)
    os.chmod(tmp_path / "cache", 0o700)
    os.symlink(victim, locks / ("k" * 64 + ".lock"))
    with pytest.warns(RuntimeWarning, match="cannot create lock files"):
        with store.lock("k" * 64, "kernel 'x'") as held:
            assert held is False
    assert victim.read_text() == "precious"
