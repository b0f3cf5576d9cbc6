"""IR dumps, pass timing and failure reproducers for the pipeline driver.

- ``FLYDSL_DUMP_IR=1``: every stage of every compile is written under
  ``FLYDSL_DUMP_DIR`` (default ``<tmp>/flydsl-dump``) as
  ``<kernel>.<n>/NN-<stage>.<ext>``.
- ``FLYDSL_PRINT_AFTER_ALL=1``: MLIR prints the IR after every pass (stderr).
- ``FLYDSL_PASS_TIMING=1``: MLIR prints its pass timing report (stderr).
- On a pass failure the IR that went into the failing stage is written with
  an ``mlir-opt --run-reproducer`` header naming the pipeline, and the error
  message shows its path.
"""
from __future__ import annotations

import itertools
import os
import re
import tempfile
from typing import Optional, Union

from .options import env_flag

_EXT = {"llir": "ll", "ptx": "ptx", "amdgcn": "s", "asm": "s", "cubin": "cubin",
        "hsaco": "hsaco", "so": "so"}
_counter = itertools.count()


def dump_enabled() -> bool:
    return env_flag("FLYDSL_DUMP_IR")


def print_after_all() -> bool:
    return env_flag("FLYDSL_PRINT_AFTER_ALL")


def pass_timing() -> bool:
    return env_flag("FLYDSL_PASS_TIMING")


def dump_root() -> str:
    return os.environ.get("FLYDSL_DUMP_DIR") or os.path.join(tempfile.gettempdir(), "flydsl-dump")


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name) or "module"


class CompileDump:
    """Where one compile's stages go (created lazily, only when something is written)."""

    def __init__(self, kernel: str):
        self.kernel = kernel or "module"
        self.index = 0
        self._dir: Optional[str] = None

    @property
    def dir(self) -> str:
        if self._dir is None:
            self._dir = os.path.join(dump_root(),
                                     f"{_safe(self.kernel)}.{os.getpid()}.{next(_counter)}")
            os.makedirs(self._dir, exist_ok=True)
        return self._dir

    def write(self, stage: str, content: Union[str, bytes]) -> str:
        ext = _EXT.get(stage, "mlir")
        path = os.path.join(self.dir, f"{self.index:02d}-{_safe(stage)}.{ext}")
        self.index += 1
        with open(path, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        return path

    def write_reproducer(self, stage: str, ir_text: str, pipeline: str) -> Optional[str]:
        """The failing stage's input IR, runnable with ``mlir-opt --run-reproducer``."""
        header = (f"// flydsl: stage {stage!r} of kernel {self.kernel!r} failed on this IR.\n"
                  f"// Reproduce: mlir-opt --run-reproducer {{file}}\n"
                  f"//        or: mlir-opt --pass-pipeline='{pipeline}' {{file}}\n")
        trailer = ("\n{-#\n  external_resources: {\n    mlir_reproducer: {\n"
                   f"      pipeline: \"{pipeline}\",\n      disable_threading: true,\n"
                   "      verify_each: true\n    }\n  }\n#-}\n")
        try:
            path = os.path.join(self.dir, f"{_safe(stage)}.reproducer.mlir")
            with open(path, "w") as f:
                f.write(header.replace("{file}", path) + ir_text + trailer)
            return path
        except OSError:
            return None
