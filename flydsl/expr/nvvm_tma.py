"""Hopper TMA (the Tensor Memory Accelerator) for ``fx.nvvm``: the tensor-map
descriptor built on the host, and the bulk tensor copies a kernel issues with it.

``make_tma_descriptor(tensor, box, swizzle)`` describes a tensor (its address, shape
and strides), the box one copy moves and the shared-memory swizzle. It returns 128
bytes (an ``int64[16]`` tensor on the tensor's device) that the kernel takes as an
ordinary ``fx.Tensor`` argument:

* on a CUDA tensor, the driver's ``CUtensorMap`` (``cuTensorMapEncodeTiled``), which
  ``cp.async.bulk.tensor`` reads from global memory;
* on a host tensor, flydsl's own record of the same facts (:data:`HOST_LAYOUT`), from
  which the CPU backend performs the copy.

Dimensions, box and coordinates are given in the tensor's order (``(rows, cols)`` for a
row-major matrix); the last dimension must be contiguous. The box lands in shared
memory row-major (the last dimension fastest), each 16-byte chunk moved by the
swizzle exactly as the hardware does: with ``swizzle=128`` (64, 32) the chunk index
(bits 4-6, 4-5, 4 of the byte offset) is XORed with bits 7-9 (7-8, 7) of it, which is
``fx.Swizzle(3 | 2 | 1, 4 - log2(element bytes), 3)`` on element offsets
(:func:`tma_swizzle`). The shared buffer of a swizzled box must be aligned to the
swizzle's repeat (1024, 512 or 256 bytes). Elements of the box outside the tensor
read as zero, and count toward the transaction bytes.
"""
from __future__ import annotations

from importlib import import_module
from typing import Sequence

from ..errors import DSLTypeError
from .implementation import ops as _ops
from .swizzle import Swizzle

__all__ = ["make_tma_descriptor", "tma_swizzle", "tma_load", "tma_store",
           "tma_store_commit_group", "tma_store_wait_group", "fence_proxy_async"]

#: The host record (int64 words): magic, address, rank | element bytes << 8 |
#: swizzle bits << 16, dims[5] (innermost first), byte strides of dims 1-4, boxes
#: (16 bits each, dims 0-3 then 4).
HOST_LAYOUT = ("magic", "address", "rank_esize_swizzle", "dim0", "dim1", "dim2", "dim3",
               "dim4", "stride1", "stride2", "stride3", "stride4", "box0123", "box4")
HOST_MAGIC = 0x464C59544D4101     # "FLYTMA", version 1
#: swizzle bytes -> B of Swizzle<B, 4, 3> on byte offsets.
SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}
_CU_DTYPES = {("float", 1): "UINT8", ("float", 2): "FLOAT16", ("bfloat", 2): "BFLOAT16", ("float", 4): "FLOAT32",
              ("float", 8): "FLOAT64", ("int", 4): "INT32", ("int", 8): "INT64",
              ("uint", 1): "UINT8", ("int", 1): "UINT8", ("uint", 2): "UINT16",
              ("int", 2): "UINT16", ("uint", 4): "UINT32", ("uint", 8): "UINT64"}


def tma_swizzle(swizzle: int, element_bytes: int) -> Swizzle:
    """The ``fx.Swizzle`` on element offsets that a TMA copy with ``swizzle`` bytes (32,
    64 or 128; 0 gives the identity ``Swizzle(0, ...)``) applies to a box of ``element_bytes``-byte elements: view the shared
    buffer through it (``fx.make_composed_layout``) to read the box logically.

    Returns: an ``fx.Swizzle``.

    Example::

        >>> fx.nvvm.tma_swizzle(128, 2)
        Sw<3,3,3>
    """
    if swizzle not in SWIZZLE_BITS:
        raise DSLTypeError(f"fx.nvvm.tma_swizzle: swizzle must be 0, 32, 64 or 128 bytes, "
                           f"got {swizzle!r}")
    if element_bytes not in (1, 2, 4, 8, 16):
        raise DSLTypeError(f"fx.nvvm.tma_swizzle: element_bytes must be 1, 2, 4, 8 or 16, "
                           f"got {element_bytes!r}")
    return Swizzle(SWIZZLE_BITS[swizzle], 4 - (element_bytes.bit_length() - 1), 3)


def _layout_of(tensor) -> tuple:
    """(shape, element strides, element bytes, dtype kind, address, device) of a torch
    tensor or numpy array."""
    if hasattr(tensor, "data_ptr"):         # torch
        t = tensor
        kind = ("bfloat" if str(t.dtype) == "torch.bfloat16" else
                "float" if t.dtype.is_floating_point else
                "int" if t.dtype.is_signed else "uint")
        return (tuple(t.shape), tuple(t.stride()), t.element_size(), kind, t.data_ptr(),
                t.device)
    import numpy as np
    a = np.asarray(tensor)
    kind = {"f": "float", "i": "int", "u": "uint", "b": "uint"}.get(a.dtype.kind, "?")
    return (a.shape, tuple(s // a.itemsize for s in a.strides), a.itemsize, kind,
            a.ctypes.data, None)


def _check(shape, strides, esize, box, swizzle, address) -> None:
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: a TMA tensor has 1 to 5 "
                           f"dimensions, got {rank}")
    if len(box) != rank or not all(isinstance(b, int) and 1 <= b <= 256 for b in box):
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: box must give 1 to 256 elements "
                           f"for each of the {rank} dimensions, got {tuple(box)!r}")
    if swizzle not in SWIZZLE_BITS:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: swizzle must be 0 (none), 32, 64 "
                           f"or 128 bytes, got {swizzle!r}")
    if strides[-1] != 1 and shape[-1] != 1:
        raise DSLTypeError("fx.nvvm.make_tma_descriptor: the last dimension must be "
                           f"contiguous (stride 1), got strides {tuple(strides)!r}")
    if any((s * esize) % 16 for s in strides[:-1]) or address % 16:
        raise DSLTypeError("fx.nvvm.make_tma_descriptor: the address and every byte stride "
                           f"must be multiples of 16, got strides {tuple(strides)!r} of "
                           f"{esize}-byte elements")
    inner = box[-1] * esize
    if inner % 16:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: the box's last dimension must "
                           f"span a multiple of 16 bytes, got {inner}")
    if swizzle and inner > swizzle:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: with swizzle={swizzle} the box's "
                           f"last dimension may span at most {swizzle} bytes, got {inner}")


def make_tma_descriptor(tensor, box: Sequence[int], swizzle: int = 0):
    """The TMA descriptor of ``tensor`` (a torch tensor or numpy array, 1 to 5
    dimensions, the last contiguous) for copies of ``box`` elements (one size per
    dimension, 1 to 256 each, in the tensor's order) with the shared-memory ``swizzle``
    (0, 32, 64 or 128 bytes). A host function: call it in ``@flydsl.jit`` code or
    before the launch, and pass the result to the kernel as an ``fx.Tensor``.

    Returns: 128 bytes as an ``int64[16]`` torch tensor on ``tensor``'s device (a CUDA
    ``CUtensorMap`` for a CUDA tensor; flydsl's host record otherwise).

    Example::

        >>> a = np.zeros((64, 64), np.float16)
        >>> fx.nvvm.make_tma_descriptor(a, (16, 64), swizzle=128).shape
        torch.Size([16])
    """
    import torch
    shape, strides, esize, kind, address, device = _layout_of(tensor)
    box = tuple(box)
    _check(shape, strides, esize, box, swizzle, address)
    if device is not None and device.type == "cuda":
        words = _cuda_tensor_map(shape, strides, esize, kind, address, box, swizzle)
        return torch.tensor(words, dtype=torch.int64, device=device)
    rank = len(shape)
    dims = list(reversed(shape)) + [1] * (5 - rank)
    byte_strides = [s * esize for s in reversed(strides)][1:] + [0] * (5 - rank)
    boxes = list(reversed(box)) + [1] * (5 - rank)
    words = [HOST_MAGIC, address, rank | esize << 8 | SWIZZLE_BITS[swizzle] << 16,
             *dims, *byte_strides[:4],
             boxes[0] | boxes[1] << 16 | boxes[2] << 32 | boxes[3] << 48, boxes[4], 0, 0]
    return torch.tensor(words, dtype=torch.int64)


def _cuda_tensor_map(shape, strides, esize, kind, address, box, swizzle) -> list:
    """``cuTensorMapEncodeTiled`` of the tensor, as 16 signed 64-bit words."""
    from cuda.bindings import driver as cu
    name = _CU_DTYPES.get((kind, esize))
    if name is None:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: no TMA data type for {kind} "
                           f"elements of {esize} bytes")
    rank = len(shape)
    swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[swizzle]
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}"), rank, address,
        [int(d) for d in reversed(shape)], [int(s) * esize for s in reversed(strides)][1:],
        list(reversed(box)), [1] * rank, cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise DSLTypeError(f"fx.nvvm.make_tma_descriptor: cuTensorMapEncodeTiled failed "
                           f"({err.name}) for shape {tuple(shape)}, box {tuple(box)}, "
                           f"swizzle {swizzle}")
    return [w - (1 << 64) if w >= 1 << 63 else w for w in (int(x) for x in tmap.opaque)]


def _impl():
    return import_module(".nvvm_tma_ops", _ops().__package__)


def tma_load(desc, dst, bar, coords) -> None:
    """``cp.async.bulk.tensor.<N>d.shared::cluster.global.mbarrier::complete_tx::bytes``:
    one thread starts the copy of the box at ``coords`` (element coordinates of its
    first element, one per dimension in the tensor's order; Int32 values or ints) from
    the tensor ``desc`` describes to the shared buffer ``dst`` (a shared view or
    pointer; 128-byte aligned, 1024 with ``swizzle=128``), and the copy's bytes complete
    the transaction count of the mbarrier ``bar``. Announce them first (or after) with
    ``fx.nvvm.mbarrier_arrive_expect_tx(bar, box bytes)`` and wait on the barrier's
    phase before reading ``dst``. The CPU backend copies at once (zero outside the
    tensor, the swizzle applied) and completes the bytes on ``bar``.

    Example::

        @flydsl.kernel
        def first_rows(d: fx.Tensor, out: fx.Tensor):
            t = fx.thread_idx.x
            bar = fx.shared_array((1,), fx.Int64)
            box = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 8 * 16, 1024]).peek()
            s = box.view(fx.make_layout(8 * 16, 1))
            if t == 0:
                fx.nvvm.mbarrier_init(bar, 1)
                fx.nvvm.mbarrier_arrive_expect_tx(bar, 8 * 16 * 4)
                fx.nvvm.tma_load(d, s, bar, (0, 0))     # rows 0-7, columns 0-15
            fx.nvvm.mbarrier_wait(bar, 0)
            out[t] = s[t]

        a = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
        out = np.zeros(8 * 16, np.float32)
        first_rows[1, 128](fx.nvvm.make_tma_descriptor(a, (8, 16)), out)
        assert (out == a[:8].reshape(-1)).all()
    """
    _impl().tma_load(desc, dst, bar, coords)


def tma_store(desc, src, coords) -> None:
    """``cp.async.bulk.tensor.<N>d.global.shared::cta.bulk_group``: one thread starts
    the copy of the shared buffer ``src`` (laid out, and swizzled, as :func:`tma_load`
    leaves a box) to the box at ``coords`` of the tensor ``desc`` describes; elements
    outside the tensor are not written. Make the block's shared-memory writes visible
    to the copy first (``fx.nvvm.fence_proxy_async()`` then ``fx.barrier()``), and
    wait with :func:`tma_store_commit_group` / :func:`tma_store_wait_group` before
    reusing ``src``. The CPU backend copies at once.

    Example::

        @flydsl.kernel
        def fill_tile(d: fx.Tensor):
            t = fx.thread_idx.x
            box = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 8 * 16, 1024]).peek()
            s = box.view(fx.make_layout(8 * 16, 1))
            s[t] = fx.Float32(t)
            fx.nvvm.fence_proxy_async()
            fx.barrier()
            if t == 0:
                fx.nvvm.tma_store(d, s, (4, 0))          # rows 4-11, columns 0-15
                fx.nvvm.tma_store_commit_group()
                fx.nvvm.tma_store_wait_group(0)

        c = np.zeros((32, 16), np.float32)
        fill_tile[1, 128](fx.nvvm.make_tma_descriptor(c, (8, 16)))
        assert (c[4:12].reshape(-1) == np.arange(128)).all()
    """
    _impl().tma_store(desc, src, coords)


def tma_store_commit_group() -> None:
    """``cp.async.bulk.commit_group``: the bulk stores this thread started since the
    last commit form one group (a no-op on the CPU, where they are complete).

    Example::

        fx.nvvm.tma_store_commit_group()
    """
    _impl().bulk_commit_group()


def tma_store_wait_group(n: int, read: bool = True) -> None:
    """``cp.async.bulk.wait_group.read n`` (``read=False``: without ``.read``): wait
    until at most ``n`` (a constant) of this thread's bulk groups are pending (with
    ``.read``: until their shared-memory sources have been read). A no-op on the CPU.

    Example::

        fx.nvvm.tma_store_wait_group(0)
    """
    _impl().bulk_wait_group(n, read)


def fence_proxy_async() -> None:
    """``fence.proxy.async.shared::cta``: orders this thread's shared-memory accesses
    with the asynchronous proxy (TMA stores reading them, wgmma); a no-op on the CPU.

    Example::

        fx.nvvm.fence_proxy_async()
    """
    _impl().fence_proxy_async()
