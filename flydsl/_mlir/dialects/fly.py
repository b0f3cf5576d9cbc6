"""``flydsl._mlir.dialects.fly``: upstream FlyDSL's own C++ dialect, which flydsl does not have.

The module imports (so upstream helper modules that import it load). Of its operations it
has the one upstream kernels build AMD buffer resources and raw pointers from,
:func:`extract_aligned_pointer_as_index`, the value-returning copy-atom call
:func:`copy_atom_call_ssa`, and the layout-algebra operations whose results
are layouts (``coalesce``, ``composition``, ``complement``, ``right_inverse``,
``left_inverse``: flydsl's fx functions of the same name, with the dialect's keyword
names); every other name read from it raises an AttributeError saying so: flydsl expresses layouts, pointers and copies with
``flydsl.expr`` (fx.make_layout, fx.make_view, fx.copy, fx.ptr_load, ...) and lowers them
to standard MLIR dialects itself.
"""
import contextlib


def absent_dialect(dialect: str):
    """The module ``__getattr__`` of an upstream dialect flydsl does not have."""
    def missing(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"flydsl has no '{dialect}' MLIR dialect (upstream FlyDSL's C++ "
                             f"dialect), so flydsl._mlir.dialects.{dialect}.{name} does not "
                             f"exist; use the flydsl.expr (fx) API for layouts, pointers and "
                             f"copies")
    return missing


def extract_aligned_pointer_as_index(result, tensor, *, loc=None, ip=None):
    """``fly.extract_aligned_pointer_as_index``: an ``!llvm.ptr`` of type ``result`` to the
    first element of ``tensor`` (a kernel tensor, a view of one, or a memref value), as
    upstream kernels pass to ``rocdl.make.buffer.rsrc`` or to ``llvm.getelementptr``.
    Flydsl builds it from standard ops (the memref's aligned pointer plus its offset), so
    it runs on every backend; the CPU backend also runs the buffer operations built on it
    (:mod:`flydsl.passes.rocdl_buffers`).

    Example (inside a kernel, ``x`` a tensor argument)::

        from flydsl._mlir import ir
        from flydsl._mlir.dialects import fly
        base = fly.extract_aligned_pointer_as_index(ir.Type.parse("!llvm.ptr"), x)
    """
    import mlir.ir as ir
    from ...expr import implementation
    ptr_type = getattr(result, "ir_type", result)
    if not isinstance(ptr_type, ir.Type) or not str(ptr_type).startswith("!llvm.ptr"):
        from ...errors import DSLTypeError
        raise DSLTypeError(f"fly.extract_aligned_pointer_as_index: the result type must be "
                           f"an !llvm.ptr type, got {result!r}")
    if hasattr(tensor, "ir_value") and not isinstance(tensor, ir.Value) and \
            not hasattr(tensor, "memory") and not hasattr(tensor, "mem"):
        tensor = tensor.ir_value()
    with loc if loc is not None else contextlib.nullcontext(), \
            ip if ip is not None else contextlib.nullcontext():
        build = getattr(implementation.ops(), "rocdl_tensor_pointer", None)
        if build is None:
            from ...errors import DSLError
            raise DSLError("fly.extract_aligned_pointer_as_index can only be used inside a "
                           "@flydsl.kernel body")
        return build(ptr_type, tensor, "fly.extract_aligned_pointer_as_index")


def copy_atom_call_ssa(results, copy_atom, src, dst=None, pred=None, *, loc=None, ip=None):
    """``fly.copy_atom_call_ssa([vector type], atom, src)``: one call of ``copy_atom`` from
    the view ``src`` (one call's elements, e.g. ``fx.slice(divided, (None, i))``), its
    bits returned as a value of the one result type (a vector such as ``vector<4xi32>``)
    instead of written to registers: :func:`flydsl.expr.copy` into a register fragment
    of that type's elements, read back as the vector. ``dst`` is not supported (the
    register form of the call is ``fx.copy_atom_call``).

    Example (inside a kernel, ``seq`` an int32 tensor)::

        atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Int32)
        div = fx.logical_divide(fx.rocdl.make_buffer_tensor(seq), fx.make_layout(1, 1))
        v = fly.copy_atom_call_ssa([T.vec(1, T.i32)], atom, fx.slice(div, (None, i)))
    """
    import mlir.ir as ir
    from mlir.dialects import vector
    from ...errors import DSLTypeError
    from ...expr import layout
    from ...expr.dtypes import dtype_from_mlir_text
    types = list(results) if isinstance(results, (list, tuple)) else [results]
    if dst is not None or len(types) != 1:
        raise DSLTypeError("fly.copy_atom_call_ssa: one result type and no dst (the "
                           f"register form is fx.copy_atom_call), got {len(types)} result "
                           f"type(s){' and a dst' if dst is not None else ''}")
    rt = getattr(types[0], "ir_type", types[0])
    if not isinstance(rt, ir.VectorType):
        raise DSLTypeError(f"fly.copy_atom_call_ssa: the result type must be a vector type, "
                           f"got {rt}")
    rt = ir.VectorType(rt)
    n = 1
    for d in rt.shape:
        n *= d
    with loc if loc is not None else contextlib.nullcontext(), \
            ip if ip is not None else contextlib.nullcontext():
        dtype = dtype_from_mlir_text(str(rt.element_type))
        if dtype is None:
            raise DSLTypeError(f"fly.copy_atom_call_ssa: no flydsl dtype for the result's "
                               f"element type {rt.element_type}")
        regs = layout.make_rmem_tensor(n, dtype)
        layout.copy(copy_atom, src, regs, pred=pred)
        lanes = [regs[j] for j in range(n)]
        return vector.from_elements(rt, [getattr(v, "v", v) for v in lanes])


def coalesce(layout, pattern=None):
    """``fly.coalesce``: :func:`flydsl.expr.coalesce` (``pattern`` is its target profile).

    Example::

        >>> fly.coalesce(fx.make_layout((3, (1, 9)), (1, (9, 3))))
        27:1
    """
    from ...expr import layout_algebra
    return layout_algebra.coalesce(layout, pattern)


def composition(layout, tiler):
    """``fly.composition``: :func:`flydsl.expr.composition`."""
    from ...expr import layout_algebra
    return layout_algebra.composition(layout, tiler)


def complement(layout, codomain_size=None):
    """``fly.complement``: :func:`flydsl.expr.complement`."""
    from ...expr import layout_algebra
    return layout_algebra.complement(layout, codomain_size=codomain_size)


def right_inverse(layout):
    """``fly.right_inverse``: :func:`flydsl.expr.right_inverse`."""
    from ...expr import layout_algebra
    return layout_algebra.right_inverse(layout)


def left_inverse(layout):
    """``fly.left_inverse``: :func:`flydsl.expr.left_inverse`."""
    from ...expr import layout_algebra
    return layout_algebra.left_inverse(layout)


__getattr__ = absent_dialect("fly")
