"""FlyDSL's module paths its kernels import (issue 31): ``flydsl.expr.rocdl.universal``
(``make_buffer_ptr``, upstream's conv kernels) and ``flydsl.utils.smem_allocator``
(``SmemAllocator``/``SmemPtr``, upstream's quant kernel), on flydsl's buffer resources
and shared arrays."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLError, DSLTypeError
from flydsl.expr.rocdl import universal
from flydsl.expr.typing import T
from flydsl.utils.smem_allocator import (SmemAllocator, SmemPtr, check_smem_capacity)


def test_universal_names_are_fx_rocdl_s():
    assert universal.BufferCopy128b is fx.rocdl.BufferCopy128b
    assert universal.make_buffer_tensor is fx.rocdl.make_buffer_tensor
    assert universal.s_waitcnt is fx.rocdl.s_waitcnt and universal.MFMA is fx.rocdl.MFMA
    assert universal.sched_barrier is fx.rocdl.sched_barrier     # any fx.rocdl name
    with pytest.raises(AttributeError, match="universal.*no_such_name"):
        universal.no_such_name


def _copy_4(p, y):
    """y[t] = element t of a 4-element view from p, read with a buffer copy."""
    tid = fx.thread_idx.x
    src = fx.flat_divide(fx.make_view(p, fx.make_layout(4, 1)), (1,))[None, tid]
    regs = fx.make_fragment_like(src)
    fx.copy(fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32), src, regs)
    y[tid] = regs[0]


@flydsl.kernel
def sized(x: fx.Tensor, y: fx.Tensor):
    _copy_4(universal.make_buffer_ptr(fx.get_iter(x) + 4, num_records_bytes=8), y)


@flydsl.kernel
def rest_of_tensor(x: fx.Tensor, y: fx.Tensor):
    _copy_4(universal.make_buffer_ptr(fx.get_iter(x) + 6), y)


@flydsl.kernel
def raw(x: fx.Tensor, y: fx.Tensor):
    _copy_4(universal.make_buffer_ptr(fx.inttoptr(fx.Float32, fx.ptrtoint(fx.get_iter(x)))), y)


X = np.arange(8, dtype=np.float32)


def test_make_buffer_ptr_bounds_reads_by_its_records_on_the_cpu():
    y = np.full(4, -1, np.float32)
    sized[1, 4](X, y)
    np.testing.assert_array_equal(y, [4, 5, 0, 0])      # 8 bytes from x[4]
    y = np.full(4, -1, np.float32)
    rest_of_tensor[1, 4](X, y)
    np.testing.assert_array_equal(y, [6, 7, 0, 0])      # the rest of x from x[6]


def test_make_buffer_ptr_is_a_buffer_load_on_gfx942():
    @flydsl.jit
    def launch(x, y):
        sized(x, y).launch(grid=(1, 1, 1), block=(4, 1, 1))
    prog = flydsl.compile(launch, X, np.zeros(4, np.float32), backend="rocm", arch="gfx942")
    assert "buffer_load_dword" in prog.kernels[0].asm["amdgcn"]


def test_make_buffer_ptr_of_a_raw_address_is_a_located_error():
    with pytest.raises(DSLTypeError, match="raw address") as info:
        raw[1, 4](X, np.zeros(4, np.float32))
    assert info.value.filename == __file__ and "make_buffer_ptr" in info.value.source_line


# -- SmemAllocator / SmemPtr ----------------------------------------------------------

plan = SmemAllocator(None, arch="gfx942")
FLAG = plan._align(plan.ptr, 16)
plan.ptr = FLAG + 3
RED = plan._align(plan.ptr, 16)
plan.ptr = RED + 8 * 4
same_name = SmemAllocator(None, arch="gfx942")     # shares plan's buffer ("smem_storage")


@flydsl.kernel
def reverse8(x: fx.Tensor, y: fx.Tensor):
    t = fx.thread_idx.x
    red = SmemPtr(plan.get_base(), RED, T.f32, shape=(2, 4))    # FlyDSL's spelling
    SmemPtr.store(red, x[t], [t // 4, t % 4])
    fx.barrier()
    flat = SmemPtr(same_name.get_base(), RED, fx.Float32, shape=(8,))
    y[t] = flat.load([7 - t])


def test_smem_allocator_slices_one_shared_buffer():
    assert (FLAG, RED, plan.total_bytes) == (0, 16, 128)
    y = np.zeros_like(X)
    reverse8[1, 8](X, y)
    np.testing.assert_array_equal(y, X[::-1])


def test_smem_allocator_checks_capacity_and_needs_a_kernel():
    check_smem_capacity(65536, "gfx942")
    check_smem_capacity(1 << 30, None)                  # unknown: not checked
    with pytest.raises(RuntimeError, match="gfx942 has 65536"):
        check_smem_capacity(65537, "gfx942")
    with pytest.raises(DSLError, match="inside a @flydsl.kernel"):
        plan.get_base()
    big = SmemAllocator(None, arch="gfx942", global_sym_name="big")
    big.ptr = 70000

    @flydsl.kernel
    def too_big(y: fx.Tensor):
        y[0] = SmemPtr(big.get_base(), 0, fx.Float32).load()
    with pytest.raises(DSLError, match="too_big.*shared memory overflow: 70016 bytes"):
        too_big[1, 1](np.zeros(1, np.float32))


def test_smem_allocator_docstring_examples_run():
    import doctest
    import flydsl.utils.smem_allocator as module
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0
