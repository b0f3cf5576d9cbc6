"""The compile-cache key follows what a kernel's trace read, across processes.

A project (tests/cache_key_project) has one kernel per way of reading a value:
closures and constexpr objects, module attributes computed at import, helpers
imported from another file, static/class methods, lru_cache and partial helpers,
attributes of global objects, deeply nested constants. A first process fills the
cache; after an edit a fresh process must compute the new result (never run the
old binary), and an unchanged one must load every kernel from disk.
"""
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import uuid
import warnings

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

PROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache_key_project")


def run_project(folder, cache, **env):
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    full = dict(os.environ, FLYDSL_CACHE_DIR=str(cache), FLYDSL_COMPILE_BACKEND="cpu",
                PYTHONPATH=path, **env)
    out = subprocess.run([sys.executable, "main.py"], cwd=folder, capture_output=True,
                         text=True, env=full, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def expected(s=2.0, scale=2.0, twice=2.0, plus=1.0, k=1.0, tripled=3.0, partial=2.0,
             nested=2.0, method=2.0, env=2.0):
    return {"closure_a": s, "closure_b": s + 1, "constexpr_a": s, "constexpr_b": s + 1,
            "hashed": s, "unhashable": s, "from_env_at_import": scale,
            "from_other_module": twice, "from_staticmethod": 1 + plus,
            "from_classmethod": 1 + k, "from_lru_cache": tripled, "from_partial": partial,
            "from_global_object": s, "from_deep_constant": nested,
            "from_instance_method": method, "from_environment": env}


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(PROJECT, folder)
    return folder


def values(results):
    return {name: value for name, (value, _) in results.items()}


def test_a_fresh_process_never_runs_a_binary_compiled_for_other_values(project, tmp_path):
    cache = tmp_path / "cache"
    first, _ = run_project(project, cache)
    assert values(first) == expected()
    again, _ = run_project(project, cache)
    assert values(again) == expected()          # closure/constexpr objects kept apart
    memory_only = {"unhashable"}
    assert {n for n, (_, disk) in again.items() if not disk} == memory_only

    edit(project / "other.py", "v * 2.0", "v * 5.0")
    edit(project / "kernels.py", "return v + 1.0", "return v + 4.0")
    edit(project / "kernels.py", "K = 1.0", "K = 6.0")
    edit(project / "cached_helpers.py", "v * 3.0", "v * 7.0")
    edit(project / "cached_helpers.py", "s=2.0", "s=8.0")
    edit(project / "kernels.py", "((2.0,),)", "((9.0,),)")
    edit(project / "kernels.py", "self.v * 2.0", "self.v * 3.0")
    edit(project / "kernels.py", "v * 1.0", "v * 2.0")
    edit(project / "kernels.py", "v + 0.0", "v + 1.0")
    edited, _ = run_project(project, cache, CK_S="5.0", CK_SCALE="4.0", CK_ENV="3.0")
    assert values(edited) == expected(s=5.0, scale=4.0, twice=5.0, plus=4.0, k=6.0,
                                      tripled=7.0, partial=8.0, nested=9.0, method=7.0,
                                      env=3.0)
    assert not any(disk for _, disk in edited.values())   # every value changed
    unchanged, _ = run_project(project, cache, CK_S="5.0", CK_SCALE="4.0", CK_ENV="3.0")
    assert {n for n, (_, disk) in unchanged.items() if not disk} == memory_only


def test_a_value_without_content_hash_keeps_the_kernel_in_memory_with_one_warning(
        project, tmp_path):
    _, stderr = run_project(project, tmp_path / "cache")
    lines = [line for line in stderr.splitlines() if "cached in memory only" in line]
    assert len(lines) == 1, stderr
    assert "from_unhashable" in lines[0] and "`cfg`" in lines[0]
    assert "__flydsl_hash__" in lines[0] and "Constexpr" in lines[0]


INSTALLED = '''
__version__ = "{version}"


def helper(v):
    return v * {factor}
'''


def test_an_upgraded_installed_package_is_seen(tmp_path):
    """A helper from site-packages, upgraded between two processes."""
    name = f"flydsl_ck_pkg_{uuid.uuid4().hex[:8]}"
    site = sysconfig.get_paths()["purelib"]
    pkg = os.path.join(site, name)
    os.makedirs(pkg)
    script = tmp_path / "use_pkg.py"
    script.write_text(textwrap.dedent(f'''
        import numpy as np, flydsl, flydsl.expr as fx
        import {name}

        @flydsl.kernel
        def k(x: fx.Tensor):
            x[0] = {name}.helper(x[0])

        x = np.ones(1, np.float32)
        k[1, 1](x)
        print(float(x[0]))
    '''))
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    try:
        results = []
        for version, factor in (("1.0", 2.0), ("1.1", 3.0)):
            with open(os.path.join(pkg, "__init__.py"), "w") as f:
                f.write(INSTALLED.format(version=version, factor=factor))
            shutil.rmtree(os.path.join(pkg, "__pycache__"), ignore_errors=True)
            out = subprocess.run([sys.executable, str(script)], capture_output=True,
                                 text=True, env=env, timeout=300)
            assert out.returncode == 0, out.stderr
            results.append(float(out.stdout.strip()))
        assert results == [2.0, 3.0]
    finally:
        shutil.rmtree(pkg, ignore_errors=True)


def test_cache_clear_recompiles_for_changed_globals(tmp_path):
    """Within a process a kernel keeps the specialization it compiled; after
    cache_clear() the disk lookup sees today's values, not the stale entry."""
    path = tmp_path / "cc_kernel.py"
    path.write_text(textwrap.dedent('''
        import flydsl, flydsl.expr as fx

        class Settings:
            factor = 2.0

        SETTINGS = Settings()

        @flydsl.kernel
        def k(x: fx.Tensor):
            x[0] = x[0] * SETTINGS.factor
    '''))
    spec = importlib.util.spec_from_file_location("cc_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.ones(1, np.float32)
    module.k[1, 1](x)
    assert x[0] == 2.0
    module.SETTINGS.factor = 5.0
    module.k.cache_clear()
    x[0] = 1.0
    module.k[1, 1](x)
    assert x[0] == 5.0


def test_objects_read_only_through_attributes_need_no_content_hash(tmp_path):
    class Opaque:            # no __eq__, no __flydsl_hash__: only its attribute is read
        def __init__(self, s):
            self.s = s

    def make(cfg):
        @flydsl.kernel
        def attr_only(x: fx.Tensor):
            x[0] = x[0] * cfg.s
        return attr_only

    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no memory-only warning
        keys = {flydsl.compile(make(Opaque(s)), np.ones(1, np.float32)).kernels[0].cache_key
                for s in (2.0, 3.0, 2.0)}
    assert len(keys) == 2 and "" not in keys


class PrintsAlike:
    """Two of these print the same whatever they hold."""

    def __init__(self, s):
        self.s = s

    def __repr__(self):
        return "PrintsAlike"


@flydsl.kernel
def reads_constexpr(x: fx.Tensor, cfg: fx.Constexpr):
    x[0] = cfg.s


def test_constexpr_objects_that_print_alike_get_their_own_binaries_in_process():
    x = np.zeros(1, np.float32)
    for s in (2.0, 3.0, 2.0):
        reads_constexpr[1, 1](x, PrintsAlike(s))
        assert x[0] == s


@flydsl.kernel
def fill_from_file(x: fx.Tensor, path: fx.Constexpr[str]):
    x[fx.thread_idx.x] = float(pathlib.Path(path).read_text())


def test_a_data_file_read_while_tracing_is_part_of_the_key(tmp_path):
    """The disk lookup (what a fresh process does) compiles again when the file
    changed, and finds the entry while it is unchanged."""
    data = tmp_path / "scale.txt"
    data.write_text("2.0")
    x = np.zeros(4, np.float32)
    fill_from_file[1, 4](x, str(data))
    assert (x == 2.0).all()
    fill_from_file.cache_clear()
    fill_from_file[1, 4](x, str(data))
    assert (x == 2.0).all() and flydsl.compile(fill_from_file, x, str(data)).kernels[0].from_cache
    data.write_text("3.0")
    fill_from_file.cache_clear()
    fill_from_file[1, 4](x, str(data))
    assert (x == 3.0).all()


def test_annotations_hash_by_what_they_name():
    """A class whose methods name typing constructs (upstream's attention context reads
    `Optional`) is hashable: an annotation is described by its repr."""
    import typing
    from flydsl.compiler.content_hash import content_hash
    hashes = {content_hash(a) for a in (typing.Optional[int], typing.Optional[float],
                                        typing.List[int], int | None, list[int], typing.Any)}
    assert len(hashes) == 6
    assert content_hash(typing.Optional[int]) == content_hash(typing.Optional[int])

    class UsesOptional:
        def f(self, v: "typing.Optional[float]" = None):
            return typing.Optional, v

    assert content_hash(UsesOptional)


def test_environment_reads_while_tracing_are_noted_and_the_mapping_restored():
    from flydsl.compiler.dependencies import reading_environ
    getitem = type(os.environ).__getitem__
    with reading_environ() as names:
        os.environ.get("FLYDSL_CK_A")
        assert "FLYDSL_CK_B" not in os.environ
        os.getenv("FLYDSL_CK_C", "x")
    assert names == {"FLYDSL_CK_A", "FLYDSL_CK_B", "FLYDSL_CK_C"}
    with reading_environ() as names:
        dict(os.environ)
    assert "" in names             # the whole environment
    assert type(os.environ).__getitem__ is getitem
