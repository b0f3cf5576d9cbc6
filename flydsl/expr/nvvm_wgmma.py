"""Hopper warpgroup MMA for ``fx.nvvm``: ``wgmma.mma_async`` atoms reading both
operands from (swizzled) shared memory, their fences and groups, and ``setmaxnreg``.

A warpgroup is 4 consecutive warps (128 threads, the first a multiple of 128) that
issue the instruction together. ``fx.nvvm.wgmma(op, acc, a, b)`` multiplies the 64 x K
tile ``A`` by the K x N tile ``B`` into the 64 x N accumulator spread over the
warpgroup's registers (``N / 2`` values per thread: lane ``l`` of warp ``w`` holds in
value ``i`` the element (``16 w + l // 4 + 8 ((i % 4) // 2)``, ``8 (i // 4) + 2 (l % 4)
+ i % 2``), :meth:`WGMMA.acc_coord`). Both operands are K-major (``A`` stored 64 rows of
K, ``B`` stored N rows of K) in the layout a TMA box with the same swizzle leaves:
rows of ``swizzle`` bytes, 16-byte chunks XOR-swizzled, the buffer aligned to the
swizzle's repeat (8 x ``swizzle`` bytes); advancing ``a``/``b`` by ``K`` elements
selects the next K slice within a row, as CUTLASS advances descriptors.

The CPU backend computes each thread's accumulators from the same shared-memory
geometry, so a kernel right on the CPU has the right lane mapping on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from ..errors import DSLTypeError
from . import dtypes as dt
from .dtypes import DType
from .implementation import ops as _ops

__all__ = ["WGMMA", "wgmma", "wgmma_fence", "wgmma_commit_group", "wgmma_wait_group",
           "setmaxnreg"]

#: Operand element type -> (PTX name, K of the instruction); Float32 is read as tf32.
_AB = {"Float16": ("f16", 16), "BFloat16": ("bf16", 16), "Float8E4M3FN": ("e4m3", 32),
       "Float8E5M2": ("e5m2", 32), "Float32": ("tf32", 8)}


@dataclass(frozen=True)
class WGMMA:
    """``wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}.{ab}`` with both operands in
    shared memory (K-major, ``swizzle`` 32, 64 or 128 bytes): the instruction
    :func:`wgmma` issues. ``ab_dtype`` is ``fx.BFloat16`` or ``fx.Float16`` (k16),
    ``fx.Float8E4M3FN`` or ``fx.Float8E5M2`` (k32), or ``fx.Float32`` read as tf32
    (k8: the low 13 mantissa bits ignored); ``n`` is 8 to 256, a multiple of 8;
    ``acc_dtype`` Float32.

    ``b_major="mn"`` (bf16/f16 only) reads B stored MN-major instead: K rows of N
    elements, ``swizzle`` bytes of N per row (a TMA box of K rows), 8-row groups
    ``8 * swizzle`` bytes apart, as ``P @ V`` reads V (keys x head_dim) in attention;
    when ``n`` is wider than one swizzle row (``swizzle / element bytes`` elements),
    ``b_mn_stride`` is the distance in elements between its column blocks (the
    descriptor's leading byte offset; e.g. the size of one box). The A operand of
    :func:`wgmma` may also be a register fragment (8 bf16/f16 values per thread).

    Example::

        >>> op = fx.nvvm.WGMMA(64, fx.BFloat16, swizzle=128)
        >>> op, op.k, op.acc_coord(37, 5)
        (WGMMA(m64n64k16.f32.bf16, swizzle=128), 16, (17, 11))
    """
    n: int
    ab_dtype: DType = dt.BFloat16
    acc_dtype: DType = dt.Float32
    swizzle: int = 128
    b_major: str = "k"
    b_mn_stride: int = 0

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or \
                not 8 <= self.n <= 256 or self.n % 8:
            raise DSLTypeError(f"fx.nvvm.WGMMA: n must be a multiple of 8 in [8, 256], got "
                               f"{self.n!r}")
        if getattr(self.ab_dtype, "name", None) not in _AB:
            raise DSLTypeError(f"fx.nvvm.WGMMA: ab_dtype must be fx.BFloat16, fx.Float16, "
                               f"fx.Float8E4M3FN, fx.Float8E5M2 or fx.Float32 (tf32), got "
                               f"{self.ab_dtype!r}")
        if self.acc_dtype is not dt.Float32:
            raise DSLTypeError(f"fx.nvvm.WGMMA: acc_dtype must be fx.Float32, got "
                               f"{self.acc_dtype!r}")
        if self.swizzle not in (32, 64, 128):
            raise DSLTypeError(f"fx.nvvm.WGMMA: swizzle must be 32, 64 or 128 bytes, got "
                               f"{self.swizzle!r}")
        if self.b_major not in ("k", "mn"):
            raise DSLTypeError(f"fx.nvvm.WGMMA: b_major must be 'k' or 'mn', got "
                               f"{self.b_major!r}")
        if self.b_major == "mn":
            if self.ab_dtype.bits != 16:
                raise DSLTypeError(f"fx.nvvm.WGMMA: an MN-major B (b_major='mn') needs "
                                   f"bf16 or f16 operands, got {self.ab_dtype!r}")
            wide = self.n > self.swizzle // 2
            s = self.b_mn_stride
            if wide and (not isinstance(s, int) or s <= 0 or (2 * s) % (8 * self.swizzle)
                         or 2 * s >= 1 << 18):
                raise DSLTypeError(f"fx.nvvm.WGMMA: an MN-major B {self.n} wide spans "
                                   f"{self.n * 2 // self.swizzle} column blocks of "
                                   f"{self.swizzle // 2} elements: b_mn_stride (elements "
                                   f"between them) must be a positive multiple of "
                                   f"{4 * self.swizzle} below 2^17, got {s!r}")

    @property
    def k(self) -> int:
        """K of one instruction (32 bytes of operand: 16 for 16-bit types, 32 for fp8,
        8 for tf32)."""
        return _AB[self.ab_dtype.name][1]

    @property
    def ab_name(self) -> str:
        return _AB[self.ab_dtype.name][0]

    @property
    def acc_name(self) -> str:
        return "f32"

    def acc_coord(self, thread, i: int) -> tuple:
        """(row, column) in the 64 x n tile of accumulator value ``i`` of ``thread`` (its
        index in the block, or in the warpgroup; an int or a kernel integer)."""
        w, lane = (thread % 128) // 32, thread % 32
        return (w * 16 + lane // 4 + 8 * ((i % 4) // 2), lane % 4 * 2 + 8 * (i // 4) + i % 2)

    def __repr__(self) -> str:
        mn = (f", b_major='mn', b_mn_stride={self.b_mn_stride}" if self.b_major == "mn"
              else "")
        return f"WGMMA(m64n{self.n}k{self.k}.f32.{self.ab_name}, swizzle={self.swizzle}{mn})"


def _impl():
    return import_module(".nvvm_wgmma_ops", _ops().__package__)


def wgmma(op: WGMMA, acc, a, b, scale_d=1) -> None:
    """``wgmma.mma_async``: ``acc = A @ B.T + (acc if scale_d else 0)`` for the
    warpgroup, ``A`` (64 x K) at the shared pointer or view ``a`` and ``B`` (n x K) at
    ``b`` (see the module docstring for their layout; ``op.b_major == "mn"``: B stored
    K x n, see :class:`WGMMA`), ``acc`` this thread's register fragment of ``op.n // 2``
    Float32 values. ``a`` may instead be a register fragment of 8 bf16/f16 values (the
    ``mma.sync`` m16n8k16 A fragment of the warp's 16 rows: value ``j`` of lane ``l`` of
    warp ``w`` is A[16 w + l // 4 + 8 ((j % 4) // 2), 8 (j // 4) + 2 (l % 4) + j % 2],
    which is accumulator values ``8 s .. 8 s + 7`` of an m64nN wgmma for K slice ``s``:
    FlashAttention's P); on the CPU that form exchanges the values through block-shared
    scratch with block barriers, so every thread of the block must issue it. Asynchronous: issue it between
    :func:`wgmma_fence` and :func:`wgmma_commit_group`, and read ``acc`` only after
    :func:`wgmma_wait_group`. On the CPU each thread computes its values at once.

    Example::

        @flydsl.kernel
        def tile_mm(da: fx.Tensor, db: fx.Tensor, out: fx.Tensor):
            t = fx.thread_idx.x
            op = fx.nvvm.WGMMA(8, fx.Float16, swizzle=32)    # (64 x 16) @ (8 x 16).T
            bar = fx.shared_array((1,), fx.Int64)
            a = fx.SharedAllocator().allocate(fx.Array[fx.Float16, 64 * 16, 256]).peek()
            b = fx.SharedAllocator().allocate(fx.Array[fx.Float16, 8 * 16, 256]).peek()
            sa = fx.get_iter(a.view(fx.make_layout(64 * 16, 1)))
            sb = fx.get_iter(b.view(fx.make_layout(8 * 16, 1)))
            if t == 0:
                fx.nvvm.mbarrier_init(bar, 1)
                fx.nvvm.mbarrier_arrive_expect_tx(bar, (64 + 8) * 16 * 2)
                fx.nvvm.tma_load(da, sa, bar, (0, 0))
                fx.nvvm.tma_load(db, sb, bar, (0, 0))
            fx.nvvm.mbarrier_wait(bar, 0)
            acc = fx.make_rmem_tensor((4,), fx.Float32)
            fx.nvvm.wgmma_fence()
            fx.nvvm.wgmma(op, acc, sa, sb, scale_d=0)
            fx.nvvm.wgmma_commit_group()
            fx.nvvm.wgmma_wait_group(0)
            for i in fx.range_constexpr(4):
                r, c = op.acc_coord(t, i)
                out[r, c] = acc[i]

        a = np.arange(64 * 16).reshape(64, 16).astype(np.float16) % 7 - 3
        b = np.arange(8 * 16).reshape(8, 16).astype(np.float16) % 5 - 2
        out = np.zeros((64, 8), np.float32)
        tile_mm[1, 128](fx.nvvm.make_tma_descriptor(a, (64, 16), 32),
                        fx.nvvm.make_tma_descriptor(b, (8, 16), 32), out)
        assert (out == a.astype(np.float32) @ b.astype(np.float32).T).all()
    """
    _impl().wgmma(op, acc, a, b, scale_d)


def wgmma_fence(*fragments) -> None:
    """``wgmma.fence.sync.aligned``: orders this warpgroup's register and shared-memory
    accesses before the ``wgmma.mma_async`` that follow; a no-op on the CPU.

    ``fragments``: register fragments the following wgmmas read (an A operand in
    registers, accumulators: 32-bit values or pairs of 16-bit ones). Their registers
    pass through the fence, so the compiler computes them before it and not between
    the wgmmas (where ptxas would insert fences of its own, message C7519), as
    CUTLASS's ``warpgroup_fence_operand`` does.

    Example::

        fx.nvvm.wgmma_fence()
        frag = fx.make_rmem_tensor((8,), fx.BFloat16)    # an A fragment in registers
        for i in fx.range_constexpr(8):
            frag[i] = 1.0
        fx.nvvm.wgmma_fence(frag)        # its registers are final before the wgmmas
    """
    _impl().wgmma_fence(fragments)


def wgmma_commit_group() -> None:
    """``wgmma.commit_group.sync.aligned``: the ``wgmma.mma_async`` issued since the
    last commit form one group; a no-op on the CPU.

    Example::

        fx.nvvm.wgmma_commit_group()
    """
    _impl().wgmma_commit_group()


def wgmma_wait_group(n: int) -> None:
    """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` (0 to 7, a
    constant) committed groups are pending; a no-op on the CPU.

    Example::

        fx.nvvm.wgmma_wait_group(0)
    """
    _impl().wgmma_wait_group(n)


def setmaxnreg(count: int, increase: bool = True) -> None:
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 count``: the warpgroup asks for (or
    gives back) registers, ``count`` per thread (a multiple of 8 in [24, 256]), as
    warp-specialized kernels do (producers ``dec``, consumers ``inc``); a no-op on the
    CPU.

    Example::

        fx.nvvm.setmaxnreg(232, increase=True)
    """
    _impl().setmaxnreg(count, increase)
