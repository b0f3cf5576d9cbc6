"""The result of compiling a module: every stage's text and the binary."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from .target import GPUTarget


class Stages(dict):
    """Stage name -> text or bytes, in pipeline order.

    A stage a missing tool kept from being made (the HSACO without an ``ld.lld``) is
    absent, and ``missing`` holds how to make it later: indexing it tries again, and
    raises why it still cannot be made (``"hsaco" in stages`` is False and
    ``stages.get("hsaco")`` None until then).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: stage name -> a function that makes it, or raises why it cannot (yet)
        self.missing: dict[str, Callable[[], Union[str, bytes]]] = {}

    def __missing__(self, stage: str):
        make = self.missing.get(stage)
        if make is None:
            raise KeyError(stage)
        value = make()   # raises the reason while the tool is still missing
        self[stage] = value
        self.missing.pop(stage, None)
        return value

    @property
    def complete(self) -> bool:
        """Whether every stage was made (only such results are stored in the cache)."""
        return not self.missing


@dataclass
class CompiledArtifact:
    """Stages produced by :class:`~flydsl.compiler.MlirCompiler`.

    ``asm`` maps stage name (``mlir``, ``llvm-mlir``, ``llir``, ``ptx``,
    ``cubin``, ``amdgcn``, ``hsaco``, ...) to text or bytes, in pipeline order.
    """

    backend: str
    target: GPUTarget
    binary_stage: str
    asm: Stages = field(default_factory=Stages)
    #: The module's text after each pipeline fragment, keyed by stage name, in order.
    stages: dict[str, str] = field(default_factory=dict)
    kernel_names: list[str] = field(default_factory=list)
    #: Kernel name -> what the toolchain reported of its resources (registers, spills,
    #: shared memory: :mod:`flydsl.compiler.kernel_metadata`); empty where it reports none.
    resources: dict[str, dict] = field(default_factory=dict)
    #: Backend-specific loaded state (the CPU backend's ExecutionEngine).
    engine: Optional[Any] = None

    @property
    def binary(self) -> Union[str, bytes, None]:
        """The binary stage; raises the reason when a missing tool kept it from being made."""
        try:
            return self.asm[self.binary_stage]
        except KeyError:
            return None
