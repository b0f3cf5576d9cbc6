"""Prepared launches (flydsl.runtime.prepared, ``kernel.prepare``): re-launching one
specialization with torch tensors of the same layouts stores only the data pointers;
whatever still can change under equal layouts sends the call back (False)."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from conftest import run_in_threads

torch = pytest.importorskip("torch")


@flydsl.kernel
def axpy(x: fx.Tensor, y: fx.Tensor, out: fx.Tensor, a, n: fx.Int32, K: fx.Constexpr[int]):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        out[i] = x[i] * a + y[i] + K


def _args(n=100, a=2.0, dtype=torch.float32):
    x = torch.arange(n, dtype=dtype)
    y = torch.full((n,), 0.5, dtype=dtype)
    return [x, y, torch.zeros(n, dtype=dtype), a, n, 3]


def _want(args):
    x, y, _, a, _, k = args
    return x * a + y + k


def test_prepare_relaunches_new_tensors():
    axpy.cache_clear()
    args = _args()
    axpy[1, 128](*args)
    launch = axpy.prepare(tuple(args), 1, 128)
    assert launch is not None and "data_ptr()" in launch.__flydsl_source__
    assert ".stride()" not in launch.__flydsl_source__    # layouts are the caller's promise
    fresh = _args()
    fresh[0] = torch.arange(100, dtype=torch.float32) * -1.5
    assert launch(tuple(fresh))
    torch.testing.assert_close(fresh[2], _want(fresh))
    assert fresh[2].data_ptr() != args[2].data_ptr()


def test_prepare_before_any_launch_binds_the_specialization_and_launches_nothing():
    axpy.cache_clear()
    args = _args()
    launch = axpy.prepare(tuple(args), 1, 128)
    assert launch is not None and not args[2].any()
    assert launch(tuple(args))
    torch.testing.assert_close(args[2], _want(args))


def test_prepare_after_a_launch_the_last_specialization_took_under_another_key():
    """n=100 then n=1000: the second launch passes the first one's guards (any Int32
    n not divisible by 16), so it leaves no warm entry under its own key (another
    bit length); prepare still finds its specialization (the torch fused kernels
    prepared nothing for every shape but the first they ran)."""
    axpy.cache_clear()
    small, big = _args(100), _args(1000)
    axpy[1, 128](*small)
    axpy[8, 128](*big)
    launch = axpy.prepare(tuple(big), 8, 128)
    assert launch is not None
    fresh = _args(1000, a=2.0)
    fresh[0] = fresh[0] * 3
    assert launch(tuple(fresh))
    torch.testing.assert_close(fresh[2], _want(fresh))


def test_changed_scalars_misaligned_pointers_and_env_send_the_call_back(monkeypatch):
    axpy.cache_clear()
    args = _args()
    axpy[1, 128](*args)
    launch = axpy.prepare(tuple(args), 1, 128)
    untouched = torch.zeros(100)
    for bad in ([*args[:3], 2.5, 100, 3],      # another float: packed differently
                [*args[:3], 2, 100, 3],       # an int where a float was prepared
                [*args[:4], 99, 3],            # another n
                [*args[:5], 4],                # another constexpr
                args[:5]):                     # fewer arguments
        bad[2] = untouched
        assert launch(tuple(bad)) is False
    assert not untouched.any()                 # nothing ran
    buf = torch.zeros(101)
    shifted = [args[0], args[1], buf[1:], *args[3:]]   # 4 bytes past an aligned pointer
    assert shifted[2].data_ptr() % 16
    assert launch(tuple(shifted)) is False     # the kernel assumed 16-byte alignment
    monkeypatch.setenv("FLYDSL_OPT_LEVEL", "1")
    assert launch(tuple(args)) is False        # another codegen environment
    monkeypatch.delenv("FLYDSL_OPT_LEVEL")
    assert launch(tuple(args))


def test_a_read_only_output_is_not_prepared_and_the_usual_launch_refuses_it():
    """The warm entry of these layouts exists, but its key does not say whether the
    output is writable: prepare must check that, as a cold launch does."""
    axpy.cache_clear()
    args = _args()
    axpy[1, 128](*args)
    with torch.inference_mode():
        out = torch.zeros(100)
    read_only = (*args[:2], out, *args[3:])
    assert axpy.prepare(read_only, 1, 128) is None
    with pytest.raises(flydsl.LaunchError, match="inference"):
        axpy[1, 128](*read_only)
    assert not out.any()


def test_signed_zero_float_scalars_are_not_confused():
    axpy.cache_clear()
    args = _args(a=0.0)
    axpy[1, 128](*args)
    launch = axpy.prepare(tuple(args), 1, 128)
    assert launch(tuple(_args(a=0.0)))
    assert launch(tuple(_args(a=-0.0))) is False


def test_numpy_arguments_are_not_prepared():
    axpy.cache_clear()
    x = np.arange(8, dtype=np.float32)
    args = (x, x.copy(), np.zeros(8, np.float32), 1.0, 8, 0)
    axpy[1, 8](*args)
    assert axpy.prepare(args, 1, 8) is None


def test_threads_using_one_prepared_launch_keep_their_own_pointers():
    axpy.cache_clear()
    args = _args(n=4096)
    axpy[32, 128](*args)
    launch = axpy.prepare(tuple(args), 32, 128)

    def work(seed):
        for r in range(30):
            mine = _args(n=4096)
            mine[0] = torch.full((4096,), float(seed * 100 + r))
            assert launch(tuple(mine))
            torch.testing.assert_close(mine[2], _want(mine))
    errors = run_in_threads(work, range(4))
    assert not errors, errors
