"""FlyDSL's compile hints: ``CompilationContext.compile_hints({...})`` and
``flyc.compile[{...}]``.

A hint dict maps to :class:`~flydsl.compiler.options.CompileOptions`:

- ``fast_fp_math`` / ``unsafe_fp_math`` true, or ``fastmath`` naming ``fast``:
  ``fast_math=True`` (reassociation, approximate math on every float op);
- ``fastmath`` naming ``contract`` (a string, or ``arith.FastMathFlags.contract``):
  ``fp_contract=True`` (the default); ``fastmath="none"``: ``fp_contract=False``;
- ``opt_level``: the LLVM optimization level (0..3).

Other hints FlyDSL knows (``waves_per_eu``, ``maxnreg``, ``llvm_options``) tune the
AMDGPU code generator; they are accepted and have no effect on flydsl's backends.

The launch block. As in FlyDSL, a kernel that declares no ``known_block_size`` and
asks ``fx.known_block_size()`` gets the block of the launch being compiled: the
kernel is then specialized on its launch block (:func:`launch_block`), and the block
is part of its cache key as the dependency path :data:`LAUNCH_BLOCK_PATH`.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

from ..errors import DSLTypeError


def merge_compile_hints(*layers: Optional[dict]) -> dict:
    """The hint dicts merged, later layers winning."""
    out: dict = {}
    for layer in layers:
        if layer:
            out.update(layer)
    return out


class CompilationContext:
    """Scoped compile hints for the ``@flyc.jit`` calls (and ``flyc.compile``) made
    inside ``with CompilationContext.compile_hints({...}):`` (per thread)."""

    _local = threading.local()

    @classmethod
    @contextlib.contextmanager
    def compile_hints(cls, hints: dict) -> Iterator[dict]:
        if not isinstance(hints, dict):
            raise DSLTypeError(f"compile_hints expects a dict, got {type(hints).__name__}")
        previous = getattr(cls._local, "hints", None)
        cls._local.hints = merge_compile_hints(previous, hints)
        try:
            yield cls._local.hints
        finally:
            cls._local.hints = previous

    @classmethod
    def get_compile_hints(cls) -> dict:
        """The hints in effect on this thread ({} outside any ``compile_hints`` block)."""
        return getattr(cls._local, "hints", None) or {}

    @classmethod
    def get_current(cls) -> "CompilationContext":
        """FlyDSL's accessor for the compilation in progress (FlyDSL's kernels call it at
        the top of a ``@flyc.jit`` body). Inside a ``@flyc.jit`` call it answers that
        call's context (the same object for the whole call); elsewhere a context with
        no GPU module. Its ``hints`` are the compile hints in effect on this thread.

        Example::

            >>> with CompilationContext.compile_hints({"opt_level": 2}):
            ...     CompilationContext.get_current().hints
            {'opt_level': 2}
        """
        stack = JIT_CALLS.stack
        if not stack:
            return cls()
        ctx = stack[-1]
        if ctx is None:
            ctx = stack[-1] = cls(in_jit=True)
        return ctx

    def __init__(self, in_jit: bool = False):
        self._in_jit = in_jit
        self._gpu_module = None

    @property
    def hints(self) -> dict:
        """The compile hints in effect on this thread."""
        return self.get_compile_hints()

    @property
    def gpu_module_op(self):
        """The ``gpu.module`` of this ``@flyc.jit`` call (see :attr:`gpu_module_body`)."""
        if not self._in_jit:
            raise AttributeError("gpu_module_op")     # __getattr__ says why
        if self._gpu_module is None:
            self._gpu_module = _jit_gpu_module()     # (builtin.module, gpu.module)
        return self._gpu_module[1]

    @property
    def gpu_module_body(self):
        """The body block of this ``@flyc.jit`` call's ``gpu.module`` (FlyDSL's
        ``ctx.gpu_module_body``), for ``with ir.InsertionPoint(ctx.gpu_module_body):``
        around module-level setup such as ``SmemAllocator.finalize()``.

        flydsl compiles each kernel from its own trace, so what is built here is not
        part of the kernels this call launches (flydsl's ``SmemAllocator`` allocates
        its buffer inside the kernel instead of as a module global); a kernel that
        names a symbol defined only here fails to compile. Outside a ``@flyc.jit`` call
        there is no GPU module: an ``AttributeError``.
        """
        return self.gpu_module_op.regions[0].blocks[0]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("gpu_module_body", "gpu_module_op"):
            raise AttributeError(f"CompilationContext.{name}: no GPU module outside a "
                                 "@flyc.jit call (FlyDSL builds one per compilation of a "
                                 "@flyc.jit function; call get_current() inside its body)")
        raise AttributeError(f"CompilationContext.{name}: flydsl builds no GPU module "
                             "outside kernels (FlyDSL's link_libs, ...): "
                             "shared memory comes from fx.shared_array / fx.SharedAllocator "
                             "inside the kernel")


class _JitCalls(threading.local):
    """Per thread: one entry per ``@flyc.jit`` call running (innermost last), its
    :class:`CompilationContext` once ``get_current()`` asked for it (else None).
    ``JitFunction.__call__`` pushes and pops the entries."""

    def __init__(self):
        self.stack: list = []
        self.mlir = None          # (ir.Context, the last gpu.module made), made on demand


#: This thread's running ``@flyc.jit`` calls (``JIT_CALLS.stack``, see :class:`_JitCalls`).
JIT_CALLS = _JitCalls()


def _jit_gpu_module() -> tuple:
    """``(builtin.module, gpu.module)``, the latter with an empty body for a ``@flyc.jit`` call: the last one
    this thread made while nothing was built into it, else a new one (in its own
    ``builtin.module``, in this thread's MLIR context made once)."""
    import mlir.ir as ir
    from mlir.dialects import gpu
    state = JIT_CALLS.mlir
    if state is not None:
        context, last = state
        if not list(last[1].regions[0].blocks[0].operations):
            return last
    else:
        context = ir.Context()
    with context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            op = gpu.GPUModuleOp("flydsl_jit")
        op.regions[0].blocks.append()
    JIT_CALLS.mlir = (context, (module, op))
    return module, op


def _flag_names(value) -> set:
    """The flag names of ``fastmath``: a string (``"fast"``, ``"contract,afn"``) or an
    enum/flag (``arith.FastMathFlags.contract``)."""
    import re
    name = value if isinstance(value, str) else getattr(value, "name", None)
    text = (name if isinstance(name, str) else str(value)).lower().replace("fastmathflags", "")
    return set(re.findall("[a-z]+", text))


def options_overrides(hints: dict) -> dict:
    """The :class:`~flydsl.compiler.options.CompileOptions` fields ``hints`` set."""
    out: dict = {}
    if hints.get("fast_fp_math") or hints.get("unsafe_fp_math"):
        out["fast_math"] = True
    fm = hints.get("fastmath")
    if fm is not None:
        names = _flag_names(fm)
        if "fast" in names:
            out["fast_math"] = True
        if "contract" in names or "fast" in names:
            out["fp_contract"] = True
        elif names <= {"none"}:
            out["fp_contract"] = False
    if "opt_level" in hints:
        out["opt_level"] = hints["opt_level"]
    return out


#: The constexpr name the launch block is read under (not an identifier: no parameter
#: can be called so) and its dependency path (``P:@launch_block``).
LAUNCH_BLOCK = "@launch_block"
LAUNCH_BLOCK_PATH = (("P", LAUNCH_BLOCK),)

_launch = threading.local()


class LaunchBlock:
    """The block of the launch being compiled (``block``: ``(x, y, z)``, None when
    unknown), whether the trace read it (``read``), and the block size the kernel
    declares (``declared``: ``@flydsl.kernel(known_block_size=...)``, or None)."""

    __slots__ = ("block", "read", "declared")

    def __init__(self, block: Optional[tuple], declared: Optional[tuple] = None):
        self.block = tuple(block) if block is not None else None
        self.read = False
        self.declared = tuple(declared) if declared is not None else None


@contextlib.contextmanager
def launch_block(block: Optional[tuple],
                 declared: Optional[tuple] = None) -> Iterator[LaunchBlock]:
    """While the block runs on this thread, kernels compiled for a launch of ``block``
    threads may read it (``fx.known_block_size()`` without a declaration); the kernel
    compiled declares the block size ``declared`` (part of its cache key: two kernels
    of one function may declare two sizes)."""
    previous = getattr(_launch, "state", None)
    state = _launch.state = LaunchBlock(block, declared)
    try:
        yield state
    finally:
        _launch.state = previous


def current_launch_block() -> Optional[LaunchBlock]:
    """The :class:`LaunchBlock` of the compile in progress on this thread, or None."""
    return getattr(_launch, "state", None)


def reads_launch_block(state: LaunchBlock, compiled) -> bool:
    """Whether ``compiled`` (just traced under ``state``, or loaded from the cache with
    its dependency set ``compiled.variant``) depends on the launch block."""
    if state.read:
        return True
    from .dependencies import encode_path    # the variant's own encoding of the path
    wanted = encode_path(LAUNCH_BLOCK_PATH)
    return any(isinstance(entry, (list, tuple)) and entry and entry[0] == wanted
               for entry in getattr(compiled, "variant", None) or ())


__all__ = ["CompilationContext", "LAUNCH_BLOCK", "LAUNCH_BLOCK_PATH", "LaunchBlock",
           "current_launch_block", "JIT_CALLS", "launch_block", "merge_compile_hints", "options_overrides",
           "reads_launch_block"]
