"""Write ``docs/reference.md``, the ``fx`` API reference, from the docstrings of
``flydsl.expr``, so that the reference cannot drift from the code.

    python docs/gen_reference.py            # rewrite docs/reference.md
    python docs/gen_reference.py --check    # exit 1 (and say why) when it is stale

``tests/test_docs_reference.py`` fails when the checked-in file is stale, when a public
``fx`` name has no entry, and when an entry lacks an example or a return description;
it also runs every example.

The docstring of each public ``fx`` name follows this convention:

* the first paragraph says what it is or does;
* ``Returns: ...`` says what a call gives and its type (functions annotated
  ``-> None`` need none; ``flydsl/expr/numeric.py`` states the result in its first
  sentence instead);
* ``Example: ``code``  # comment`` gives one example on one line, or ``Example::``
  followed by an indented block;
* every other paragraph (backends, errors, limits) is rendered as written.

A kernel-body example may use ``i`` (the thread's global index), ``n`` (the number of
elements), tensors (any name that is indexed: ``x[i]``, ``out[i]``), values (other
lower-case names) and compile-time ints (upper-case names); an example that needs
no kernel (layout algebra, atoms) is plain Python, and an ``==`` comparison there must
hold. This script is not part of the package: nothing imports it but the tests.
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REFERENCE = os.path.join(HERE, "reference.md")
if ROOT not in sys.path:    # run as a script from a checkout
    sys.path.insert(0, ROOT)

import flydsl.expr as fx  # noqa: E402
from flydsl.expr import dtypes as _dtypes  # noqa: E402

# -- sections ------------------------------------------------------------------------

#: Section titles in order, with the paragraph that opens each.
SECTIONS: list[tuple[str, str]] = [
    ("Threads and launch",
     "Where a thread is, how big the launch is, and block-level synchronization. "
     "Indices are `Int32`: launches are limited so they never wrap (write "
     "`fx.Int64(fx.block_idx.x) * fx.block_dim.x + fx.thread_idx.x` for 64-bit "
     "arithmetic)."),
    ("Math",
     "Math functions take floats (ints become `Float32`) and return the float type they "
     "were given; `Float16` and `BFloat16` compute in `Float32` where the target lacks "
     "the function. Python's `math.f(x)` works on kernel values wherever an `fx` "
     "function computes it. On the CPU, Float32 `exp`, `exp2`, `log`, `log2`, `log10`, "
     "`sin`, `cos`, `tanh` and `erf` are flydsl's own vectorizable code (README: "
     "[Math on the CPU](../README.md#math-on-the-cpu)); ROCm has no device math library "
     "in flydsl, so a few functions are a compile error there (see "
     "[what is not supported](not-supported.md))."),
    ("Numbers and bits",
     "Integer bit operations and float classification. Promotion rules are in the "
     "README's [Numbers and bits](../README.md#numbers-and-bits)."),
    ("Memory and atomics",
     "Arrays a kernel allocates and atomic updates. Every atomic takes `(t, index, ...)`, "
     "where `t` is a tensor or shared array and `index` an int or a tuple of them, and "
     "returns the value `t[index]` held just before the update, in `t`'s element type."),
    ("Pointers and shared structs",
     "FlyDSL's pointers (`fx.get_iter`, `fx.add_offset`, `fx.recast_iter`, `fx.ptr_load`, "
     "...), element access (`fx.memref_load`/`memref_store` and their `_vec` forms) and "
     "structured shared memory (`@fx.struct` records of `fx.Array` fields carved by "
     "`fx.SharedAllocator`)."),
    ("Warp and block collectives",
     "A warp is `fx.warp_size()` lanes of consecutive linear thread ids (32 on CUDA and "
     "the CPU, 64 on CDNA). `fx.block_*` and `fx.syncthreads_*` use shared memory and "
     "barriers: every thread of the block must reach them."),
    ("Debugging", "Printing and assertions inside kernels."),
    ("Types",
     "Scalar types, parameter annotations and the tensor type. A kernel parameter "
     "annotated with a scalar type is a run-time value; `fx.Constexpr[T]` is part of the "
     "specialization key."),
    ("Layout algebra",
     "CuTe's layout algebra. It runs in plain Python on static layouts, and inside "
     "kernels also on run-time shapes (emitting index arithmetic). The functions that "
     "take a layout also take a tensor or view and then return a view of the same "
     "memory. README: [Layouts, copies and MMA](../README.md#layouts-copies-and-mma)."),
    ("Tensors and views",
     "Views of tensors through layouts, per-thread register fragments and coordinate "
     "tensors (inside kernels)."),
    ("Copies",
     "Copy atoms, tiled copies (which thread moves which elements) and `fx.copy`."),
    ("MMA", "Matrix-core atoms, tiled MMAs and `fx.gemm`."),
    ("Swizzles and composed layouts",
     "FlyDSL's swizzle functions (`fx.Swizzle`) and layouts composed with them "
     "(`fx.make_composed_layout`), used for bank-conflict-free shared memory."),
    ("FlyDSL arith, math and vectors",
     "FlyDSL's `fx.arith`, `fx.math` and `fx.typing` modules and the names they export "
     "into `fx`: typed comparisons and min/max, math functions that also work per lane "
     "of a `fx.Vector`, register vectors and their `<Type>x<N>` aliases, and MLIR types "
     "by name (`fx.T`). They run inside kernels; see "
     "[FlyDSL compatibility](flydsl-compat.md)."),
    ("fx.rocdl and fx.nvvm",
     "Target-specific atoms. Every atom also runs on the CPU backend with the "
     "hardware's per-lane fragment layout."),
    ("Hopper (fx.nvvm, sm_90a)",
     "Hopper's transaction barriers (`mbarrier`), TMA bulk tensor copies (the "
     "descriptor built on the host, the shared-memory swizzle) and warpgroup MMA "
     "(`wgmma`). Each is one PTX instruction on sm_90+ and runs on the CPU backend with "
     "the same semantics: phases and transaction counts, the box, its zero fill and its "
     "swizzle, each thread's accumulator fragment."),
    ("AMD intrinsics and scheduling (fx.rocdl)",
     "FlyDSL's raw AMD intrinsics (`fx.rocdl.exp2`, `readlane`, `ds_bpermute`, the "
     "`mfma_*` wrappers) and scheduling hints (`sched_*`, `s_waitcnt`, `s_setprio`). "
     "Each also runs on the CPU backend (hints are no-ops there and on NVIDIA)."),
]

#: The section of each module's names, unless SECTION_OF_NAME says otherwise.
SECTION_OF_MODULE = {
    "flydsl.expr.numeric": "Math",
    "flydsl.expr.memory": "Memory and atomics",
    "flydsl.expr.pointer": "Pointers and shared structs",
    "flydsl.expr.struct": "Pointers and shared structs",
    "flydsl.expr.warp": "Warp and block collectives",
    "flydsl.expr.debug": "Debugging",
    "flydsl.expr.dtypes": "Types",
    "flydsl.expr.layout_algebra": "Layout algebra",
    "flydsl.expr.layout_types": "Layout algebra",
    "flydsl.expr.rocdl": "fx.rocdl and fx.nvvm",
    "flydsl.expr.rocdl.copies": "fx.rocdl and fx.nvvm",
    "flydsl.expr.rocdl.cdna3": "fx.rocdl and fx.nvvm",
    "flydsl.expr.rocdl.cdna4": "fx.rocdl and fx.nvvm",
    "flydsl.expr.rocdl.intrinsics": "AMD intrinsics and scheduling (fx.rocdl)",
    "flydsl.expr.rocdl.mfma": "AMD intrinsics and scheduling (fx.rocdl)",
    "flydsl.expr.rocdl.perm": "AMD intrinsics and scheduling (fx.rocdl)",
    "flydsl.expr.rocdl.sched": "AMD intrinsics and scheduling (fx.rocdl)",
    "flydsl.expr.rocdl.enum": "AMD intrinsics and scheduling (fx.rocdl)",
    "flydsl.expr.nvvm": "fx.rocdl and fx.nvvm",
    "flydsl.expr.nvvm_hopper": "Hopper (fx.nvvm, sm_90a)",
    "flydsl.expr.nvvm_tma": "Hopper (fx.nvvm, sm_90a)",
    "flydsl.expr.nvvm_wgmma": "Hopper (fx.nvvm, sm_90a)",
    "flydsl.expr.swizzle": "Swizzles and composed layouts",
    "flydsl.expr.arith": "FlyDSL arith, math and vectors",
    "flydsl.expr.math": "FlyDSL arith, math and vectors",
    "flydsl.expr.typing": "FlyDSL arith, math and vectors",
    "flydsl.expr.gpu": "Threads and launch",
    "flydsl.expr.enum": "Memory and atomics",
    "flydsl.expr.atoms": "Copies",
    "flydsl.expr.pipeline": "Copies",
    "flydsl.expr.layout": "Tensors and views",
}

_THREADS = ["thread_idx", "block_idx", "block_dim", "grid_dim", "grid", "gridsize", "warp_size",
            "barrier", "threadfence", "threadfence_block", "threadfence_system", "range",
            "range_constexpr", "target"]
_MATH = ["exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "floor", "ceil", "abs", "max",
         "min", "fma", "select", "where", "cast"]
_BITS = ["clz", "popc", "brev", "ffs", "isnan", "isinf", "isfinite"]
_VIEWS = ["make_view", "make_fragment_like", "make_rmem_tensor", "elem_less", "slice"]
_COPIES = ["copy", "make_copy_atom", "UniversalCopy", "UniversalCopy32b", "UniversalCopy64b",
           "UniversalCopy128b", "BufferCopy", "CopyAtom", "make_tiled_copy_tv",
           "make_tiled_copy", "TiledCopy", "ThrCopy", "make_tiled_copy_A",
           "make_tiled_copy_B", "make_tiled_copy_C"]
_MMA = ["gemm", "make_mma_atom", "MmaAtom", "make_tiled_mma", "TiledMma", "ThrMma"]
_TYPES = ["DType", "Bool", "Boolean", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16",
          "UInt32", "UInt64", "Float16", "BFloat16", "Float32", "Float64", "Tensor",
          "Constexpr", "Stream"]
_ALGEBRA = ["Layout", "IntTuple", "StaticInt", "ScaledBasis", "make_layout", "make_shape",
            "make_stride", "make_coord", "make_int_tuple", "make_ordered_layout",
            "make_identity_layout", "make_layout_tv", "get_shape", "get_stride", "get",
            "unpack", "size", "cosize", "rank", "depth", "product_each", "is_static",
            "crd2idx", "idx2crd", "slice_and_offset", "dice", "group", "append", "prepend",
            "flatten", "coalesce", "filter_zeros", "ceil_div", "shape_div", "composition",
            "complement", "right_inverse", "left_inverse", "max_common_vector",
            "recast_layout", "logical_divide", "zipped_divide", "tiled_divide",
            "flat_divide", "logical_product", "zipped_product", "tiled_product",
            "flat_product", "blocked_product", "raked_product"]
_TARGETS = ["rocdl", "fx.rocdl.MFMA", "fx.rocdl.WMMA", "fx.rocdl.BufferCopy32b",
            "fx.rocdl.BufferCopy64b", "fx.rocdl.BufferCopy128b", "fx.rocdl.make_buffer_tensor",
            "nvvm", "fx.nvvm.MMA"]
SECTION_OF_NAME = {
    **{n: "Threads and launch" for n in _THREADS},
    **{n: "Math" for n in _MATH},
    **{n: "Numbers and bits" for n in _BITS},
    "shared_array": "Memory and atomics", "atomic_add": "Memory and atomics",
    "shuffle_xor": "Warp and block collectives",
    **{n: "Tensors and views" for n in _VIEWS},
    **{n: "Copies" for n in _COPIES},
    **{n: "MMA" for n in _MMA},
    "rocdl": "fx.rocdl and fx.nvvm", "nvvm": "fx.rocdl and fx.nvvm",
    **{n: "Layout algebra" for n in ["crd2idx", "idx2crd", "recast_layout", "get_layout",
                                     "static"]},
    **{n: "Copies" for n in ["copy_atom_call", "atom_set_value", "tiled_copy_partition_src",
                             "tiled_copy_partition_dst", "tiled_copy_retile"]},
    **{n: "MMA" for n in ["UniversalFMA", "mma_atom_call", "mma_make_fragment",
                          "tiled_mma_partition", "tiled_mma_partition_shape"]},
    "const_expr": "Threads and launch", "shuffle_idx": "Warp and block collectives",
    "mask_mfma": "AMD intrinsics and scheduling (fx.rocdl)",
    "FastMathFlags": "FlyDSL arith, math and vectors",
    "RoundingMode": "FlyDSL arith, math and vectors",
}

#: Generated families of names, each documented once by one representative's docstring:
#: ``(pattern over qualified names, entry title, representative)``. Every other name
#: needs its own docstring (the test fails on an undocumented ordinary name).
FAMILIES: list[tuple[str, str, str]] = [
    (r"fx\.(?:U?[Ii]nt|Uint|B?Float)\w*x\d+", "fx.<Type>x<N>", "fx.Float32x4"),
    (r"fx\.rocdl\.mfma_\w+", "fx.rocdl.mfma_*", "fx.rocdl.mfma_f32_16x16x16f16"),
    (r"fx\.rocdl\.mask_\w+", "fx.rocdl.mask_*", "fx.rocdl.mask_mfma"),
]

#: Docstrings of public names whose objects flydsl re-exports from MLIR (whose own
#: docstrings are MLIR's one-liners), in the convention above.
FOREIGN_DOCS = {
    "fx.FastMathFlags": (
        "MLIR's ``arith`` fast-math flags (``none``, ``reassoc``, ``nnan``, ``ninf``, "
        "``nsz``, ``arcp``, ``contract``, ``afn``, ``fast``), FlyDSL's ``fastmath=`` "
        "argument.\n\nExample::\n\n    >>> fx.FastMathFlags.fast.name\n    'fast'"),
    "fx.RoundingMode": (
        "MLIR's ``arith`` rounding modes (``to_nearest_even``, ``downward``, ``upward``, "
        "``toward_zero``, ``to_nearest_away``) of FlyDSL's float truncations."
        "\n\nExample::\n\n    >>> fx.RoundingMode.to_nearest_even.name\n"
        "    'to_nearest_even'"),
    "fx.rocdl.mask_mfma": (
        "The instruction classes of ``sched_group_barrier`` (LLVM's SchedGroupMask bits, "
        "Python ints): ``mask_mfma`` (MFMA/WMMA, 0x008), ``mask_vmem_rd`` (global/buffer "
        "reads, 0x020), ``mask_dsrd`` (LDS reads, 0x100), ``mask_dswr`` (LDS writes, "
        "0x200).\n\nExample::\n\n    >>> hex(fx.rocdl.mask_mfma | fx.rocdl.mask_dsrd)\n"
        "    '0x108'"),
}
#: Entries in this order (short names of fx.*, else qualified); the rest follow, sorted.
ORDER = _THREADS + _MATH + _BITS + _TYPES + _ALGEBRA + _VIEWS + _COPIES + _MMA + _TARGETS
#: Modules whose docstrings state the result in their first sentence (no ``Returns:``).
RESULT_IN_SUMMARY_MODULES = {
    "flydsl.expr.numeric", "flydsl.expr.layout_algebra", "flydsl.expr.math",
    "flydsl.expr.arith", "flydsl.expr.typing", "flydsl.expr.gpu", "flydsl.expr.atoms",
    "flydsl.expr.rocdl.copies", "flydsl.expr.rocdl.intrinsics", "flydsl.expr.rocdl.mfma"}


# -- entries -------------------------------------------------------------------------

@dataclass
class Entry:
    """One reference entry: one object and every public name it has."""
    names: list          # qualified: "fx.exp", "fx.rocdl.MFMA"
    objs: list
    section: str
    summary: str
    returns: Optional[str]
    example: Optional[str]
    example_comment: str
    notes: str
    signatures: list = field(default_factory=list)
    members: list = field(default_factory=list)
    family: Optional[str] = None     # the title of a FAMILIES entry

    @property
    def title(self) -> str:
        if self.family:
            return f"`{self.family}`"
        return ", ".join(f"`{n}`" for n in self.names)


def public_names() -> list:
    """``(qualified name, object)`` for every public ``fx`` name and every name of the
    ``fx.rocdl`` and ``fx.nvvm`` modules."""
    out = [(f"fx.{n}", getattr(fx, n)) for n in dict.fromkeys(fx.__all__)]
    for mod_name in ("rocdl", "nvvm"):
        mod = getattr(fx, mod_name)
        out += [(f"fx.{mod_name}.{n}", getattr(mod, n)) for n in mod.__all__]
    return out


def family_of(qualified: str) -> Optional[tuple]:
    """The FAMILIES row whose pattern matches the whole name, else None."""
    return next((f for f in FAMILIES if re.fullmatch(f[0], qualified)), None)


def _group_key(obj: Any) -> Any:
    """Objects documented together: an instance without its own docstring (
    ``fx.thread_idx`` & co) is documented by its class, and the scalar types (classes
    whose class is ``DType``) by ``DType`` and its table."""
    if isinstance(obj, _dtypes.DType):
        return _dtypes.DType
    if isinstance(obj, (type, types.FunctionType, types.ModuleType)):
        return obj
    return obj if "__doc__" in getattr(obj, "__dict__", {}) else type(obj)


def _section(short: str, obj: Any) -> str:
    if short in SECTION_OF_NAME:
        return SECTION_OF_NAME[short]
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return SECTION_OF_MODULE.get(module, "Unsorted")


def entries() -> list:
    """The reference entries, in section order, each section in ORDER then by name."""
    groups: dict = {}
    for name, obj in public_names():
        family = family_of(name)
        key = ("family", family[1]) if family else id(_group_key(obj))
        groups.setdefault(key, []).append((name, obj))
    out = []
    for key, members in groups.items():
        family = family_of(members[0][0]) if isinstance(key, tuple) else None
        # the representative of a family, else the shortest fx.* spelling, names the
        # entry (fx.BufferCopy, not fx.rocdl.BufferCopy)
        members.sort(key=lambda m: (not family or m[0] != family[2], m[0].count("."),
                                    _order(m[0]), m[0]))
        names, objs = [n for n, _ in members], [o for _, o in members]
        documented = objs[0] if family else _group_key(objs[0])
        out.append(_make_entry(names, objs, _section(names[0].split(".")[-1], objs[0]),
                               documented, family[1] if family else None))
    titles = [t for t, _ in SECTIONS]
    out.sort(key=lambda e: (titles.index(e.section) if e.section in titles else len(titles),
                            _order(e.names[0]), e.names[0].lower()))
    return out


def _order(qualified: str) -> int:
    key = qualified.split(".")[-1] if qualified.count(".") == 1 else qualified
    return ORDER.index(key) if key in ORDER else len(ORDER)


def _make_entry(names: list, objs: list, section: str, documented: Any,
                family: Optional[str] = None) -> Entry:
    doc = FOREIGN_DOCS.get(names[0]) or inspect.getdoc(documented) or ""
    summary, returns, example, comment, notes = split_docstring(doc)
    module = getattr(documented, "__module__", "")
    if returns is None and module in RESULT_IN_SUMMARY_MODULES and callable(documented):
        returns = summary
    if returns is None and _returns_none(documented):
        returns = "`None`."
    entry = Entry(names, objs, section, summary, returns, example, comment, notes,
                  family=family)
    if documented is _dtypes.DType:   # one line for the table of types
        entry.signatures = ["fx.Float32(value)  # and so every type in the table"]
    elif family:     # the representative's signature stands for the family's
        entry.signatures = [s for s in [_signature(names[0], objs[0])] if s]
    else:
        entry.signatures = [s for s in (_signature(n, o) for n, o in zip(names, objs)) if s]
    if isinstance(documented, type) and documented is not _dtypes.DType:
        entry.members = _members(documented)
    return entry


def _returns_none(obj: Any) -> bool:
    if not inspect.isfunction(obj):
        return False
    return inspect.signature(obj).return_annotation in (None, "None")


# -- docstrings ------------------------------------------------------------------------

_EXAMPLE_LINE = re.compile(r"^Example:\s*``(?P<code>.+?)``(?P<rest>.*)$")


def split_docstring(doc: str) -> tuple:
    """``(summary, returns, example, example_comment, notes)`` of a docstring written
    in the convention above; missing parts are None (notes: "")."""
    lines = doc.splitlines()
    summary_end = next((k for k, line in enumerate(lines) if not line.strip()), len(lines))
    summary = " ".join(line.strip() for line in lines[:summary_end])
    returns = example = None
    comment = ""
    notes: list = []
    k = summary_end
    while k < len(lines):
        line = lines[k]
        if line.startswith("Returns:"):
            para = [line[len("Returns:"):].strip()]
            k += 1
            while k < len(lines) and lines[k].strip():
                para.append(lines[k].strip())
                k += 1
            returns = " ".join(para)
            continue
        if line.rstrip() == "Example::" and example is None:
            k += 1
            block = []
            while k < len(lines) and (not lines[k].strip() or lines[k].startswith(" ")):
                block.append(lines[k])
                k += 1
            example = textwrap.dedent("\n".join(block)).strip("\n")
            continue
        match = _EXAMPLE_LINE.match(line)
        if match and example is None:
            example = match.group("code")
            rest = match.group("rest").strip()
            comment = rest[1:].strip() if rest.startswith("#") else rest
            k += 1
            continue
        notes.append(line)
        k += 1
    notes_text = re.sub(r"\n{3,}", "\n\n", "\n".join(notes)).strip("\n")
    return summary, returns, example, comment, notes_text


def rst_to_markdown(text: str) -> str:
    """Docstring markup as Markdown: ``code`` -> `code`, :func:`x` -> `x`, a
    paragraph ending in ``::`` followed by an indented block -> a fenced block."""
    text = re.sub(r":(?:func|class|mod|meth|attr|data):`~?([^`]+)`", r"``\1``", text)
    text = re.sub(r"``([^`]+?)``", r"`\1`", text)
    out: list = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.rstrip().endswith("::") and k + 1 < len(lines) and not lines[k + 1].strip():
            out.append(line.rstrip()[:-1])
            k += 1
            block = []
            while k < len(lines) and (not lines[k].strip() or lines[k].startswith(" ")):
                block.append(lines[k])
                k += 1
            out += ["", "```python", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""]
            continue
        out.append(line)
        k += 1
    return "\n".join(out)


# -- signatures and members -----------------------------------------------------------

class _Annotation(str):
    """A string annotation printed without quotes."""

    def __repr__(self) -> str:
        return str(self)


def _plain(sig: inspect.Signature) -> inspect.Signature:
    def fix(a):
        return _Annotation(a) if isinstance(a, str) else a
    params = [p.replace(annotation=fix(p.annotation)) for p in sig.parameters.values()]
    return sig.replace(parameters=params, return_annotation=fix(sig.return_annotation))


def _signature(name: str, obj: Any) -> Optional[str]:
    if isinstance(obj, types.ModuleType) or not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if isinstance(obj, type):
        if not sig.parameters and "__class_getitem__" in vars(obj):
            return f"{name}[T]"
        sig = sig.replace(return_annotation=inspect.Signature.empty)
    return f"{name}{_plain(sig)}"


def _members(cls: type) -> list:
    """``(name, kind, first docstring line)`` of the public members a class defines
    (in flydsl's own classes of its MRO)."""
    seen, out = set(), []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("flydsl."):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            if isinstance(value, property):
                kind, doc = "property", value.__doc__
            elif isinstance(value, (staticmethod, classmethod)):
                kind, doc = "method", value.__func__.__doc__
            elif inspect.isfunction(value):
                kind, doc = "method", value.__doc__
            else:
                continue
            seen.add(name)
            first = inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ") if doc else ""
            out.append((name, kind, first))
    fields = getattr(cls, "__dataclass_fields__", {})
    out += [(f, "field", "") for f in fields if not f.startswith("_") and f not in seen]
    return sorted(out)


# -- rendering ---------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _dtype_table() -> str:
    rows = ["| type | kind | bits | numpy | notes |", "| --- | --- | --- | --- | --- |"]
    for t in _dtypes.ALL_DTYPES:
        kind = {"bool": "bool", "float": "float"}.get(t.kind, "signed int" if t.signed
                                                      else "unsigned int")
        if t.storage_only:
            kind, np_name = "narrow float (storage only)", "`uint8` (one per byte)"
        elif t.np_dtype is not None:
            np_name = f"`{t.np_dtype.name}`"
        else:
            np_name = "(none; torch.bfloat16)" if t.name == "BFloat16" else "(none)"
        own = inspect.getdoc(t) or ""     # the narrow floats say what their format is
        note = rst_to_markdown(own.split("\n\n")[0].replace("\n", " ")) if (
            own and own != f"fx.{t.name}" and own != inspect.getdoc(_dtypes.DType)) else ""
        rows.append(f"| `fx.{t.name}` | {kind} | {t.bits} | {np_name} | {note} |")
    return "\n".join(rows)


def render_entry(e: Entry) -> str:
    parts = [f"### {e.title}", ""]
    if e.signatures:
        parts += ["```python", *e.signatures, "```", ""]
    parts += [rst_to_markdown(e.summary), ""]
    if e.returns and e.returns != e.summary:     # else the first sentence says it
        parts += [f"**Returns:** {rst_to_markdown(e.returns)}", ""]
    if _dtypes.DType in e.objs:
        parts += [_dtype_table(), ""]
    if e.family:
        parts += ["**Names:** " + ", ".join(f"`{n}`" for n in sorted(e.names)), ""]
    if e.example:
        code = e.example + (f"  # {e.example_comment}" if e.example_comment else "")
        parts += ["**Example:**", "", "```python", code, "```", ""]
    if e.notes:
        parts += [rst_to_markdown(e.notes), ""]
    if e.members:
        parts += ["**Members:**", ""]
        for name, kind, doc in e.members:
            call = "()" if kind == "method" else ""
            parts.append(f"- `.{name}{call}`" + (f": {rst_to_markdown(doc)}" if doc else ""))
        parts.append("")
    return "\n".join(parts)


def render(items: Optional[list] = None) -> str:
    items = entries() if items is None else items
    out = [
        "# `fx` API reference",
        "",
        "<!-- Generated by docs/gen_reference.py from the docstrings of flydsl.expr;",
        "     do not edit: run `python docs/gen_reference.py`. -->",
        "",
        "Every public name of `flydsl.expr` (`import flydsl.expr as fx`), with its",
        "signature, what a call returns, one example and its backend notes. This page is",
        "generated from the docstrings (`python docs/gen_reference.py`), and",
        "`tests/test_docs_reference.py` runs every example: kernel-body examples inside a",
        "kernel on the CPU backend (with `i` the thread's global index and `x`, `y`,",
        "`out`, ... tensors), the others as plain Python, where each `==` must hold.",
        "See also: [what is not supported](not-supported.md),",
        "[`@flydsl.jit` vs `@triton.jit`](jit-vs-triton.md),",
        "[registers, spills and GPU timing](gpu-profiling.md),",
        "[CPU backend performance](cpu-performance.md).",
        "",
        "## Contents",
        "",
    ]
    sections = [t for t, _ in SECTIONS] + sorted({e.section for e in items} -
                                                 {t for t, _ in SECTIONS})
    for title in sections:
        names = [e for e in items if e.section == title]
        if not names:
            continue
        links = ", ".join(f"[`{e.family or e.names[0]}`](#{slug(e.title)})" for e in names)
        out.append(f"- **[{title}](#{slug(title)})**: {links}")
    out.append("")
    intros = dict(SECTIONS)
    for title in sections:
        section_entries = [e for e in items if e.section == title]
        if not section_entries:
            continue
        out += [f"## {title}", ""]
        if intros.get(title):
            out += [textwrap.fill(intros[title], 88), ""]
        out += [render_entry(e) for e in section_entries]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/reference.md differs from the docstrings")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = open(REFERENCE, encoding="utf-8").read() if os.path.exists(REFERENCE) else ""
        if current != text:
            print(f"{os.path.relpath(REFERENCE)} is stale: run python docs/gen_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    with open(REFERENCE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(REFERENCE)} ({len(entries())} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
