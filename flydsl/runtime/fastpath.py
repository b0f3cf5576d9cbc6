"""The warm-launch fast path: one generated function per specialization.

A warm launch must check that its arguments still fit the prepared launch, pack
them into the thread's slot table and submit. Doing that with one key tuple per
call (:func:`~flydsl.runtime.dispatch.arg_key` for each argument, a hash, a dict
lookup) and one packer call per argument costs a few microseconds of Python calls.
So, once a specialization is bound, this module writes a function for it that
does the same work inline:

* guards that hold exactly when the argument's fast key would be the same and
  the cold path would accept it (tensors: strides in whole elements, writable
  where the kernel stores; ints: when the value fits the parameter's type, which
  is what that key protects), in the order of the arguments, returning ``False``
  at the first mismatch so that the caller falls back to the keyed lookup (and
  from there to the cold path, which raises what it refuses): a warm launch may
  only be faster than a cold one, never more permissive
  (``tests/test_warm_path_parity.py`` launches both over many views);
* the packing of numpy, torch and ``__cuda_array_interface__`` tensors and of ints
  written out, reusing what the guards read (stride tuples, the interface dict);
  every other argument kind uses its packer and an exact key comparison;
* the overlap checks of the specialization (``pairs``): written tensors whose byte
  ranges overlapped another tensor's, or did not, still do or do not
  (:mod:`flydsl.runtime.specialization`), from the pointers, shapes and strides the
  guards read; none where at most one tensor is checked or none is written;
* the launcher's ``submit``.

Where :mod:`flydsl.runtime.native_launch` applies (the CPU driver's plain submit; torch
CPU tensors, numpy arrays, ints, floats, bools), the same guards, packing and submit run in C and
the kernel's entry is called directly for a one-block grid; the generated Python
function is then kept as the native launch's ``flydsl_python``.

The generated source is kept on the function (``__flydsl_source__``) for debugging.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..errors import FlydslRuntimeError
from .drivers import get_driver
from .native_launch import native_fast_launch
from .dispatch import arg_key, constexpr_token, env_token
from .packing import BoundLaunch, numpy_data
from .specialization import (ALIGNMENT, DIVISIBILITY, SWEEP_PAIRS, WIDE_ELEMENTS, PairGuard,
                             byte_range, overlap)
from .tensors import (cai_aligned, cai_device, cai_itemsize, contiguous_strides,
                      device_id_attribute, is_torch_tensor, range_of, torch_writable)

#: Constexpr types whose ``==`` agrees with constexpr_token's (type, repr) equality.
_PLAIN_CONSTEXPR = (int, bool, str, type(None))


def _same(a, b) -> bool:
    """Key equality that never raises (exotic objects may compare elementwise)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - "not the same" is the safe answer
        return False


class _Writer:
    """Collects the generated lines and the constants they refer to."""

    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[str, object] = {}
        #: tensors whose whole byte range is ``r{i}`` (not only ``lo{i}, hi{i}``)
        self.ranges: set[int] = set()

    def const(self, prefix: str, value) -> str:
        name = f"_{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def emit(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)


def emit_constexpr_guards(w: _Writer, constexprs: Sequence[tuple[int, object]]) -> None:
    """Return False unless each constexpr argument ``(position, value)`` is the same as
    its launch key compares it (plain values by type and value, others by token)."""
    for pos, value in constexprs:
        if type(value) in _PLAIN_CONSTEXPR:
            w.emit(f"if type(args[{pos}]) is not {w.const('ct', type(value))} or "
                   f"args[{pos}] != {w.const('cv', value)}: return False")
        else:
            w.names.update(_constexpr_token=constexpr_token, _same=_same)
            w.emit(f"if not _same(_constexpr_token(args[{pos}]), "
                   f"{w.const('ck', constexpr_token(value))}): return False")


def _emit_layout_guard(w: _Writer, contiguous_test: str, inner: bool) -> None:
    """Return False unless the innermost-contiguity test gives what the key recorded."""
    w.emit(f"if {'not ' if inner else ''}{contiguous_test}: return False")


def _emit_width_guard(w: _Writer, numel: str, wide: bool) -> None:
    """Return False unless the tensor is wide (Int64 shapes) exactly when the key said so."""
    w.emit(f"if {numel} {'<' if wide else '>='} {WIDE_ELEMENTS}: return False")


def emit_whole_elements_guard(w: _Writer, strides: str, nd: int, item: int,
                              may_be_none: bool = False) -> None:
    """Return False unless each of the ``nd`` byte strides in ``strides`` (None, if it
    ``may_be_none``: contiguous) is a whole number of ``item``-byte elements: the rule
    of :func:`~flydsl.runtime.tensors.element_strides`, by which the cold path refuses
    the tensor. The key does not record it, so without this guard a launch primed by
    a strided view would pack ``s // item`` for a structured array's field."""
    if not nd or item == 1:
        return
    partial = " or ".join(f"{strides}[{k}] % {item}" for k in range(nd))
    if may_be_none:
        partial = f"{strides} is not None and ({partial})"
    w.emit(f"if {partial}: return False")


def _emit_alignment_guard(w: _Writer, ptr: str, row_strides: list, aligned: bool) -> None:
    """Return False unless the pointer and the row strides (byte expressions) are all
    multiples of ALIGNMENT exactly when the key said so (runtime.specialization)."""
    misaligned = " or ".join(f"{x} % {ALIGNMENT}" for x in [ptr, *row_strides])
    w.emit(f"if {'' if aligned else 'not ('}{misaligned}{'' if aligned else ')'}: return False")


def _tensor_code(w: _Writer, a: str, off: int, rank: int, sample, key, written: bool) -> str:
    """Guard a numpy or torch tensor inline, and pack it where that is written out:
    ``"packed"``, ``"guarded"`` (the packer still has to run) or ``""`` (another
    kind: nothing emitted). ``written``: the kernel stores to it, so read-only
    arguments go to the slow path (which refuses them)."""
    if type(sample) is np.ndarray:
        t, dtype, nd, inner, aligned, wide = key
        dt, item = w.const("dt", dtype), sample.itemsize
        sd, sh = f"sd{off}", f"sh{off}"   # each .strides/.shape builds a tuple: read once
        w.emit(f"if type({a}) is not _ndarray: return False")
        if written:
            w.emit(f"if not {a}.flags.writeable: return False")
        w.emit(f"if {a}.dtype is not {dt} and {a}.dtype != {dt}: return False")
        w.emit(f"{sd} = {a}.strides")
        w.emit(f"if len({sd}) != {nd}: return False")
        emit_whole_elements_guard(w, sd, nd, item)
        w.emit(f"{sh} = {a}.shape")
        if nd:
            _emit_layout_guard(w, f"({sd}[-1] == {item} or {sh}[-1] == 1)", inner)
        w.emit(f"p = _numpy_data({a})")
        _emit_alignment_guard(w, "p", [f"{sd}[{k}]" for k in range(nd - 1)], aligned)
        _emit_width_guard(w, f"{sh}[0]" if nd == 1 else f"{a}.size", wide)
        if rank == 1:
            w.emit(f"v[{off}] = p; v[{off + 1}] = p")
            w.emit(f"v[{off + 3}] = {sh}[0]; v[{off + 4}] = {sd}[0] // {item}")
            return "packed"
        return "guarded"
    if is_torch_tensor(sample) and len(key) == 7:
        t, dtype, nd, inner, device, aligned, wide = key
        item = sample.element_size()
        tt, dt = w.const("tt", t), w.const("dt", dtype)
        # Each tensor attribute read costs ~0.1 us: read each once, the cheapest way
        # (``is_cpu`` instead of building a device to compare; 1-D numel is the shape).
        where = (f"not {a}.is_cpu" if device.type == "cpu"
                 else f"{a}.device != {w.const('dev', device)}")
        st, sh = f"st{off}", f"sh{off}"
        w.emit(f"if type({a}) is not {tt} or {a}.dtype is not {dt} or {where}: return False")
        # the negative bit (z.conj().imag): the cold path refuses it. The conjugate
        # bit needs a complex dtype, which flydsl does not take (the dtype guard).
        w.emit(f"if {a}.is_neg(): return False")
        if written:
            w.names["_torch_writable"] = torch_writable
            w.emit(f"if {a}.is_inference() and not _torch_writable({a}): return False")
        w.emit(f"{st} = {a}.stride()")
        w.emit(f"if len({st}) != {nd}: return False")
        if nd or rank:
            w.emit(f"{sh} = {a}.shape")
        if nd:
            _emit_layout_guard(w, f"({st}[-1] == 1 or {sh}[-1] == 1)", inner)
        w.emit(f"p = {a}.data_ptr()")
        # no memory (a FakeTensor, a functionalized tensor): the cold path refuses it
        numel = "1" if not nd else f"{sh}[0]" if nd == 1 else f"{a}.numel()"
        w.emit(f"if not p and {numel}: return False")
        _emit_alignment_guard(w, "p", [f"{st}[{k}] * {item}" for k in range(nd - 1)], aligned)
        if nd:   # a 0-d tensor is never wide
            _emit_width_guard(w, f"{sh}[0]" if nd == 1 else f"{a}.numel()", wide)
        w.emit(f"v[{off}] = p; v[{off + 1}] = p")
        if rank == 1:
            w.emit(f"v[{off + 3}] = {sh}[0]; v[{off + 4}] = {st}[0]")
        elif rank:
            w.emit(f"v[{off + 3}:{off + 3 + rank}] = {sh}; "
                   f"v[{off + 3 + rank}:{off + 3 + 2 * rank}] = {st}")
        return "packed"
    if len(key) == 8 and getattr(sample, "__cuda_array_interface__", None) is not None:
        return _cai_code(w, a, off, rank, sample, key, written)
    return ""


def _cai_code(w: _Writer, a: str, off: int, rank: int, sample, key, written: bool) -> str:
    """A ``__cuda_array_interface__`` array (CuPy, Numba): the interface is read once
    for the guards (those of :func:`~flydsl.runtime.devices.cai_key`) and the packing."""
    t, typestr, nd, inner, masked, aligned, wide, device = key
    item = cai_itemsize(typestr)
    cai, sh, st = f"cai{off}", f"sh{off}", f"st{off}"
    w.emit(f"if type({a}) is not {w.const('tt', t)}: return False")
    w.emit(f"{cai} = {a}.__cuda_array_interface__")
    w.emit(f"{sh} = {cai}['shape']; {st} = {cai}.get('strides')")
    w.emit(f"if {cai}['typestr'] != {typestr!r} or len({sh}) != {nd}: return False")
    if nd:
        _emit_layout_guard(w, f"({st} is None or {sh}[-1] == 1 or {st}[-1] == {item})", inner)
        emit_whole_elements_guard(w, st, nd, item, may_be_none=True)
    w.emit(f"if ({cai}.get('mask') is not None) is not {masked}: return False")
    if written:
        w.emit(f"if {cai}['data'][1]: return False")   # (pointer, read-only)
    w.emit(f"p = {cai}['data'][0] or 0")
    w.emit(f"if _cai_aligned(p, {sh}, {st}, {item}) is not {aligned}: return False")
    _emit_width_guard(w, f"_prod({sh})", wide)
    if device_id_attribute(sample) is not None:   # CuPy: the array says where it lives
        w.emit(f"if {a}.device.id != {device}: return False")
    elif _several_cuda_devices():   # else cai_device() answers 0 for every pointer
        w.emit(f"if cai_device({a}, p) != {device}: return False")
    w.emit(f"v[{off}] = p; v[{off + 1}] = p")
    if rank == 1:
        w.emit(f"v[{off + 3}] = {sh}[0]; v[{off + 4}] = 1 if {st} is None else {st}[0] // {item}")
    elif rank:
        w.emit(f"v[{off + 3}:{off + 3 + rank}] = {sh}")
        w.emit(f"v[{off + 3 + rank}:{off + 3 + 2 * rank}] = _contiguous_strides({sh}) "
               f"if {st} is None else [s // {item} for s in {st}]")
    return "packed"


def _emit_range(w: _Writer, i: int, a: str, off: int, sample, key) -> None:
    """``lo{i}, hi{i}``: the bytes tensor ``a`` spans, as
    :func:`~flydsl.runtime.specialization.byte_range` gives them: inline for a 1-D
    numpy or torch tensor whose key says it is contiguous (``p`` to ``p + n * item``,
    from the guards' ``p`` and shape); else as ``r{i}`` (which may also carry the
    step of a view with gaps), from the guards' pointer, shape and strides for numpy
    and torch tensors, by call for other kinds."""
    numpy = type(sample) is np.ndarray
    torch = not numpy and is_torch_tensor(sample) and len(key) == 7
    if (numpy or torch) and key[2] == 1 and key[3]:
        item = sample.itemsize if numpy else sample.element_size()
        w.emit(f"lo{i} = p; hi{i} = p + sh{off}[0] * {item}")
        return
    if numpy:    # byte strides
        w.emit(f"r{i} = _byte_range(p, sh{off}, sd{off}, {sample.itemsize})")
    elif torch and key[2]:    # element strides (a 0-d tensor has no shape read)
        item = sample.element_size()
        w.emit(f"r{i} = _byte_range(p, sh{off}, st{off}, {item}, {item})")
    else:
        w.emit(f"r{i} = _range_of({a})")
    w.emit(f"lo{i} = r{i}[0]; hi{i} = r{i}[1]")
    w.ranges.add(i)


def emit_pair_guard(w: _Writer, pairs: Sequence[tuple], item: Callable[[int], str]) -> bool:
    """For :data:`~flydsl.runtime.specialization.SWEEP_PAIRS` pairs or more: return
    False unless one :class:`~flydsl.runtime.specialization.PairGuard` of ``pairs``
    accepts the ranges ``item(k)`` (an expression) of its positions; whether it was
    emitted (fewer pairs: the caller tests each inline)."""
    if len(pairs) < SWEEP_PAIRS:
        return False
    guard = PairGuard(pairs)
    items = ", ".join(map(item, guard.positions))
    w.emit(f"if not {w.const('pairs', guard)}(({items},)): return False")
    return True


def emit_overlap_guards(w: _Writer, pairs: Sequence[tuple]) -> None:
    """Return False unless each ``(i, j, overlapping)`` of ``pairs`` holds of the ranges
    ``lo{i}, hi{i}`` and ``lo{j}, hi{j}`` (by :func:`overlap` of ``r{i}`` and ``r{j}``
    where both are whole ranges: views with gaps, whose hulls may meet while their
    elements do not); many pairs by one :class:`~flydsl.runtime.specialization.PairGuard`,
    which gives the same answer."""
    if emit_pair_guard(w, pairs, lambda k: f"r{k}" if k in w.ranges else f"(lo{k}, hi{k})"):
        return
    for i, j, overlapping in pairs:
        test = f"lo{i} < hi{j} and lo{j} < hi{i}"
        if i in w.ranges and j in w.ranges:
            test += f" and _overlap(r{i}, r{j})"
        w.emit(f"if not ({test}): return False" if overlapping else f"if {test}: return False")


def _several_cuda_devices() -> bool:
    try:
        return get_driver("cuda").device_count() > 1
    except FlydslRuntimeError:
        return False


def _int_code(w: _Writer, a: str, off: int, sample, dtype, inferred: bool,
              divisible: bool) -> None:
    """An int argument (Python's or a numpy integer, of ``sample``'s type) of an integer
    parameter: guarded by the range of the parameter's type, as the cold path checks
    it (an inferred Int64 also by *not* fitting Int32, which would infer Int32; a numpy
    integer's type decides its inferred type), and by its divisibility by DIVISIBILITY
    (runtime.specialization)."""
    lo, hi = dtype.int_limits
    t = "int" if type(sample) is int else w.const("it", type(sample))
    w.emit(f"if type({a}) is not {t} or not {lo} <= {a} < {hi}: return False")
    w.emit(f"if {'' if divisible else 'not '}{a} % {DIVISIBILITY}: return False")
    if inferred and dtype.bits == 64 and type(sample) is int:
        w.emit(f"if -2147483648 <= {a} < 2147483648: return False")
    w.emit(f"v[{off}] = {a}")


def build_fast_launch(bound: BoundLaunch, nargs: int, env: tuple,
                      constexprs: Sequence[tuple[int, object]],
                      runtime: Sequence[tuple], name: str = "kernel",
                      pairs: Sequence[tuple] = ()) -> Callable:
    """The warm launch ``fast(args, grid, block, smem, stream) -> bool`` of one
    specialization: True when it launched, False when ``args`` do not fit it.

    ``runtime`` has one entry per runtime parameter of ``bound``, in its order:
    ``("arg", position, fast_key, param_kind, sample)`` for a passed argument (its
    :func:`~flydsl.runtime.dispatch.arg_key` when bound, the kernel parameter's
    declared kind: ``tensor``, ``scalar`` or ``infer``, and the argument itself, read
    while generating and not kept) or ``("default", value)`` for an omitted one.
    ``constexprs`` lists ``(position, value)`` of the constexpr arguments.
    ``pairs`` lists ``(i, j, overlapping)`` of runtime tensor parameters whose
    overlap the specialization depends on, and whether they overlapped.
    Which launch context it serves is decided by who looks it up (a kernel keys its
    warm launches by context, :mod:`flydsl.launch_context`), not by the launch.
    The native twin of the function (runtime.native_launch) is returned where it applies.
    """
    w = _Writer()
    w.names.update(_ndarray=np.ndarray, _numpy_data=numpy_data, _env_token=env_token,
                   cai_device=cai_device, _cai_aligned=cai_aligned, _prod=math.prod,
                   _contiguous_strides=contiguous_strides,
                   _arg_key=arg_key, _constexpr_token=constexpr_token, _same=_same,
                   _local=bound.local, _new_buffer=bound.new_buffer, _submit=bound.submit,
                   _range_of=range_of, _byte_range=byte_range,
                   _overlap=overlap)
    ranged = {k for i, j, _ in pairs for k in (i, j)}
    w.lines.append("def fast(args, grid, block, smem, stream):")
    w.emit(f"if len(args) != {nargs}: return False")
    w.emit(f"if _env_token() != {w.const('env', env)}: return False")
    emit_constexpr_guards(w, constexprs)
    w.emit("try:")
    w.emit("buf = _local.buf", 2)
    w.emit("except AttributeError:")
    w.emit("buf = _new_buffer()", 2)
    w.emit("v = buf.values")
    for i, (entry, (kind, info), off, pack) in enumerate(
            zip(runtime, bound.layout, bound.offsets, bound.packers)):
        if entry[0] == "default":
            w.emit(f"{w.const('pack', pack)}(v, {w.const('default', entry[1])})")
            if i in ranged:
                w.emit(f"r{i} = {w.const('range', range_of(entry[1]))}; "
                       f"lo{i} = r{i}[0]; hi{i} = r{i}[1]")
                w.ranges.add(i)
            continue
        _, pos, key, param_kind, sample = entry
        a = f"a{i}"
        w.emit(f"{a} = args[{pos}]")
        done = (_tensor_code(w, a, off, info, sample, key, i in bound.written)
                if kind == "tensor" else "")
        if done == "packed":
            if i in ranged:
                _emit_range(w, i, a, off, sample, key)
            continue
        if kind == "scalar" and (type(sample) is int or isinstance(sample, np.integer)) \
                and info.kind == "int":
            _int_code(w, a, off, sample, info, inferred=param_kind == "infer",
                      divisible=key[3])
            continue
        if done == "guarded":
            pass
        elif type(sample) in (float, bool):   # their key is the type itself
            w.emit(f"if type({a}) is not {sample.__class__.__name__}: return False")
        else:
            w.emit(f"if not _same(_arg_key({a}), {w.const('key', key)}): return False")
        w.emit(f"{w.const('pack', pack)}(v, {a})")
        if i in ranged:
            _emit_range(w, i, a, off, sample, key)
    emit_overlap_guards(w, pairs)
    w.emit("_submit(buf, grid, block, smem, stream)")
    w.emit("return True")
    source = "\n".join(w.lines) + "\n"
    scope = dict(w.names)
    exec(compile(source, f"<flydsl fast launch of {name}>", "exec"), scope)  # noqa: S102
    fast = scope["fast"]
    fast.__flydsl_source__ = source
    native = native_fast_launch(bound, nargs, env, constexprs, runtime, name, pairs)
    if native is None:
        return fast
    native.__flydsl_source__ = ("# native (runtime/native_launch.c): the same guards and "
                                "packing as this Python\n" + source)
    native.flydsl_python = fast     # the Python twin (tests, benchmarks)
    return native


__all__ = ["build_fast_launch"]
