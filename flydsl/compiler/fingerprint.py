"""The compile-cache key of a kernel specialization (no tracing, no MLIR).

A key has two parts:

* the *base key* (:func:`base_key`): flydsl's version and sources, the kernel's
  own source and where it sits, the specialization (argument dtypes, ranks and
  layouts, constexpr values by content), and the backend's hash (target, pipeline
  text, options). The toolchain's versions are stamped on each stored dependency
  set instead, and matched where a compiler is installed (see ``kernel_compiler``):
  a deployment without one cannot know them;
* the values the trace read (:mod:`.dependencies`): every global, closure variable,
  attribute and helper, hashed by content. :func:`entry_key` combines them.

The cache keeps, per base key, the list of what earlier traces read (a manifest),
so a later process computes the full key from its own values without tracing.
"""
from __future__ import annotations

import functools
import hashlib
import os
from typing import Optional, Sequence

from .. import version
from .content_hash import Unhashable, content_hash, traced_function_hash

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def flydsl_sources_hash() -> str:
    """sha256 over every Python source of flydsl (compiler, runtime, passes). The
    same wherever ``flydsl.passes`` lives: beside the package (an install from this
    repository) or inside it (a GPU kit's copy), so keys match between the two."""
    import flydsl.passes as passes
    return sources_hash(_PKG_DIR, os.path.dirname(os.path.abspath(passes.__file__)))


def sources_hash(package: str, passes: str) -> str:
    """:func:`flydsl_sources_hash` of the flydsl package folder ``package`` whose
    ``flydsl.passes`` is the folder ``passes`` (a copy's, say)."""
    roots = list(dict.fromkeys([os.path.abspath(package), os.path.abspath(passes)]))
    h = hashlib.sha256()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in roots)
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()


def specialization_text(specs: Sequence) -> str:
    """The specialization as the key sees it: tensor and scalar parameters by their
    spec, constexpr values by content. An object without a content hash is described
    by its type here; what the kernel reads from it is recorded by the trace (and an
    object used as data keeps the kernel out of the disk cache)."""
    parts = []
    for spec in specs:
        if spec.kind != "constexpr":
            parts.append(repr(spec.key()))
            continue
        try:
            parts.append(f"C:{spec.name}:{content_hash(spec.value)}")
        except Unhashable:
            t = type(spec.value)
            parts.append(f"C:{spec.name}:object:{t.__module__}.{t.__qualname__}")
    return ";".join(parts)


def base_key(fn, specs: Sequence, backend, options,
             known_block_size: Optional[tuple] = None) -> str:
    """Everything in the key that is known before tracing (see the module docstring),
    with the block size the kernel declares (``known_block_size``: two kernels of one
    function may declare two). Not the interpreter's version: the tracer reads the
    kernel's source, not its bytecode, so a bundle built with one Python loads under
    another."""
    h = hashlib.sha256()
    parts = (f"flydsl {version.__version__}", flydsl_sources_hash(),
             traced_function_hash(fn), specialization_text(specs), backend.name,
             backend.hash(options, toolchain=False))
    if known_block_size is not None:
        parts += (f"known_block_size {list(known_block_size)}",)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def entry_key(base: str, variant: Sequence, hashes: Sequence[str]) -> str:
    """The full key: the base key and, for each path the trace read, its hash."""
    h = hashlib.sha256(base.encode())
    for (path, modes), digest in zip(variant, hashes):
        h.update(f"\0{path}\0{modes}\0{digest}".encode())
    return h.hexdigest()
