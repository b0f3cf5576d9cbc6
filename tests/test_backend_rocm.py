"""The ROCm backend: HSACO production for every supported arch, without a GPU."""
from __future__ import annotations

import ctypes
import os
import struct

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx

ir = pytest.importorskip("mlir.ir")

from flydsl.compiler import CompileOptions, GPUTarget, MlirCompiler, get_backend  # noqa: E402
from flydsl.compiler import hsaco, toolchain  # noqa: E402
from flydsl.passes import rocdl as rocdl_passes  # noqa: E402
from flydsl.compiler.backends.rocm import RocmBackend  # noqa: E402
from flydsl.errors import CompilationError, ToolchainError  # noqa: E402

from gpu_modules import ALL  # noqa: E402

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V5 = 64, 3
#: EF_AMDGPU_MACH_AMDGCN_* (llvm/BinaryFormat/ELF.h); the low byte of e_flags.
EF_AMDGPU_MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx950": 0x4F, "gfx1100": 0x41,
                  "gfx1201": 0x4E}
WARP = {"gfx90a": 64, "gfx942": 64, "gfx950": 64, "gfx1100": 32, "gfx1201": 32}

def test_the_pip_installed_linker_is_found_first(monkeypatch):
    monkeypatch.delenv("FLYDSL_LLD", raising=False)
    lld = toolchain.find_lld()
    assert lld is not None and "ziglang" in lld[0] and lld[1:] == ["ld.lld"]


# -- a tiny ELF64 reader --------------------------------------------------------

def read_elf(data: bytes) -> dict:
    """e_machine, e_flags and every symbol (name -> (section index, type)) of an ELF64 LE file."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not an ELF64 LE file"
    e_machine, = struct.unpack_from("<H", data, 18)
    e_flags, = struct.unpack_from("<I", data, 48)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
                for i in range(e_shnum)]
    symbols = {}
    for sh_name, sh_type, _, _, off, size, link, _, _, entsize in sections:
        if sh_type not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        str_off = sections[link][4]
        for pos in range(off + entsize, off + size, entsize):  # entry 0 is the null symbol
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, pos)
            end = data.index(b"\0", str_off + st_name)
            symbols[data[str_off + st_name:end].decode()] = (st_shndx, st_info & 0xF)
    return {"osabi": data[7], "abi_version": data[8], "machine": e_machine, "flags": e_flags,
            "symbols": symbols}


def undefined_symbols(elf: dict) -> list[str]:
    return [name for name, (shndx, _) in elf["symbols"].items() if name and shndx == 0]


def compile_rocm(src: str, arch: str = "gfx942", **kw):
    with ir.Context():
        return MlirCompiler.compile(ir.Module.parse(src), backend="rocm", arch=arch, **kw)


def assert_hsaco(artifact, arch: str, kernels: list[str]) -> dict:
    elf = read_elf(artifact.asm["hsaco"])
    assert elf["machine"] == EM_AMDGPU
    assert (elf["osabi"], elf["abi_version"]) == (ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V5)
    assert elf["flags"] & 0xFF == EF_AMDGPU_MACH[arch]
    for name in kernels:
        assert name in elf["symbols"] and f"{name}.kd" in elf["symbols"]
    assert undefined_symbols(elf) == []
    return elf


# -- kernels beyond tests/gpu_modules -------------------------------------------

# block_dim/grid_dim on every axis and tanh on every float type: all of them are
# device-library calls in MLIR's plain ROCDL lowering.
DIMS_TANH = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @dims_tanh(%a: memref<?xf32>, %h: memref<?xf16>, %b: memref<?xbf16>) kernel {
      %tid = gpu.thread_id x
      %bx = gpu.block_dim x
      %by = gpu.block_dim y
      %bz = gpu.block_dim z
      %gx = gpu.grid_dim x
      %gy = gpu.grid_dim y
      %gz = gpu.grid_dim z
      %s0 = arith.addi %bx, %by : index
      %s1 = arith.addi %s0, %bz : index
      %s2 = arith.addi %s1, %gx : index
      %s3 = arith.addi %s2, %gy : index
      %s4 = arith.addi %s3, %gz : index
      %i = arith.remui %tid, %s4 : index
      %x = memref.load %a[%i] : memref<?xf32>
      %t = math.tanh %x : f32
      memref.store %t, %a[%i] : memref<?xf32>
      %xh = memref.load %h[%i] : memref<?xf16>
      %th = math.tanh %xh : f16
      memref.store %th, %h[%i] : memref<?xf16>
      %xb = memref.load %b[%i] : memref<?xbf16>
      %tb = math.tanh %xb : bf16
      memref.store %tb, %b[%i] : memref<?xbf16>
      gpu.return
    }
  }
}
'''

# What the DSL emits: strided 2-D views, the math list, atomics, shuffles,
# workgroup memory, scf loops, f16/bf16.
DSL_FEATURES = r'''
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @features(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>, %h: memref<?xf16>,
                       %b: memref<?xbf16>, %acc: memref<?xf32>, %cnt: memref<?xi32>, %n: index)
        workgroup(%tile: memref<256xf32, #gpu.address_space<workgroup>>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %k1 = arith.constant 1 : i32
      %width = arith.constant 32 : i32
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %x = memref.load %a[%tx, %ty] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      %e = math.exp %x : f32
      %l = math.log %e : f32
      %s = math.sqrt %l : f32
      %r = math.rsqrt %s : f32
      %si = math.sin %r : f32
      %co = math.cos %si : f32
      %ab = math.absf %co : f32
      %fm = math.fma %ab, %x, %co : f32
      %mx = arith.maximumf %fm, %x : f32
      %mn = arith.minnumf %mx, %x : f32
      %sh, %valid = gpu.shuffle xor %mn, %k1, %width : f32
      memref.store %sh, %tile[%tx] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %t = memref.load %tile[%c0] : memref<256xf32, #gpu.address_space<workgroup>>
      %old = memref.atomic_rmw addf %t, %acc[%c0] : (f32, memref<?xf32>) -> f32
      %oldi = memref.atomic_rmw addi %k1, %cnt[%c0] : (i32, memref<?xi32>) -> i32
      %xh = memref.load %h[%tx] : memref<?xf16>
      %eh = math.exp %xh : f16
      %sh16 = math.sin %eh : f16
      %xb = memref.load %b[%tx] : memref<?xbf16>
      %eb = math.exp %xb : bf16
      %cb = math.cos %eb : bf16
      %sb = arith.addf %cb, %xb : bf16
      %f0 = arith.extf %sh16 : f16 to f32
      %f1 = arith.extf %sb : bf16 to f32
      %init = arith.addf %f0, %f1 : f32
      %sum = scf.for %i = %c0 to %n step %c1 iter_args(%v = %init) -> f32 {
        %q = arith.addf %v, %t : f32
        scf.yield %q : f32
      }
      %oh = arith.truncf %sum : f32 to f16
      memref.store %oh, %h[%tx] : memref<?xf16>
      %ob = arith.truncf %sum : f32 to bf16
      memref.store %ob, %b[%tx] : memref<?xbf16>
      memref.store %sum, %a[%ty, %tx] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      gpu.return
    }
  }
}
'''


def unary_kernel(op: str, ty: str) -> str:
    return f'''
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @unary(%a: memref<?x{ty}>) kernel {{
      %c0 = arith.constant 0 : index
      %x = memref.load %a[%c0] : memref<?x{ty}>
      %y = {op} %x : {ty}
      memref.store %y, %a[%c0] : memref<?x{ty}>
      gpu.return
    }}
  }}
}}
'''


# -- targets --------------------------------------------------------------------

def test_targets():
    assert RocmBackend.default_arch() == "gfx942"
    assert RocmBackend.make_target("gfx942") == GPUTarget("rocm", "gfx942", 64)
    assert RocmBackend.make_target("gfx1100").warp_size == 32
    assert RocmBackend.make_target("gfx942:sramecc+:xnack-").arch == "gfx942"
    for arch, warp in WARP.items():
        assert RocmBackend.supports_target(GPUTarget("rocm", arch, warp)) is True
    assert RocmBackend.supports_target(GPUTarget("rocm", "gfx942", 32)) is False
    assert RocmBackend.supports_target(GPUTarget("cuda", "sm_90", 32)) is False
    assert RocmBackend.supports_target(GPUTarget("rocm", "gfx1030", 32)) is False
    assert RocmBackend.detect_target() is None or RocmBackend.supports_target(
        RocmBackend.detect_target())


def test_bad_arch_raises_value_error():
    with pytest.raises(ValueError, match="gfx90a, gfx942, gfx950, gfx1100, gfx1201"):
        RocmBackend.make_target("gfx1030")
    with pytest.raises(ValueError):
        get_backend("rocm", arch="sm_90")
    with pytest.raises(ValueError):
        RocmBackend(GPUTarget("rocm", "gfx942", 32))


def test_pipeline_and_identity():
    from mlir.passmanager import PassManager
    backend = get_backend("rocm", arch="gfx1201")
    fragments = backend.pipeline_fragments(CompileOptions())
    text = backend.pipeline_text(CompileOptions())
    assert "convert-gpu-to-rocdl{chipset=gfx1201 " in text and "<python:rocm-expand-tanh:" in text
    with ir.Context():
        for frag in fragments:
            if isinstance(frag, str):
                PassManager.parse(f"builtin.module({frag})")
        attrs = [ir.Attribute.parse(t) for t in backend.gpu_module_targets()]
    assert 'chip = "gfx1201"' in str(attrs[0])
    versions = backend.toolchain_versions()
    assert set(versions) == {"mlir", "lld"} and "llvmlite=" in versions["mlir"]
    assert backend.hash() != get_backend("rocm", arch="gfx942").hash()
    assert backend.hash() != backend.hash(CompileOptions(opt_level=1))


# -- HSACO ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ALL))
def test_gpu_modules_compile_to_hsaco(name):
    art = compile_rocm(ALL[name])
    assert art.binary_stage == "hsaco" and art.binary is art.asm["hsaco"]
    assert art.kernel_names == [name]
    assert_hsaco(art, "gfx942", [name])
    assert '.amdgcn_target "amdgcn-amd-amdhsa--gfx942' in art.asm["amdgcn"]
    assert "__ock" not in art.asm["llir"] and "__ocml" not in art.asm["llir"]


@pytest.mark.parametrize("arch", sorted(WARP))
def test_every_arch(arch):
    art = compile_rocm(DSL_FEATURES, arch)
    assert art.target.warp_size == WARP[arch]
    assert_hsaco(art, arch, ["features"])
    asm = art.asm["amdgcn"]
    assert f".wavefront_size: {WARP[arch]}" in asm
    assert ".max_flat_workgroup_size: 1024" in asm
    assert "s_swappc" not in asm  # no calls left


def test_block_dim_and_tanh_need_no_device_libs():
    art = compile_rocm(DIMS_TANH)
    assert_hsaco(art, "gfx942", ["dims_tanh"])
    llir = art.asm["llir"]
    assert "llvm.amdgcn.dispatch.ptr" in llir
    assert "__ockl" not in llir and "__ocml" not in llir and "llvm.tanh" not in llir


def test_known_block_size_bounds_the_workgroup():
    src = unary_kernel("math.exp", "f32").replace(
        "kernel {", "kernel attributes {known_block_size = array<i32: 128, 1, 1>} {")
    art = compile_rocm(src, "gfx1100", options=CompileOptions(opt_level=0))
    assert ".max_flat_workgroup_size: 128" in art.asm["amdgcn"]


@pytest.mark.parametrize("op,ty,missing", [
    # (exp, sin, tanh, erf, tan, ... have flydsl's own code: passes/math_portable.py)
    ("math.cbrt", "f32", "__ocml_cbrt_f32"),
    ("math.cbrt", "f64", "__ocml_cbrt_f64"),
])
def test_device_library_math_is_a_clear_error(op, ty, missing):
    with pytest.raises(CompilationError, match="ROCm device libraries") as info:
        compile_rocm(unary_kernel(op, ty))
    assert missing in str(info.value) and not isinstance(info.value, ToolchainError)


@pytest.mark.parametrize("how", ["env", "monkeypatch"])
def test_no_linker_keeps_the_assembly(monkeypatch, how):
    """Without an ld.lld every stage but the HSACO is made; asking for the HSACO says
    why it is missing, and links it once a linker is there."""
    with monkeypatch.context() as m:
        if how == "env":
            m.setenv("FLYDSL_LLD", "/nonexistent/ld.lld")
        else:
            m.setattr(toolchain, "find_lld", lambda: None)
        artifact = compile_rocm(ALL["vadd"])
        assert ".amdhsa_kernel vadd" in artifact.asm["amdgcn"]
        assert "define amdgpu_kernel void @vadd" in artifact.asm["llir"]
        assert "hsaco" not in artifact.asm and artifact.asm.get("hsaco") is None
        assert not artifact.asm.complete
        with pytest.raises(ToolchainError, match="ziglang") as info:
            artifact.asm["hsaco"]
        err = info.value
        assert "FLYDSL_LLD" in str(err) and err.stage == "hsaco" and err.kernel == "vadd"
        with pytest.raises(ToolchainError, match="no ld.lld"):
            artifact.binary
    assert_hsaco(artifact, "gfx942", ["vadd"])     # a linker again: linked on demand
    assert artifact.asm.complete and artifact.binary == artifact.asm["hsaco"]


def test_linker_reports_undefined_functions():
    llir = ('declare float @mystery(float)\n'
            'define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n'
            '  %x = load float, ptr addrspace(1) %p\n  %y = call float @mystery(float %x)\n'
            '  store float %y, ptr addrspace(1) %p\n  ret void\n}\n')
    _, obj = hsaco.emit_amdgcn(llir, "gfx942")
    assert read_elf(obj)["machine"] == EM_AMDGPU
    with pytest.raises(CompilationError, match="mystery"):
        hsaco.link_hsaco(obj)


# -- numerics of the tanh expansion (run on the host) ---------------------------

def test_tanh_expansion_accuracy():
    """The gpu.module's expanded tanh, JIT-compiled for the host, against float64 numpy."""
    from mlir.execution_engine import ExecutionEngine
    from mlir.passmanager import PassManager
    src = r'''
    module { gpu.module @m {
      func.func @tanh_all(%x: memref<?xf32>, %y: memref<?xf32>, %n: index)
          attributes {llvm.emit_c_interface} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        scf.for %i = %c0 to %n step %c1 {
          %v = memref.load %x[%i] : memref<?xf32>
          %t = math.tanh %v : f32
          memref.store %t, %y[%i] : memref<?xf32>
        }
        return
      }
    } }'''
    from mlir.runtime import get_ranked_memref_descriptor
    x = np.concatenate([np.linspace(-12, 12, 200001), [0.0, -0.0, 1e-30, -1e-7, 3e-4, 0.4999,
                                                      0.5, 0.5001, 50.0, -1e4, np.inf, -np.inf,
                                                      np.nan]])
    x = x.astype(np.float32)
    y = np.zeros_like(x)
    with ir.Context():
        module = ir.Module.parse(src)
        rocdl_passes.expand_tanh(module)
        gpu_module = module.body.operations[0].operation
        assert "math.tanh" not in str(gpu_module)
        body = "\n".join(str(op) for op in gpu_module.regions[0].blocks[0].operations)
        host = ir.Module.parse(f"module {{\n{body}\n}}")
        PassManager.parse("builtin.module(convert-scf-to-cf,convert-to-llvm,"
                          "reconcile-unrealized-casts)").run(host.operation)
        engine = ExecutionEngine(host, opt_level=2)
        args = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in (x, y)]
        engine.invoke("tanh_all", *args, ctypes.pointer(ctypes.c_int64(len(x))))
    nan = np.isnan(x)
    assert np.isnan(y[nan]).all()
    ref = np.tanh(x[~nan].astype(np.float64))
    ulp = np.abs(y[~nan] - ref) / np.spacing(np.abs(ref).astype(np.float32))
    assert ulp.max() < 4
    assert np.array_equal(np.signbit(y[x == 0]), np.signbit(x[x == 0]))


# -- flydsl.compile and launches without a linker --------------------------------

NO_LINKER_RUN = '''
import json, sys
import numpy as np
import flydsl, flydsl.expr as fx
from flydsl.compiler.cache import DiskCache
from flydsl.errors import ToolchainError

@flydsl.kernel
def twice(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        x[i] = x[i] * 2.0

x = np.zeros(64, np.float32)
prog = flydsl.compile(twice, x, 64, backend="rocm", arch="gfx942")
try:
    hsaco = prog.asm["hsaco"][:4].hex()
except ToolchainError as e:
    hsaco = str(e)
print(json.dumps({"stages": list(prog.asm), "amdgcn": ".amdhsa_kernel twice" in prog.asm["amdgcn"],
                  "hsaco": hsaco, "entries": len(DiskCache().entries()),
                  "from_cache": prog.kernels[0].from_cache}))
'''


def test_compile_without_a_linker_keeps_the_cache_trustworthy(tmp_path):
    """FLYDSL_LLD naming no linker: flydsl.compile still gives every stage but the
    HSACO, whose access says why; nothing is cached, so a later run with a linker
    builds (and caches) the HSACO."""
    import json
    import subprocess
    import sys
    script = tmp_path / "twice.py"
    script.write_text(NO_LINKER_RUN)

    def run(lld=None):
        env = {k: v for k, v in os.environ.items() if k != "FLYDSL_LLD"}
        env["FLYDSL_CACHE_DIR"] = str(tmp_path / "cache")
        if lld:
            env["FLYDSL_LLD"] = lld
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])
    without = run(lld="/nonexistent/ld.lld")
    assert without["stages"] == ["mlir", "llvm-mlir", "llir", "amdgcn"] and without["amdgcn"]
    assert "no ld.lld" in without["hsaco"] and "[kernel twice]" in without["hsaco"]
    assert without["entries"] == 0
    with_linker, again = run(), run()
    assert with_linker["hsaco"] == b"\x7fELF".hex() and "hsaco" in with_linker["stages"]
    assert with_linker["entries"] == 1 and not with_linker["from_cache"]
    assert again["hsaco"] == b"\x7fELF".hex() and again["from_cache"]


@flydsl.kernel
def fill_kernel(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    if i < n:
        x[i] = 1.0


def test_launch_without_a_linker_is_a_toolchain_error(fake_hip, monkeypatch):
    """Launching needs the HSACO: with a HIP runtime but no linker, the launch raises
    the ToolchainError that names the missing linker."""
    from fake_gpu import dev
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "rocm")
    monkeypatch.setenv("FLYDSL_LLD", "/nonexistent/ld.lld")
    with pytest.raises(ToolchainError, match="no ld.lld.*FLYDSL_LLD") as info:
        fill_kernel[1, 64](dev((64,)), 64)
    assert info.value.kernel == "fill_kernel"
