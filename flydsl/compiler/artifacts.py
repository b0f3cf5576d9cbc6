"""The result of compiling a module: every stage's text and the binary."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .target import GPUTarget


@dataclass
class CompiledArtifact:
    """Stages produced by :class:`~flydsl.compiler.MlirCompiler`.

    ``asm`` maps stage name (``mlir``, ``llvm-mlir``, ``llir``, ``ptx``,
    ``cubin``, ``amdgcn``, ``hsaco``, ...) to text or bytes, in pipeline order.
    """

    backend: str
    target: GPUTarget
    binary_stage: str
    asm: dict[str, Union[str, bytes]] = field(default_factory=dict)
    #: The module's text after each pipeline fragment, keyed by stage name, in order.
    stages: dict[str, str] = field(default_factory=dict)
    kernel_names: list[str] = field(default_factory=list)
    #: Backend-specific loaded state (the CPU backend's ExecutionEngine).
    engine: Optional[Any] = None

    @property
    def binary(self) -> Union[str, bytes, None]:
        return self.asm.get(self.binary_stage)
