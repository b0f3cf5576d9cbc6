"""Tensors specialized on 16-byte alignment, ints on divisibility by 16: the key, the
warm-launch guards, and the vector accesses and FMAs it buys on every target."""
import re
import shutil
import subprocess

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import FlydslError


@flydsl.kernel
def vadd8_kernel(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor, n: fx.Int32):
    i = (fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x) * 8
    if i < n:
        va = [a[i + k] for k in fx.range_constexpr(8)]
        vb = [b[i + k] for k in fx.range_constexpr(8)]
        for k in fx.range_constexpr(8):
            c[i + k] = va[k] + vb[k]


@flydsl.jit
def vadd8(a, b, c, n: fx.Int32):
    vadd8_kernel(a, b, c, n).launch(grid=((n // 8 + 127) // 128, 1, 1), block=(128, 1, 1))


@flydsl.kernel
def rmsnorm_kernel(x: fx.Tensor, w: fx.Tensor, y: fx.Tensor, n: fx.Int32, eps: fx.Float32):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    base = tid * 8
    xs = [fx.cast(x[row, base + k], fx.Float32) for k in fx.range_constexpr(8)]
    ws = [fx.cast(w[base + k], fx.Float32) for k in fx.range_constexpr(8)]
    acc = fx.Float32(0.0)
    for k in fx.range_constexpr(8):
        acc = acc + xs[k] * xs[k]
    s = fx.shared_array((256,), fx.Float32)
    s[tid] = acc
    fx.barrier()
    stride = 128
    while stride > 0:
        if tid < stride:
            s[tid] = s[tid] + s[tid + stride]
        fx.barrier()
        stride = stride // 2
    r = fx.rsqrt(s[0] / fx.cast(n, fx.Float32) + eps)
    for k in fx.range_constexpr(8):
        y[row, base + k] = fx.cast(xs[k] * r * ws[k], fx.Float16)


@flydsl.jit
def rmsnorm(x, w, y, eps: fx.Float32 = 1e-6):
    rmsnorm_kernel(x, w, y, x.shape[1], eps).launch(grid=(x.shape[0], 1, 1),
                                                     block=(x.shape[1] // 8, 1, 1))


def _halves(n: int, misalign: int = 0) -> np.ndarray:
    """``n`` float16 values starting ``misalign`` elements into a 16-byte aligned buffer."""
    buf = np.empty(n + 16, np.float16)
    start = (-buf.ctypes.data % 16) // 2 + misalign
    out = buf[start:start + n]
    out[:] = np.random.default_rng(n + misalign).standard_normal(n)
    return out


def _rmsnorm_ref(x, w, eps=1e-6):
    x32 = x.astype(np.float32)
    r = 1 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps)
    return (x32 * r * w.astype(np.float32)).astype(np.float16)


# -- the key and the guards (CPU twins: these run everywhere) ----------------------------

def test_alignment_and_divisibility_are_in_the_key_and_results_stay_right():
    vadd8_kernel.cache_clear()
    n = 2048
    for misalign in (0, 1, 0, 1):    # warm launches alternate between the two variants
        a, b, c = _halves(n, misalign), _halves(n, misalign), _halves(n, misalign)
        vadd8(a, b, c, n)
        np.testing.assert_array_equal(c, a + b)
    keys = [k[0] for k in vadd8_kernel._compiled]
    assert len(keys) == 2
    aligned = {k[0][4] for k in keys}   # ("T", dtype, rank, inner, aligned) of `a`
    assert aligned == {True, False}


def test_an_unaligned_call_after_warm_aligned_ones_never_takes_their_fast_path():
    """On the CPU an aligned variant may use aligned vector moves: run on a misaligned
    pointer it would fault or read the wrong elements."""
    vadd8_kernel.cache_clear()
    n = 4096
    a, b, c = _halves(n), _halves(n), _halves(n)
    for _ in range(3):
        vadd8(a, b, c, n)
    src = vadd8_kernel.warm_launch_source()
    assert "% 16" in src   # the alignment guard is in the generated launch
    ua, ub, uc = _halves(n, 3), _halves(n, 5), _halves(n, 7)
    for _ in range(3):
        vadd8(ua, ub, uc, n)
        np.testing.assert_array_equal(uc, ua + ub)
    np.testing.assert_array_equal(c, a + b)


def test_row_strides_count_for_alignment():
    x = np.zeros((4, 24), np.float16)       # rows 48 bytes apart: aligned
    y = np.zeros((4, 20), np.float16)       # rows 40 bytes apart: not
    from flydsl.runtime.tensors import as_tensor
    assert as_tensor(x).aligned == (x.ctypes.data % 16 == 0)
    assert not as_tensor(y).aligned
    assert not as_tensor(np.zeros(40, np.float16)[1:]).aligned


def test_torch_tensors_with_an_unaligned_storage_offset():
    torch = pytest.importorskip("torch")
    vadd8_kernel.cache_clear()
    base = torch.randn(4096 + 8).half()
    for off in (0, 1, 0):
        a, b = base[off:off + 4096], base[8 - off:8 - off + 4096] if off else base[:4096]
        c = torch.empty(4096, dtype=torch.float16)
        vadd8(a, b, c, 4096)
        assert torch.equal(c, a + b)
    assert len(vadd8_kernel._compiled) == 2


def test_an_int_divisible_by_16_is_a_specialization_and_do_not_specialize_opts_out():
    @flydsl.kernel
    def fill(out: fx.Tensor, n: fx.Int32):
        i = fx.thread_idx.x
        if i < n:
            out[i] = fx.Float32(n)

    @flydsl.kernel(do_not_specialize=("n",))
    def fill_once(out: fx.Tensor, n: fx.Int32):
        i = fx.thread_idx.x
        if i < n:
            out[i] = fx.Float32(n)

    for k in (fill, fill_once):
        for n in (32, 30, 48, 17):
            out = np.zeros(64, np.float32)
            k[1, 64](out, n)
            assert (out[:n] == n).all() and (out[n:] == 0).all()
    assert len(fill._compiled) == 2 and len(fill_once._compiled) == 1
    mlir = flydsl.compile(fill, np.zeros(64, np.float32), 32, backend="cpu").asm["mlir"]
    assert "llvm.intr.assume" in mlir
    mlir = flydsl.compile(fill, np.zeros(64, np.float32), 30, backend="cpu").asm["mlir"]
    assert "llvm.intr.assume" not in mlir


def test_do_not_specialize_names_a_parameter():
    with pytest.raises(FlydslError, match="do_not_specialize names no parameter: m"):
        @flydsl.kernel(do_not_specialize=("m",))
        def k(out: fx.Tensor, n: fx.Int32):
            out[0] = 1.0


def test_rmsnorm_runs_right_on_aligned_and_unaligned_rows():
    rows, cols = 8, 2048
    w = _halves(cols)
    for misalign in (0, 1):
        x = _halves(rows * cols, misalign).reshape(rows, cols)
        y = _halves(rows * cols).reshape(rows, cols)
        rmsnorm(x, w, y)
        np.testing.assert_allclose(y.astype(np.float32), _rmsnorm_ref(x, w).astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


# -- what the GPU code looks like (compiled here, no GPU needed) -------------------------

def _count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


def _programs(backend: str, arch: str, misalign: int) -> dict:
    rows, cols = 64, 2048
    x = _halves(rows * cols, misalign).reshape(rows, cols)
    flat = x.reshape(-1)
    return {
        "rmsnorm": flydsl.compile(rmsnorm, x, _halves(cols), _halves(rows * cols).reshape(rows, cols),
                                  backend=backend, arch=arch),
        "vadd": flydsl.compile(vadd8, flat, flat, flat, rows * cols, backend=backend, arch=arch),
    }


def test_ptx_has_128_bit_accesses_aligned_params_and_fma():
    progs = _programs("cuda", "sm_90", 0)
    rms, vadd = progs["rmsnorm"].asm["ptx"], progs["vadd"].asm["ptx"]
    assert _count(rms, r"ld\.global\.(?:nc\.)?v4\.b32") == 2     # x's and w's 8 halves each
    assert _count(rms, r"st\.global\.v4\.b32") == 1
    assert _count(rms, r"ld\.global\.(?:nc\.)?b16|st\.global\.b16") == 0
    assert _count(rms, r"\bfma\.rn\.f32") >= 7                  # acc + x*x, contracted
    assert _count(vadd, r"ld\.global\.(?:nc\.)?v4\.b32") == 2
    assert _count(vadd, r"st\.global\.v4\.b32") == 1
    assert _count(vadd, r"\.param \.u64 \.ptr \.align 16") == 6  # both pointers of a, b, c


def test_ptx_of_misaligned_tensors_keeps_scalar_accesses():
    vadd = _programs("cuda", "sm_90", 1)["vadd"].asm["ptx"]
    assert _count(vadd, r"\.v[24]\.") == 0
    assert _count(vadd, r"ld\.global\.(?:nc\.)?b16") == 16
    assert ".align 16" not in vadd


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) not installed")
def test_ptxas_reports_no_spills():
    for prog in _programs("cuda", "sm_90", 0).values():
        ptx = prog.asm["ptx"]
        r = subprocess.run(["ptxas", "-v", "-arch=sm_90", "-", "-o", "/dev/null"], input=ptx,
                           capture_output=True, text=True)
        if r.returncode:   # older ptxas read no stdin: use a file
            import tempfile
            with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
                f.write(ptx)
                f.flush()
                r = subprocess.run(["ptxas", "-v", "-arch=sm_90", f.name, "-o", "/dev/null"],
                                   capture_output=True, text=True, check=True)
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", r.stderr), r.stderr


def test_gfx942_has_dwordx4_accesses_and_fma():
    progs = _programs("rocm", "gfx942", 0)
    rms, vadd = progs["rmsnorm"].asm["amdgcn"], progs["vadd"].asm["amdgcn"]
    assert _count(rms, r"global_load_dwordx4") == 2
    assert _count(rms, r"global_store_dwordx4") == 1
    assert _count(rms, r"global_load_(?:ushort|short_d16)|global_store_short") == 0
    assert _count(rms, r"\bv_fma(?:c|mac)?_f32") >= 7
    assert _count(vadd, r"global_load_dwordx4") == 2
    assert _count(vadd, r"global_store_dwordx4") == 1


# -- tensors of 2^31 elements or more: Int64 shapes --------------------------------------

@flydsl.kernel
def shape_probe(x: fx.Tensor, out: fx.Tensor):
    n = x.shape[0]
    out[0] = fx.Int64(n)
    out[1] = x.size
    x[n - 1] = 7


def test_a_tensor_of_2_31_elements_or_more_has_int64_shapes():
    n = 2**31 + 5
    x = np.zeros(n, np.int8)    # calloc'd: only the page written is ever touched
    out = np.zeros(2, np.int64)
    shape_probe[1, 1](x, out)
    assert out.tolist() == [n, n] and x[-1] == 7
    small = np.zeros(5, np.int8)
    shape_probe[1, 1](small, out)
    assert out.tolist() == [5, 5] and small[-1] == 7
    assert sorted(k[0][0][5] for k in shape_probe._compiled) == [False, True]


def test_cli_signatures_name_the_variant():
    from flydsl.cli import parse_signature
    from flydsl.runtime.tensors import as_tensor
    t2, t1, bad, n16, n = parse_signature("f16[2],f32[1],f32[2]:1,i32:16,i32")
    assert as_tensor(t2).aligned and as_tensor(t1).aligned and not as_tensor(bad).aligned
    assert (t2.ndim, bad.ndim, int(n16), int(n)) == (2, 2, 16, 1)
    with pytest.raises(ValueError, match="suffix is :16"):
        parse_signature("i32:8")


def test_autotune_stand_ins_keep_the_alignment_variant():
    """Candidates compiled in worker processes must be the variant this process runs."""
    from flydsl.autotune import StandIn
    from flydsl.runtime.tensors import as_tensor
    for value in (_halves(64), _halves(64, 1), _halves(80).reshape(4, 20),
                  _halves(96).reshape(4, 24)):
        made = StandIn(value).make()
        assert as_tensor(made).aligned == as_tensor(value).aligned
        assert made.shape == value.shape
