"""Environment variables a kernel's trace reads key its compiled code in this process
too, as they key the disk cache across processes (6be62ec): setting one between two
launches compiles again, instead of launching the code traced under the old value."""
import os

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.runtime.device import get_rocm_arch


@flydsl.kernel
def scaled_by_environ(x: fx.Tensor, y: fx.Tensor):
    """Reads FLYDSL_TEST_SCALE while tracing: a compile-time constant of the code."""
    t = fx.thread_idx.x
    y[t] = x[t] * float(os.environ.get("FLYDSL_TEST_SCALE", "1"))


@flydsl.kernel
def tagged_by_arch(y: fx.Tensor):
    """Takes upstream FlyDSL's gfx950 path when get_rocm_arch() says so (it reads
    FLYDSL_GPU_ARCH, one of the codegen variables every launch keys)."""
    t = fx.thread_idx.x
    y[t] = 950.0 if "gfx95" in get_rocm_arch() else 942.0


def test_a_variable_the_trace_read_changes_the_code_in_this_process(monkeypatch):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    monkeypatch.setenv("FLYDSL_TEST_SCALE", "2")
    for _ in range(3):      # the later launches are warm ones
        scaled_by_environ[1, 4](x, y)
        np.testing.assert_array_equal(y, 2 * x)
    monkeypatch.setenv("FLYDSL_TEST_SCALE", "3")
    for _ in range(3):
        scaled_by_environ[1, 4](x, y)
        np.testing.assert_array_equal(y, 3 * x)
    monkeypatch.delenv("FLYDSL_TEST_SCALE")
    scaled_by_environ[1, 4](x, y)
    np.testing.assert_array_equal(y, x)
    monkeypatch.setenv("FLYDSL_TEST_SCALE", "2")     # back: the first code, from disk
    scaled_by_environ[1, 4](x, y)
    np.testing.assert_array_equal(y, 2 * x)
    monkeypatch.setenv("FLYDSL_TEST_SCALE", "3")     # a disk hit knows what it read too
    scaled_by_environ[1, 4](x, y)
    np.testing.assert_array_equal(y, 3 * x)


@pytest.mark.parametrize("first,second", [("gfx942", "gfx950"), ("gfx950", "gfx942")])
def test_flydsl_gpu_arch_set_between_launches_takes_the_other_path(monkeypatch, first, second):
    y = np.zeros(4, np.float32)
    for arch in (first, second, first):
        monkeypatch.setenv("FLYDSL_GPU_ARCH", arch)
        tagged_by_arch[1, 4](y)
        tagged_by_arch[1, 4](y)
        np.testing.assert_array_equal(y, float(arch[3:]))
