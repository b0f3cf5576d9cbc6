"""FlyDSL's ``fx.coop.universal``: the portable forms under the public names.

FlyDSL dispatches ``fx.coop.*`` to per-target overrides (DPP sequences on ROCm) and
keeps the portable shuffle forms here for callers and tests that want them. flydsl has
one implementation on every target, so these are the same functions and classes as
``fx.coop``'s (the backend picks each target's instructions for the shuffles).
"""
from .block import BlockReduce, BlockReduceAlgorithm, BlockScan, BlockScanAlgorithm
from .warp import (warp_broadcast, warp_exclusive_scan, warp_exclusive_sum,
                   warp_inclusive_scan, warp_inclusive_sum, warp_max, warp_min, warp_reduce,
                   warp_scan, warp_scan_with_aggregate, warp_sum)

__all__ = ["warp_reduce", "warp_sum", "warp_max", "warp_min", "warp_broadcast",
           "warp_inclusive_scan", "warp_exclusive_scan", "warp_inclusive_sum",
           "warp_exclusive_sum", "warp_scan", "warp_scan_with_aggregate", "BlockReduceAlgorithm", "BlockReduce",
           "BlockScanAlgorithm", "BlockScan"]
