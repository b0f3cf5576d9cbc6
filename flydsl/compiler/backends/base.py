"""What a compile backend is: a target description plus the passes and
tools that turn a ``gpu.container_module`` into a loadable binary.

How a binary is *launched* lives in :mod:`flydsl.runtime`, not here.
"""
from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Union

from ..options import CompileOptions
from ..target import GPUTarget

if TYPE_CHECKING:  # pragma: no cover
    from ..artifacts import CompiledArtifact


#: A pipeline stage: textual MLIR pipeline (run inside ``builtin.module(...)``)
#: or a Python pass taking the ``ir.Module`` (see :mod:`flydsl.passes`).
PipelineFragment = Union[str, "PythonPass"]


@dataclass(frozen=True)
class PythonPass:
    """A pipeline stage implemented in Python over the MLIR Python API.

    ``run`` is the callable ``(module, target, options) -> None`` or a lazy
    ``"module:function"`` reference, so that describing a pipeline (for the
    cache key) never imports the MLIR bindings.
    """

    name: str
    run: Union[Callable, str]
    #: Anything about the pass that changes its output beyond flydsl's own sources.
    fingerprint: str = ""

    def resolve(self) -> Callable:
        if callable(self.run):
            return self.run
        import importlib
        module, _, attr = self.run.partition(":")
        return getattr(importlib.import_module(module), attr)


@functools.cache
def detect_device_target(cls: type) -> Optional[GPUTarget]:
    """The target of device 0 of ``cls.driver`` through flydsl's driver layer, once per
    process; None without the Python bindings, a driver, a device or a supported arch
    (detection never raises)."""
    from ...runtime.devices import device_arch, device_count
    try:
        if device_count(cls.driver) < 1:
            return None
        return cls.make_target(device_arch(cls.driver, 0))
    except Exception:  # noqa: BLE001 - a broken install counts as no device
        return None


class BaseBackend(ABC):
    """A compile backend. Subclasses set ``name`` and implement the hooks.

    Constructing a backend validates the target: ``supports_target``
    failures raise :class:`ValueError`, never ``assert``.
    """

    name: ClassVar[str] = ""
    #: Registry tags, e.g. ``("experimental",)``; merged with those given to register_backend.
    tags: ClassVar[tuple[str, ...]] = ()
    #: Stage whose output is the loadable binary (``cubin``, ``hsaco``, ...).
    binary_stage: ClassVar[str] = ""
    #: Which runtime driver launches this backend's binaries (``cpu``, ``cuda``, ``hip``).
    driver: ClassVar[str] = ""
    #: The stage holding its assembly text (``ptx``, ``amdgcn``), if it has one.
    assembly_stage: ClassVar[str] = ""

    def __init__(self, target: GPUTarget):
        if not isinstance(target, GPUTarget):
            raise TypeError(f"{type(self).__name__} needs a GPUTarget, got {type(target).__name__}")
        if not self.supports_target(target):
            raise ValueError(f"backend {self.name!r} does not support target {target}")
        self.target = target

    # -- target --------------------------------------------------------
    @classmethod
    @abstractmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        """Whether this backend can compile for ``target``."""

    @classmethod
    @abstractmethod
    def make_target(cls, arch: str) -> GPUTarget:
        """Build a validated target for ``arch``; raises ValueError for unknown arches."""

    @classmethod
    @abstractmethod
    def detect_target(cls) -> Optional[GPUTarget]:
        """The target of the first present device, or None when there is none."""

    @classmethod
    def default_arch(cls) -> str:
        """Arch used when neither the caller, ``FLYDSL_GPU_ARCH`` nor a device names one."""
        raise ValueError(
            f"backend {cls.name!r}: no device found to detect the arch from; "
            "pass arch=... or set FLYDSL_GPU_ARCH")

    @classmethod
    def accepts_env_arch(cls, arch: str) -> bool:
        """Whether ``FLYDSL_GPU_ARCH`` applies to this backend (the CPU backend ignores it)."""
        return True

    @classmethod
    def device_present(cls) -> bool:
        return cls.detect_target() is not None

    def wider_warp_target(self) -> Optional[GPUTarget]:
        """The target to trace a kernel for again when it needs more lanes than this
        target's warp (a :class:`~flydsl.errors.WarpTooNarrowError`), or None: the
        error stands. Only the CPU backend, whose warp width is emulated, has one."""
        return None

    @property
    def experimental(self) -> bool:
        """Experimental backends are hidden from ``list_backends()`` by default."""
        return "experimental" in self.tags

    # -- compilation ---------------------------------------------------
    @abstractmethod
    def pipeline_fragments(self,
                           options: Optional[CompileOptions] = None) -> list[PipelineFragment]:
        """The ordered stages lowering a gpu.container_module to the backend's LLVM dialect.

        Textual fragments are built from validated values only.
        """

    def gpu_module_targets(self, options: Optional[CompileOptions] = None) -> list[str]:
        """Target attributes (MLIR text) attached to every ``gpu.module``."""
        return []

    def runtime_libs(self) -> list[str]:
        """Shared libraries the compiled code needs at load time."""
        return []

    def toolchain_versions(self) -> dict[str, str]:
        """Versions of every external tool that shapes the binary."""
        from ..toolchain import mlir_version
        return {"mlir": mlir_version()}

    @classmethod
    def describe_toolchain(cls) -> str:
        """One line for ``flydsl backends``: the external tools this machine has for it."""
        return "-"

    def assembly(self, asm: dict) -> str:
        """The human-readable assembly of a compiled kernel's stages (``flydsl compile
        --emit asm``): the ``assembly_stage`` by default."""
        if not self.assembly_stage or self.assembly_stage not in asm:
            raise KeyError(f"the {self.name} backend produced no assembly stage")
        return asm[self.assembly_stage]

    @abstractmethod
    def finalize(self, module, artifact: "CompiledArtifact", options: CompileOptions) -> None:
        """Turn the lowered module into binary stages stored on ``artifact``."""

    # -- identity ------------------------------------------------------
    def pipeline_text(self, options: Optional[CompileOptions] = None) -> str:
        parts = []
        for frag in self.pipeline_fragments(options):
            if isinstance(frag, PythonPass):
                parts.append(f"<python:{frag.name}:{frag.fingerprint}>")
            else:
                parts.append(frag)
        return ",".join(parts)

    def hash(self, options: Optional[CompileOptions] = None, *,
             toolchain: bool = True) -> str:
        """Digest of everything about this backend that changes the binary: target,
        options, pipeline text, toolchain versions (without them if not
        ``toolchain``: see :meth:`toolchain_stamp`). (flydsl's own sources, Python
        passes included, are in every cache key already: see ``fingerprint``.)"""
        options = options or CompileOptions()
        h = hashlib.sha256()
        h.update(repr(self.target).encode())
        h.update(repr(options.key()).encode())
        h.update(self.pipeline_text(options).encode())
        h.update(repr(self.gpu_module_targets(options)).encode())
        if toolchain:
            h.update(self.toolchain_stamp().encode())
        return h.hexdigest()

    def toolchain_stamp(self) -> str:
        """The toolchain versions as one string. Compiled kernels carry the stamp of
        the tools that built them instead of keying on it: a machine that can compile
        rebuilds a kernel whose stamp differs from its own, and one without a
        compiler (a deployment running bundles) uses it as built."""
        return repr(sorted(self.toolchain_versions().items()))

    @staticmethod
    def can_compile() -> bool:
        """Whether this machine has the compiler (the MLIR bindings) installed; looked
        up in the package metadata, without importing them."""
        from importlib.metadata import PackageNotFoundError, version
        try:
            version("xtc-mlir-python-bindings")
        except PackageNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"
