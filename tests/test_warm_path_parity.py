"""A warm launch accepts exactly what a cold one accepts: the generated guards
(flydsl.runtime.fastpath) may only be faster than the cold checks
(flydsl.runtime.tensors, launch, specialization), never more permissive.

Each case launches a kernel cold, in a fresh KernelFunction, and warm, right after
a priming launch of one shared KernelFunction with another view of the same kind,
and asserts that both raise the same error class or leave the same bytes in every
buffer the view lives in (so a store at a wrong offset shows in its neighbours).
"""
import random

import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.errors import DSLTypeError

torch = pytest.importorskip("torch")


def _double1(x: fx.Tensor):
    i = fx.thread_idx.x
    if i < x.shape[0]:
        x[i] = x[i] + x[i]


def _double2(x: fx.Tensor):
    i = fx.thread_idx.x
    j = fx.thread_idx.y
    if i < x.shape[0]:
        if j < x.shape[1]:
            x[i, j] = x[i, j] + x[i, j]


def _double0(x: fx.Tensor):
    x[()] = x[()] + x[()]


def _twice_into(x: fx.Tensor, out: fx.Tensor):
    i = fx.thread_idx.x
    if i < x.shape[0]:
        out[i] = x[i] + x[i]


# -- cases: make(dtype) -> (argument, the buffers it lives in) -------------------------

def _numpy(dtype, take, read_only=False):
    base = (np.arange(64) % 7 + 1).astype(dtype)
    view = take(base)
    if read_only:
        view.flags.writeable = False
    return view, [base]


def _field(dtype, shape):
    """The ``x`` field of ``[("x", dtype), ("y", "i1")]``: byte strides of itemsize + 1."""
    rec = np.zeros(shape, [("x", dtype), ("y", "i1")])
    rec["x"] = 3
    rec["y"] = 5
    return rec["x"], [rec]


def _on_bytes(dtype, shape, strides, offset):
    """``dtype`` elements at any byte offset and byte strides of a byte buffer."""
    raw = np.arange(256, dtype=np.uint8)
    return np.ndarray(shape, dtype, buffer=raw, offset=offset, strides=strides), [raw]


def _item(dtype) -> int:
    return np.dtype(dtype).itemsize


NUMPY = {
    1: {"contiguous": lambda d: _numpy(d, lambda b: b[:8]),
        "every_other": lambda d: _numpy(d, lambda b: b[::2][:8]),
        "one_in": lambda d: _numpy(d, lambda b: b[1:9]),
        "reversed": lambda d: _numpy(d, lambda b: b[::-1][:8]),
        "read_only": lambda d: _numpy(d, lambda b: b[:8], read_only=True),
        "empty": lambda d: _numpy(d, lambda b: b[:0]),
        # numpy keeps the base's pointer for b[1:1], not for b[1:][:0]
        "empty_one_in": lambda d: _numpy(d, lambda b: b[1:][:0]),
        "field": lambda d: _field(d, (8,)),
        "odd_byte_stride": lambda d: _on_bytes(d, (8,), (_item(d) + 1,), 0),
        "one_byte_in": lambda d: _on_bytes(d, (8,), (_item(d),), 1),
        "broadcast": lambda d: _numpy(d, lambda b: np.broadcast_to(b[:1], (8,)))},
    2: {"contiguous": lambda d: _numpy(d, lambda b: b.reshape(8, 8)),
        "transposed": lambda d: _numpy(d, lambda b: b.reshape(8, 8).T),
        "one_in": lambda d: _numpy(d, lambda b: b[1:57].reshape(7, 8)),
        "every_other_column": lambda d: _numpy(d, lambda b: b.reshape(8, 8)[:, ::2]),
        "read_only": lambda d: _numpy(d, lambda b: b.reshape(8, 8), read_only=True),
        "empty": lambda d: _numpy(d, lambda b: b[:0].reshape(0, 4)),
        "field": lambda d: _field(d, (4, 4)),
        "odd_row_bytes": lambda d: _on_bytes(d, (4, 4), (4 * _item(d) + 1, _item(d)), 0)},
    0: {"contiguous": lambda d: _numpy(d, lambda b: b[:1].reshape(())),
        "one_in": lambda d: _numpy(d, lambda b: b[1:2].reshape(())),
        "read_only": lambda d: _numpy(d, lambda b: b[:1].reshape(()), read_only=True),
        "field": lambda d: _field(d, ()),
        "one_byte_in": lambda d: _on_bytes(d, (), (), 1)},
}


def _torch(dtype, take, inference=False):
    with torch.inference_mode(inference):
        base = (torch.arange(64) % 7 + 1).to(getattr(torch, dtype))
        return take(base), [base]


def _torch_bytes(dtype, count, offset):
    """``count`` elements of ``dtype`` viewed on a byte buffer, ``offset`` bytes in."""
    raw = torch.arange(256, dtype=torch.uint8)
    item = _item(dtype)
    return raw[offset:offset + count * item].view(getattr(torch, dtype)), [raw]


TORCH = {
    1: {"contiguous": lambda d: _torch(d, lambda b: b[:8]),
        "every_other": lambda d: _torch(d, lambda b: b[::2][:8]),
        "one_in": lambda d: _torch(d, lambda b: b[1:9]),
        "strided_by_3": lambda d: _torch(d, lambda b: torch.as_strided(b, (8,), (3,))),
        "inference": lambda d: _torch(d, lambda b: b[:8], inference=True),
        "empty": lambda d: _torch(d, lambda b: b[:0]),
        "empty_one_in": lambda d: _torch(d, lambda b: b[1:][:0]),
        "bytes_one_item_in": lambda d: _torch_bytes(d, 8, _item(d)),
        "broadcast": lambda d: _torch(d, lambda b: b[:1].expand(8))},
    2: {"contiguous": lambda d: _torch(d, lambda b: b.view(8, 8)),
        "transposed": lambda d: _torch(d, lambda b: b.view(8, 8).t()),
        "one_in": lambda d: _torch(d, lambda b: b[1:57].view(7, 8)),
        "rows_of_5": lambda d: _torch(d, lambda b: torch.as_strided(b, (4, 4), (5, 1))),
        "inference": lambda d: _torch(d, lambda b: b.view(8, 8), inference=True),
        "empty": lambda d: _torch(d, lambda b: b[:0].view(0, 4))},
    0: {"contiguous": lambda d: _torch(d, lambda b: b[0]),
        "one_in": lambda d: _torch(d, lambda b: b[1]),
        "inference": lambda d: _torch(d, lambda b: b[0], inference=True)},
}

#: The views a warm kernel is primed with (different specializations; an empty view
#: one element in once installed an aligned variant for misaligned arrays).
PRIMES = ("contiguous", "every_other", "transposed", "one_in", "empty_one_in")
KERNELS = {0: (_double0, (1,)), 1: (_double1, (16,)), 2: (_double2, (8, 8))}


def _bytes(buffer) -> bytes:
    if isinstance(buffer, np.ndarray):
        return buffer.tobytes()
    return buffer.numpy().tobytes()


def _outcome(kernel, block, make, dtype, read_into):
    """The error class a launch raises, or the bytes of every buffer after it."""
    arg, buffers = make(dtype)
    args = (arg,)
    if read_into:
        out = np.zeros(8, dtype)
        args, buffers = (arg, out), buffers + [out]
    try:
        kernel[1, block](*args)
    except Exception as e:  # noqa: BLE001 - its class is what both paths must agree on
        return type(e).__name__
    return [_bytes(b) for b in buffers]


def _check_parity(fn, block, cases, dtype, seed, read_into=None):
    warm = flydsl.kernel(fn)
    cold = {name: _outcome(flydsl.kernel(fn), block, make, dtype, read_into)
            for name, make in cases.items()}
    pairs = [(p, c) for p in PRIMES if p in cases for c in cases]
    random.Random(seed).shuffle(pairs)
    mismatches = []
    for prime, case in pairs:
        assert not isinstance(_outcome(warm, block, cases[prime], dtype, read_into), str)
        got = _outcome(warm, block, cases[case], dtype, read_into)
        if got != cold[case]:
            mismatches.append((prime, case, got if isinstance(got, str) else "other bytes",
                               cold[case] if isinstance(cold[case], str) else "launched"))
    assert not mismatches, f"(primed with, launched, warm, cold): {mismatches}"


@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])   # item sizes 4, 1, 8
def test_warm_numpy_vectors_are_accepted_and_written_as_cold_ones(dtype):
    _check_parity(_double1, (16,), NUMPY[1], dtype, seed=1)


@pytest.mark.parametrize("rank", [0, 2])
def test_warm_numpy_matrices_and_scalars_are_accepted_as_cold_ones(rank):
    fn, block = KERNELS[rank]
    _check_parity(fn, block, NUMPY[rank], "float32", seed=rank)


def test_warm_reads_of_numpy_views_see_what_cold_reads_see():
    cases = {k: NUMPY[1][k] for k in ("contiguous", "every_other", "one_in", "read_only",
                                      "field", "odd_byte_stride", "broadcast")}
    _check_parity(_twice_into, (16,), cases, "float32", seed=3, read_into=True)


@pytest.mark.parametrize("rank, dtype", [(1, "float32"), (1, "float64"), (2, "float32"),
                                         (0, "float32")])
def test_warm_torch_tensors_are_accepted_and_written_as_cold_ones(rank, dtype):
    fn, block = KERNELS[rank]
    _check_parity(fn, block, TORCH[rank], dtype, seed=4)


def test_warm_cuda_array_interface_strides_of_no_whole_element_are_refused(fake_cuda,
                                                                           monkeypatch):
    """CuPy/Numba-like arrays: after a launch with a stride of 8 bytes, one of 5
    bytes (a structured field) is refused as a cold launch refuses it."""
    from fake_gpu import PlainCai, compiled_vadd, dev, register, vadd_kernel
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", "cuda")
    register(fake_cuda, compiled_vadd())
    b, c = dev(64), dev(64)
    vadd_kernel[1, 64](PlainCai(np.zeros(128, np.float32)[::2]), b, c, 64)
    field = np.zeros(64, [("x", "f4"), ("y", "i1")])["x"]
    with pytest.raises(DSLTypeError, match="not a multiple of the item size"):
        vadd_kernel[1, 64](PlainCai(field), b, c, 64)
    assert len(fake_cuda.launches) == 1
