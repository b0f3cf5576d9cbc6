"""FlyDSL 0.5's autotune options (issue 31): ``configs`` as a function of the call's
arguments, ``default=`` (a heuristic config run without benchmarking unless
``FLYDSL_AUTOTUNE=1`` forces a search) and ``artifact_name=`` (offline config files in
``FLYDSL_AUTOTUNE_CONFIG_DIR``, written by a forced search, read before the default)."""
import json

import numpy as np
import pytest

import autotune_kernels as ak
import flydsl
import flydsl.expr as fx
from flydsl import autotune_artifacts, launch_context
from test_autotune import FAST, SLOW, MEDIUM, arrays, quick_bench


@pytest.fixture(autouse=True)
def own_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_WORKERS", "0")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(tmp_path / "configs"))
    monkeypatch.delenv("FLYDSL_AUTOTUNE", raising=False)
    monkeypatch.delenv("FLYDSL_AUTOTUNE_PRINT", raising=False)
    return tmp_path / "configs"


def make(configs=(SLOW, FAST, MEDIUM), **options):
    """A tuned y = 2 x, and the log of what it did: ('bench', config) per benchmark run,
    ('configs', n) per call of a configs function, ('default', n) per default call."""
    log = []

    def bench(fn, **kwargs):
        log.append(("bench",))
        return quick_bench(fn, **kwargs)

    if callable(configs):
        inner = configs

        def configs(*args, **kwargs):
            log.append(("configs", args[2]))
            return inner(*args, **kwargs)
    default = options.pop("default", None)
    if default is not None:
        chosen = default

        def default(*args, **kwargs):
            log.append(("default", args[2]))
            return chosen

    @flydsl.autotune(configs=configs, key=["n"], warmup=1, rep=3, do_bench=bench,
                     default=default, **options)
    @flydsl.jit
    def double(x, y, n: fx.Int32, EXTRA: fx.Constexpr[int] = 0):
        ak.double_kernel(x, y, n, EXTRA).launch(grid=((n + 127) // 128,), block=(128,))
    return double, log


def test_configs_may_be_a_function_of_the_call():
    double, log = make(configs=lambda x, y, n: [SLOW, FAST] if n > 500 else [MEDIUM])
    x, y = arrays(1000)
    double(x, y, x.size)
    assert double.best_config == FAST and np.array_equal(y, 2 * x)
    assert log.count(("bench",)) == 2 and ("configs", 1000) in log
    x, y = arrays(100)
    double(x, y, x.size)
    assert double.best_config == MEDIUM and np.array_equal(y, 2 * x)
    double(x, y, x.size)                        # a known key: no second search
    assert log.count(("configs", 100)) == 1


def test_a_configs_function_must_return_configs():
    double, _ = make(configs=lambda x, y, n: [{"EXTRA": 0}])
    x, y = arrays()
    with pytest.raises(TypeError, match="non-empty list of flydsl.Config"):
        double(x, y, x.size)


def test_the_default_runs_without_benchmarking():
    double, log = make(default=SLOW)
    x, y = arrays()
    double(x, y, x.size)
    assert double.best_config == SLOW and np.array_equal(y, 2 * x)
    assert log == [("default", 1000)]


def test_flydsl_autotune_1_searches_despite_the_default_and_the_winner_stays(monkeypatch):
    double, log = make(default=SLOW)
    x, y = arrays()
    monkeypatch.setenv("FLYDSL_AUTOTUNE", "1")
    double(x, y, x.size)
    assert double.best_config == FAST and log.count(("bench",)) == 3
    assert not any(e[0] == "default" for e in log)
    monkeypatch.delenv("FLYDSL_AUTOTUNE")
    double(x, y, x.size)                        # the searched winner beats the default
    assert double.best_config == FAST and not any(e[0] == "default" for e in log)


def test_a_forced_search_writes_the_offline_config_and_a_new_tuner_reads_it(monkeypatch,
                                                                          own_dirs):
    double, log = make(default=SLOW, artifact_name="double")
    x, y = arrays()
    monkeypatch.setenv("FLYDSL_AUTOTUNE", "1")
    double(x, y, x.size)
    files = list(own_dirs.glob("double-*.json"))
    assert len(files) == 1
    payload = json.loads(files[0].read_text())
    assert payload["version"] == 1 and payload["config"] == {"EXTRA": 0}
    assert payload["identity"]["key"] == {"n": 1000}
    assert payload["identity"]["name"] == "double"
    assert payload["identity"]["device"]["arch"]

    monkeypatch.delenv("FLYDSL_AUTOTUNE")
    monkeypatch.setenv("FLYDSL_CACHE_DISABLE", "1")     # no store record to fall back on
    fresh, log = make(configs=lambda *a: pytest.fail("an offline hit builds no configs"),
                      default=SLOW, artifact_name="double")
    y[:] = 0
    fresh(x, y, x.size)
    assert fresh.best_config == FAST and np.array_equal(y, 2 * x)
    assert log == []                            # neither the default nor a benchmark
    x2, y2 = arrays(100)                        # another key value: no file, the default
    fresh(x2, y2, x2.size)
    assert fresh.best_config == SLOW and log == [("default", 100)]


def test_an_offline_config_the_call_cannot_take_is_ignored_with_a_warning(own_dirs, caplog):
    double, log = make(default=SLOW, artifact_name="double")
    x, y = arrays()
    backend, _ = launch_context.current().resolve([x, y])
    path, identity = double._artifact({"x": x, "y": y, "n": x.size}, backend)
    autotune_artifacts.write(path, identity, {"EXTRA": 0, "n": 5})    # sets the key
    with caplog.at_level("WARNING", logger="flydsl.autotune"):
        double(x, y, x.size)
    assert double.best_config == SLOW and "Ignoring offline config" in caplog.text
    path.write_text("{not json")
    double.cache_clear()
    double(x, y, x.size)
    assert double.best_config == SLOW


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "../up", 3])
def test_an_artifact_name_is_a_short_safe_file_name(name):
    with pytest.raises((TypeError, ValueError), match="artifact_name"):
        make(artifact_name=name)


def test_a_plain_python_function_that_launches_kernels_can_be_tuned():
    """FlyDSL's rdna3 GEMM tunes its plain dispatch function (it builds and launches
    the kernel itself) with a configs function and a default."""
    seen = []

    @flydsl.autotune(configs=lambda x, y, n: [SLOW, FAST], key=["n"], warmup=1, rep=3,
                     do_bench=quick_bench)
    def dispatch(x, y, n, EXTRA=None):
        seen.append(EXTRA)
        ak.double_kernel(x, y, n, EXTRA).launch(grid=((n + 127) // 128,), block=(128,))

    x, y = arrays()
    dispatch(x, y, x.size)
    assert dispatch.best_config == FAST and np.array_equal(y, 2 * x)
    assert set(seen) == {1000, 0} and seen[-1] == 0
    assert dispatch.__name__ == "dispatch"
    with pytest.raises(TypeError, match="Python function"):
        flydsl.autotune(configs=[FAST])(object())
