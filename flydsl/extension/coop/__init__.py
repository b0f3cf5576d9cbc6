"""Cooperative algorithms over the threads of a launch (FlyDSL's ``fx.coop``), written
in the DSL: warp-scope reductions and scans (:mod:`.warp`) and block-scope
``BlockReduce`` / ``BlockScan`` specialized on dtype, block size and algorithm
(:mod:`.block`). ``op`` is a :class:`~flydsl.expr.typing.ReductionOp`.

Example::

    @flydsl.kernel(known_block_size=[128, 1, 1])
    def row_sums(x: fx.Tensor, out: fx.Tensor):
        i = fx.thread_idx.x
        red = fx.coop.BlockReduce[fx.Float32, fx.known_block_size()]
        storage = fx.SharedAllocator().allocate(red.SharedStorage).peek()
        total = red(x[fx.block_idx.x, i], fx.ReductionOp.ADD, storage=storage)
        if i == 0:
            out[fx.block_idx.x] = total

``fx.coop.universal`` is the same surface (FlyDSL's portable forms; flydsl has no
per-target overrides).
"""
from . import block, universal, warp
from .block import BlockReduce, BlockReduceAlgorithm, BlockScan, BlockScanAlgorithm
from .warp import (warp_broadcast, warp_exclusive_scan, warp_exclusive_sum,
                   warp_inclusive_scan, warp_inclusive_sum, warp_max, warp_min, warp_reduce,
                   warp_scan, warp_scan_with_aggregate, warp_sum)

__all__ = ["warp_reduce", "warp_sum", "warp_max", "warp_min", "warp_broadcast",
           "warp_inclusive_scan", "warp_exclusive_scan", "warp_inclusive_sum",
           "warp_exclusive_sum", "warp_scan", "warp_scan_with_aggregate", "BlockReduceAlgorithm", "BlockReduce",
           "BlockScanAlgorithm", "BlockScan"]
