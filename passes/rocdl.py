"""Python passes that keep ROCm kernels free of device-library calls.

MLIR's ROCDL lowering relies on the ROCm device libraries (ocml/ockl
bitcode) for some operations, which flydsl cannot link. These passes
replace the ones the DSL emits and reject the rest with a clear error:

* :func:`expand_tanh` (before ``convert-gpu-to-rocdl``): ``math.tanh`` on
  f32/f16/bf16 becomes a polynomial / ``exp`` formula (< 4 ulp in f32).
  MLIR lowers it to ``llvm.tanh``, which LLVM's AMDGPU backend cannot
  expand (it aborts the process).
* :func:`lower_debug_ops` (before ``convert-gpu-to-rocdl``): ``cf.assert``
  (``fx.device_assert`` in debug mode) becomes ``llvm.trap`` (``s_trap``) under
  the negated condition (MLIR would lower it to host ``abort``/``puts`` calls);
  ``gpu.printf`` (``fx.printf``) is a located error, since HIP's device printf
  is ``__ockl_printf_*`` from the device libraries.
* :func:`lower_device_calls` (after lowering): ``rocdl.workgroup.dim.*`` and
  ``rocdl.grid.dim.*`` (``__ockl_get_local_size``/``__ockl_get_num_groups``)
  read the HSA kernel dispatch packet; ``__ocml_*`` calls that have an LLVM
  intrinsic the AMDGPU backend expands (f32/f16 ``sin``, ``cos``, ``exp2``,
  ``log2``, ``floor``, ...) become that intrinsic. Note f32 ``sin``/``cos`` are
  then the hardware ``v_sin``/``v_cos`` (no extra range reduction: accurate for
  |x| up to a few hundred radians, unlike ocml).
* :func:`hsa_abi`: target triple, code object version, and a 1024-thread
  work-group limit for kernels without a known block size (MLIR's default is 256).
* :func:`check_device_libs` (last): any remaining external function, or an
  intrinsic the AMDGPU backend cannot expand (LLVM would abort the process),
  raises :class:`~flydsl.errors.CompilationError` naming the missing function.
"""
from __future__ import annotations

import re

import mlir.ir as ir

from flydsl.errors import CompilationError, UnsupportedConstructError

from ._simt_ir import source_location
from .ir import describe_unlowered, gpu_modules, unlowered_ops, walk

#: The target triple of AMD GPU code (HSA ABI).
TRIPLE = "amdgcn-amd-amdhsa"
#: Code object version of the emitted HSACO (5: the ROCm 6 default, loadable since ROCm 5.x).
CODE_OBJECT_VERSION = 5
#: Largest work-group size a kernel without ``known_block_size`` may be launched with.
MAX_FLAT_WORKGROUP_SIZE = 1024

#: tanh(x) = x + x^3 * P(x^2) for |x| < TANH_SMALL (least-squares fit, <= 0.8 ulp in f32).
TANH_SMALL = 0.5
TANH_COEFFS = (-0.333333283662796, 0.13332980871200562, -0.05390097573399544,
               0.021306009963154793, -0.006660073064267635)

#: ocml function -> LLVM intrinsic with the same semantics. ``pow`` is left out on
#: purpose: the AMDGPU expansion of ``llvm.pow`` is wrong for negative bases.
OCML_INTRINSICS = {
    "exp": "exp", "exp2": "exp2", "exp10": "exp10", "log": "log", "log2": "log2",
    "log10": "log10", "sin": "sin", "cos": "cos", "sqrt": "sqrt", "fabs": "fabs",
    "fma": "fma", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "rint",
    "round": "round", "copysign": "copysign", "fmax": "maxnum", "fmin": "minnum",
}
# Intrinsics the AMDGPU backend cannot expand: for any float type, and for f64.
_NO_LOWERING = {"tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh"}
_NO_LOWERING_F64 = {"exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "pow",
                    "powi", "sincos"}

# Offsets in hsa_kernel_dispatch_packet_t: workgroup_size_{x,y,z} (u16), grid_size_{x,y,z} (u32).
_WG_SIZE_OFFSET, _GRID_SIZE_OFFSET = 4, 12
_GEP_INBOUNDS = 3  # llvm.getelementptr noWrapFlags: inbounds (which implies nusw)
# Ops allowed in a gpu.module handed to the LLVM IR translation.
_LLVM_DIALECTS = ("llvm.", "rocdl.", "gpu.module", "builtin.")
_OCML_NAME = re.compile(r"__ocml_(\w+)_f(16|32|64)")


def device_lib_message(names) -> str:
    """Explain that ``names`` live in the ROCm device libraries, which flydsl cannot link."""
    listed = ", ".join(sorted(set(names)))
    return (f"the kernel needs {listed}, which only the ROCm device libraries "
            "(ocml/ockl bitcode) provide; they are not available to flydsl. "
            "Use an operation flydsl maps to LLVM intrinsics (f32/f16/bf16 exp, log, sqrt, "
            "rsqrt, sin, cos, tanh, ...) or another backend")


# -- helpers ------------------------------------------------------------------

def _walk(op, prefixes: tuple[str, ...]) -> list:
    """Operations nested in ``op`` whose name starts with one of ``prefixes``."""
    return walk(op, lambda inner: inner.name.startswith(prefixes))


def _element_type(ty):
    return ty.element_type if isinstance(ty, ir.VectorType) else ty


def _lowerable(intrinsic: str, float_width: int) -> bool:
    """Whether the AMDGPU backend expands ``llvm.<intrinsic>`` for floats of this width."""
    return intrinsic not in _NO_LOWERING and not (
        float_width == 64 and intrinsic in _NO_LOWERING_F64)


def _replace(op, value) -> None:
    op.results[0].replace_all_uses_with(value)
    op.erase()


# -- tanh ---------------------------------------------------------------------

def expand_tanh(module, target=None, options=None) -> None:
    """Rewrite every f32/f16/bf16 ``math.tanh`` into ops the AMDGPU backend lowers natively.

    f16/bf16 are computed in f32. f64 is left for :func:`check_device_libs` to reject.
    """
    for gpu_module in gpu_modules(module):
        for op in _walk(gpu_module, ("math.tanh",)):
            x = op.operands[0]
            if isinstance(_element_type(x.type), (ir.F32Type, ir.F16Type, ir.BF16Type)):
                with ir.InsertionPoint(op), op.location:
                    value = _tanh(x)
                _replace(op, value)


def _tanh(x):
    """tanh of ``x`` (scalar or vector, f32/f16/bf16), computed in f32."""
    from mlir.dialects import arith, math
    f32 = ir.F32Type.get()
    ty = ir.VectorType.get(x.type.shape, f32) if isinstance(x.type, ir.VectorType) else f32

    def const(v: float):
        attr = ir.FloatAttr.get(f32, v)
        if isinstance(ty, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(ty, attr)
        return arith.constant(ty, attr)

    narrow = x.type if x.type != ty else None
    if narrow:
        x = arith.extf(ty, x)
    # tanh is odd: work on |x| and restore the sign (and -0) at the end.
    a = math.absf(x)
    # |x| < 0.5: odd polynomial, accurate down to the tiniest x.
    u = arith.mulf(a, a)
    p = const(TANH_COEFFS[-1])
    for c in reversed(TANH_COEFFS[:-1]):
        p = math.fma(p, u, const(c))
    small = math.fma(arith.mulf(a, u), p, a)
    # Otherwise 1 - 2 / (exp(2|x|) + 1): no cancellation, saturates to 1.
    one = const(1.0)
    e = math.exp(arith.addf(a, a))
    big = arith.subf(one, arith.divf(const(2.0), arith.addf(e, one)))
    result = math.copysign(
        arith.select(arith.cmpf(arith.CmpFPredicate.OLT, a, const(TANH_SMALL)), small, big), x)
    return arith.truncf(narrow, result) if narrow else result


# -- debugging ops ------------------------------------------------------------

def lower_debug_ops(module, target=None, options=None) -> None:
    """``cf.assert`` -> ``llvm.trap`` when the condition fails; ``gpu.printf`` -> error."""
    from mlir.dialects import arith, llvm, scf
    for gpu_module in gpu_modules(module):
        for op in _walk(gpu_module, ("gpu.printf",)):
            filename, lineno, source = source_location(op)
            raise UnsupportedConstructError(
                "fx.printf is not supported on the rocm backend: HIP's device printf "
                "needs __ockl_printf_* from the ROCm device libraries, which flydsl "
                "cannot link; run the kernel on the cpu (or cuda) backend to print",
                kernel=_enclosing_symbol(op), filename=filename, lineno=lineno,
                source_line=source)
        for op in _walk(gpu_module, ("cf.assert",)):
            with ir.InsertionPoint(op), op.location:
                true = arith.constant(ir.IntegerType.get_signless(1), 1)
                failed = scf.IfOp(arith.xori(op.operands[0], true))
                with ir.InsertionPoint(failed.then_block):
                    llvm.intr_trap()
                    scf.YieldOp([])
            op.erase()


def _enclosing_symbol(op) -> str:
    """The symbol name of the function holding ``op`` ("" if none)."""
    p = op.parent
    while p is not None and "sym_name" not in p.attributes:
        p = p.parent
    return ir.StringAttr(p.attributes["sym_name"]).value if p is not None else ""


# -- device-library calls -----------------------------------------------------

def lower_device_calls(module, target=None, options=None) -> None:
    """Replace ockl work-group/grid sizes and mappable ocml calls (see the module docstring)."""
    from mlir.dialects import llvm
    for gpu_module in gpu_modules(module):
        for op in _walk(gpu_module, ("rocdl.workgroup.dim.", "rocdl.grid.dim.")):
            with ir.InsertionPoint(op), op.location:
                value = _dispatch_dim(op)
            _replace(op, value)
        for op in _walk(gpu_module, ("llvm.call",)):
            if op.name != "llvm.call" or "callee" not in op.attributes:
                continue
            m = _OCML_NAME.fullmatch(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            intrinsic = m and OCML_INTRINSICS.get(m.group(1))
            if intrinsic and len(op.results) == 1 and _lowerable(intrinsic, int(m.group(2))):
                with ir.InsertionPoint(op), op.location:
                    value = llvm.call_intrinsic(op.results[0].type, f"llvm.{intrinsic}",
                                                list(op.operands), [], [])
                _replace(op, value)
        _drop_unused_declarations(gpu_module)


def _dispatch_dim(op):
    """Block (``workgroup.dim``) or grid (``grid.dim``, in blocks) size from the dispatch packet."""
    from mlir.dialects import llvm
    dim = "xyz".index(op.name[-1])
    i8, i16, i32 = (ir.IntegerType.get_signless(w) for w in (8, 16, 32))
    ptr = ir.Type.parse("!llvm.ptr<4>")
    packet = llvm.call_intrinsic(ptr, "llvm.amdgcn.dispatch.ptr", [], [], [])

    def field(offset: int, ty, align: int):
        addr = llvm.getelementptr(ptr, packet, [], ir.DenseI32ArrayAttr.get([offset]), i8,
                                  ir.IntegerAttr.get(i32, _GEP_INBOUNDS))
        return llvm.load(ty, addr, alignment=align, invariant=True)

    value = llvm.zext(i32, field(_WG_SIZE_OFFSET + 2 * dim, i16, 2))
    if op.name.startswith("rocdl.grid.dim."):
        # HIP launches whole work-groups: grid_size is a multiple of the work-group size.
        value = llvm.udiv(field(_GRID_SIZE_OFFSET + 4 * dim, i32, 4), value)
    res_ty = op.results[0].type
    return llvm.zext(res_ty, value) if res_ty.width > 32 else value


def _external_functions(gpu_module) -> dict:
    """Declared-only ``llvm.func`` ops of ``gpu_module`` by name (LLVM intrinsics excluded)."""
    found = {}
    for op in gpu_module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "llvm.func" and not op.regions[0].blocks:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if not name.startswith("llvm."):
                found[name] = op
    return found


def _drop_unused_declarations(gpu_module) -> None:
    used = set()
    for op in _walk(gpu_module, ("llvm.call", "llvm.mlir.addressof")):
        for key in ("callee", "global_name"):
            if key in op.attributes:
                used.add(ir.FlatSymbolRefAttr(op.attributes[key]).value)
    for name, op in _external_functions(gpu_module).items():
        if name not in used:
            op.erase()


# -- module-level ABI ---------------------------------------------------------

def hsa_abi(module, target=None, options=None) -> None:
    """Set the triple, code object version and default work-group limit of each gpu.module."""
    for gpu_module in gpu_modules(module):
        gpu_module.attributes["llvm.target_triple"] = ir.StringAttr.get(TRIPLE)
        body = gpu_module.regions[0].blocks[0]
        if not any(op.operation.name == "llvm.module_flags" for op in body.operations):
            flags = ir.Operation.parse(
                'llvm.module_flags [#llvm.mlir.module_flag<error, "amdhsa_code_object_version", '
                f'{CODE_OBJECT_VERSION * 100} : i32>]')
            ir.InsertionPoint.at_block_begin(body).insert(flags)
        for op in body.operations:
            attrs = op.operation.attributes
            if op.operation.name == "llvm.func" and "rocdl.kernel" in attrs \
                    and "rocdl.flat_work_group_size" not in attrs:
                attrs["rocdl.flat_work_group_size"] = ir.StringAttr.get(
                    f"1,{MAX_FLAT_WORKGROUP_SIZE}")


# -- device-library check -----------------------------------------------------

def check_device_libs(module, target=None, options=None) -> None:
    """Raise CompilationError if a kernel still needs a ROCm device-library function."""
    missing: list[str] = []
    for gpu_module in gpu_modules(module):
        missing += _external_functions(gpu_module)
        for op in _walk(gpu_module, ("llvm.intr.", "llvm.call_intrinsic")):
            if op.name == "llvm.call_intrinsic":
                intrinsic = ir.StringAttr(op.attributes["intrin"]).value.split(".")[1]
            else:
                intrinsic = op.name[len("llvm.intr."):]
            floats = [t for t in (_element_type(v.type) for v in (*op.operands, *op.results))
                      if isinstance(t, ir.FloatType)]
            width = max((t.width for t in floats), default=0)
            if width and not _lowerable(intrinsic, width):
                missing.append(f"__ocml_{intrinsic}_f{width} (llvm.{intrinsic})")
    if missing:
        raise CompilationError(device_lib_message(missing), stage="rocm-check-device-libs")
    # MLIR's translation to LLVM IR crashes on ops it cannot translate: reject them here.
    unlowered = [op for gm in gpu_modules(module) for op in unlowered_ops(gm, _LLVM_DIALECTS)]
    if unlowered:
        raise CompilationError("operations left unlowered by the ROCDL pipeline: "
                               + ", ".join(sorted({op.name for op in unlowered})),
                               stage="rocm-check-device-libs",
                               diagnostics=describe_unlowered(unlowered, "the LLVM/ROCDL dialects"))
