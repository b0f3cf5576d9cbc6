"""Upstream FlyDSL's attention kernels on flydsl (issue 31): the gfx950 16-bit MFMA atoms
their generic flash attention builds, and Python lists built by an expression inside a
runtime loop (``lo = [None] * n``)."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

from conftest import perm_b32_reference as _perm_reference
from flydsl.errors import CompileTimeValueRequired
from flydsl.expr import mma_layouts

# name -> (mn, k, dtype): the CDNA4 (gfx950) forms with twice the K of the gfx942 ones
GFX950_ATOMS = {
    "mfma_f32_32x32x16_bf16": (32, 16, fx.BFloat16),
    "mfma_f32_32x32x16_f16": (32, 16, fx.Float16),
    "mfma_f32_16x16x32_bf16": (16, 32, fx.BFloat16),
    "mfma_f32_16x16x32_f16": (16, 32, fx.Float16),
}


@pytest.mark.parametrize("name", sorted(GFX950_ATOMS))
def test_gfx950_mfma_tables_are_the_isa_lane_layouts(name):
    """Lane l holds row (column) l % mn and K values 8*(l // mn) + i, i < 8 (CDNA4 ISA)."""
    mn, k, dtype = GFX950_ATOMS[name]
    spec = mma_layouts.find_spec("mfma", mn, mn, k, dtype, arch="gfx950")
    assert spec.name == name and spec.arches == ("gfx950",)
    assert spec.intrinsic == f"llvm.amdgcn.mfma.f32.{mn}x{mn}x{k}.{spec.ab_dtype}"
    for operand in "ab":
        coords = mma_layouts.lane_value_coords(spec, operand)
        assert coords == [[(lane % mn, 8 * (lane // mn) + i) for i in range(8)]
                          for lane in range(64)]
    with pytest.raises(LookupError, match=rf"{mn}x{mn}x{k} .*on gfx942.*{name}: gfx950"):
        mma_layouts.find_spec("mfma", mn, mn, k, spec.ab_dtype, arch="gfx942")


@flydsl.kernel
def isa_layout_atom(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, op: fx.Constexpr,
                    MN: fx.Constexpr[int]):
    """Each lane loads the A/B values the ISA gives it and stores its accumulators where
    the ISA puts them (not through the atom's own tables)."""
    lane = fx.thread_idx.x
    atom = fx.make_mma_atom(op)
    fa = fx.make_rmem_tensor(8, atom.ab_dtype)
    fb = fx.make_rmem_tensor(8, atom.ab_dtype)
    fc = fx.make_rmem_tensor(MN * MN // 64, fx.Float32)
    row, group = lane % MN, lane // MN
    for i in fx.range_constexpr(8):
        fa[i] = atom.ab_dtype(A[row, 8 * group + i])
        fb[i] = atom.ab_dtype(B[row, 8 * group + i])
    fc.fill(0.5)
    fx.gemm(atom, fc, fa, fb, fc)
    for i in fx.range_constexpr(MN * MN // 64):
        if fx.const_expr(MN == 32):
            C[8 * (i // 4) + 4 * group + i % 4, row] = fc[i]
        else:
            C[4 * group + i, row] = fc[i]


@pytest.mark.parametrize("name", ["mfma_f32_16x16x32_bf16"])   # upstream builds the 32x32x16 form
def test_gfx950_mfma_runs_exactly_on_the_cpu(name):
    """The CPU backend runs every generation's atoms with their lane layouts (it has no
    MFMA arch of its own), so upstream's gfx950 atoms compute there exactly."""
    mn, k, dtype = GFX950_ATOMS[name]
    rng = np.random.default_rng(3)
    A = rng.integers(-4, 5, (mn, k)).astype(np.float32)    # exact in bf16 and f16
    B = rng.integers(-4, 5, (mn, k)).astype(np.float32)
    C = np.full((mn, mn), np.nan, np.float32)
    isa_layout_atom[1, 64](A, B, C, fx.rocdl.MFMA(mn, mn, k, dtype), mn)
    np.testing.assert_array_equal(C, A @ B.T + 0.5)


def test_gfx950_f16_mfma_is_the_gfx950_instruction_and_an_error_on_gfx942():
    A, C = np.zeros((32, 16), np.float32), np.zeros((32, 32), np.float32)
    op = fx.rocdl.MFMA(32, 32, 16, fx.Float16)
    prog = flydsl.compile(isa_layout_atom, A, A, C, op, 32, backend="rocm", arch="gfx950")
    assert "v_mfma_f32_32x32x16_f16" in prog.asm["amdgcn"]
    # bf16: the gfx950 intrinsic takes <8 x bfloat> (not the older forms' i16 vectors;
    # passing those made LLVM abort the process)
    bf16 = fx.rocdl.MFMA(32, 32, 16, fx.BFloat16)
    prog = flydsl.compile(isa_layout_atom, A, A, C, bf16, 32, backend="rocm", arch="gfx950")
    assert "v_mfma_f32_32x32x16_bf16" in prog.asm["amdgcn"]
    with pytest.raises(flydsl.DSLError, match=r"32x32x16 f16->f32 on gfx942.*gfx950") as info:
        flydsl.compile(isa_layout_atom, A, A, C, op, 32, backend="rocm", arch="gfx942")
    assert "fx.gemm" in info.value.source_line     # refused where it is used


# -- lists built inside a runtime loop ---------------------------------------------------

@flydsl.kernel
def lists_built_in_the_loop(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    total = 0.0
    for i in range(n):                      # a runtime loop
        lo = [None] * 2                     # built by an operator, in the loop body
        hi = [x[0]] + []
        d = dict(a=1.0)
        s = sorted([3, 1])
        for p in fx.range_constexpr(2):
            lo[p] = x[i] * (p + 1)
        hi.append(x[i])
        d["a"] = x[i]
        s[0] = x[i]
        total += lo[0] + lo[1] + hi[1] + d["a"] + s[0]
    out[0] = total


def test_lists_built_by_any_expression_in_a_runtime_loop_may_change_there():
    x, out = np.arange(5, dtype=np.float32), np.zeros(1, np.float32)
    lists_built_in_the_loop[1, 1](x, out, 5)
    assert out[0] == 6 * x.sum()


@flydsl.kernel
def outer_list_changed(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    lo = [None] * 2                         # built before the loop
    for i in range(n):
        lo[0] = x[i]
    out[0] = 0.0


class _Holder:
    """An object whose ``+`` returns a list it already holds (not a new one)."""
    def __init__(self):
        self.items = [0.0]

    def __add__(self, other):
        return self.items


_HOLDER = _Holder()


@flydsl.kernel
def held_list_changed(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    for i in range(n):
        items = _HOLDER + 1                 # the holder's own list, made before the loop
        items.append(x[i])
    out[0] = 0.0


@flydsl.kernel
def alias_changed(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    outer = [0.0]
    for i in range(n):
        same = outer + []                   # new: changing it is fine
        same[0] = x[i]
        alias = list(outer) and outer       # the outer list itself
        alias[0] = x[i]
    out[0] = 0.0


@pytest.mark.parametrize("kernel, line", [
    (outer_list_changed, "lo[0] = x[i]"),
    (held_list_changed, "items.append(x[i])"),
    (alias_changed, "alias[0] = x[i]"),
])
def test_lists_from_outside_a_runtime_loop_stay_an_error(kernel, line):
    x, out = np.arange(4, dtype=np.float32), np.zeros(1, np.float32)
    with pytest.raises(CompileTimeValueRequired, match="inside a runtime `if` or loop") as info:
        kernel[1, 1](x, out, 4)
    assert info.value.source_line.strip() == line


# -- raw MLIR values carried by a runtime loop -------------------------------------------

@flydsl.kernel
def raw_values_carried(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    acc = fx.Vector.filled(4, 0.0, fx.Float32)          # a vector before the loop
    total = fx.Float32(0.0)
    for i in range(n):
        acc = (acc + x[i]).ir_value()                   # a raw MLIR vector after the body,
        total = (total + x[i]).ir_value()               # as FlyDSL's rocdl.mfma_* returns
    for j in fx.range_constexpr(4):
        out[j] = fx.Vector(acc)[j]
    out[4] = total


def test_a_loop_carries_raw_mlir_values_as_the_kernel_values_they_are():
    x, out = np.arange(1, 6, dtype=np.float32), np.zeros(5, np.float32)
    raw_values_carried[1, 1](x, out, 5)
    np.testing.assert_array_equal(out, np.full(5, x.sum()))


# -- fx.rocdl.perm_b32 (v_perm_b32) ------------------------------------------------------

@flydsl.kernel
def byte_permutes(a: fx.Tensor, b: fx.Tensor, sel: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x
    out[t] = fx.rocdl.perm_b32(a[t], b[t], sel[t])                  # a runtime selector
    out[32 + t] = fx.rocdl.perm_b32(a[t], b[t], 0x07060302)         # upstream's constant


def _perm_inputs():
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32) for _ in "ab")
    s = rng.integers(0, 16, (32, 4)).astype(np.uint32)     # every selector kind, 0..15
    sel = s[:, 0] | s[:, 1] << 8 | s[:, 2] << 16 | s[:, 3] << 24
    return a, b, sel.astype(np.uint32)


def test_perm_b32_picks_the_isa_bytes_on_the_cpu():
    a, b, sel = _perm_inputs()
    out = np.zeros(64, np.uint32)
    byte_permutes[1, 32](a.view(np.int32), b.view(np.int32), sel.view(np.int32),
                         out.view(np.int32))
    want = [_perm_reference(x, y, s) for x, y, s in zip(a, b, sel)] + \
        [_perm_reference(x, y, 0x07060302) for x, y in zip(a, b)]
    np.testing.assert_array_equal(out, np.array(want, np.uint32))


def test_perm_b32_is_the_instruction_on_gfx942():
    a, b, sel = (x.view(np.int32) for x in _perm_inputs())
    prog = flydsl.compile(byte_permutes, a, b, sel, np.zeros(64, np.int32), backend="rocm",
                          arch="gfx942")
    assert prog.asm["amdgcn"].count("v_perm_b32") >= 2


# -- @flyc.jit on a function defined inside a kernel -----------------------------------

@flydsl.kernel
def jit_nested(x: fx.Tensor, out: fx.Tensor):
    t = fx.thread_idx.x

    @flydsl.jit
    def store_clamped():                    # upstream's finalize_o: a runtime `if` inside
        if x[t] < 0.0:
            out[t] = 0.0
        else:
            out[t] = x[t]
    store_clamped()


def test_a_jit_decorated_function_inside_a_kernel_is_traced_as_kernel_code():
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    out = np.full(4, np.nan, np.float32)
    jit_nested[1, 4](x, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0.0))


@flydsl.kernel
def carried_item_changes(x: fx.Tensor, out: fx.Tensor, n: fx.Int32):
    state = [fx.Float32(0.0), fx.Vector.filled(4, 0.0, fx.Float32)]
    for i in range(n):
        state = [state[0] + x[i], (x[i], x[i])]         # item [1]: a vector, then a tuple
    out[0] = state[0]


def test_a_loop_carried_structure_error_names_the_item_that_changed():
    x, out = np.zeros(4, np.float32), np.zeros(1, np.float32)
    with pytest.raises(flydsl.DSLError, match=r"a list of 2 before the loop and a list of 2 "
                       r"after its body \(item \[1\]: a vector of 4 values, then a tuple of 2\)"):
        carried_item_changes[1, 1](x, out, 4)
