"""Host (CPU) shared objects from LLVM IR: a packed entry point per kernel, then link.

The CPU backend's binary is a plain ``.so``: the runtime loads it with ctypes,
so a process that finds a kernel in the disk cache never touches MLIR.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from ..errors import ToolchainError
from ..runtime.cpu_launcher import PACKED_PREFIX  # the ABI the CPU launcher calls
from . import toolchain

_DEFINE = re.compile(r'^define\s+(?:[\w.]+\s+)*void\s+@"?([\w.$]+)"?\((.*)\)', re.M)


def _split_params(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def packed_wrappers(llir: str, names: list[str]) -> str:
    """LLVM IR defining ``_flydsl_packed_<name>(ptr args)`` for each kernel ``name``.

    ``args`` is a table of pointers, one per parameter of ``name``; the wrapper
    loads each value and calls the kernel, so one ctypes call with one pointer
    launches any signature.
    """
    found = {m.group(1): _split_params(m.group(2)) for m in _DEFINE.finditer(llir)}
    out = []
    for name in names:
        if name not in found:
            raise ValueError(f"kernel function {name!r} not found in the LLVM IR")
        types = [p.split()[0] for p in found[name]]
        lines = [f"define void @{PACKED_PREFIX}{name}(ptr %args) {{"]
        call_args = []
        for i, ty in enumerate(types):
            lines.append(f"  %slot{i} = getelementptr ptr, ptr %args, i64 {i}")
            lines.append(f"  %ptr{i} = load ptr, ptr %slot{i}")
            lines.append(f"  %arg{i} = load {ty}, ptr %ptr{i}")
            call_args.append(f"{ty} %arg{i}")
        lines.append(f"  call void @{name}({', '.join(call_args)})")
        lines.append("  ret void")
        lines.append("}")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def linker_argv() -> list[str]:
    cc = os.environ.get("CC")
    for cand in ([cc] if cc else []) + ["cc", "gcc", "clang"]:
        path = shutil.which(cand)
        if path:
            return [path, "-shared", "-nostartfiles"]
    lld = toolchain.find_lld()
    if lld:
        return [*lld, "-shared"]
    raise ToolchainError("no C compiler (cc/gcc/clang) or ld.lld found to link the CPU "
                         "kernel library; install gcc or lld-19", stage="so")


def linker_version() -> str:
    try:
        return toolchain.tool_version(linker_argv()[:1])
    except ToolchainError:
        return "none"


def link_shared_object(obj: bytes, libs: list[str] = ()) -> bytes:
    """Link a relocatable host object into a shared library and return its bytes.

    ``libs`` (e.g. ``["m"]``) are linked with a C compiler driver; a bare ld.lld
    leaves their symbols to be resolved when the library is loaded into Python,
    which already has them.
    """
    argv = linker_argv()
    with tempfile.TemporaryDirectory(prefix="flydsl-so-") as tmp:
        src, out = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "kernel.so")
        with open(src, "wb") as f:
            f.write(obj)
        link_libs = [f"-l{lib}" for lib in libs] if "-nostartfiles" in argv else []
        proc = subprocess.run([*argv, src, "-o", out, *link_libs],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise ToolchainError(f"{argv[0]} failed to link the CPU kernel library",
                                 stage="so", diagnostics=(proc.stderr or proc.stdout).strip())
        with open(out, "rb") as f:
            return f.read()
