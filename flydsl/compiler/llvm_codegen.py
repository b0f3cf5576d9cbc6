"""LLVM IR -> optimized object code with llvmlite (shared by the CPU and ROCm backends)."""
from __future__ import annotations

import functools
import threading
from typing import Sequence

from ..errors import CompilationError

# llvmlite shares one LLVM context per process: serialize parsing and codegen.
_LOCK = threading.Lock()


@functools.cache
def initialize() -> None:
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def target_machine(triple: str, cpu: str, features: str = "", opt_level: int = 3):
    """A position-independent llvmlite TargetMachine."""
    import llvmlite.binding as llvm
    initialize()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise CompilationError(f"this llvmlite build cannot target {triple} ({e})",
                               stage="codegen") from None
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level,
                                        reloc="pic", codemodel="default")


def optimize_and_emit(llvm_ir: Sequence[str], tm, triple: str, opt_level: int, *,
                      stage: str, want_asm: bool = True,
                      internal: Sequence[str] = ()) -> tuple[str, bytes]:
    """Link the IR modules, run LLVM's ``opt_level`` pipeline and emit code.

    ``internal``: functions to keep out of the object's exported symbols (a CPU
    kernel named ``brk`` must call itself, not libc's ``brk``).

    Returns ``(assembly text or "", relocatable object)``; CompilationError
    (stage ``stage``) when LLVM rejects the IR.
    """
    import llvmlite.binding as llvm
    if isinstance(llvm_ir, str):
        llvm_ir = [llvm_ir]
    with _LOCK:
        try:
            module = llvm.parse_assembly(llvm_ir[0])
            for extra in llvm_ir[1:]:
                module.link_in(llvm.parse_assembly(extra))
            for name in internal:
                module.get_function(name).linkage = "internal"
            module.triple = triple
            module.data_layout = str(tm.target_data)
            module.verify()
        except RuntimeError as e:
            raise CompilationError("LLVM rejected the generated IR", stage=stage,
                                   diagnostics=str(e)) from None
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(opt_level))
        pb.getModulePassManager().run(module, pb)
        # Codegen may rewrite the module (e.g. AMDGPU LDS lowering): emit from fresh copies.
        optimized = module.as_bitcode()
        asm = tm.emit_assembly(llvm.parse_bitcode(optimized)) if want_asm else ""
        obj = tm.emit_object(llvm.parse_bitcode(optimized))
    return asm, obj
