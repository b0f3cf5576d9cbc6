"""Host (CPU) shared objects from LLVM IR: a packed entry point per kernel, then link.

The CPU backend's binary is a plain ``.so``: the runtime loads it with ctypes,
so a process that finds a kernel in the disk cache never touches MLIR.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile

from ..errors import ToolchainError
from ..runtime.drivers.cpu import PACKED_PREFIX, TEAM_PREFIX  # what the CPU launcher calls
from ..runtime.interrupts import (INTERRUPT_POINTER, INTERRUPT_STATE, SIGINT_HANDLER,
                                  SIGINT_PREVIOUS)
from . import toolchain

_DEFINE = re.compile(r'^define\s+(?:[\w.]+\s+)*void\s+@"?([\w.$]+)"?\((.*)\)', re.M)


def _split_params(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def defined_functions(llir: str) -> list[str]:
    """Names of the functions ``llir`` defines (with a body)."""
    return re.findall(r'^define\s+[^@]*@"?([\w.$]+)"?\(', llir, re.M)


def packed_wrappers(llir: str, names: list[str]) -> str:
    """LLVM IR defining ``i32 _flydsl_packed_<name>(ptr args)`` for each kernel ``name``.

    ``args`` is a table of pointers, one per parameter of ``name``; the wrapper
    loads each value and calls the kernel, so one ctypes call with one pointer
    launches any signature. It counts itself as running in the interrupt state
    (see :data:`HOST_ABI`) and returns the interrupt flag: nonzero means the
    blocks were cut short by Ctrl-C. A fresh launch (no kernel running, starting at
    block 0) clears a flag left over from an earlier interrupt; later chunks of a
    launch never do, so they stop too.
    """
    found = {m.group(1): _split_params(m.group(2)) for m in _DEFINE.finditer(llir)}
    out = [f"@{INTERRUPT_POINTER} = external global ptr"]
    for name in names:
        if name not in found:
            raise ValueError(f"kernel function {name!r} not found in the LLVM IR")
        types = [p.split()[0] for p in found[name]]
        loads, call_args = _load_args(types)
        begin = f"%arg{len(types) - 3}"     # (..., begin, end, dynamic shared bytes)
        lines = [f"define i32 @{PACKED_PREFIX}{name}(ptr %args) {{", "entry:", *loads,
                 *_enter_running([f"  %first = icmp eq i64 {begin}, 0"], "run"),
                 "run:",
                 f"  call void @{name}({', '.join(call_args)})",
                 "  %r1 = atomicrmw sub ptr %running, i32 1 monotonic",
                 "  %flag = load atomic i32, ptr %state monotonic, align 4",
                 "  ret i32 %flag",
                 "}"]
        out.append("\n".join(lines))
        out.append(_team_wrapper(name, types))
    return "\n\n".join(out) + "\n"


def _load_args(types: list[str], chunk: tuple = ()) -> tuple[list[str], list[str]]:
    """(lines loading each parameter's value from the packed table ``%args``, the call's
    typed arguments). ``chunk``: the values passed as (begin, end) instead of the
    table's (a team member's claimed blocks)."""
    n, lines, call_args = len(types), [], []
    for i, ty in enumerate(types):
        if chunk and i in (n - 3, n - 2):      # (..., begin, end, dynamic shared bytes)
            call_args.append(f"i64 {chunk[i - (n - 3)]}")
            continue
        lines.append(f"  %slot{i} = getelementptr ptr, ptr %args, i64 {i}")
        lines.append(f"  %ptr{i} = load ptr, ptr %slot{i}")
        lines.append(f"  %arg{i} = load {ty}, ptr %ptr{i}")
        call_args.append(f"{ty} %arg{i}")
    return lines, call_args


def _enter_running(first: list[str], then: str) -> list[str]:
    """Lines counting this entry as running (``%state``, ``%running``) and clearing a
    leftover interrupt flag when it is a fresh launch: no kernel running and ``first``
    (lines defining ``%first``) true. Continues at label ``then``."""
    return [f"  %state = load ptr, ptr @{INTERRUPT_POINTER}",
            "  %running = getelementptr i32, ptr %state, i64 1",
            "  %r0 = atomicrmw add ptr %running, i32 1 monotonic",
            "  %idle = icmp eq i32 %r0, 0",
            *first,
            "  %fresh = and i1 %idle, %first",
            f"  br i1 %fresh, label %reset, label %{then}",
            "reset:",
            "  store atomic i32 0, ptr %state monotonic, align 4",
            f"  br label %{then}"]


def _team_wrapper(name: str, types: list[str]) -> str:
    """``void _flydsl_team_<name>(ptr team)``: one member of an OpenMP team running a
    launch (``GOMP_parallel(fn, team, threads, 0)``, see
    :mod:`flydsl.runtime.drivers.openmp`). ``team`` is five i64: the packed argument
    table, the next unclaimed block (shared, atomically advanced), the grid's block
    count, the blocks per claim, and the interrupt flag seen (OR-ed in). Each member
    claims chunks until none is left or Ctrl-C raised the flag."""
    loads, call_args = _load_args(types, chunk=("%b", "%e"))
    lines = [f"define void @{TEAM_PREFIX}{name}(ptr %team) {{", "entry:",
             "  %args = load ptr, ptr %team",
             "  %nextp = getelementptr i64, ptr %team, i64 1",
             "  %endp = getelementptr i64, ptr %team, i64 2",
             "  %chunkp = getelementptr i64, ptr %team, i64 3",
             "  %flagp = getelementptr i64, ptr %team, i64 4",
             "  %end = load i64, ptr %endp",
             "  %chunk = load i64, ptr %chunkp",
             *loads,
             *_enter_running(["  %next0 = load atomic i64, ptr %nextp monotonic, align 8",
                              "  %first = icmp eq i64 %next0, 0"], "claim"),
             "claim:",
             "  %b = atomicrmw add ptr %nextp, i64 %chunk monotonic",
             "  %more = icmp slt i64 %b, %end",
             "  br i1 %more, label %run, label %done",
             "run:",
             "  %e0 = add i64 %b, %chunk",
             "  %over = icmp sgt i64 %e0, %end",
             "  %e = select i1 %over, i64 %end, i64 %e0",
             f"  call void @{name}({', '.join(call_args)})",
             "  %f = load atomic i32, ptr %state monotonic, align 4",
             "  %stop = icmp ne i32 %f, 0",
             "  br i1 %stop, label %done, label %claim",
             "done:",
             "  %r1 = atomicrmw sub ptr %running, i32 1 monotonic",
             "  %flag = load atomic i32, ptr %state monotonic, align 4",
             "  %flag64 = zext i32 %flag to i64",
             "  %old = atomicrmw or ptr %flagp, i64 %flag64 monotonic",
             "  ret void",
             "}"]
    return "\n".join(lines)


#: Linked into every CPU kernel library (its own LLVM module): the interrupt state
#: ``[flag, running]`` (two i32, reached through a pointer so that every library of a
#: process can share one),
#: ``flydsl_interrupted()`` (what :mod:`flydsl.passes.cpu_interrupts` calls) and a
#: SIGINT handler that raises the flag while kernels run, then calls the handler it
#: replaced (Python's). See :mod:`flydsl.runtime.interrupts`.
HOST_ABI = f"""
@{INTERRUPT_STATE} = global [2 x i32] zeroinitializer, align 4
@{INTERRUPT_POINTER} = global ptr @{INTERRUPT_STATE}, align 8
@{SIGINT_PREVIOUS} = global ptr null, align 8

define i1 @flydsl_interrupted() alwaysinline {{
  %state = load ptr, ptr @{INTERRUPT_POINTER}, align 8
  %flag = load atomic i32, ptr %state monotonic, align 4
  %stop = icmp ne i32 %flag, 0
  ret i1 %stop
}}

; float -> bfloat, rounding to nearest even (a NaN stays a NaN, quieted; subnormals
; rounded, where the AVX-512 BF16 and AVX-NE-CONVERT instructions flush them to zero:
; the CPU backend turns those features off). LLVM calls this compiler-rt function,
; which libgcc before GCC 13 lacks.
define hidden bfloat @__truncsfbf2(float %x) {{
  %bits = bitcast float %x to i32
  %high = lshr i32 %bits, 16
  %odd = and i32 %high, 1
  %bias = add i32 %odd, 32767
  %sum = add i32 %bits, %bias
  %rounded = lshr i32 %sum, 16
  %quiet = or i32 %high, 64
  %nan = fcmp uno float %x, 0.0
  %pick = select i1 %nan, i32 %quiet, i32 %rounded
  %half = trunc i32 %pick to i16
  %out = bitcast i16 %half to bfloat
  ret bfloat %out
}}

; double -> bfloat: to float rounding to odd (exact, or the nearer-to-zero float with
; its last bit set), then to bfloat to nearest even: no double-rounding error.
define hidden bfloat @__truncdfbf2(double %x) {{
  %t = fptrunc double %x to float
  %back = fpext float %t to double
  %exact = fcmp ueq double %back, %x
  %bits = bitcast float %t to i32
  %ax = call double @llvm.fabs.f64(double %x)
  %aback = call double @llvm.fabs.f64(double %back)
  %away = fcmp ogt double %aback, %ax
  %less = sub i32 %bits, 1
  %toward = select i1 %away, i32 %less, i32 %bits
  %odd = or i32 %toward, 1
  %pick = select i1 %exact, i32 %bits, i32 %odd
  %f = bitcast i32 %pick to float
  %out = call bfloat @__truncsfbf2(float %f)
  ret bfloat %out
}}
declare double @llvm.fabs.f64(double)

define void @{SIGINT_HANDLER}(i32 %sig) {{
entry:
  %state = load ptr, ptr @{INTERRUPT_POINTER}, align 8
  %running = getelementptr i32, ptr %state, i64 1
  %n = load atomic i32, ptr %running monotonic, align 4
  %busy = icmp sgt i32 %n, 0
  br i1 %busy, label %raise, label %chain
raise:
  store atomic i32 1, ptr %state monotonic, align 4
  br label %chain
chain:
  %prev = load ptr, ptr @{SIGINT_PREVIOUS}, align 8
  %bits = ptrtoint ptr %prev to i64
  %real = icmp ugt i64 %bits, 1
  br i1 %real, label %call, label %done
call:
  call void %prev(i32 %sig)
  br label %done
done:
  ret void
}}
"""


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
                         "kernel library; install gcc, or reinstall flydsl (its ziglang "
                         "dependency brings ld.lld)", stage="so")


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
    with _scratch_folder() as tmp:
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


@contextlib.contextmanager
def _scratch_folder():
    """A private temporary folder for the linker, in the first of
    :func:`~flydsl.private_files.scratch_folders` that can hold one; ToolchainError
    when none can."""
    from ..private_files import scratch_folders
    errors, tmp = [], None
    for where in scratch_folders():
        try:
            tmp = tempfile.mkdtemp(prefix="flydsl-so-", dir=where)
            break
        except OSError as e:
            errors.append(f"{where}: {e}")
    if tmp is None:
        raise ToolchainError("no folder to link the CPU kernel library in (TMPDIR and the "
                             "cache folder cannot be written): " + "; ".join(errors) +
                             "; point TMPDIR at a writable folder", stage="so")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
