"""Tracebacks of flydsl's errors trimmed to the user's frames.

An error leaving flydsl's API (``@flydsl.jit`` calls, launches, ``flydsl.compile``,
compiled programs) keeps the user's frames and, for a :class:`~flydsl.errors.DSLError`
located in a kernel, that kernel line as its innermost frame; ``FLYDSL_TRACEBACK=full``
keeps every frame (README: "Short tracebacks").
"""
from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Optional

from .errors import DSLError, is_internal_file


#: The note added to a trimmed traceback (once).
TRIMMED_NOTE = ("(flydsl-internal frames are hidden from this traceback; "
                "set FLYDSL_TRACEBACK=full to see them)")


def full_tracebacks() -> bool:
    """``FLYDSL_TRACEBACK=full``: keep flydsl's own frames in error tracebacks."""
    return os.environ.get("FLYDSL_TRACEBACK", "").strip().lower() == "full"


def trim_traceback(exc: BaseException) -> BaseException:
    """Remove flydsl's own frames from the traceback of ``exc`` and of the exceptions
    it chains (``raise ... from``), keeping the user's frames; a :class:`DSLError`
    located in a kernel gets that kernel line as its innermost frame. Called where an
    error leaves flydsl's API (``except FlydslError as e: trim_traceback(e); raise``:
    a bare ``raise`` adds no frame). ``FLYDSL_TRACEBACK=full`` keeps every frame."""
    if full_tracebacks():
        return exc
    hidden, seen, todo = 0, set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        frames = _frames(e.__traceback__)
        kept = _user_frames(frames)
        hidden += len(frames) - len(kept)
        links = [(tb.tb_frame, tb.tb_lasti, tb.tb_lineno) for tb in kept]
        if isinstance(e, DSLError):
            links += _kernel_frame(e, kept)
        e.__traceback__ = _link(links)
        todo += [e.__cause__, e.__context__]
    notes = getattr(exc, "__notes__", ())
    if hidden and TRIMMED_NOTE not in notes:
        exc.add_note(TRIMMED_NOTE)
    return exc


def _user_frames(frames: list) -> list:
    """The entries of ``frames`` (outermost first) that are not flydsl's: its own code,
    and the standard library it calls (``contextlib`` around its context managers)."""
    kept, inside = [], False
    for tb in frames:
        filename = tb.tb_frame.f_code.co_filename
        inside = is_internal_file(filename) or (inside and _is_stdlib_file(filename))
        if not inside:
            kept.append(tb)
    return kept


def _is_stdlib_file(filename: str) -> bool:
    import sysconfig
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return any(path.startswith(os.path.abspath(sysconfig.get_path(name)) + os.sep)
               for name in ("stdlib", "platstdlib"))


def _frames(tb: Optional[TracebackType]) -> list:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def _link(links: list) -> Optional[TracebackType]:
    tb = None
    for frame, lasti, lineno in reversed(links):
        tb = TracebackType(tb, frame, lasti, lineno)
    return tb


def _kernel_frame(err: "DSLError", kept: list) -> list:
    """The kernel source line of ``err`` as a traceback entry (as Jinja2 does for
    templates): a frame of a code object compiled at that file and line, named after
    the kernel. Nothing when the traceback already ends there (launch errors)."""
    if not err.filename or err.lineno <= 0 or err.filename.startswith("<"):
        return []
    if kept:
        last = kept[-1]
        if last.tb_frame.f_globals.get("__flydsl_kernel_frame__") or (
                last.tb_frame.f_code.co_filename == err.filename
                and last.tb_lineno == err.lineno):
            return []
    try:
        code = compile(_raise_at(err.filename, err.lineno), err.filename, "exec").replace(
            co_name=err.kernel or "<kernel>")
        exec(code, {"__flydsl_kernel_frame__": True, "_": _KernelLine()})
    except _KernelLine:
        tb = sys.exc_info()[2].tb_next
        return [(tb.tb_frame, tb.tb_lasti, tb.tb_lineno)] if tb is not None else []
    except Exception:  # noqa: BLE001 - a traceback decoration must never fail
        return []
    return []


def _raise_at(filename: str, lineno: int) -> str:
    """Source whose ``raise`` covers exactly the text of line ``lineno`` of ``filename``
    (same indentation, same width in bytes), so tracebacks quote that line without
    drawing ``^`` markers under part of it."""
    import linecache
    line = linecache.getline(filename, lineno).rstrip()
    indent = len(line) - len(line.lstrip())
    width = len(line.lstrip().encode())
    statement = "raise" + " " * max(1, width - 6) + "_"
    if indent and lineno > 1:
        return "\n" * (lineno - 2) + "if 1:\n" + " " * indent + statement
    return "\n" * (lineno - 1) + statement


class _KernelLine(Exception):
    """Raised (and caught) to make the frame that stands for a kernel line."""


# -- suggestions -------------------------------------------------------------
