"""FlyDSL's host API on the CPU backend: ``flyc.from_torch_tensor`` / ``from_dlpack`` and
their layout markers, ``@flyc.jit`` tensor views (``A.shape.unpack()``),
``JitArgumentRegistry``, ``flyc.compile`` (runs once, ``CompiledFunction``, compile
hints), class-bound jit functions and kernels, struct constexpr parameters, host
scalars, ``flydsl.runtime.device`` and ``compile_backend_name``/``current_target``.
Cases follow upstream FlyDSL's tests and examples, in our own words."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr.host_scalar import HostScalar
from flydsl.compiler.kernel_function import CompilationContext, options_overrides
from flydsl.runtime import device
from flydsl.expr.host_scalar import call_type
from flydsl.runtime.host_args import (HostScalar, LayoutMarkError, TensorArgument, host_scalar,
                                      host_value)

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cpu")


@flyc.kernel
def add_one(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        x[i] = x[i] + 1.0


# -- from_torch_tensor / from_dlpack and the layout markers -----------------------------

def test_from_torch_tensor_is_static_and_marks_like_flydsl():
    t = torch.zeros(4, 8)
    a = flyc.from_torch_tensor(t)
    assert isinstance(a, TensorArgument) and a.value is t
    assert a.cache_signature() == a.__cache_signature__() == (fx.Float32, 4, False, (4, 8), (8, 1))
    assert not a.is_layout_dynamic
    assert a.mark_layout_dynamic(leading_dim=1, divisibility=4) is a
    assert a.cache_signature()[3:] == ((-1, -1), (-4, 1))
    b = flyc.from_torch_tensor(torch.zeros(8, 16, 32)).mark_shape_dynamic([0, 2], 4) \
        .mark_stride_dynamic(-3, divisibility=16)
    assert b.cache_signature()[3:] == ((-4, 16, -4), (-16, 32, 1))
    c = flyc.from_dlpack(np.zeros((3, 5), np.int32), assumed_align=16, use_32bit_stride=True)
    assert c.cache_signature() == (fx.Int32, 16, True, (3, 5), (5, 1))


@pytest.mark.parametrize("mark", [
    lambda a: a.mark_layout_dynamic(leading_dim=0),            # stride 8, not 1
    lambda a: a.mark_layout_dynamic(leading_dim=2),            # no such dim
    lambda a: a.mark_layout_dynamic(divisibility=3),           # not a power of two
    lambda a: a.mark_shape_dynamic(5),
    lambda a: a.mark_shape_dynamic(0, [2, 4]),                 # int dims, list divisibility
    lambda a: a.mark_stride_dynamic([0, 1], [8]),              # lengths differ
    lambda a: a.mark_shape_dynamic(1, divisibility=16),        # 8 is not a multiple of 16
])
def test_layout_marks_reject_what_flydsl_rejects(mark):
    with pytest.raises(LayoutMarkError):
        mark(flyc.from_torch_tensor(torch.zeros(4, 8)))


def test_layout_dynamic_needs_a_unit_stride():
    with pytest.raises(LayoutMarkError, match="no dimension of stride 1"):
        flyc.from_torch_tensor(torch.zeros(4, 8)[:, ::2]).mark_layout_dynamic()
    with pytest.raises(fx.DSLError if hasattr(fx, "DSLError") else TypeError):
        flyc.from_torch_tensor(np.zeros(3))


def test_wrapped_tensor_launches_directly_and_through_jit():
    t = torch.zeros(100)
    add_one[(1, 1, 1), (128, 1, 1)](flyc.from_torch_tensor(t), 100)
    add_one(flyc.from_torch_tensor(t).mark_layout_dynamic(leading_dim=0), 100) \
        .launch(grid=(1, 1, 1), block=(128, 1, 1))

    @flyc.jit
    def run(x: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        (n,) = x.shape.unpack()
        add_one(x, n).launch(grid=((n + 63) // 64, 1, 1), block=(64, 1, 1), stream=stream)

    run(flyc.from_torch_tensor(t))
    run(t)
    assert torch.equal(t, torch.full((100,), 4.0))


# -- what a @flyc.jit body sees ------------------------------------------------------

def test_jit_tensor_parameters_are_host_views():
    seen = {}

    @flyc.jit
    def probe(A: fx.Tensor, B: fx.Tensor, k: int, stream: fx.Stream = fx.Stream(None)):
        M, N = A.shape.unpack()
        seen.update(M=M, N=N, stride=(A.stride[0], A.stride(1), tuple(A.stride())),
                    numel=A.size if isinstance(A.value, np.ndarray) else A.numel(),
                    dtype=A.dtype, elem=A.element_type,
                    layout=str(A.layout), b=B.shape.unpack(), k=k, stream=stream.value,
                    dynamic=A.is_layout_dynamic)

    a = torch.zeros(6, 10)[:, :7]
    probe(a, np.zeros((2, 3), np.float32), 5)
    assert seen == dict(M=6, N=7, stride=(10, 1, (10, 1)), numel=42, dtype=torch.float32,
                        elem=fx.Float32, layout="(6,7):(10,1)", b=(2, 3), k=5, stream=None,
                        dynamic=True)
    # a numpy array's shape is still a tuple (FlyDSL code and ours agree)
    seen.clear()
    probe(np.zeros((3, 4), np.float32), np.zeros(1, np.float32), 0)
    assert (seen["M"], seen["N"]) == (3, 4) and seen["dtype"] == np.float32


def test_jit_number_parameters_are_typed_host_numbers_with_run_time_layouts():
    """FlyDSL's test_basis_dynamic_coefficient: a number passed for an ``fx.Int32``
    parameter is a run-time value in the layouts the body builds from it (FlyDSL traces
    the body, the parameter being a dynamic Int32); flydsl hands the body fx.Int32(n).
    A parameter the body only computes with, or hands to kernels, is passed as it is."""
    seen = {}

    @flyc.jit
    def build(coeff: fx.Int32, scale: fx.Float32 = 1.0, plain: int = 0):
        leaf = fx.make_int_tuple(fx.Basis(coeff, [0]))
        stride = fx.make_stride(fx.Basis(coeff, [0]), fx.E(1))
        dyn = fx.get_leaves(stride, dynamic_only=True)
        seen.update(static=leaf.type.is_static, basis=leaf.type.is_leaf_basis,
                    scalar=fx.get_scalar(leaf).modes, dyn=[d.modes for d in dyn],
                    coeff=coeff, scale=scale, plain=plain, size=fx.size(fx.make_layout(coeff)))

    build(2, plain=3)
    assert seen == dict(static=False, basis=True, scalar=[0], dyn=[[0]], coeff=2, scale=1.0,
                        plain=3, size=2)
    assert type(seen["coeff"]) is HostScalar and seen["coeff"].dtype is fx.Int32
    assert type(seen["plain"]) is int and type(seen["scale"]) is float   # default: as is
    build(coeff=np.int64(5), scale=2)
    assert type(seen["coeff"]) is HostScalar and seen["coeff"] == 5
    assert type(seen["scale"]) is HostScalar and seen["scale"].value == 2.0

    @flyc.jit
    def arithmetic(n: fx.Int32):
        seen.update(n=n, blocks=(n + 63) // 64, last=-n)

    arithmetic(100)
    assert type(seen["n"]) is HostScalar and seen["blocks"] == 2 and seen["last"] == -100
    assert arithmetic._views.scalars == ((0, fx.Int32),)


def test_jit_with_tiled_copy_kernel_parameter_like_upstream_example_01():
    @flyc.kernel
    def vadd(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, tiled_copy: fx.TiledCopy):
        tid = fx.thread_idx.x
        bid_x, bid_y = fx.block_idx.x, fx.block_idx.y
        M, N = A.shape.unpack()
        tile = tiled_copy.tile_mn
        gA = fx.flat_divide(A, tile)[None, None, bid_x, bid_y]
        gB = fx.flat_divide(B, tile)[None, None, bid_x, bid_y]
        gC = fx.flat_divide(C, tile)[None, None, bid_x, bid_y]
        cC = fx.flat_divide(fx.make_view((0, 0), fx.make_identity_layout((M, N))),
                            tile)[None, None, bid_x, bid_y]
        thr = tiled_copy.get_slice(tid)
        tA, tB, tC = thr.partition_S(gA), thr.partition_S(gB), thr.partition_D(gC)
        tcC = thr.partition_S(cC)[(0, None), None, None]
        rA, rB, rC = (fx.make_fragment_like(t) for t in (tA, tB, tC))
        pred = fx.make_fragment_like(tcC, dtype=fx.Boolean)
        for a in fx.range_constexpr(fx.size(pred.shape).unpack()):
            pred[a] = fx.elem_less(tcC[a], (M, N))
        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        fx.copy(atom, tA, rA, pred=pred)
        fx.copy(atom, tB, rB, pred=pred)
        rC.store(rA.load() + rB.load())
        fx.copy(atom, rC, tC, pred=pred)

    @flyc.jit
    def vector_add(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor,
                   stream: fx.Stream = fx.Stream(None)):
        atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
        tiled = fx.make_tiled_copy_tv(atom, fx.make_ordered_layout((8, 16), order=(1, 0)),
                                      fx.make_ordered_layout((1, 4), order=(0, 1)))
        tile_m, tile_n = tiled.tile_mn.unpack()
        M, N = A.shape.unpack()
        vadd(A, B, C, tiled).launch(grid=((M + tile_m - 1) // tile_m,
                                          (N + tile_n - 1) // tile_n, 1),
                                    block=(128, 1, 1), stream=stream)

    A, B = torch.randn(20, 70), torch.randn(20, 70)
    C = torch.zeros(20, 70)
    vector_add(A, B, C)
    assert torch.equal(C, A + B)


# -- JitArgumentRegistry -----------------------------------------------------------------

class Buffer:
    def __init__(self, array):
        self.array = array


def test_registered_host_type_is_converted_for_jit_and_kernels():
    flyc.JitArgumentRegistry.register(Buffer, dsl_type=fx.Tensor)(lambda b: b.array)
    try:
        with pytest.raises(fx.DSLError if hasattr(fx, "DSLError") else Exception,
                           match="already registered"):
            flyc.JitArgumentRegistry.register(Buffer)(lambda b: b)

        @flyc.jit
        def run(x: fx.Tensor):
            (n,) = x.shape.unpack()
            add_one(x, n).launch(grid=(1, 1, 1), block=(64, 1, 1))

        buf = Buffer(np.zeros(50, np.float32))
        run(buf)
        add_one[(1, 1, 1), (64, 1, 1)](buf, 50)      # a kernel takes it too
        assert (buf.array == 2.0).all()
        assert flyc.JitArgumentRegistry.get(type("Sub", (Buffer,), {}))[1] is fx.Tensor
    finally:
        flyc.JitArgumentRegistry.unregister(Buffer)


# -- flyc.compile and compile hints -----------------------------------------------------

@flyc.kernel
def scale_k(x: fx.Tensor, s: fx.Float32, n: fx.Int32):
    i = fx.thread_idx.x
    if i < n:
        x[i] = x[i] * s


def test_flyc_compile_runs_once_and_returns_a_compiled_function():
    @flyc.jit
    def scale(x: fx.Tensor, s: float, stream: fx.Stream = fx.Stream(None)):
        scale_k(x, s, x.shape[0]).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    x = torch.ones(10)
    exe = flyc.compile(scale, x, 2.0)            # FlyDSL: compiles *and* executes
    assert isinstance(exe, flyc.CompiledFunction)
    assert torch.equal(x, torch.full((10,), 2.0))
    exe(x, 3.0)
    assert torch.equal(x, torch.full((10,), 6.0))
    with pytest.raises(TypeError, match="@flyc.jit"):
        flyc.compile(scale_k, x, 2.0, 10)


def test_compile_only_compiles_without_launching(monkeypatch):
    @flyc.jit
    def scale(x: fx.Tensor):
        scale_k(x, 5.0, 10).launch(grid=(1, 1, 1), block=(32, 1, 1))

    monkeypatch.setenv("COMPILE_ONLY", "1")
    x = torch.ones(10)
    assert flyc.compile(scale, x) is None
    scale(x)                                      # a plain call compiles only, too
    assert torch.equal(x, torch.ones(10))
    # FlyDSL's test fixtures patch these; flydsl does not use them
    from flydsl.compiler import jit_function
    monkeypatch.setattr(jit_function, "_flydsl_key", lambda: "test-key")
    monkeypatch.setattr(jit_function.MlirCompiler, "compile", classmethod(lambda cls, m, **k: m))
    scale(x)
    monkeypatch.delenv("COMPILE_ONLY")
    scale(x)
    assert torch.equal(x, torch.full((10,), 5.0))


def test_compile_hints_subscription_and_context():
    @flyc.jit
    def scale(x: fx.Tensor):
        scale_k(x, 0.5, 4).launch(grid=(1, 1, 1), block=(32, 1, 1))

    with pytest.raises(TypeError, match="expects a dict"):
        flyc.compile["fast"]
    assert flyc.compile(scale) is scale and scale.compile_hints == {} and scale.func is scale.fn
    hinted = flyc.compile[{"fast_fp_math": True}](scale)
    assert hinted is scale and scale.compile_hints == {"fast_fp_math": True}
    scale_k.cache_clear()
    scale(np.ones(4, np.float32))
    options = [dict(key[3]) for key in scale_k._compiled]
    assert [o["fast_math"] for o in options] == [True]

    @flyc.jit
    def plain(x: fx.Tensor):
        scale_k(x, 0.5, 4).launch(grid=(1, 1, 1), block=(32, 1, 1))

    scale_k.cache_clear()
    with CompilationContext.compile_hints({"fastmath": "none"}):
        with CompilationContext.compile_hints({"waves_per_eu": 2}):
            assert CompilationContext.get_compile_hints() == {"fastmath": "none",
                                                              "waves_per_eu": 2}
            plain(np.ones(4, np.float32))
    assert CompilationContext.get_compile_hints() == {}
    assert [dict(key[3])["fp_contract"] for key in scale_k._compiled] == [False]


def test_hint_mapping():
    class Flags:            # an enum member such as arith.FastMathFlags.contract
        name = "contract"
    assert options_overrides({"unsafe_fp_math": True}) == {"fast_math": True}
    assert options_overrides({"fastmath": Flags()}) == {"fp_contract": True}
    assert options_overrides({"fastmath": "fast"}) == {"fast_math": True, "fp_contract": True}
    assert options_overrides({"waves_per_eu": 2, "maxnreg": 128, "opt_level": 1}) == \
        {"opt_level": 1}


# -- class-bound jit functions and kernels, struct constexprs, host scalars ---------------

class Program:
    def __init__(self, step):
        self.step = step

    @flyc.kernel
    def kernel(self, x: fx.Tensor, n: fx.Int32):
        i = fx.thread_idx.x
        if i < n:
            x[i] = x[i] + self.step

    @flyc.jit
    def run(self, x: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        self.kernel(x, x.shape[0]).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    @flyc.jit
    def __call__(self, x: fx.Tensor):
        self.kernel[(1, 1, 1), (32, 1, 1)](x, x.shape[0])


def test_class_defined_jit_and_kernel_bind_self():
    x = np.zeros(8, np.float32)
    Program(2.0).run(x)
    Program(3.0)(x)
    assert (x == 5.0).all()


@dataclasses.dataclass(frozen=True)
class Cfg:
    scale: float
    offset: float


@flyc.kernel
def affine(x: fx.Tensor, cfg: Cfg, ns: SimpleNamespace, n: fx.Int32):
    i = fx.thread_idx.x
    if i < n:
        x[i] = x[i] * cfg.scale + cfg.offset + ns.bias


def test_dataclass_and_namespace_parameters_are_constexpr_structs():
    x = np.ones(4, np.float32)
    affine[(1, 1, 1), (32, 1, 1)](x, Cfg(2.0, 1.0), SimpleNamespace(bias=0.5), 4)
    assert (x == 3.5).all()
    affine[(1, 1, 1), (32, 1, 1)](x, Cfg(1.0, 0.0), SimpleNamespace(bias=1.0), 4)
    assert (x == 4.5).all()


def test_host_scalars_wrap_and_pass_as_their_value():
    assert host_scalar(2**31, fx.Int32).value == -2**31
    assert host_scalar(300, fx.UInt8).value == 44
    assert host_scalar(3, fx.Float32).value == 3.0 and isinstance(host_scalar(3, fx.Float32).value,
                                                                  float)
    five = call_type(fx.Int32, 5)            # fx.Int32(5) outside a kernel
    assert isinstance(five, HostScalar) and five + 1 == 6 and 10 // five == 2 and -five == -5
    assert (five + 255) // 256 == 1 and five == 5 and host_value(five) == 5
    x = np.zeros(8, np.float32)
    add_one[(1, 1, 1), (32, 1, 1)](x, five)
    add_one(x, n=host_scalar(3, fx.Int32)).launch(grid=(1, 1, 1), block=(32, 1, 1))
    assert x.tolist() == [2.0] * 3 + [1.0] * 2 + [0.0] * 3


# -- flydsl.runtime.device, compile_backend_name, current_target -------------------------

def test_rocm_arch_and_warp_size(monkeypatch):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.delenv("HSA_OVERRIDE_GFX_VERSION", raising=False)
    expected = device._device_arch() or "gfx942"     # no ROCm device: the CPU runs gfx942 code
    assert device.get_rocm_arch() == expected
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "11.0.0")
    assert device.get_rocm_arch() == "gfx1100" and device.is_rdna_arch()
    assert device.get_warp_size() == 32
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "GFX950")
    assert device.get_rocm_arch() == "gfx950" and not device.is_rdna_arch()
    assert device.get_warp_size() == 64 and device.get_warp_size("gfx1201") == 32
    device.check_smem_capacity(65536, "gfx942")
    with pytest.raises(ValueError, match="shared memory overflow"):
        device.check_smem_capacity(65537, "gfx942")
    assert device.get_rocm_device_count() >= 0


def test_compile_backend_name_and_current_target():
    from flydsl.compiler.backends import compile_backend_name, current_target
    assert flyc.compile_backend_name() == compile_backend_name() == "cpu"
    target = current_target()
    assert target.backend == "cpu" and target.warp_size == 32


# -- flyc.from_c_void_p: raw addresses for fx.Pointer parameters --------------------------

@flyc.kernel
def copy_through_pointers(src: fx.Pointer, dst: fx.Pointer, n: fx.Int32):
    i = fx.thread_idx.x
    if i < n:
        dst[i] = src[i] * 2.0


def test_from_c_void_p_pointers_and_compiled_function_addresses():
    import ctypes

    @flyc.jit
    def run(src: fx.Pointer, dst: fx.Pointer, n: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        copy_through_pointers(src, dst, n).launch(grid=(1, 1, 1), block=(32, 1, 1),
                                                  stream=stream)

    a = torch.arange(16, dtype=torch.float32)
    b = torch.zeros(16)
    src = flyc.from_c_void_p(fx.Float32, a.data_ptr())
    assert int(src) == a.data_ptr() and "Float32" in repr(src)
    exe = flyc.compile(run, src, flyc.from_c_void_p(fx.Float32, ctypes.c_void_p(b.data_ptr())), 10)
    assert torch.equal(b[:10], a[:10] * 2) and not b[10:].any()
    c = torch.zeros(16)
    exe(a.data_ptr(), c.data_ptr(), 16)          # bare addresses, as FlyDSL's hot loops pass
    assert torch.equal(c, a * 2)
    with pytest.raises(TypeError, match="fx element type"):
        flyc.from_c_void_p("f32", 0)


@flyc.kernel(name="renamed_add_one")
def add_one_named(x: fx.Tensor, n: fx.Int32):
    i = fx.thread_idx.x
    if i < n:
        x[i] = x[i] + 1.0


def test_kernel_name_option_names_the_compiled_kernel():
    import flydsl
    x = np.zeros(8, np.float32)
    prog = flydsl.compile(add_one_named, x, 8)
    assert prog.kernel_names == ["renamed_add_one"]
    assert "renamed_add_one" in prog.asm["mlir"]
    add_one_named[(1, 1, 1), (32, 1, 1)](x, 8)
    assert (x == 1.0).all()
    with pytest.raises(TypeError, match="identifier"):
        flyc.kernel(name="not a name")(lambda x: None)


def test_host_scalars_answer_flydsls_numeric_api():
    """FlyDSL's language tests use typed host numbers like values: is_static, to,
    select, **, ~ (4 of its error kinds before)."""
    five = fx.Int32(5)
    assert five.is_static() and five ** 2 == 25 and 2 ** five == 32 and ~five == -6
    assert abs(fx.Int32(-3)) == 3 and +five == 5
    wrapped = fx.Int32(2 ** 31 + 1).to(fx.Int64)
    assert wrapped.dtype is fx.Int64 and wrapped == -(2 ** 31) + 1
    assert five.to(fx.Float32).dtype is fx.Float32 and five.to(fx.Float32) == 5.0
    assert fx.Boolean(True).select(1, 2) == 1 and fx.Boolean(False).select(1, 2) == 2
    assert ~fx.Boolean(True) is False


def test_host_scalars_of_raw_mlir_values():
    """FlyDSL wraps raw MLIR values in fx types anywhere (its IR-building unit tests):
    outside a kernel an arith.constant gives its number, any other value a located
    DSLError (it was float()'s TypeError on a BlockArgument)."""
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import arith, func
    from flydsl.errors import DSLError
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            c = arith.constant(ir.IntegerType.get_signless(32), 7)
            f = arith.constant(ir.F32Type.get(), 2.5)
            fn = func.FuncOp("f", ir.FunctionType.get([ir.F32Type.get()], []))
            arg = fn.add_entry_block().arguments[0]
        assert fx.Int32(c) == 7 and fx.Float32(f) == 2.5 and fx.Float32(c) == 7.0
        with pytest.raises(DSLError, match=r"Float32\(BlockArgument of MLIR type f32\) "
                                     r"outside a kernel body") as e:
            fx.Float32(arg)   # the line the error names
        assert e.value.filename == __file__ and "fx.Float32(arg)" in e.value.source_line
