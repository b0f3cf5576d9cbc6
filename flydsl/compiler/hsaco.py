"""AMDGPU code objects (HSACO) from LLVM IR, without a ROCm install.

The MLIR bindings' LLVM has no AMDGPU target, so code generation goes
through llvmlite (whose LLVM has it): optimize the IR, emit the ``amdgcn``
assembly and an ELF relocatable object; an ``ld.lld`` of LLVM >= 17 then
links the object into the shared HSACO the HIP runtime loads.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Optional, Sequence

from ..errors import CompilationError, ToolchainError
from ..passes.rocdl import TRIPLE, device_lib_message
from . import llvm_codegen, toolchain

#: How to get a linker, quoted by every "no linker" error.
LLD_HINT = ("flydsl's install brings one (the `ziglang` package: `pip install ziglang`); "
            "or point FLYDSL_LLD at any ld.lld of LLVM >= 17")

def target_machine(arch: str, opt_level: int = 3, features: str = ""):
    """An llvmlite TargetMachine for ``arch`` (e.g. ``gfx942``)."""
    try:
        return llvm_codegen.target_machine(TRIPLE, arch, features, opt_level)
    except CompilationError as e:
        raise ToolchainError(f"{e}; install llvmlite>=0.50 from PyPI", stage="amdgcn") from None


def emit_amdgcn(llvm_ir: Sequence[str], arch: str, *, opt_level: int = 3,
                features: str = "") -> tuple[str, bytes]:
    """Link the LLVM IR modules, optimize at ``opt_level`` and generate code for ``arch``.

    Returns ``(assembly text, ELF relocatable object)``. Raises
    CompilationError when LLVM rejects the IR.
    """
    tm = target_machine(arch, opt_level, features)
    return llvm_codegen.optimize_and_emit(llvm_ir, tm, TRIPLE, opt_level, stage="amdgcn")


def link_hsaco(obj: bytes, lld: Optional[list[str]] = None, *, kernel: str = "") -> bytes:
    """Link an AMDGPU relocatable object into a loadable HSACO with ``ld.lld -shared``.

    ``lld`` is the linker's argv prefix (default: :func:`toolchain.find_lld`).
    Raises ToolchainError when no usable linker exists or it fails, and
    CompilationError when the object calls functions nobody defines.
    """
    lld = lld or toolchain.find_lld()
    if not lld:
        raise ToolchainError("no ld.lld (LLVM >= 17) found to link the HSACO, which "
                             "launching needs (the mlir, llir and amdgcn stages need no "
                             f"linker); {LLD_HINT}", stage="hsaco", kernel=kernel)
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
