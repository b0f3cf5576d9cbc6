"""Ctrl-C during CPU kernels: a flag the kernels check, raised by SIGINT.

Every CPU kernel library carries the same small host ABI (linked in by the CPU
backend, :data:`flydsl.compiler.host_object.HOST_ABI`): an interrupt state
``[flag, running]``, a pointer to the state the library uses, and a SIGINT
handler. The first library a process loads becomes the *host*: it is never
unloaded, its handler is installed (chaining to the handler it replaces, Python's
own, so ``KeyboardInterrupt`` is still raised), and every other library is pointed
at its state. While any kernel runs (``running > 0``) a SIGINT raises the flag;
kernels test it before each block and in every ``while`` loop
(:mod:`flydsl.passes.cpu_interrupts`) and their packed entry returns it, so a
launch stops within a block and the launcher raises ``KeyboardInterrupt`` once no
thread of the launch is left running.

Where the handler cannot be installed (another platform, a handler taking
``siginfo``, SIGINT ignored) Ctrl-C still stops multi-threaded launches between
blocks, as the launching thread gets the ``KeyboardInterrupt`` and raises the flag.
"""
from __future__ import annotations

import ctypes
import platform
import signal
import sys
import threading

#: Symbols of the host ABI (see the module docstring).
INTERRUPT_POINTER = "flydsl_interrupt_ptr"
INTERRUPT_STATE = "flydsl_interrupt_state"
SIGINT_HANDLER = "flydsl_on_sigint"
SIGINT_PREVIOUS = "flydsl_sigint_prev"

_lock = threading.Lock()
_host = None             # the pinned library whose state every kernel library uses
_flag = None             # ctypes.c_int32 view of the host's flag
_installed = None        # our handler's address once installed
#: glibc's ``struct sigaction`` on Linux x86-64 and AArch64: handler at 0, flags at 136.
_SA_FLAGS_OFFSET = 136
_SA_SIGINFO = 4


def attach(lib: ctypes.CDLL) -> None:
    """Point ``lib`` at the process's interrupt state (the first library becomes the
    host) and make sure the SIGINT handler is in place."""
    global _host, _flag
    with _lock:
        if _host is None:
            _host = lib
            _flag = ctypes.c_int32.in_dll(lib, INTERRUPT_STATE)
        state = ctypes.addressof(_flag)
        ctypes.c_void_p.in_dll(lib, INTERRUPT_POINTER).value = state
        _ensure_handler()


def raise_flag() -> None:
    """Ask every running kernel to stop (the launching thread saw Ctrl-C itself)."""
    if _flag is not None:
        _flag.value = 1


def interrupted(kernel: str) -> KeyboardInterrupt:
    """The exception for a launch whose kernels stopped on the flag. The flag stays up
    for the other kernels still running; the next fresh launch clears it (see
    :func:`flydsl.compiler.host_object.packed_wrappers`)."""
    return KeyboardInterrupt(f"flydsl kernel {kernel!r} was interrupted")


def _ensure_handler() -> None:
    """Install the host's SIGINT handler in front of the current one (Python's), unless
    it is already there; a no-op where glibc's struct layout is not known."""
    global _installed
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64",
                                                                             "aarch64"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    action = ctypes.create_string_buffer(256)
    if libc.sigaction(signal.SIGINT, None, action) != 0:
        return
    current = ctypes.c_void_p.from_buffer(action, 0).value or 0
    ours = ctypes.cast(getattr(_host, SIGINT_HANDLER), ctypes.c_void_p).value
    if current == ours:
        return
    flags = ctypes.c_int.from_buffer(action, _SA_FLAGS_OFFSET).value
    if current in (0, 1) or flags & _SA_SIGINFO:   # SIG_DFL, SIG_IGN, or a 3-argument one
        return
    ctypes.c_void_p.in_dll(_host, SIGINT_PREVIOUS).value = current
    ctypes.c_void_p.from_buffer(action, 0).value = ours
    if libc.sigaction(signal.SIGINT, action, None) == 0:
        _installed = ours


def handler_installed() -> bool:
    """Whether SIGINT currently goes through flydsl's handler first."""
    with _lock:
        if _host is None or _installed is None:
            return False
        action = ctypes.create_string_buffer(256)
        ctypes.CDLL(None).sigaction(signal.SIGINT, None, action)
        return ctypes.c_void_p.from_buffer(action, 0).value == _installed
