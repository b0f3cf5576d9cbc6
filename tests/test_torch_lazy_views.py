"""Torch tensors whose values are a lazy view of their memory (the negative bit of
``z.conj().imag``, the conjugate bit of ``z.conj()``) are refused where a torch tensor
becomes a kernel argument: a kernel reads memory, not the flipped values torch
shows, so passing one gave a silently wrong answer. The cold launch raises naming
the kernel and the argument; the warm launches (native C, generated Python) and a
prepared launch refuse it, so the cold launch says why."""
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError, LaunchError
from flydsl.runtime import native_launch
from flydsl.runtime.tensors import lazy_view_problem

torch = pytest.importorskip("torch")
G1, B4 = (1, 1, 1), (4, 1, 1)


@flydsl.kernel
def add(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        c[i] = a[i] + b[i]


def views():
    """``(plain, negative)``: the imaginary parts of ``z`` and of ``z.conj()`` (public
    API only): same dtype, shape, strides (2) and alignment; the second has the
    negative bit (it shows ``-im``; its memory holds ``im``)."""
    z = torch.complex(torch.zeros(4), torch.arange(4.0))
    plain, negative = z.imag, z.conj().imag
    assert not plain.is_neg() and negative.is_neg()
    assert plain.stride() == negative.stride() == (2,)
    return plain, negative


def contiguous_views():
    """``(plain, negative)``, contiguous and aligned (the native launch takes a 1-D
    tensor that may overlap an output only when it is contiguous): torch's
    ``_neg_view``, what ``z.conj().imag`` is made of."""
    plain = torch.arange(4.0)
    negative = torch._neg_view(plain)
    assert negative.is_neg() and negative.stride() == (1,)
    return plain, negative


def test_the_cold_launch_names_the_kernel_and_argument_and_the_fix():
    add.cache_clear()
    _, x = views()
    c = torch.zeros(4)
    with pytest.raises(DSLTypeError, match=r"kernel 'add'.*argument 'a'.*negative bit"
                                           r".*resolve_neg\(\)"):
        add[1, 4](x, torch.ones(4), c, 4)
    assert c.tolist() == [0.0] * 4                      # nothing launched
    with pytest.raises(DSLTypeError, match=r"argument 'c'.*negative bit"):
        add[1, 4](torch.ones(4), torch.ones(4), views()[1], 4)   # an output too


def test_resolve_neg_gives_the_right_answer():
    add.cache_clear()
    _, x = views()
    c = torch.zeros(4)
    add[1, 4](x.resolve_neg(), torch.ones(4), c, 4)
    assert c.tolist() == [1.0, 0.0, -1.0, -2.0]          # torch's x + 1
    assert c.tolist() == (x + 1).tolist()


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_warm_launch_refuses_it_and_the_cold_launch_says_why(native, monkeypatch):
    """Primed with a plain tensor of the same dtype, shape and strides, the warm
    launch (native, or the generated Python one) must not take the negative one."""
    monkeypatch.setenv("FLYDSL_NATIVE_LAUNCH", native)
    if native == "1" and native_launch.load() is None:
        pytest.skip(f"no native launch module here: {native_launch.problem()}")
    add.cache_clear()
    plain, negative = contiguous_views()
    b, c = torch.ones(4), torch.zeros(4)
    add[1, 4](plain, b, c, 4)
    add[1, 4](plain, b, c, 4)
    fast = add._last
    kind = "NativeFastLaunch" if native == "1" else "function"
    assert type(fast).__name__ == kind                   # normal tensors: still warm
    assert c.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert fast((plain, b, c, 4), G1, B4, 0, None) is True
    assert fast((negative, b, c, 4), G1, B4, 0, None) is False
    if native == "1":
        assert fast.flydsl_python((negative, b, c, 4), G1, B4, 0, None) is False
        assert fast.flydsl_python((plain, b, c, 4), G1, B4, 0, None) is True
    out = torch.zeros(4)
    with pytest.raises(DSLTypeError, match=r"argument 'a'.*resolve_neg"):
        add[1, 4](negative, b, out, 4)
    assert out.tolist() == [0.0] * 4
    add.cache_clear()


def test_the_native_launch_refuses_it_through_the_python_api_reader(monkeypatch):
    """The native launch reads tensors through torch's C shim, or its Python API
    where the shim is not usable: both check the bit."""
    if native_launch.load() is None:
        pytest.skip(f"no native launch module here: {native_launch.problem()}")
    monkeypatch.setattr(native_launch, "_dtype_code", lambda module, sample: -1)
    test_a_warm_launch_refuses_it_and_the_cold_launch_says_why("1", monkeypatch)


def test_a_prepared_launch_refuses_it():
    add.cache_clear()
    plain, negative = views()
    b, c = torch.ones(4), torch.zeros(4)
    add[1, 4](plain, b, c, 4)
    prepared = add.prepare((plain, b, c, 4), 1, 4)
    assert prepared is not None
    assert prepared((negative, b, c, 4)) is False
    assert prepared((plain, b, c, 4)) is True
    add.cache_clear()


def test_the_conjugate_bit_is_named_too():
    """flydsl takes no complex dtype (the dtype error comes first at a launch); the
    check itself names the conjugate bit and its fix."""
    z = torch.complex(torch.ones(2), torch.ones(2))
    assert lazy_view_problem(z) is None and lazy_view_problem(z.imag) is None
    assert "resolve_conj()" in lazy_view_problem(z.conj())
    assert "resolve_neg()" in lazy_view_problem(z.conj().imag)
    with pytest.raises(DSLTypeError, match=r"argument 'a'"):
        add[1, 4](z.conj(), torch.ones(2), torch.zeros(2), 2)


def test_the_native_shim_reads_the_bit_in_one_call_or_asks_the_tensor(monkeypatch):
    """Where torch's C shim is used, the bit is read through libtorch's is_neg (checked
    against the Python API when installed); without that reader the tensor's own
    is_neg() answers: both refuse the negative view."""
    if native_launch.load() is None:
        pytest.skip(f"no native launch module here: {native_launch.problem()}")
    module = native_launch.load()
    if not native_launch.torch_shim(module):
        pytest.skip("torch's C shim is not usable here")
    plain, negative = contiguous_views()
    assert module.torch_neg(negative) is True and module.torch_neg(plain) is False
    module.torch_is_neg(0)
    try:
        assert module.torch_neg(negative) is None
        test_a_warm_launch_refuses_it_and_the_cold_launch_says_why("1", monkeypatch)
    finally:
        import ctypes
        import os
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                       "libtorch_cpu.so"), mode=getattr(os, "RTLD_NOLOAD", 0))
        native_launch._install_is_neg(module, lib)
    assert module.torch_neg(negative) is True


def test_the_torch_compile_backend_reads_negative_inputs_resolved(caplog):
    """torch.compile hands the backend a negative view as it is: the fused kernel gets
    a resolved copy (inputs are only read), not an eager fallback for its signature."""
    from flydsl.torch import kernels

    def chain(x, y):
        return torch.sigmoid((x * 2.0 + y).relu() - 0.5) * x

    compiled = torch.compile(chain, backend="flydsl", fullgraph=True)
    z = torch.complex(torch.zeros(64), torch.linspace(-3.0, 3.0, 64))
    y = torch.linspace(0.0, 1.0, 64)
    for x in (z.imag, z.conj().imag, torch._neg_view(torch.linspace(-2.0, 2.0, 64))):
        before = dict(kernels.stats)
        with caplog.at_level("WARNING", logger="flydsl"):
            out = compiled(x, y)
        torch.testing.assert_close(out, chain(x, y))
        assert kernels.stats["eager_fallbacks"] == before["eager_fallbacks"]
        assert kernels.stats["launches"] > before["launches"]
    assert "failed to build" not in caplog.text


@flydsl.jit
def run_add(a, b, c, n: fx.Int32):
    add(a, b, c, n).launch(grid=(1, 1, 1), block=(4, 1, 1))


def test_a_jit_function_refuses_it_after_a_plain_call():
    plain, negative = contiguous_views()
    b, c = torch.ones(4), torch.zeros(4)
    run_add(plain, b, c, 4)
    run_add(plain, b, c, 4)
    assert c.tolist() == [1.0, 2.0, 3.0, 4.0]
    out = torch.zeros(4)
    with pytest.raises(DSLTypeError, match=r"kernel 'add'.*argument 'a'.*resolve_neg"):
        run_add(negative, b, out, 4)
    assert out.tolist() == [0.0] * 4


def test_a_tensor_without_memory_is_refused_cold_and_warm(monkeypatch):
    """A FakeTensor or a functionalized tensor (what torch.compile traces with) has
    data_ptr() 0: launching it killed the process (a kernel read address 0). The cold
    launch refuses it; a functionalized tensor is a plain torch.Tensor, so the warm
    launches (native, Python) and a prepared launch check the pointer too."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.ones(4)
    functional = torch._to_functional_tensor(torch.ones(4))
    assert type(functional) is torch.Tensor and functional.data_ptr() == 0
    zero = torch._efficientzerotensor(4)    # autograd's zero gradient: no memory either
    assert zero._is_zerotensor() and zero.data_ptr() == 0
    b = torch.ones(4)
    for native in ("1", "0"):
        monkeypatch.setenv("FLYDSL_NATIVE_LAUNCH", native)
        add.cache_clear()
        a, c = torch.arange(4.0), torch.zeros(4)
        add[1, 4](a, b, c, 4)
        add[1, 4](a, b, c, 4)
        fast = add._last
        assert fast((a, b, c, 4), G1, B4, 0, None) is True
        assert fast((functional, b, c, 4), G1, B4, 0, None) is False, native
        assert fast((zero, b, c, 4), G1, B4, 0, None) is False, native
        for x in (fake, functional, zero):
            with pytest.raises(LaunchError, match=r"kernel 'add'.*argument 'a'.*no memory"):
                add[1, 4](x, b, c, 4)
        empty = torch.empty(0)
        add[1, 4](empty, torch.empty(0), torch.empty(0), 0)   # empty tensors still launch
    prepared = add.prepare((a, b, c, 4), 1, 4)
    assert prepared((functional, b, c, 4)) is False and prepared((a, b, c, 4)) is True
    add.cache_clear()
