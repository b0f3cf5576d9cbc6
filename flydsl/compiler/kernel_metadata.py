"""Kernel resource metadata: registers, spills, shared memory, occupancy.

The backends read a kernel's resources from what their toolchain reports about the
binary (``ptxas -v`` for a cubin, the code object's metadata for an HSACO) into a
plain dict that travels with the cache entry and bundles (:func:`parse_ptxas_log`,
:func:`parse_amdgpu_metadata`), so a kernel loaded without the compiler has them.
:class:`KernelMetadata` is what users read (``prog.kernels[i].metadata``,
``kernel.metadata``); it adds the theoretical occupancy of a launch's block size.

Occupancy is "active warps (waves) per SM (CU) over the most it can hold", limited by
registers, shared memory (LDS), the block size and the per-SM block limit; it ignores
what only the running device knows (carve-out settings, other kernels).

Sources of the limits:

- NVIDIA: CUDA C++ Programming Guide, "Technical Specifications per Compute
  Capability" (registers per SM, warps and blocks per SM, shared memory per SM and
  per block), and the CUDA Occupancy Calculator's allocation rules (registers are
  allocated per warp in units of 256; warps in groups of 4, one per SM
  sub-partition; shared memory in units of 128 bytes plus 1 KiB the system reserves
  per block on compute capability 8.x and 9.x).
- AMD: the "AMD Instinct MI300 (CDNA3) Instruction Set Architecture" guide and the
  LLVM AMDGPU backend's documentation (AMDGPUUsage, "Code Object V3+ Metadata"):
  a CU has 4 SIMDs; a wave64 SIMD holds at most 8 waves; its unified register file
  has 512 VGPRs (architected + accumulation) per lane, allocated in granules of 8;
  a CU has 64 KiB of LDS (160 KiB on gfx950); all waves of a workgroup run on one CU.
  ``.vgpr_count`` in the metadata is already the unified count. A SIMD also has 800
  SGPRs, allocated to waves in granules of 16 (LLVM's ``AMDGPUBaseInfo``: the limit
  applies to GFX9 arches, CDNA included).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class CudaLimits:
    """One NVIDIA compute capability's per-SM limits (programming guide table)."""
    max_warps: int
    max_blocks: int
    shared_per_sm: int
    shared_per_block: int
    registers: int = 65536
    max_registers_per_thread: int = 255
    register_unit: int = 256        # per warp
    warp_granule: int = 4           # warps allocated per sub-partition group
    shared_unit: int = 128
    shared_reserved: int = 1024     # per block, the system's (8.x, 9.x)
    max_threads_per_block: int = 1024


@dataclass(frozen=True)
class AmdLimits:
    """One AMD CDNA arch's per-CU limits (ISA guide, LLVM AMDGPUUsage)."""
    lds_per_cu: int
    simds: int = 4
    max_waves_per_simd: int = 8
    vgprs_per_simd_lane: int = 512
    vgpr_granule: int = 8
    sgprs_per_simd: int = 800
    sgpr_granule: int = 16
    max_threads_per_block: int = 1024


KIB = 1024
CUDA_LIMITS = {
    "sm_80": CudaLimits(max_warps=64, max_blocks=32, shared_per_sm=164 * KIB,
                        shared_per_block=163 * KIB),
    "sm_86": CudaLimits(max_warps=48, max_blocks=16, shared_per_sm=100 * KIB,
                        shared_per_block=99 * KIB),
    "sm_89": CudaLimits(max_warps=48, max_blocks=24, shared_per_sm=100 * KIB,
                        shared_per_block=99 * KIB),
    "sm_90": CudaLimits(max_warps=64, max_blocks=32, shared_per_sm=228 * KIB,
                        shared_per_block=227 * KIB),
}
AMD_LIMITS = {
    "gfx90a": AmdLimits(lds_per_cu=64 * KIB),
    "gfx942": AmdLimits(lds_per_cu=64 * KIB),
    "gfx950": AmdLimits(lds_per_cu=160 * KIB),
}


@dataclass(frozen=True)
class KernelMetadata:
    """A compiled kernel's resources (None where the backend cannot know one).

    - ``registers``: registers per thread (NVIDIA), VGPRs per lane, architected plus
      accumulation (AMD); ``scalar_registers``: SGPRs per wave (AMD).
    - ``spill_bytes``: bytes of registers spilled to memory per thread (``ptxas``'
      spill stores; AMD: 4 per spilled VGPR or SGPR); ``local_bytes``: the thread's
      whole local (scratch) frame, spills and local arrays.
    - ``shared_bytes``: static shared memory (LDS) per block; ``dynamic_shared_bytes``:
      the launch's ``smem=`` (0 before a launch).
    - ``max_threads_per_block``: the largest block the kernel can launch with (its
      registers may allow fewer than the hardware's 1024).
    - ``block_threads``: the launch's block size that ``occupancy`` is for (None
      before a launch); ``occupancy``: active warps/waves per SM/CU over the most
      it holds (0: a block of that size cannot launch at all);
      :meth:`occupancy_for` gives it for another block.

    ``n_regs`` and ``n_spills`` are Triton's names: registers, and spilled 32-bit
    registers (``spill_bytes / 4``).
    """

    backend: str
    arch: str
    registers: Optional[int] = None
    scalar_registers: Optional[int] = None
    spill_bytes: Optional[int] = None
    local_bytes: Optional[int] = None
    shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    max_threads_per_block: Optional[int] = None
    block_threads: Optional[int] = None
    occupancy: Optional[float] = None

    @property
    def n_regs(self) -> Optional[int]:
        """Triton's name for ``registers``."""
        return self.registers

    @property
    def n_spills(self) -> Optional[int]:
        """Triton's name: spilled 32-bit registers (``spill_bytes / 4``, rounded up)."""
        return None if self.spill_bytes is None else -(-self.spill_bytes // 4)

    def occupancy_for(self, block_threads: int, dynamic_shared_bytes: int = 0
                      ) -> Optional[float]:
        """Theoretical occupancy with blocks of ``block_threads`` threads and
        ``dynamic_shared_bytes`` of dynamic shared memory (None where unknown)."""
        if self.registers is None:
            return None
        shared = self.shared_bytes + dynamic_shared_bytes
        if self.backend == "rocm" and self.arch in AMD_LIMITS:
            return amd_occupancy(AMD_LIMITS[self.arch], self.registers, shared,
                                 block_threads, sgprs=self.scalar_registers or 0)
        if self.backend == "cuda" and self.arch.rstrip("af") in CUDA_LIMITS:
            return cuda_occupancy(CUDA_LIMITS[self.arch.rstrip("af")], self.registers,
                                  shared, block_threads)
        return None

    def at_launch(self, block_threads: int, dynamic_shared_bytes: int = 0
                  ) -> "KernelMetadata":
        """This metadata for a launch of ``block_threads`` threads per block."""
        return replace(self, block_threads=block_threads,
                        dynamic_shared_bytes=dynamic_shared_bytes,
                        occupancy=self.occupancy_for(block_threads, dynamic_shared_bytes))

    def as_dict(self) -> dict:
        """Every field, with ``n_regs`` and ``n_spills``."""
        return {**asdict(self), "n_regs": self.n_regs, "n_spills": self.n_spills}


def metadata_of(backend: str, arch: str, resources: dict, shared_bytes: int
                ) -> KernelMetadata:
    """The metadata of a kernel whose backend reported ``resources`` (a dict from
    :func:`parse_ptxas_log` or :func:`parse_amdgpu_metadata`; empty where the backend
    reports none), with ``shared_bytes`` from the trace where the binary says nothing."""
    fields = {k: resources[k] for k in ("registers", "scalar_registers", "spill_bytes",
                                        "local_bytes") if k in resources}
    return KernelMetadata(backend=backend, arch=arch,
                          shared_bytes=resources.get("shared_bytes", shared_bytes),
                          max_threads_per_block=_max_threads(backend, arch, resources),
                          **fields)


def _max_threads(backend: str, arch: str, resources: dict) -> Optional[int]:
    """The largest launchable block: the binary's own limit, and on NVIDIA what the
    register file allows."""
    regs = resources.get("registers")
    if backend == "cuda" and regs is not None:
        limits = CUDA_LIMITS.get(arch.rstrip("af"), CUDA_LIMITS["sm_90"])
        warps = limits.registers // _round_up(max(regs, 1) * 32, limits.register_unit)
        return min(limits.max_threads_per_block, warps * 32)
    if backend == "rocm" and regs is not None and arch in AMD_LIMITS:
        limits = AMD_LIMITS[arch]
        waves = limits.simds * _amd_waves_per_simd(limits, regs,
                                                   resources.get("scalar_registers", 0))
        return min(resources.get("max_threads_per_block", 1024), waves * 64)
    return resources.get("max_threads_per_block")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def cuda_occupancy(limits: CudaLimits, registers: int, shared_bytes: int,
                   block_threads: int) -> float:
    """Active warps per SM over ``limits.max_warps`` for blocks of ``block_threads``
    threads using ``registers`` per thread and ``shared_bytes`` per block."""
    warps = -(-block_threads // 32)
    if (registers > limits.max_registers_per_thread or block_threads < 1
            or block_threads > limits.max_threads_per_block
            or shared_bytes > limits.shared_per_block):
        return 0.0
    per_warp = _round_up(max(registers, 1) * 32, limits.register_unit)
    reg_warps = limits.registers // per_warp // limits.warp_granule * limits.warp_granule
    by_regs = reg_warps // warps
    by_warps = limits.max_warps // warps
    by_shared = limits.max_blocks
    if shared_bytes:
        per_block = _round_up(shared_bytes + limits.shared_reserved, limits.shared_unit)
        by_shared = limits.shared_per_sm // per_block
    blocks = min(by_regs, by_warps, by_shared, limits.max_blocks)
    return blocks * warps / limits.max_warps


def _amd_waves_per_simd(limits: AmdLimits, vgprs: int, sgprs: int = 0) -> int:
    """Waves a SIMD holds at once, by their VGPRs and SGPRs."""
    by_vgprs = limits.vgprs_per_simd_lane // _round_up(max(vgprs, 1), limits.vgpr_granule)
    by_sgprs = limits.sgprs_per_simd // _round_up(max(sgprs, 1), limits.sgpr_granule)
    return min(limits.max_waves_per_simd, by_vgprs, by_sgprs)


def amd_occupancy(limits: AmdLimits, vgprs: int, lds_bytes: int, block_threads: int,
                  wave_size: int = 64, sgprs: int = 0) -> float:
    """Active waves per CU over ``simds * max_waves_per_simd`` for workgroups of
    ``block_threads`` work-items using ``vgprs`` per lane, ``sgprs`` per wave and
    ``lds_bytes``."""
    waves = -(-block_threads // wave_size)
    slots = limits.simds * _amd_waves_per_simd(limits, vgprs, sgprs)
    if block_threads < 1 or waves > slots or lds_bytes > limits.lds_per_cu:
        return 0.0
    groups = slots // waves
    if lds_bytes:
        groups = min(groups, limits.lds_per_cu // lds_bytes)
    return groups * waves / (limits.simds * limits.max_waves_per_simd)


# -- reading what the toolchains report -------------------------------------------
_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FIELDS = {
    "local_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_bytes": re.compile(r"(\d+) bytes spill stores"),
    "registers": re.compile(r"Used (\d+) registers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas_log(log: str, kernel: str) -> dict:
    """The resources ``ptxas -v`` reported for the entry function ``kernel`` (empty
    when the log does not name it)."""
    sections = _PTXAS_ENTRY.split(log)
    # [before, name1, text1, name2, text2, ...]
    for name, text in zip(sections[1::2], sections[2::2]):
        if name == kernel:
            # the frame and spills from the kernel's own properties, not a device
            # function's printed in between
            own = text.partition(f"Function properties for {kernel}\n")[2] or text
            found = {k: int(m.group(1)) for k, rx in _PTXAS_FIELDS.items()
                     if (m := rx.search(own if k in ("local_bytes", "spill_bytes") else text))}
            found.setdefault("shared_bytes", 0)   # ptxas omits "smem" when there is none
            return found
    return {}


_AMD_FIELDS = {
    "registers": "vgpr_count", "scalar_registers": "sgpr_count",
    "shared_bytes": "group_segment_fixed_size", "local_bytes": "private_segment_fixed_size",
    "max_threads_per_block": "max_flat_workgroup_size",
}


def parse_amdgpu_metadata(assembly: str, kernel: str) -> dict:
    """The resources in the ``.amdgpu_metadata`` block (the code object's metadata
    note, as the assembler writes it) of the kernel ``kernel``."""
    start = assembly.find(".amdgpu_metadata")
    if start < 0:
        return {}
    block = assembly[start:assembly.find(".end_amdgpu_metadata", start)]
    for entry in re.split(r"\n  - ", block)[1:]:
        # the kernel's own keys are indented 4 spaces (its .args' deeper)
        keys = dict(re.findall(r"^(?:    )?\.(\w+):\s+(\S+)", entry, re.M))
        if keys.get("name") != kernel:
            continue
        found = {ours: int(keys[theirs]) for ours, theirs in _AMD_FIELDS.items()
                 if theirs in keys}
        spills = [int(keys[k]) for k in ("vgpr_spill_count", "sgpr_spill_count") if k in keys]
        if spills:
            found["spill_bytes"] = 4 * sum(spills)
        return found
    return {}


def occupancy_text(meta: Optional[KernelMetadata]) -> str:
    """One line for ``flydsl compile --stats``: the fields this backend knows."""
    if meta is None:
        return "no metadata"
    parts = []
    if meta.registers is not None:
        parts.append(f"registers {meta.registers}")
    if meta.scalar_registers is not None:
        parts.append(f"sgprs {meta.scalar_registers}")
    if meta.spill_bytes is not None:
        parts.append(f"spills {meta.spill_bytes} B")
    if meta.local_bytes is not None:
        parts.append(f"local {meta.local_bytes} B")
    dynamic = f" + {meta.dynamic_shared_bytes} B dynamic" if meta.dynamic_shared_bytes else ""
    parts.append(f"shared {meta.shared_bytes} B{dynamic}")
    if meta.max_threads_per_block is not None:
        parts.append(f"max threads/block {meta.max_threads_per_block}")
    if meta.occupancy is not None:
        parts.append(f"occupancy {meta.occupancy:.0%} at {meta.block_threads} threads")
    return ", ".join(parts)


__all__ = ["KernelMetadata", "metadata_of", "parse_ptxas_log", "parse_amdgpu_metadata",
           "cuda_occupancy", "amd_occupancy", "CUDA_LIMITS", "AMD_LIMITS", "occupancy_text"]
