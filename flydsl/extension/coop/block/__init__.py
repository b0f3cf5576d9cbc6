"""Block-scope cooperative algorithms (FlyDSL's ``fx.coop.BlockReduce`` and
``fx.coop.BlockScan``), specialized as ``Algorithm[dtype, block_size, algorithm]``.

*block_size* is the x extent (``(x, 1, 1)``) or ``(x, y, z)`` -- pass
``fx.known_block_size()`` -- and must be a power of two in total; it has to be the
block the kernel is launched with. A block narrower than a warp narrows the logical
warp to itself. The specialization's ``SharedStorage`` is a struct to allocate with
``fx.SharedAllocator().allocate(S.SharedStorage).peek()`` and pass as ``storage=``.

Every thread of the block must make the call (it has a block barrier). Reusing the
storage for another collective call needs an ``fx.barrier()`` in between.

Example::

    @flydsl.kernel(known_block_size=[256, 1, 1])
    def k(x: fx.Tensor, y: fx.Tensor):
        scan = fx.coop.BlockScan[fx.Int32, fx.known_block_size()]
        storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        i = fx.thread_idx.x
        y[i] = scan.exclusive(x[i], fx.ReductionOp.ADD, storage=storage)
"""
from ._spec import BlockAlgorithmMeta
from .reduce import BlockReduce, BlockReduceAlgorithm
from .scan import BlockScan, BlockScanAlgorithm

__all__ = ["BlockReduceAlgorithm", "BlockReduce", "BlockScanAlgorithm", "BlockScan"]
