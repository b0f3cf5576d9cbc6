"""FlyDSL's ``flydsl.expr.rocdl.enum``: AMDGPU sync scopes and address spaces.

Example::

    >>> from flydsl.expr.rocdl.enum import SyncScope, TargetAddressSpace
    >>> SyncScope.Agent, int(TargetAddressSpace.Shared)
    ('agent', 3)
"""
from __future__ import annotations

import enum as _enum

__all__ = ["AddressSpace", "TargetAddressSpace", "SyncScope"]


class TargetAddressSpace(_enum.IntEnum):
    """AMDGPU's LLVM address spaces (``Shared`` is LDS, ``BufferDesc`` a buffer
    resource); ``AddressSpace`` is the same enum under FlyDSL's other name."""

    Generic = 0
    Global = 1
    Region = 2
    Shared = 3
    Workgroup = 3
    Constant = 4
    Register = 5
    BufferFatPointer = 7
    BufferDesc = 8


AddressSpace = TargetAddressSpace


class SyncScope:
    """AMDGPU sync scopes: the LLVM sync-scope strings of the AMDGPU memory model
    (``fx.SyncScope`` has the target-neutral ones).

    Example::

        >>> fx.rocdl.SyncScope.Workgroup
        'workgroup'
    """

    Agent = "agent"
    Workgroup = "workgroup"
    Wavefront = "wavefront"
    OneAs = "one-as"
    AgentOneAs = "agent-one-as"
    WorkgroupOneAs = "workgroup-one-as"
    WavefrontOneAs = "wavefront-one-as"
    SingleThreadOneAs = "singlethread-one-as"
