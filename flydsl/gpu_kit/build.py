"""``python -m flydsl.gpu_kit build``: compile every case for a GPU arch (no GPU
needed) into a kit folder: ``kernels.tar.gz`` (the bundle), ``manifest.json``, and
the sources the run side imports (``flydsl/`` with ``flydsl/passes/``, ``examples/``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

#: What may be brought to the GPU machine per run.
MAX_KIT_BYTES = 64 << 20
BUNDLE_NAME = "kernels.tar.gz"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info")


def build(arch: str, out: str) -> dict:
    """Write the kit for CUDA ``arch`` to ``out``; returns its manifest."""
    import flydsl
    from ..compiler import fingerprint
    from .cases import EXAMPLE_DIRS, HostArrays, all_cases
    root = _repo_root()
    os.makedirs(out, exist_ok=True)
    _add_example_paths(os.path.join(root, "examples"), EXAMPLE_DIRS)
    started = time.perf_counter()
    rows = []
    with flydsl.capture(os.path.join(out, BUNDLE_NAME), overwrite=True) as captured:
        for case in all_cases(arch):
            prog = flydsl.compile(case.function(), *case.make(HostArrays()), backend="cuda",
                                  arch=arch)
            rows.append({"case": case.name, "kernels": [k.kernel_name for k in prog.kernels],
                         "binary": sorted({k.binary_stage for k in prog.kernels})})
    _copy_sources(root, out)
    copied = fingerprint.sources_hash(os.path.join(out, "flydsl"),
                                      os.path.join(out, "flydsl", "passes"))
    if copied != fingerprint.flydsl_sources_hash():
        raise OSError("flydsl's sources changed while the kit was built (its kernels' keys "
                      "would not match the copy): build it again")
    manifest = {"arch": arch, "backend": "cuda", "flydsl": flydsl.__version__,
                "flydsl_sources": fingerprint.flydsl_sources_hash(),
                "built_with": {"python": sys.version.split()[0], "numpy": _numpy_version()},
                "bundle": BUNDLE_NAME, "kernels": captured.count, "cases": rows,
                "build_seconds": round(time.perf_counter() - started, 1)}
    manifest["bytes"] = _folder_bytes(out)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    if manifest["bytes"] > MAX_KIT_BYTES:
        raise OSError(f"the kit {out} is {manifest['bytes']} bytes, over {MAX_KIT_BYTES}")
    print(f"gpu kit for cuda/{arch}: {captured.count} kernel(s) from {len(rows)} case(s), "
          f"{manifest['bytes'] / 1e6:.1f} MB in {out}", file=sys.stderr)
    return manifest


def _repo_root() -> str:
    """The folder holding ``examples/`` (flydsl's checkout, or a kit)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isdir(os.path.join(here, "examples")):
        raise OSError(f"no examples/ beside the flydsl package in {here}: build the kit "
                      "from a checkout of the flydsl repository")
    return here


def _add_example_paths(examples: str, subdirs) -> None:
    for sub in subdirs:
        path = os.path.join(examples, sub)
        if path not in sys.path:
            sys.path.insert(0, path)


def _copy_sources(root: str, out: str) -> None:
    """flydsl's package exactly as this process hashed it (its keys depend on it), with
    ``flydsl.passes`` inside it, and the examples."""
    import flydsl
    import flydsl.passes as passes
    package = os.path.dirname(os.path.abspath(flydsl.__file__))
    for name, src in (("flydsl", package), ("examples", os.path.join(root, "examples"))):
        dest = os.path.join(out, name)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest, ignore=_SKIP)
    passes_dir = os.path.dirname(os.path.abspath(passes.__file__))
    if not passes_dir.startswith(package + os.sep):
        shutil.copytree(passes_dir, os.path.join(out, "flydsl", "passes"), ignore=_SKIP)


def _numpy_version() -> str:
    import numpy
    return numpy.__version__


def _folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
