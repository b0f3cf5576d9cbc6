"""AMDGPU code objects (HSACO) from LLVM IR, without a ROCm install.

The MLIR bindings' LLVM has no AMDGPU target, so code generation goes
through llvmlite (whose LLVM has it): optimize the IR, emit the ``amdgcn``
assembly and an ELF relocatable object; an ``ld.lld`` of LLVM >= 17 then
links the object into the shared HSACO the HIP runtime loads.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import threading
from typing import Optional, Sequence

from ..errors import CompilationError, ToolchainError
from . import toolchain

TRIPLE = "amdgcn-amd-amdhsa"

#: How to get a linker, quoted by every "no linker" error.
LLD_HINT = ("install one with `apt-get install lld-19` (any LLVM >= 17 lld works), "
            "`pip install ziglang`, or point FLYDSL_LLD at an ld.lld binary")

# llvmlite shares one LLVM context per process; keep codegen single-file.
_LOCK = threading.Lock()


def device_lib_message(names: Sequence[str]) -> str:
    """Explain that ``names`` live in the ROCm device libraries, which flydsl cannot link."""
    listed = ", ".join(sorted(set(names)))
    return (f"the kernel needs {listed}, which only the ROCm device libraries "
            "(ocml/ockl bitcode) provide; they are not available to flydsl. "
            "Use an operation flydsl maps to LLVM intrinsics (f32/f16/bf16 exp, log, sqrt, "
            "rsqrt, sin, cos, tanh, ...) or another backend")


def llvmlite_version() -> str:
    """llvmlite's version and the LLVM it embeds, e.g. ``0.50.0/llvm-22.1.0``."""
    import llvmlite
    import llvmlite.binding as llvm
    return f"{llvmlite.__version__}/llvm-{'.'.join(map(str, llvm.llvm_version_info))}"


@functools.cache
def _amdgpu_target():
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        return llvm.Target.from_triple(TRIPLE)
    except RuntimeError as e:
        raise ToolchainError(f"this llvmlite build has no AMDGPU target ({e}); "
                             "install llvmlite>=0.50 from PyPI", stage="amdgcn") from None


def target_machine(arch: str, opt_level: int = 3, features: str = ""):
    """An llvmlite TargetMachine for ``arch`` (e.g. ``gfx942``)."""
    return _amdgpu_target().create_target_machine(
        cpu=arch, features=features, opt=opt_level, reloc="pic", codemodel="default")


def emit_amdgcn(llvm_ir: Sequence[str], arch: str, *, opt_level: int = 3,
                features: str = "") -> tuple[str, bytes]:
    """Link the LLVM IR modules, optimize at ``opt_level`` and generate code for ``arch``.

    Returns ``(assembly text, ELF relocatable object)``. Raises
    CompilationError when LLVM rejects the IR.
    """
    import llvmlite.binding as llvm
    if isinstance(llvm_ir, str):
        llvm_ir = [llvm_ir]
    with _LOCK:
        tm = target_machine(arch, opt_level, features)
        try:
            module = llvm.parse_assembly(llvm_ir[0])
            for extra in llvm_ir[1:]:
                module.link_in(llvm.parse_assembly(extra))
            module.triple = TRIPLE
            module.data_layout = str(tm.target_data)
            module.verify()
        except RuntimeError as e:
            raise CompilationError("LLVM rejected the generated IR", stage="amdgcn",
                                   diagnostics=str(e)) from None
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(opt_level))
        pb.getModulePassManager().run(module, pb)
        # Codegen rewrites the module (LDS lowering, ...): give each emission a fresh copy.
        optimized = module.as_bitcode()
        asm = tm.emit_assembly(llvm.parse_bitcode(optimized))
        obj = tm.emit_object(llvm.parse_bitcode(optimized))
    return asm, obj


def link_hsaco(obj: bytes, lld: Optional[list[str]] = None) -> bytes:
    """Link an AMDGPU relocatable object into a loadable HSACO with ``ld.lld -shared``.

    ``lld`` is the linker's argv prefix (default: :func:`toolchain.find_lld`).
    Raises ToolchainError when no usable linker exists or it fails, and
    CompilationError when the object calls functions nobody defines.
    """
    lld = lld or toolchain.find_lld()
    if not lld:
        raise ToolchainError(f"no ld.lld (LLVM >= 17) found to link the HSACO; {LLD_HINT}",
                             stage="hsaco")
    with tempfile.TemporaryDirectory(prefix="flydsl-hsaco-") as tmp:
        src, out = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "kernel.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        argv = [*lld, "-shared", "--no-undefined", src, "-o", out]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            raise ToolchainError(f"could not run {' '.join(lld)}: {e}; {LLD_HINT}",
                                 stage="hsaco") from None
        if proc.returncode != 0:
            log = (proc.stderr or proc.stdout).strip()
            undefined = re.findall(r"undefined symbol: (\S+)", log)
            if undefined:
                raise CompilationError(device_lib_message(undefined), stage="hsaco",
                                       diagnostics=log)
            raise ToolchainError(f"{' '.join(lld)} failed (exit {proc.returncode})",
                                 stage="hsaco", diagnostics=log)
        with open(out, "rb") as f:
            return f.read()
