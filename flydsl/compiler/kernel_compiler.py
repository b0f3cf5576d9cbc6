"""Compiling one kernel specialization, through the disk cache.

A disk hit rebuilds the :class:`CompiledKernel` from the entry alone (binary
and launch metadata), without tracing and without importing MLIR.
"""
from __future__ import annotations

import threading
from typing import Optional

from . import cache as disk_cache
from . import deploy
from .store import active_store
from .target import GPUTarget
from .dependencies import environ_names_in, reading_environ, reading_files, resolve_hashes, \
    with_files
from .fingerprint import base_key, entry_key
from .kernel_function import LAUNCH_BLOCK, current_launch_block

ENTRY_VERSION = 2
#: Cache keys this process compiled (not loaded), in order: for tests and diagnostics.
compiled_keys: list[str] = []


class CompiledKernel:
    """One specialization of a kernel: its stages (``.asm``), binary and launcher."""

    def __init__(self, *, kernel_name: str, name: str, specs: tuple, asm: dict,
                 binary_stage: str, backend_name: str, driver: str, target: GPUTarget,
                 shared_bytes: int, cache_key: str = "", base_key: str = "",
                 from_cache: bool = False, written: tuple = (),
                 resources: Optional[dict] = None):
        self.kernel_name = kernel_name
        self.name = name
        self.specs = specs
        self.asm = asm
        self.binary_stage = binary_stage
        self.backend_name = backend_name
        self.driver = driver
        self.target = target
        self.shared_bytes = shared_bytes
        self.cache_key = cache_key
        #: The key before what the trace read (its manifest): with ``cache_key``, what a
        #: bundle needs to ship this kernel.
        self.base_key = base_key
        self.from_cache = from_cache
        #: What the trace read (its dependency set): with the keys, what a bundle's
        #: manifest records for it (None if unknown).
        self.variant = None
        #: The environment variables its trace read (``""``: the whole environment):
        #: a launch after one of them changed compiles again, as a new process would.
        self.environ_names: tuple = ()
        #: Set by the kernel that holds it: those of them outside the codegen keys and
        #: their values when it was compiled or loaded (see ``flydsl.kernel``).
        self.environ_read: tuple = ()
        #: Tensor parameters the kernel may write: read-only arguments are refused there.
        self.written = tuple(written)
        #: What the toolchain reported of the binary's resources (kept in the cache
        #: entry, so a kernel loaded without the compiler has them): see ``metadata``.
        self.resources = dict(resources or {})
        #: (threads per block, dynamic shared bytes) of the launch that brought this
        #: kernel in (or that flydsl.compile recorded): what ``metadata.occupancy`` is for.
        self.launch_shape: Optional[tuple] = None
        #: The driver's launcher (binary loaded), made by the runtime on first launch.
        self.launcher = None
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.kernel_name} {self.backend_name}/{self.target.arch} "
                f"{'(disk cache)' if self.from_cache else ''}>")

    @property
    def binary(self):
        """The binary stage (what the driver loads). When a missing tool kept it from
        being made (no ``ld.lld`` for an HSACO), raises that ToolchainError."""
        try:
            return self.asm[self.binary_stage]
        except KeyError:
            return None

    @property
    def metadata(self):
        """Registers, spills, shared memory, max threads and occupancy
        (:class:`~flydsl.compiler.kernel_metadata.KernelMetadata`)."""
        from .kernel_metadata import metadata_of
        meta = metadata_of(self.backend_name, self.target.arch, self.resources,
                           self.shared_bytes)
        return meta.at_launch(*self.launch_shape) if self.launch_shape else meta

    @property
    def complete(self) -> bool:
        """Whether every stage was produced (False without a tool such as ``ld.lld``)."""
        return not getattr(self.asm, "missing", None)

    # -- cache entries ---------------------------------------------------
    def to_entry(self) -> disk_cache.CacheEntry:
        text = {k: v for k, v in self.asm.items() if isinstance(v, str)}
        meta = {"version": ENTRY_VERSION, "kernel": self.kernel_name, "name": self.name,
                "backend": self.backend_name, "driver": self.driver,
                "target": [self.target.backend, self.target.arch, self.target.warp_size],
                "binary_stage": self.binary_stage, "shared_bytes": self.shared_bytes,
                "stages": list(self.asm), "text_stages": sorted(text),
                "written": list(self.written), "resources": self.resources}
        blobs = {k: (v.encode() if isinstance(v, str) else bytes(v)) for k, v in self.asm.items()}
        return disk_cache.CacheEntry(meta, blobs)

    @classmethod
    def from_entry(cls, entry: disk_cache.CacheEntry, specs: tuple, key: str,
                   base: str = "") -> "CompiledKernel":
        m = entry.meta
        if m.get("version") != ENTRY_VERSION:
            raise ValueError("cache entry version mismatch")
        text = set(m["text_stages"])
        asm = {k: (entry.blobs[k].decode() if k in text else entry.blobs[k]) for k in m["stages"]}
        return cls(kernel_name=m["kernel"], name=m["name"], specs=specs, asm=asm,
                   binary_stage=m["binary_stage"], backend_name=m["backend"],
                   driver=m["driver"], target=GPUTarget(*m["target"]),
                   shared_bytes=m["shared_bytes"], cache_key=key, base_key=base,
                   from_cache=True,
                   written=tuple(m["written"]), resources=m.get("resources"))


def compile_specialization(fn, name: str, specs: tuple, backend, options) -> CompiledKernel:
    """Cache hit, or trace + compile (once across processes and, with a shared store,
    across machines) and store: the kernel ``name`` whose body is the Python function
    ``fn``.

    The full key needs what the trace reads (:mod:`.dependencies`): a lookup tries
    the dependency sets earlier traces of this base key recorded, resolved against
    this process's values; a miss traces, and stores the entry with its set.
    """
    if not disk_cache.enabled():
        deploy.before_compile(name, specs, backend.target, ())
        return _compile(fn, name, specs, backend, options)
    store = active_store()
    if not store.usable():
        deploy.before_compile(name, specs, backend.target, ())
        return _compile(fn, name, specs, backend, options)
    launch = current_launch_block()
    base = base_key(fn, specs, backend, options,
                    launch.declared if launch is not None else None)
    constexprs = {s.name: s.value for s in specs if s.kind == "constexpr"}
    if launch is not None and launch.block is not None:   # what P:@launch_block resolves to
        constexprs[LAUNCH_BLOCK] = launch.block
    hit = _lookup(store, base, fn, constexprs, specs, backend)
    if hit is not None:
        return _captured(hit)
    deploy.before_compile(name, specs, backend.target, store.bundles)
    with store.lock(base, f"kernel {name!r}"):
        hit = _lookup(store, base, fn, constexprs, specs, backend)  # another process built it
        if hit is not None:
            return _captured(hit)
        traced = _trace(fn, name, specs, backend, options)
        deps = traced.dependencies
        if deps.problems:
            _warn_memory_only(name, deps.problems)
            return _build(name, traced, specs, backend, options, "", base)
        variant = _stamped(deps.variant, backend.toolchain_stamp())
        key = entry_key(base, variant, [*deps.hashes, _TOOLCHAIN])
        hit = _load(store, key, specs, base)   # compiled before, but the manifest lost it
        if hit is None:
            hit = _build(name, traced, specs, backend, options, key, base)
            if not hit.complete:   # a stage is missing (no linker): never cached as whole
                hit.cache_key = ""
                return hit
            store.put(key, hit.to_entry())
        store.add_variant(base, variant)
        hit.variant = variant
        return _captured(hit)


def _captured(kernel: CompiledKernel) -> CompiledKernel:
    """``kernel``, handed to the active captures (:mod:`.deploy`) on its way."""
    deploy.record(kernel, kernel.variant)
    return kernel


def _lookup(store, base: str, fn, constexprs: dict, specs: tuple,
            backend) -> Optional[CompiledKernel]:
    unusable: set = set()    # keys whose entry failed to load (a bundle's cannot be removed)
    variants: dict = {}      # key -> the dependency set it came from
    usable_stamp = _toolchain_filter(backend)

    def key_for(variant):
        deps, stamp = _split_stamp(variant)
        if not usable_stamp(stamp):
            return None
        hashes = resolve_hashes(fn, constexprs, deps)
        if hashes is None:
            return None
        key = entry_key(base, variant, [*hashes, _TOOLCHAIN] if stamp is not None else hashes)
        variants[key] = variant
        return key if key not in unusable else None
    while True:
        found = store.find(base, key_for)
        if found is None:
            return None
        hit = _from_entry(store, found[1], specs, found[0], base)
        if hit is not None:
            hit.variant = variants.get(found[0])
            if hit.variant is not None:
                hit.environ_names = environ_names_in(p for p, *_ in _split_stamp(hit.variant)[0])
            return hit
        unusable.add(found[0])


def _load(store, key: str, specs: tuple, base: str) -> Optional[CompiledKernel]:
    entry = store.get(key)
    return _from_entry(store, entry, specs, key, base) if entry is not None else None


def _from_entry(store, entry, specs: tuple, key: str, base: str) -> Optional[CompiledKernel]:
    try:
        return CompiledKernel.from_entry(entry, specs, key, base)
    except Exception as e:  # noqa: BLE001 - a well-formed file with bad contents: rebuild
        store.remove(key, f"has unusable contents ({type(e).__name__}: {e})")
        return None


#: The last item of a stored dependency set: the toolchain that built the entry. The
#: base key leaves the toolchain out (a deployment without a compiler cannot know
#: it); a machine with a compiler uses only entries its own tools built, one without
#: uses what it finds, and entries of several toolchains live side by side.
_TOOLCHAIN = "@toolchain"


def _stamped(variant, stamp: str) -> list:
    return [*variant, [_TOOLCHAIN, stamp]]


def _split_stamp(variant) -> tuple:
    """(dependency set, toolchain stamp or None for a set stored without one)."""
    if variant and isinstance(variant[-1], (list, tuple)) and variant[-1][0] == _TOOLCHAIN:
        return variant[:-1], variant[-1][1]
    return variant, None


def _toolchain_filter(backend):
    """Which stamps this machine may load: its own toolchain's where it can compile,
    any where it cannot (the toolchain is looked up once, on the first stamp seen)."""
    own: list = []

    def usable(stamp) -> bool:
        if stamp is None:
            return True
        if not own:
            own.append(backend.toolchain_stamp() if backend.can_compile() else None)
        return own[0] is None or stamp == own[0]
    return usable


def _warn_memory_only(kernel_name: str, problems) -> None:
    disk_cache.warn_once(
        f"memory-only:{kernel_name}:{problems[0]}",
        f"flydsl: kernel {kernel_name!r} is cached in memory only, for this process: "
        f"{problems[0]}. To cache it on disk, read plain values (numbers, strings, tuples, "
        "dataclasses) or pass them as fx.Constexpr arguments, or give the class a "
        "__flydsl_hash__(self) method that returns its content")


def symbol_name(name: str) -> str:
    """The kernel's symbol in IR and binaries: PTX, AMDGPU and the CPU's packed entry
    points take ASCII identifiers only, so other characters are spelled ``_uXXXX_``
    (``ядро`` -> ``k__u44f__u434__u440__u43e_``); messages keep the Python name."""
    if name.isascii() and name.isidentifier():
        return name
    return "k_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"_u{ord(c):x}_"
                          for c in name)


def _trace(fn, name: str, specs: tuple, backend, options):
    from .frontend.builder import trace_kernel
    # data files and environment variables the trace reads: part of the key
    with reading_files() as opened, reading_environ() as environ_names:
        traced = trace_kernel(fn, symbol_name(name), specs, backend.target, options)
    if opened or environ_names:
        traced.dependencies = with_files(traced.dependencies, opened, environ_names)
    return traced


def _compile(fn, name: str, specs: tuple, backend, options) -> CompiledKernel:
    traced = _trace(fn, name, specs, backend, options)
    return _build(name, traced, specs, backend, options, "", "")


def _build(name: str, traced, specs: tuple, backend, options, key: str,
           base: str) -> CompiledKernel:
    from .mlir_compiler import MlirCompiler
    disk_cache.stats["compiles"] += 1
    compiled_keys.append(key)
    artifact = MlirCompiler.compile(traced.module, backend=backend, options=options,
                                    func_name=traced.name, keep_stages=False)
    kernel = CompiledKernel(kernel_name=name, name=traced.name, specs=specs,
                            asm=artifact.asm, binary_stage=artifact.binary_stage,
                            backend_name=backend.name, driver=backend.driver or backend.name,
                            target=backend.target, shared_bytes=traced.shared_bytes,
                            cache_key=key, base_key=base, written=traced.written,
                            resources=artifact.resources.get(traced.name))
    kernel.environ_names = environ_names_in(
        p for p, _, _ in (traced.dependencies.entries if traced.dependencies else ()))
    return kernel
