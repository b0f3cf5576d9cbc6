"""Exceptions raised by flydsl.

Every error a user can trigger derives from :class:`FlydslError`, so
``except flydsl.FlydslError`` catches all of them.
"""
from __future__ import annotations

import contextlib
import os
import sys
from contextvars import ContextVar
from typing import Iterable, Iterator, Optional, Sequence


class FlydslError(Exception):
    """Base class of every flydsl exception."""


class UnknownPluginName(FlydslError, ValueError):
    """A name no plugin registered; ``available`` lists the registered ones."""

    kind = "plugin"

    def __init__(self, name: str, available: Iterable[str]):
        self.name = name
        self.available = sorted(available)
        super().__init__(
            f"unknown flydsl {self.kind} {name!r}; available {self.kind}s: "
            + (", ".join(self.available) or "(none)")
            + f" (a plugin adds one with register_{self.kind} or a 'flydsl.{self.kind}s' "
            "entry point)")


class InvalidBackend(UnknownPluginName):
    """An unknown compile-backend name was requested."""

    kind = "backend"


class InvalidDriver(UnknownPluginName):
    """An unknown launch-driver name: a backend names a driver no one registered."""

    kind = "driver"


class CompilationError(FlydslError):
    """A compile stage failed.

    ``stage`` names the failing stage, ``diagnostics`` holds MLIR's (or the
    external tool's) messages, ``ir_path`` where the failing IR was saved, if
    it was.
    """

    def __init__(self, message: str, *, stage: str = "", diagnostics: str = "",
                 ir_path: Optional[str] = None, kernel: str = ""):
        self.stage = stage
        self.diagnostics = diagnostics
        self.ir_path = ir_path
        self.kernel = kernel
        parts = []
        if kernel:
            parts.append(f"[kernel {kernel}]")
        if stage:
            parts.append(f"stage {stage!r}:")
        parts.append(message)
        text = " ".join(parts)
        if diagnostics:
            text += "\n" + diagnostics
        if ir_path:
            text += f"\n(failing IR written to {ir_path})"
        super().__init__(text)


class ToolchainError(CompilationError):
    """An external tool (ptxas, ld.lld) is missing or failed."""


class KernelSelectionError(FlydslError, LookupError):
    """A program compiled several kernels where one was needed (a binary stage such as
    ``cubin`` or ``hsaco``), or has no kernel by the name asked for. ``names`` lists
    the names it has."""

    def __init__(self, message: str, names: Sequence[str] = ()):
        self.names = list(names)
        super().__init__(message)


class DSLError(FlydslError):
    """A problem in a kernel's Python source, located at file and line."""

    def __init__(self, message: str, *, kernel: str = "", filename: str = "",
                 lineno: int = 0, source_line: str = ""):
        self.kernel = kernel
        self.filename = filename
        self.lineno = lineno
        self.source_line = source_line
        self.message = message
        where = ""
        if filename:
            where = f"{filename}:{lineno}: " if lineno else f"{filename}: "
        head = f"in kernel {kernel!r}: " if kernel else ""
        text = f"{where}{head}{message}"
        if source_line:
            text += f"\n    {source_line.strip()}"
        super().__init__(text)


class DSLTypeError(DSLError, TypeError):
    """A type mismatch inside a kernel or between a kernel and its arguments."""


class DSLNameError(DSLError, NameError):
    """An undefined name inside a kernel."""


class DSLAttributeError(DSLTypeError, AttributeError):
    """A missing attribute inside a kernel (``except AttributeError`` in a kernel catches it)."""


class UnsupportedConstructError(DSLError):
    """A Python construct flydsl cannot trace."""


class DivergentBarrierError(UnsupportedConstructError):
    """A barrier (``fx.barrier()`` or a block collective) under an ``if`` or loop whose
    condition depends on the thread id: some threads of a block would skip it, which
    deadlocks or is undefined on GPUs. Raised on every backend, at the barrier's line."""


class DivergentBarrierWarning(UserWarning):
    """A barrier under an ``if`` or loop whose condition depends on loaded values, which
    may differ between the threads of a block (GPU backends; the CPU rejects it)."""


class WarpTooNarrowError(DSLTypeError):
    """A warp operation over more lanes than the target's warp has: a kernel written
    for 64-lane AMD wavefronts, traced for 32-lane warps. A launch on the CPU backend at
    its default width runs such a kernel again with 64-lane warps."""


class CompileTimeValueRequired(DSLTypeError):
    """A kernel needs a compile-time value where it has a runtime one: typically the
    index of a runtime loop used to index a Python tuple, or a Python list changed
    inside a runtime loop or branch. ``fx.range_constexpr`` unrolls such a loop."""


class LaunchError(DSLError, ValueError):
    """A bad launch configuration (grid, block, shared memory, argument placement).

    Located at the user's launch call (the first frame outside flydsl).
    """

    def __init__(self, message: str, *, kernel: str = "", filename: str = "",
                 lineno: int = 0, source_line: str = ""):
        if not filename:
            filename, lineno, source_line = user_call_site()
        super().__init__(message, kernel=kernel, filename=filename, lineno=lineno,
                         source_line=source_line)


def user_call_site() -> tuple:
    """(file, line, source text) of the innermost caller outside the flydsl package,
    or the site a tool set with :func:`entry_site` when the walk reaches that tool."""
    import linecache
    entry = _ENTRY_SITE.get()
    frame = sys._getframe(1)
    while frame is not None:
        if entry is not None and frame is entry[0]:
            return entry[1]
        filename = frame.f_code.co_filename
        if not is_internal_file(filename) and not filename.startswith("<frozen"):
            lineno = frame.f_lineno
            return filename, lineno, linecache.getline(filename, lineno).rstrip("\n")
        frame = frame.f_back
    return "", 0, ""


#: (the tool's frame, the site to report) while a tool such as ``flydsl compile`` runs.
_ENTRY_SITE: ContextVar[Optional[tuple]] = ContextVar("flydsl_entry_site", default=None)


@contextlib.contextmanager
def entry_site(frame, filename: str, lineno: int, source_line: str = "") -> Iterator[None]:
    """Locate launch errors at ``filename:lineno`` when no user code lies between the
    launch and ``frame``: a tool (``flydsl compile FILE.py::kernel``) launches on the
    user's behalf, and the frames above it are a launcher script, not user code."""
    token = _ENTRY_SITE.set((frame, (filename, lineno, source_line)))
    try:
        yield
    finally:
        _ENTRY_SITE.reset(token)


def is_internal_file(filename: str) -> bool:
    """Whether ``filename`` is flydsl's own code (the package and ``flydsl.passes``)."""
    return os.path.abspath(filename).startswith(_internal_dirs())


def _internal_dirs() -> tuple:
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    passes = sys.modules.get("flydsl.passes")   # not imported: none of its frames exist
    dirs += [os.path.abspath(p) for p in getattr(passes, "__path__", ())]
    return tuple(d + os.sep for d in dirs)


def close_matches(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean fx.erf or fx.erfc?"`` for the names in ``candidates`` close to
    ``name`` (``prefix`` spells their namespace), or ``""`` when none is."""
    import difflib
    found = difflib.get_close_matches(name, sorted(set(candidates)), n=4, cutoff=0.75)
    if not found:
        return ""
    spelled = [f"{prefix}{n}" for n in found]
    listed = spelled[0] if len(spelled) == 1 else ", ".join(spelled[:-1]) + " or " + spelled[-1]
    return f"; did you mean {listed}?"


class CompileTimeWarning(UserWarning):
    """A kernel whose trace is large enough to make compiling it slow."""


class FlydslRuntimeError(FlydslError, RuntimeError):
    """A driver or runtime failure while loading or launching a kernel."""
