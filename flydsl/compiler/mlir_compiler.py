"""Run a backend's pipeline over a ``gpu.container_module``."""
from __future__ import annotations

import re
import threading
import warnings
from typing import Optional, Union

from ..errors import CompilationError, DSLError
from . import debug_dump
from .artifacts import CompiledArtifact
from .backends.base import BaseBackend, PythonPass
from .backends.registry import get_backend
from .options import CompileOptions

# MLIR contexts are not thread-safe; compiles that share one are serialized.
_COMPILE_LOCK = threading.RLock()
#: The stack compiles run on (reserved, not committed: pages are touched as used).
#: LLVM's optimizer recurses along long dependence chains (unrolled loops): on the
#: 8 MiB main stack a chain of ~100k operations overflowed it (SIGSEGV).
COMPILE_STACK_BYTES = 1 << 30
_STACK_SIZE_LOCK = threading.Lock()


def stage_name(fragment: Union[str, PythonPass]) -> str:
    """A readable name for a pipeline fragment: its first pass."""
    if isinstance(fragment, PythonPass):
        return fragment.name
    m = re.match(r"\s*(?:[\w.]+\()?\s*([\w-]+)", fragment)
    return m.group(1) if m else fragment


class MlirCompiler:
    """Compiles MLIR modules with a backend's pipeline.

    ``compile`` never aborts the interpreter on bad IR: verification and pass
    failures raise :class:`~flydsl.errors.CompilationError` carrying MLIR's
    diagnostics and the failing stage.
    """

    @classmethod
    def compile(cls, module, *, arch: Optional[str] = None,
                backend: Union[str, BaseBackend, None] = None,
                options: Optional[CompileOptions] = None,
                chip: Optional[str] = None, func_name: str = "",
                keep_stages: bool = True) -> CompiledArtifact:
        """Lower ``module`` (an ``ir.Module``; left untouched) and return the artifact.

        ``keep_stages=False`` leaves ``artifact.stages`` (the module's text after each
        pipeline fragment) empty unless ``FLYDSL_DUMP_IR`` is set: printing a large
        kernel after every fragment was ~40% of its compile. ``chip=`` is the
        deprecated spelling of ``arch=``.
        """
        if chip is not None:
            warnings.warn("MlirCompiler.compile(chip=...) is deprecated; use arch=...",
                          DeprecationWarning, stacklevel=2)
            arch = arch or chip
        if isinstance(backend, BaseBackend):
            if arch and arch != backend.target.arch:
                backend = get_backend(backend.name, arch=arch)
        else:
            backend = get_backend(backend, arch=arch)
        options = options or CompileOptions.from_env()
        with _COMPILE_LOCK:
            return on_large_stack(_run, module, backend, options, func_name, keep_stages)


def on_large_stack(fn, *args):
    """``fn(*args)`` on a thread with a :data:`COMPILE_STACK_BYTES` stack (its result,
    or its exception re-raised here); on this thread where no such thread can start.

    A stack overflow in native code kills the process, and cannot be caught: the large
    stack makes it far less likely; the trace op limit (``FLYDSL_TRACE_OP_LIMIT``)
    keeps kernels within what it was measured to hold. Ctrl-C waits for the compile
    to end (as it did on this thread: LLVM cannot be interrupted), then is raised.
    """
    outcome: list = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
            outcome.append((False, e))
        finally:
            done.set()
    try:
        _start_thread(run)
    except (RuntimeError, ValueError, MemoryError):
        return fn(*args)
    interrupted = _wait(done)
    ok, value = outcome[0]
    if not ok:
        raise value
    if interrupted:
        raise KeyboardInterrupt
    return value


def _start_thread(target) -> threading.Thread:
    with _STACK_SIZE_LOCK:      # threading.stack_size is process-wide: set, start, restore
        previous = threading.stack_size(COMPILE_STACK_BYTES)
        try:
            thread = threading.Thread(target=target, name="flydsl-compile", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    return thread


def _wait(done: threading.Event) -> bool:
    """Wait until ``done`` is set, even through Ctrl-C; whether Ctrl-C was pressed.
    (Not ``Thread.join``: before Python 3.13, a join cut short by Ctrl-C could mark a
    running thread as ended.)"""
    interrupted = False
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            interrupted = True
    return interrupted


def _run(module, backend: BaseBackend, options: CompileOptions, kernel: str,
         keep_stages: bool = True) -> CompiledArtifact:
    import mlir.ir as ir
    from ..passes.ir import diagnostics, kernel_names

    artifact = CompiledArtifact(backend=backend.name, target=backend.target,
                                binary_stage=backend.binary_stage)
    dump = debug_dump.CompileDump(kernel)
    dumping = debug_dump.dump_enabled()
    with module.context, ir.Location.unknown():
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise CompilationError("input module does not verify", stage="verify",
                                   diagnostics=diagnostics(e), kernel=kernel) from None
        artifact.asm["mlir"] = str(module)
        # Work on a copy that keeps source locations: passes report errors at user lines.
        work = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        if dumping:
            dump.write("input", work.operation.get_asm(enable_debug_info=True))
        artifact.kernel_names = kernel_names(work)
        _attach_targets(work, backend.gpu_module_targets(options))
        for fragment in backend.pipeline_fragments(options):
            _run_fragment(work, fragment, backend, options, kernel, dump)
            if keep_stages or dumping:
                name = stage_name(fragment)
                text = artifact.stages[_unique(artifact.stages, name)] = str(work)
                if dumping:
                    dump.write(name, text)
        artifact.asm["llvm-mlir"] = str(work)
        try:
            backend.finalize(work, artifact, options)
        except CompilationError:
            raise
        except (ValueError, RuntimeError, ir.MLIRError) as e:
            raise CompilationError(str(e), stage="finalize", kernel=kernel) from None
    if dumping:
        for name, content in artifact.asm.items():
            if name not in ("mlir", "llvm-mlir"):
                dump.write(name, content)
    return artifact


def _run_fragment(work, fragment, backend, options, kernel: str, dump) -> None:
    from ..passes.ir import diagnostics
    """Run one stage; on failure write a reproducer and raise CompilationError."""
    import mlir.ir as ir
    from mlir.passmanager import PassManager
    name = stage_name(fragment)
    # the reproducer's input, printed only if the stage fails (a clone costs ~1/10 of a
    # print of the module)
    before = work.operation.clone()
    try:
        if isinstance(fragment, PythonPass):
            fragment.resolve()(work, backend.target, options)
            return
        pipeline = f"builtin.module({fragment})"
        pm = PassManager.parse(pipeline)
        if debug_dump.print_after_all():
            work.context.enable_multithreading(False)  # MLIR requires it for IR printing
            pm.enable_ir_printing(print_after_all=True)
        if debug_dump.pass_timing():
            pm.enable_timing()
        pm.run(work.operation)
        del pm  # the timing report prints when the pass manager goes away
    except ir.MLIRError as e:
        path = dump.write_reproducer(name, before.get_asm(enable_debug_info=True),
                                     _pipeline_of(fragment))
        raise CompilationError("pass pipeline failed", stage=name, diagnostics=diagnostics(e),
                               kernel=kernel, ir_path=path) from None
    except (CompilationError, DSLError):
        raise
    except ValueError as e:  # e.g. unknown pass name in PassManager.parse
        raise CompilationError(str(e), stage=name, kernel=kernel) from None
    except Exception as e:  # noqa: BLE001 - a bug in a Python pass still names its stage
        path = dump.write_reproducer(name, before.get_asm(enable_debug_info=True),
                                     _pipeline_of(fragment))
        raise CompilationError(f"internal error in {name}: {type(e).__name__}: {e}",
                               stage=name, kernel=kernel, ir_path=path) from e


def _unique(existing: dict, name: str) -> str:
    if name not in existing:
        return name
    n = 2
    while f"{name}.{n}" in existing:
        n += 1
    return f"{name}.{n}"


def _pipeline_of(fragment) -> str:
    if isinstance(fragment, PythonPass):
        return f"<flydsl python pass {fragment.name}>"
    return f"builtin.module({fragment})"


def _attach_targets(module, targets: list[str]) -> None:
    if not targets:
        return
    import mlir.ir as ir
    from ..passes.ir import gpu_modules
    attr = ir.ArrayAttr.parse("[" + ", ".join(targets) + "]")
    for gm in gpu_modules(module):
        gm.attributes["targets"] = attr
