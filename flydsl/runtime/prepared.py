"""Prepared launches: one specialization re-launched with tensors of fixed layouts.

The warm path (:mod:`flydsl.runtime.fastpath`) re-checks every argument of every
launch: type, dtype, device, rank, layout, width, alignment, then packs shapes
and strides. A caller that already knows that its tensors' shapes, strides,
dtypes and devices repeat (``flydsl.torch``'s fused kernels key their launch
plans by them) needs less: a prepared launch (:func:`prepare_launch`) keeps a
slot table with everything but the data pointers packed once, and a call only
stores the tensors' pointers and submits. It still checks what can change under equal
layouts: the codegen environment (:func:`~flydsl.runtime.dispatch.env_token`),
each pointer's alignment where the specialization assumed it, the overlaps of
tensors it depends on (from the pointers and the fixed extents), and that the
other arguments are the values it was prepared with. When one does not hold,
the call returns False and launches nothing: the caller launches the usual way.
"""
from __future__ import annotations

import array
import ctypes
import functools
import threading
from typing import Callable, Optional, Sequence

from .dispatch import env_token
from .fastpath import _Writer, emit_constexpr_guards, emit_pair_guard
from .packing import BoundLaunch
from .specialization import ALIGNMENT, tensor_aligned
from .tensors import is_torch_tensor, range_of, torch_writable


def _build(bound: BoundLaunch, runtime: Sequence, positions: Sequence[Optional[int]],
           nargs: int, constexprs: Sequence, dims: tuple,
           pairs: Sequence[tuple] = ()) -> Callable[[Sequence], bool]:
    """The generated ``launch(args) -> bool`` (see :func:`prepare_launch`)."""
    buf = bound.fresh_buffer()
    for pack, value in zip(bound.packers, runtime):
        pack(buf.values, value)
    w = _Writer()
    w.names.update(_env_token=env_token, _env=env_token(), _local=threading.local(),
                   _fresh=bound.fresh_buffer, _template=list(buf.values),
                   _submit=bound.submit, _dims=dims)
    w.lines.append("def launch(args):")
    w.emit(f"if len(args) != {nargs}: return False")
    emit_constexpr_guards(w, constexprs)
    pointers, scalars = [], []
    for (kind, _), off, pos, value in zip(bound.layout, bound.offsets, positions, runtime):
        if pos is None:
            continue                   # a default: packed once for good
        if kind == "tensor":
            aligned = tensor_aligned(value.data_ptr(),
                                     [s * value.element_size() for s in value.stride()])
            pointers.append((pos, off, aligned, value.numel() > 0))
        else:
            scalars.append((pos, value))
    _emit_scalar_guards(w, scalars)
    w.emit("if _env_token() != _env: return False")
    @functools.cache
    def spans(i: int) -> bool:
        lo, hi = range_of(runtime[i])[:2]
        return lo != hi
    pairs = [(i, j, o) for i, j, o in pairs if spans(i) and spans(j)]   # an empty one: apart
    store = _native_store() if len(pointers) >= 4 and not pairs else None
    if store is not None:
        # every check and store of the pointers in one C call (no overlap to check)
        spec = array.array("i", [x for pos, off, aligned, full in pointers
                                 for x in (pos, off, int(full) | 2 * int(aligned))])
        w.names.update(_store=store, _spec=spec.tobytes(), _addressof=ctypes.addressof)
        _emit_buffer(w, address=True)
        w.emit(f"if not _store(args, _spec, addr, {ALIGNMENT}): return False")
    else:
        _emit_pointers(w, pointers)
        _emit_overlap_guards(w, pairs, runtime, positions, bound.offsets)
        _emit_buffer(w)
        _emit_stores(w, [off for _, off, _, _ in pointers])
    w.emit("_submit(buf, *_dims)")
    w.emit("return True")
    source = "\n".join(w.lines) + "\n"
    scope = dict(w.names)
    exec(compile(source, "<flydsl prepared launch>", "exec"), scope)  # noqa: S102
    launch = scope["launch"]
    launch.__flydsl_source__ = source
    return launch


def _native_store() -> Optional[Callable]:
    """The native module's ``store_pointers`` (runtime/native_launch.c), where it builds
    and reads torch tensors through torch's C shim; None where not (the generated
    Python reads them)."""
    from .native_launch import enabled, load, torch_shim
    if not enabled():
        return None
    module = load()
    if module is None or not torch_shim(module):
        return None
    return getattr(module, "store_pointers", None)


def _emit_buffer(w: _Writer, address: bool = False) -> None:
    """``buf``: this thread's slot table, made from the template on its first launch
    (launches release the GIL: one per thread); with ``address``, also ``addr``, where
    its values are."""
    w.emit("try:")
    w.emit("buf = _local.buf; addr = _local.addr" if address else "buf = _local.buf", 2)
    w.emit("except AttributeError:")
    w.emit("buf = _local.buf = _fresh()", 2)
    w.emit("buf.values[:] = _template", 2)
    if address:
        w.emit("addr = _local.addr = _addressof(buf.values)", 2)


def _emit_stores(w: _Writer, offs: Sequence[int]) -> None:
    """The pointers ``p<slot>`` stored at their slots (``slot`` and ``slot + 1``) of
    ``buf``'s values."""
    w.emit("v = buf.values")
    step = offs[1] - offs[0] if len(offs) > 2 else 0
    if step > 1 and list(offs) == list(range(offs[0], offs[-1] + 1, step)):
        # each tensor's two pointer slots, evenly spaced: two strided stores in C
        names = ", ".join(f"p{off}" for off in offs)
        w.emit(f"_ps = ({names},)")
        w.emit(f"v[{offs[0]}:{offs[-1] + 1}:{step}] = v[{offs[0] + 1}:{offs[-1] + 2}:{step}] = _ps")
    else:
        for off in offs:
            w.emit(f"v[{off}] = v[{off + 1}] = p{off}")


def _emit_scalar_guards(w: _Writer, scalars: Sequence[tuple]) -> None:
    """Return False unless each ``(position, value)`` of ``scalars`` is passed again,
    of the same type (``True == 1``) and value (and sign: ``0.0 == -0.0``, but they
    pack differently); a run of non-floats at consecutive positions is compared as
    one tuple."""
    k = 0
    while k < len(scalars):
        run = 1
        while k + run < len(scalars) and scalars[k + run][0] == scalars[k][0] + run \
                and type(scalars[k + run][1]) is not float:
            run += 1
        pos, value = scalars[k]
        if run >= 4 and type(value) is not float:
            values = tuple(v for _, v in scalars[k:k + run])
            w.emit(f"_s = tuple(args[{pos}:{pos + run}])")     # args: a list or a tuple
            w.emit(f"if _s != {w.const('vs', values)} or tuple(map(type, _s)) != "
                   f"{w.const('ts', tuple(map(type, values)))}: return False")
            k += run
            continue
        c = w.const("v", value)
        check = f"type(args[{pos}]) is not {w.const('t', type(value))} or args[{pos}] != {c}"
        if type(value) is float:
            check += f" or args[{pos}].hex() != {c}.hex()"
        w.emit(f"if {check}: return False")
        k += 1


def _emit_pointers(w: _Writer, pointers: Sequence[tuple]) -> None:
    """``p<slot>``: the data pointer of each ``(position, slot, aligned, filled)`` of
    ``pointers``, returning False where the usual launch refuses the tensor (torch's
    negative bit), where a tensor prepared with elements has no memory (a FakeTensor)
    and where one prepared aligned is not; many tensors are read with C-level maps."""
    if len(pointers) < 4:
        for pos, off, aligned, filled in pointers:
            w.emit(f"if args[{pos}].is_neg(): return False")
            w.emit(f"p{off} = args[{pos}].data_ptr()")
            if filled:
                w.emit(f"if not p{off}: return False")
            if aligned:
                w.emit(f"if p{off} % {ALIGNMENT}: return False")
        return
    import torch      # imported already: a prepared launch takes only torch tensors
    w.names.update(_is_neg=torch.Tensor.is_neg, _data_ptr=torch.Tensor.data_ptr,
                   _misaligned=ALIGNMENT.__rmod__)
    get = ", ".join(f"args[{pos}]" for pos, _, _, _ in pointers)
    w.emit(f"_ts = ({get},)")
    w.emit("if any(map(_is_neg, _ts)): return False")
    w.emit(f"{', '.join(f'p{off}' for _, off, _, _ in pointers)}, = map(_data_ptr, _ts)")
    filled = [f"p{off}" for _, off, _, f in pointers if f]
    if filled:
        w.emit(f"if not all(({', '.join(filled)},)): return False")
    aligned = [f"p{off}" for _, off, a, _ in pointers if a]
    if aligned:
        w.emit(f"if any(map(_misaligned, ({', '.join(aligned)},))): return False")


def _emit_overlap_guards(w: _Writer, pairs: Sequence[tuple], runtime: Sequence,
                         positions: Sequence, offsets: Sequence) -> None:
    """Return False unless each ``(i, j, overlapping)`` of ``pairs`` (neither tensor
    empty) still holds: the tensors' extents are fixed, so each range is its pointer
    plus constant offsets, and two views with gaps
    of one step (``x[0::2]``, ``x[1::2]``) overlap where their elements do. Many
    pairs are checked by one :class:`~flydsl.runtime.specialization.PairGuard`."""
    @functools.cache
    def bounds(i: int):
        r = range_of(runtime[i])
        base = runtime[i].data_ptr()
        p = f"p{offsets[i]}" if positions[i] is not None else str(base)
        return f"{p} + {r[0] - base}", f"{p} + {r[1] - base}", r
    def item(k: int) -> str:
        lo, hi, r = bounds(k)
        return f"({lo}, {hi}{''.join(f', {x}' for x in r[2:])})"
    if emit_pair_guard(w, pairs, item):
        return
    for i, j, overlapping in pairs:
        a, b = bounds(i), bounds(j)
        test = f"{a[0]} < {b[1]} and {b[0]} < {a[1]}"
        ra, rb = a[2], b[2]
        if len(ra) == 4 and len(rb) == 4 and ra[2] == rb[2]:   # (specialization.overlap)
            step = ra[2]
            test += f" and not ({ra[3]} <= ({b[0]} - ({a[0]})) % {step} <= {step - rb[3]})"
        w.emit(f"if not ({test}): return False" if overlapping else f"if {test}: return False")


def prepare_launch(bound: BoundLaunch, args: Sequence, params: Sequence,
                   constexprs: Sequence, dims: tuple, pairs: Sequence[tuple] = (),
                   fresh: Sequence[int] = ()) -> Optional[Callable[[Sequence], bool]]:
    """The prepared launch of ``bound`` for positional ``args`` (``params``: the kernel's
    runtime parameters in order, each ``(position or None, default)``; ``constexprs``:
    ``(position, value)`` of the constexpr arguments; ``dims``: ``(grid, block, smem,
    stream)``; ``pairs``: the overlaps the specialization depends on, as the warm
    path's), or None when
    an argument is a tensor other than a torch tensor (only torch tensors are read
    by pointer alone) or a tensor the kernel writes is read-only (an inference
    tensor outside ``torch.inference_mode()``, which the usual launch refuses: a
    prepared launch must not accept what a cold one refuses).

    ``launch(args) -> bool`` launches ``args`` (positional, as the call it was
    prepared from) when they fit, and returns False, launching nothing, when they
    do not. The caller guarantees that every tensor argument has the shape,
    strides, dtype and device of the one it was prepared with, and that the
    tensors the kernel writes stay writable: those are not checked again (a tensor
    with torch's negative bit is: it returns False, and the usual launch refuses
    it). ``fresh`` lists the positions of tensors the caller allocates anew for
    every call (``flydsl.torch``'s results): no other argument can overlap them, so
    their overlaps are not checked (an optimizer step's 30 results and 40 inputs
    make 1,635 pairs). It is a function generated for the argument list (its source:
    ``__flydsl_source__``).
    """
    runtime, positions = [], []
    for pos, default in params:
        value = args[pos] if pos is not None and pos < len(args) else default
        runtime.append(value)
        positions.append(pos if pos is not None and pos < len(args) else None)
    for i, ((kind, _), value) in enumerate(zip(bound.layout, runtime)):
        if kind == "tensor" and not is_torch_tensor(value):
            return None
        if i in bound.written and not torch_writable(value):
            return None
    if fresh:
        fresh = set(fresh)
        # a fresh tensor overlapped nothing when prepared either (were it to, the
        # caller's claim would be wrong: keep the check)
        pairs = [(i, j, o) for i, j, o in pairs
                 if o or (positions[i] not in fresh and positions[j] not in fresh)]
    return _build(bound, runtime, positions, len(args), constexprs, dims, pairs)


__all__ = ["prepare_launch"]
