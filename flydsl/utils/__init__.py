"""``flydsl.utils``: FlyDSL's utility package, for code that imports from it.

* :mod:`.smem_allocator`: ``SmemAllocator`` / ``SmemPtr`` (FlyDSL's byte-offset shared
  memory planner), ``SMEM_CAPACITY_MAP`` and ``check_smem_capacity``.

FlyDSL's ``env`` (its environment settings) and ``log`` are not provided; flydsl's own
settings are documented in docs/reference.md.
"""
