"""@flydsl.autotune: picks the fastest config per key, remembers it in memory and in the
cache store (another process reuses it), skips failing configs, restores inputs,
prunes, launches tuned kernels, and compiles candidates in a warm pool of worker
processes, where a config that crashes or hangs its compile is skipped."""
import os
import subprocess
import sys

import numpy as np
import pytest

import autotune_kernels as ak
import flydsl
import flydsl.expr as fx
from flydsl.autotune import AutotuneError, KeyPath
from flydsl.compiler import cache as disk_cache
from flydsl.compiler import kernel_compiler
from flydsl.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
SLOW, FAST, MEDIUM = (flydsl.Config({"EXTRA": n}) for n in (1000, 0, 300))


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test tunes from scratch, compiling serially unless it asks for workers."""
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "0")
    monkeypatch.delenv("FLYDSL_AUTOTUNE_PRINT", raising=False)
    return tmp_path / "cache"


def quick_bench(fn, **kwargs):
    """do_bench without cache flushes, answering the fastest call of at least 10 ms of
    them: the configs here differ tenfold in work, and the minimum is what survives a
    loaded machine (another test worker compiling on the same cores), where the median
    of 3 ms once let the slower config win."""
    kwargs.pop("quantiles", None)
    kwargs["rep"] = max(kwargs.get("rep", 10), 10)
    return do_bench(fn, flush=False, return_mode="min", **kwargs)


def make_double(configs=(SLOW, FAST, MEDIUM), key=("n",), **options):
    """A tuned y = 2 x over ak.double_kernel, and the list of its benchmark runs."""
    timed = []

    def bench(fn, **kwargs):
        timed.append(fn)
        return quick_bench(fn, **kwargs)

    @flydsl.autotune(configs=list(configs), key=list(key), warmup=1, rep=3, do_bench=bench,
                     **options)
    @flydsl.jit
    def double(x, y, n: fx.Int32, EXTRA: fx.Constexpr[int] = 0):
        """Doubles x into y."""
        ak.double_kernel(x, y, n, EXTRA).launch(grid=((n + 127) // 128,), block=(128,))
    return double, timed


def arrays(n=1000, dtype=np.float32):
    x = np.arange(n, dtype=dtype)
    return x, np.zeros_like(x)


# -- choosing and remembering --------------------------------------------------------------

def test_the_fastest_config_wins_and_the_call_runs_with_it():
    double, timed = make_double()
    x, y = arrays()
    double(x, y, x.size)
    assert double.best_config == FAST
    assert len(timed) == 3
    assert double.timings[FAST] < min(double.timings[MEDIUM], double.timings[SLOW]) / 10
    assert np.array_equal(y, 2 * x)


def test_a_known_key_reuses_the_winner_and_a_new_key_tunes_again():
    double, timed = make_double(configs=(SLOW, FAST))
    x, y = arrays()
    double(x, y, x.size)
    double(x[::-1].copy(), y, x.size)            # same n: no benchmark
    assert len(timed) == 2 and len(double.cache) == 1
    x2, y2 = arrays(500)
    double(x2, y2, x2.size)                      # new n
    assert len(timed) == 4 and len(double.cache) == 2
    x3, y3 = arrays(500, np.float64)
    double(x3, y3, x3.size)                      # same n, other tensor dtypes
    assert len(timed) == 6 and len(double.cache) == 3
    assert np.array_equal(y3, 2 * x3)


def test_a_changed_compile_option_tunes_again(monkeypatch):
    double, timed = make_double(configs=(SLOW, FAST))
    x, y = arrays()
    double(x, y, x.size)
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "2")  # other binaries: their own winner
    double(x, y, x.size)
    assert len(timed) == 4 and len(double.cache) == 2


def test_the_winner_is_reused_from_the_cache_by_a_new_tuner():
    x, y = arrays()
    first, timed = make_double()
    first(x, y, x.size)
    again, timed_again = make_double()           # same function and configs: the record
    again(x, y, x.size)
    assert timed_again == [] and again.best_config == FAST
    other, timed_other = make_double(configs=(SLOW, FAST))   # other configs: other record
    other(x, y, x.size)
    assert len(timed_other) == 2


def test_a_record_naming_another_config_is_ignored(own_cache):
    x, y = arrays()
    make_double()[0](x, y, x.size)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(own_cache / "records") for f in fs]
    key = os.path.basename(path).removesuffix(".fdr")
    store = disk_cache.DiskCache()
    record = store.get_record("autotune", key)
    record["config"]["index"] = 0                # SLOW's index, FAST's values
    store.put_record("autotune", key, record)
    again, timed = make_double()
    again(x, y, x.size)
    assert len(timed) == 3 and again.best_config == FAST


def test_a_second_process_reuses_the_winner_without_benchmarking(tmp_path):
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "shared"), FLYDSL_AUTOTUNE_PRINT="1")
    script = os.path.join(HERE, "autotune_kernels.py")
    runs = [subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                           timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert "benchmarks=3 best=Config(EXTRA=0)" in runs[0].stdout
    assert "time (ms)" in runs[0].stdout
    assert "benchmarks=0 best=Config(EXTRA=0)" in runs[1].stdout
    assert "(from the cache)" in runs[1].stdout and "time (ms)" not in runs[1].stdout


def test_with_the_cache_disabled_winners_stay_in_memory(monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")
    x, y = arrays()
    make_double(configs=(SLOW, FAST))[0](x, y, x.size)
    again, timed = make_double(configs=(SLOW, FAST))
    again(x, y, x.size)
    assert len(timed) == 2


# -- failing configs -----------------------------------------------------------------------

# The same body as autotune_kernels.pooled_kernel, but another kernel object: the pool
# test needs a kernel that no test has launched in this process (none in memory).
@flydsl.kernel
def add_kernel(x: fx.Tensor, n: fx.Int32, ADD: fx.Constexpr[int], SMEM: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if SMEM > 0:
        scratch = fx.shared_array((SMEM,), fx.Float32)
        scratch[0] = 0.0
    if i < n:
        x[i] = x[i] + ADD


def make_add(configs, **options):
    """A tuned x += ADD (with SMEM floats of shared memory) that refuses ADD > 5 in its
    host code."""
    @flydsl.autotune(configs=configs, key=["n"], warmup=1, rep=2,
                     do_bench=quick_bench, **options)
    @flydsl.jit
    def add(x, n: fx.Int32, ADD: fx.Constexpr[int] = 1, SMEM: fx.Constexpr[int] = 0):
        if ADD > 5:
            raise ValueError(f"ADD={ADD} is too large")
        add_kernel(x, n, ADD, SMEM).launch(grid=((n + 63) // 64,), block=(64,))
    return add


TOO_MUCH_SMEM = flydsl.Config({"ADD": 1, "SMEM": 1 << 20})     # 4 MiB: over the CPU's 1 MiB
TOO_LARGE = flydsl.Config({"ADD": 9})


def test_failing_configs_are_skipped():
    ok = flydsl.Config({"ADD": 1})
    add = make_add([TOO_MUCH_SMEM, ok, TOO_LARGE], restore_value=["x"])
    x = np.zeros(100, np.float32)
    add(x, x.size)
    assert add.best_config == ok
    assert add.timings[TOO_MUCH_SMEM] == add.timings[TOO_LARGE] == float("inf")
    assert np.array_equal(x, np.ones(100))


def test_when_every_config_fails_the_error_names_each():
    add = make_add([TOO_MUCH_SMEM, TOO_LARGE])
    x = np.zeros(100, np.float32)
    with pytest.raises(AutotuneError) as info:
        add(x, x.size)
    text = str(info.value)
    assert isinstance(info.value, flydsl.CompilationError)
    assert "Config(ADD=1, SMEM=1048576): LaunchError" in text and "shared memory" in text
    assert "Config(ADD=9): ValueError: ADD=9 is too large" in text
    assert isinstance(info.value.__cause__, flydsl.LaunchError)


# -- inputs the kernel writes --------------------------------------------------------------

def test_restore_value_leaves_inputs_written_once():
    configs = [flydsl.Config({"ADD": 1}), flydsl.Config({"ADD": 1, "SMEM": 16})]
    x = np.zeros(100, np.float32)
    make_add(configs, restore_value=["x"])(x, x.size)
    assert np.array_equal(x, np.ones(100))       # the tuned call's increment only
    x = np.zeros(100, np.float32)
    make_add(configs[::-1])(x, x.size)           # (other configs: not the record above)
    assert x[0] > 2                              # without it, every benchmark run adds


def test_restore_value_restores_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.zeros(100)
    make_add([flydsl.Config({"ADD": 1}), flydsl.Config({"ADD": 2})], restore_value=["x"])(
        x, x.numel())
    assert x.eq(x[0]).all() and x[0].item() in (1, 2)


@flydsl.kernel
def sum_kernel(x: fx.Tensor, out: fx.Tensor, n: fx.Int32, UNUSED: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        fx.atomic_add(out, 0, x[i])


def test_reset_to_zero_zeroes_before_every_run_and_the_real_call():
    @flydsl.autotune(configs=[flydsl.Config({"UNUSED": 0}), flydsl.Config({"UNUSED": 1})],
                     key=["n"], warmup=1, rep=2, reset_to_zero=["out"],
                     do_bench=quick_bench)
    @flydsl.jit
    def total(x, out, n: fx.Int32, UNUSED: fx.Constexpr[int] = 0):
        sum_kernel(x, out, n, UNUSED).launch(grid=((n + 63) // 64,), block=(64,))

    x = np.ones(100, np.float32)
    out = np.zeros(1, np.float32)
    total(x, out, x.size)
    assert out[0] == 100


# -- keys and configs ----------------------------------------------------------------------

def test_key_paths_read_attributes_and_indices_without_eval():
    x = np.zeros((3, 5), np.float16)
    assert KeyPath("x.shape[0]").read({"x": x}) == 3
    assert KeyPath("x.shape[-1]").read({"x": x}) == 5
    assert KeyPath(" x.dtype ").read({"x": x}) == np.float16
    for bad in ("x..dtype", "x[a]", "1x", "x.shape()", "__import__('os')", ""):
        with pytest.raises(TypeError, match="not an argument name"):
            KeyPath(bad)


def test_a_key_must_name_a_parameter():
    with pytest.raises(TypeError, match=r"key 'm' names no parameter of double\(x, y, n, "
                                        r"EXTRA\)"):
        make_double(key=("m",))
    with pytest.raises(TypeError, match="key 'EXTRA' is set by the configs"):
        make_double(key=("EXTRA",))


def test_dotted_keys_tune_per_shape_and_dtype():
    double, timed = make_double(configs=(SLOW, FAST), key=("x.shape[0]", "x.dtype"))
    x, y = arrays(256)
    double(x, y, x.size)
    double(x, y, x.size)
    assert len(timed) == 2
    assert list(double.cache)[0][0][:2] == (256, "float32")


def test_a_key_value_without_a_stable_value_is_refused():
    @flydsl.autotune(configs=[FAST], key=["tag"])
    @flydsl.jit
    def fn(x, tag, EXTRA: fx.Constexpr[int] = 0):
        pass
    with pytest.raises(TypeError, match="autotune key 'tag'.*no stable value"):
        fn(np.zeros(1), object())


def test_configs_may_set_only_parameters_of_the_function():
    with pytest.raises(TypeError, match=r"autotune of 'double': config Config\(EXTRAS=1\) "
                                        r"sets 'EXTRAS', which is not a parameter of "
                                        r"double\(x, y, n, EXTRA\)"):
        make_double(configs=[flydsl.Config({"EXTRAS": 1})])
    with pytest.raises(TypeError, match="sets 'num_warps'"):
        make_double(configs=[flydsl.Config({"EXTRA": 1}, num_warps=4)])

    @flydsl.autotune(configs=[flydsl.Config({"EXTRA": 1}, num_warps=4)], key=["n"])
    @flydsl.jit
    def takes_options(x, n, EXTRA: fx.Constexpr[int] = 0, **launch_options):
        pass
    assert takes_options.configs[0].launch_opts == {"num_warps": 4}


def test_a_call_may_not_pass_a_tuned_argument():
    double, _ = make_double()
    x, y = arrays()
    with pytest.raises(TypeError, match="'EXTRA' is set by the autotune configs"):
        double(x, y, x.size, EXTRA=5)
    with pytest.raises(TypeError, match="'EXTRA' is set by the autotune configs"):
        double(x, y, x.size, 5)
    with pytest.raises(TypeError, match=r"double\(\): missing a required argument: 'n'"):
        double(x, y)


def test_configs_compare_by_content():
    a = flydsl.Config({"BLOCK": 128, "UNROLL": 2}, num_warps=4)
    assert repr(a) == "Config(BLOCK=128, UNROLL=2, num_warps=4)"
    assert a == flydsl.Config({"UNROLL": 2, "BLOCK": 128}, num_warps=4)
    assert hash(a) == hash(flydsl.Config({"UNROLL": 2, "BLOCK": 128}, num_warps=4))
    assert a != flydsl.Config({"BLOCK": 128, "UNROLL": 2}, num_warps=8)
    assert a.all_kwargs() == {"BLOCK": 128, "UNROLL": 2, "num_warps": 4}
    with pytest.raises(TypeError, match="needs a dict"):
        flydsl.Config([("BLOCK", 128)])


def test_flydsl_config_spelling_is_the_same_config():
    # FlyDSL 0.5's Config(**kwargs): launch options by name, the rest constexpr values
    a = flydsl.Config(BLOCK=128, UNROLL=2, num_warps=4)
    assert a == flydsl.Config({"BLOCK": 128, "UNROLL": 2}, num_warps=4)
    assert a.kwargs == {"BLOCK": 128, "UNROLL": 2} and a.launch_opts == {"num_warps": 4}
    assert a.num_warps == 4 and a.compiler_opts() == {} and a.pre_hook is None
    hinted = flydsl.Config(BLOCK=128, waves_per_eu=2, maxnreg=128)
    assert hinted.compiler_opts() == {"waves_per_eu": 2, "maxnreg": 128}
    assert hinted != flydsl.Config(BLOCK=128) and hinted.all_kwargs() == {"BLOCK": 128}
    assert repr(hinted) == "Config(BLOCK=128, waves_per_eu=2, maxnreg=128)"
    assert flydsl.Config.from_dict(hinted.to_dict()) == hinted
    assert flydsl.Config(EXTRA=0) == FAST
    with pytest.raises(TypeError, match="pre_hook"):
        flydsl.Config(BLOCK=1, pre_hook=3)


def test_flydsl_configs_tune_with_pre_hooks_and_compiler_hints():
    hooked = []
    configs = [flydsl.Config(EXTRA=1000, waves_per_eu=1),
               flydsl.Config(EXTRA=0, pre_hook=lambda named: hooked.append(dict(named)))]
    double, _ = make_double(configs)
    x, y = arrays()
    double(x, y, x.size)
    assert np.array_equal(y, 2 * x) and double.best_config == configs[1]
    assert hooked and all(h["EXTRA"] == 0 and h["n"] == x.size for h in hooked)


def test_flydsl_do_bench_counts_calls_and_picks_the_median():
    from flydsl.autotune import do_bench as flydsl_do_bench
    import time
    calls = []

    def work():
        calls.append(1)
        time.sleep(0.002 if len(calls) % 2 else 0.0)

    ms = flydsl_do_bench(work, warmup=2, rep=5)
    assert len(calls) == 7 and isinstance(ms, float) and ms >= 0
    lo, hi = flydsl_do_bench(work, warmup=0, rep=4, quantiles=[0.0, 1.0])
    assert len(calls) == 11 and lo <= hi and hi >= 1.5   # one call in two sleeps 2 ms
    with pytest.raises(ValueError, match="number of calls"):
        flydsl_do_bench(work, warmup=1.5)


def test_the_tuner_looks_like_the_function():
    double, _ = make_double()
    assert double.__name__ == "double" and double.__doc__ == "Doubles x into y."
    assert isinstance(double.__wrapped__, flydsl.jit(lambda: None).__class__)
    assert double.best_config is None and double.configs == [SLOW, FAST, MEDIUM]


# -- tuned kernels, pruning, printing ------------------------------------------------------

def test_a_tuned_kernel_launches_with_a_grid_of_the_config():
    seen = []

    def grid(meta):
        seen.append(meta)
        return ((meta["n"] + meta["block"] - 1) // meta["block"],)

    tuned = flydsl.autotune(configs=[flydsl.Config({"EXTRA": 0}, block=32),
                                     flydsl.Config({"EXTRA": 0}, block=256)], key=["n"],
                            warmup=1, rep=2, do_bench=quick_bench)(ak.double_kernel)
    x, y = arrays(1000)
    tuned[grid, 1](x, y, x.size)
    assert np.array_equal(y, 2 * x)
    assert tuned.best_config.launch_opts["block"] in (32, 256)
    assert {m["block"] for m in seen} == {32, 256} and seen[0]["EXTRA"] == 0
    with pytest.raises(TypeError, match=r"as double_kernel\[grid, block\]"):
        tuned(x, y, x.size)
    with pytest.raises(TypeError, match="launch option 'num_warps'"):
        flydsl.autotune(configs=[flydsl.Config({"EXTRA": 0}, num_warps=4)],
                        key=["n"])(ak.double_kernel)


def test_prune_configs_by_drops_early_then_keeps_the_predicted_top_k():
    pruned_with = []

    def early(configs, named_args):
        pruned_with.append(named_args["n"])
        return [c for c in configs if c != MEDIUM]

    double, timed = make_double(configs=(SLOW, FAST, MEDIUM), prune_configs_by={
        "early_config_prune": early, "top_k": 1,
        "perf_model": lambda x, y, n, EXTRA: EXTRA * n})
    x, y = arrays()
    double(x, y, x.size)
    assert pruned_with == [1000]
    assert len(timed) == 1 and double.best_config == FAST
    assert list(double.timings) == [FAST]
    with pytest.raises(TypeError, match="prune_configs_by takes"):
        make_double(prune_configs_by={"topk": 1})


def test_autotune_print_shows_the_table(monkeypatch, capsys):
    monkeypatch.setenv("FLYDSL_AUTOTUNE_PRINT", "1")
    add = make_add([flydsl.Config({"ADD": 1}), TOO_LARGE])
    x = np.zeros(100, np.float32)
    add(x, x.size)
    out = capsys.readouterr().out
    assert "flydsl autotune: add (n=100, dtypes=Float32) on cpu/" in out
    assert "* Config(ADD=1)" in out
    assert "Config(ADD=9)  failed: ValueError: ADD=9 is too large" in out


# -- parallel compiles ---------------------------------------------------------------------

def test_candidates_compile_in_worker_processes_and_load_here(monkeypatch):
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "2")
    compiled_before = len(kernel_compiler.compiled_keys)
    hits_before = disk_cache.stats["disk_hits"]
    x = np.zeros(200, np.float32)
    ak.pooled_add(x, x.size)
    assert len(kernel_compiler.compiled_keys) == compiled_before     # nothing compiled here
    assert disk_cache.stats["disk_hits"] - hits_before == 3           # the workers' kernels
    assert ak.pooled_add.best_config.kwargs["SMEM"] in (0, 16)        # 4 MiB does not launch
    assert ak.pooled_add.timings[flydsl.Config({"ADD": 1, "SMEM": 1 << 20})] == float("inf")
    assert np.array_equal(x, np.ones(200))                            # restore_value


# -- configs that crash, hang or give wrong results ----------------------------------------

OK, CRASHES, HANGS, WRONG = (flydsl.Config({"MODE": m}) for m in (0, ak.CRASH, ak.HANG,
                                                                   ak.WRONG))


def tune_fragile(configs, **options):
    """A tuner over ak.fragile (importable: its candidates compile in workers)."""
    return flydsl.autotune(configs=configs, key=["n"], warmup=1, rep=2, restore_value=["x"],
                           do_bench=quick_bench, **options)(ak.fragile)


def test_a_config_that_crashes_its_compile_worker_is_skipped_with_the_reason(monkeypatch,
                                                                              capsys):
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "2")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_PRINT", "1")
    tuned = tune_fragile([CRASHES, OK])
    x = np.zeros(100, np.float32)
    tuned(x, x.size)       # this process compiled only OK (CRASHES here would add 1 too)
    assert tuned.best_config == OK and tuned.timings[CRASHES] == float("inf")
    assert "Config(MODE=1)  failed: its compile worker crashed (SIGSEGV)" in capsys.readouterr().out
    assert np.array_equal(x, np.ones(100))
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "2")      # other binaries: compiled in workers again
    tuned(x, x.size)
    assert tuned.best_config == OK and tuned.timings[CRASHES] == float("inf")
    with pytest.raises(AutotuneError, match=r"Config\(MODE=1\): its compile worker crashed"):
        tune_fragile([CRASHES])(x, x.size)


def test_a_config_whose_compile_hangs_is_stopped_after_the_timeout(monkeypatch):
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "1")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_TIMEOUT", "2")
    x = np.zeros(100, np.float32)
    with pytest.raises(AutotuneError, match=r"Config\(MODE=2\): compiling took over 2 s "
                                            r"\(FLYDSL_AUTOTUNE_TIMEOUT\); its worker was stopped"):
        tune_fragile([HANGS])(x, x.size)
    monkeypatch.setenv("FLYDSL_AUTOTUNE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="FLYDSL_AUTOTUNE_TIMEOUT must be a number"):
        tune_fragile([HANGS])(x, x.size)


def test_check_rejects_a_config_with_wrong_results():
    checked = []

    def check(x, n):
        checked.append(n)
        return bool((x == 1).all())      # x += 1 from zeros (restore_value: each run)

    tuned = tune_fragile([WRONG, OK], check=check)
    x = np.zeros(100, np.float32)
    tuned(x, x.size)
    assert tuned.best_config == OK and tuned.timings[WRONG] == float("inf")
    assert checked == [100, 100] and np.array_equal(x, np.ones(100))

    def strict(x, n):
        assert (x == 1).all(), f"x[0] is {x[0]}"
    with pytest.raises(AutotuneError, match=r"Config\(MODE=3\): ConfigRejected: .*wrong "
                                            r"results: check\(\) failed: x\[0\] is 2.0"):
        tune_fragile([WRONG], check=strict)(np.zeros(100, np.float32), 100)
    with pytest.raises(TypeError, match="check= takes a function"):
        tune_fragile([OK], check=True)


def test_the_compile_workers_stay_warm_and_import_the_module_once(monkeypatch, tmp_path):
    """Each tuning's candidates compile in the same worker processes: a worker runs the
    tuned function's module top level once, not once per tuning."""
    imports = tmp_path / "imports"
    monkeypatch.setenv("AUTOTUNE_KERNELS_IMPORT_LOG", str(imports))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "2")
    tuned = tune_fragile([OK, flydsl.Config({"MODE": 4})])
    x = np.zeros(100, np.float32)
    tuned(x, x.size)
    first = imports.read_text().split() if imports.exists() else []
    tuned(x[:50], 50)      # another key: tuned again, in the same workers
    again = imports.read_text().split() if imports.exists() else []
    assert again == first and len(set(first)) == len(first) <= 2


def test_ctrl_c_while_configs_compile_stops_the_worker_that_had_one(monkeypatch):
    import multiprocessing
    import multiprocessing.connection

    wait, pressed = multiprocessing.connection.wait, []

    def ctrl_c_once(*args, **kwargs):      # as the pool first waits for its workers
        if not pressed:
            pressed.append(True)
            raise KeyboardInterrupt
        return wait(*args, **kwargs)
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "1")
    monkeypatch.setattr(multiprocessing.connection, "wait", ctrl_c_once)
    idle = len(multiprocessing.active_children())
    x = np.zeros(100, np.float32)
    with pytest.raises(KeyboardInterrupt):
        tune_fragile([HANGS])(x, x.size)
    assert len(multiprocessing.active_children()) == max(idle - 1, 0)
