"""The ``flydsl`` command: backends, ahead-of-time compiles, and the compile cache."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from typing import Optional, Sequence

import numpy as np

_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
           "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "bool": "bool",
           "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64"}
_EMIT = ("mlir", "llvm-mlir", "llir", "ptx", "cubin", "amdgcn", "hsaco", "so", "asm")
#: File name extension of each stage, for ``-o DIRECTORY`` (one file per kernel).
_EXTENSION = {"llvm-mlir": "llvm.mlir", "llir": "ll", "amdgcn": "s", "asm": "s"}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except Exception as e:  # noqa: BLE001 - a CLI reports errors, it does not trace back
        from .errors import FlydslError
        if not isinstance(e, (FlydslError, ValueError, TypeError, OSError, KeyError)):
            raise
        print(f"flydsl: error: {e}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flydsl", description="flydsl GPU kernel DSL tools")
    sub = p.add_subparsers(title="commands")

    b = sub.add_parser("backends", help="list compile backends and what this machine has")
    b.add_argument("--all", action="store_true", help="include experimental backends")
    b.set_defaults(func=_cmd_backends)

    c = sub.add_parser("compile", help="compile a kernel ahead of time (no GPU needed)",
                       description="Compile FILE.py::NAME (a @flydsl.kernel or @flydsl.jit "
                                   "function) and write one stage of every kernel it "
                                   "launches (or of the --kernel one) to OUT.")
    c.add_argument("target", metavar="FILE.py::NAME")
    c.add_argument("--backend", default=None, help="cpu, cuda, rocm, ... (default: auto)")
    c.add_argument("--arch", action="append", default=None,
                   help="sm_90, gfx942, ... (default: resolved); repeat it for a bundle")
    c.add_argument("--emit", default="asm", choices=_EMIT,
                   help="stage to write (asm = the backend's assembly)")
    c.add_argument("--signature", action="append", default=None,
                   help="arguments in parameter order, comma separated: a tensor as DTYPE[RANK] "
                        "(f32[1], bf16[2]), a scalar as a dtype (i32, f32), a constexpr as "
                        "=VALUE (=256, ='mode'); e.g. 'f32[1],f32[1],f32[1],i32'; repeat it "
                        "for a bundle. A tensor given by its rank stands in as 16 elements "
                        "per dimension, so sizes a @jit function reads from its shape are "
                        "compiled as multiples of 16; give the real shape instead as "
                        "DTYPE(D0,D1,...) (f32(1000), f16(100,64)). Tensors are taken 16-byte "
                        "aligned (f32[1]:1: not), ints not divisible by 16 (i32:16: "
                        "divisible), the variants a launch specializes on")
    c.add_argument("--configs", default=None,
                   help="keyword arguments to compile with, as a Python list of dicts, one "
                        "compile each: \"[{'BLOCK': 128}, {'BLOCK': 256}]\"")
    c.add_argument("--bundle", default=None, metavar="PATH",
                   help="write every kernel compiled (each signature x config x arch) to a "
                        "bundle: a folder, or an archive if PATH ends in .tar, .tar.gz or "
                        ".tgz; load it with FLYDSL_CACHE_BUNDLE=PATH or flydsl.load_bundle. "
                        "A bundle at PATH holding other kernels is kept unless --force")
    c.add_argument("--force", action="store_true",
                   help="with --bundle: replace a bundle holding other kernels")
    c.add_argument("--kernel", default=None, metavar="NAME",
                   help="write only this kernel's stage (default: every kernel launched, "
                        "each text under a header naming it)")
    c.add_argument("-o", "--output", default=None,
                   help="output file (default: stdout, or nothing with --bundle); an "
                        "existing directory gets one file per kernel, NAME.EXT")
    c.add_argument("--stats", action="store_true",
                   help="print each kernel's registers, spills, shared memory, max "
                        "threads per block and occupancy (instead of a stage, unless -o)")
    c.set_defaults(func=_cmd_compile)

    bp = sub.add_parser("bundle", help="inspect or join bundles of precompiled kernels")
    bsub = bp.add_subparsers(title="bundle commands")
    info = bsub.add_parser("info", help="kernels, specializations, targets and sizes")
    info.add_argument("path", metavar="PATH")
    info.set_defaults(func=_cmd_bundle_info)
    merge = bsub.add_parser("merge", help="write one bundle holding the kernels of several")
    merge.add_argument("output", metavar="OUT")
    merge.add_argument("inputs", metavar="IN", nargs="+")
    merge.add_argument("--force", action="store_true",
                       help="replace OUT even if it holds kernels the inputs lack")
    merge.set_defaults(func=_cmd_bundle_merge)
    bp.set_defaults(func=lambda a: (bp.print_help(), 2)[1])

    k = sub.add_parser("cache", help="inspect or clean the compile cache")
    ksub = k.add_subparsers(title="cache commands")
    for name, helptext in (("info", "directory, entries and bytes"),
                           ("list", "one line per entry (and per shared-store entry)"),
                           ("clear", "remove every entry, here and in the shared store"),
                           ("prune", "drop stale temp files and evict down to the size cap")):
        sp = ksub.add_parser(name, help=helptext)
        if name == "clear":
            sp.add_argument("--local", action="store_true",
                            help="leave the shared store (FLYDSL_CACHE_STORE) alone")
        if name == "prune":
            sp.add_argument("--max-bytes", type=int, default=None,
                            help="size to evict down to (default: FLYDSL_CACHE_MAX_BYTES)")
        sp.set_defaults(func=globals()[f"_cmd_cache_{name}"])
    k.set_defaults(func=lambda a: (k.print_help(), 2)[1])
    return p


# -- backends --------------------------------------------------------------
def _cmd_backends(args) -> int:
    from .compiler.backends import backend_tags, list_backends, lookup_backend_class
    from .compiler.backends.registry import resolve_target
    rows = [("name", "tags", "arch", "device", "toolchain")]
    for name in list_backends(exclude_tags=() if args.all else ("experimental",)):
        cls = lookup_backend_class(name)
        try:
            target = resolve_target(name)
            arch = target.arch
        except Exception as e:  # noqa: BLE001 - listing must not fail on one backend
            arch = f"? ({e})"
        device = "yes" if cls.device_present() else "no"
        rows.append((name, ",".join(backend_tags(name)) or "-", arch, device,
                     cls.describe_toolchain()))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


# -- compile ---------------------------------------------------------------
def _load_target(spec: str):
    path, sep, name = spec.rpartition("::")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE.py::NAME, got {spec!r}")
    if not os.path.exists(path):
        raise OSError(f"no such file: {path}")
    mod_name = "_flydsl_cli_" + os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    module_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise KeyError(f"{path} has no {name!r}")
    return getattr(module, name)


def parse_signature(text: str) -> list:
    """Host stand-ins for a signature string (see ``flydsl compile --help``)."""
    out = []
    for item in _split_top(text):
        item = item.strip()
        if item.startswith("="):
            out.append(ast.literal_eval(item[1:]))
            continue
        item, special = _specialization_suffix(item)
        if "(" in item:
            dtype, _, rest = item.partition("(")
            shape = ast.literal_eval("(" + rest.rstrip(")") + ",)")
            out.append(_stand_in(dtype.strip(), len(shape), aligned=special != 1, shape=shape))
            continue
        if "[" in item:
            dtype, _, rest = item.partition("[")
            rank = int(rest.rstrip("]") or 0)
            out.append(_stand_in(dtype.strip(), rank, aligned=special != 1))
            continue
        if item not in _DTYPES:
            raise ValueError(f"unknown signature item {item!r}; use e.g. f32[1], i32 or =256")
        np_name = _DTYPES[item]
        if np_name == "bfloat16":
            out.append(1.0)
        else:   # i32:16 stands for ints divisible by 16 (a specialization), i32 for others
            out.append(np.dtype(np_name).type(16 if special == 16 else 1))
    return out


def _specialization_suffix(item: str) -> tuple:
    """``f32[1]:1`` / ``i32:16`` -> (``f32[1]``, 1) / (``i32``, 16); no suffix -> None.
    Tensors are aligned unless ``:1``; ints divisible by 16 only with ``:16``
    (:mod:`flydsl.runtime.specialization`)."""
    base, sep, suffix = item.rpartition(":")
    if not sep:
        return item, None
    if suffix.strip() not in ("1", "16"):
        raise ValueError(f"signature item {item!r}: the suffix is :16 (aligned tensor, int "
                         "divisible by 16) or :1 (neither)")
    return base.strip(), int(suffix)


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def _stand_in(dtype: str, rank: int, aligned: bool = True, shape: Optional[tuple] = None):
    """A host array of ``dtype`` and ``rank`` (or ``shape``): 16-byte aligned rows
    (16 elements each by default), or one element in, misaligned, when not ``aligned``."""
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
    if shape is not None:
        shape = tuple(shape[:-1]) + (shape[-1] + (not aligned),)
    else:
        shape = (1,) * (rank - 1) + (16 + (not aligned),) if rank else (2,)
    if dtype == "bf16":
        import torch  # numpy has no bfloat16
        full = torch.zeros(shape, dtype=torch.bfloat16)
    else:
        full = np.zeros(shape, dtype=_DTYPES[dtype])
    if not rank:
        return full[1:].reshape(()) if not aligned else full[:1].reshape(())
    return full[..., 1:] if not aligned else full


def _cmd_compile(args) -> int:
    import inspect
    import flydsl
    from .errors import entry_site
    fn = _load_target(args.target)
    if not args.signature:
        raise ValueError("--signature is needed to know the argument dtypes and ranks "
                         "(e.g. --signature 'f32[1],f32[1],f32[1],i32')")
    configs = _parse_configs(args.configs)
    arches = args.arch or [None]
    if args.bundle is None and (len(args.signature) > 1 or len(configs) > 1 or len(arches) > 1):
        raise ValueError("several --signature, --configs or --arch values make a bundle: "
                         "add --bundle PATH")
    # Launch errors (bad --signature arguments) point at the kernel's definition, not
    # at the `flydsl` launcher script above this frame.
    with entry_site(inspect.currentframe(), *_definition_site(fn)):
        progs = [flydsl.compile(fn, *parse_signature(sig), backend=args.backend, arch=arch,
                                **config)
                 for sig in args.signature for config in configs for arch in arches]
    for prog in progs:
        if not prog.kernels:
            raise ValueError(f"{args.target} launched no kernel")
    if args.bundle is not None:
        _write_bundle(args.bundle, [k for prog in progs for k in prog.kernels], args.force)
    if args.stats:
        _print_stats(progs)
    if args.output is not None or (args.bundle is None and not args.stats):
        _emit(progs[0], args.emit, args.kernel, args.output or "-")
    return 0


def _print_stats(progs: list) -> None:
    """One line per compiled kernel: its resource metadata."""
    from .compiler.kernel_metadata import occupancy_text
    for prog in progs:
        for name, k in zip(prog.kernel_names, prog.kernels):
            print(f"{name} ({k.backend_name}/{k.target.arch}): {occupancy_text(k.metadata)}")


def _definition_site(fn) -> tuple:
    """(file, line, text) of the ``def`` of a kernel or jit function."""
    import linecache
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    if code is None:
        return "", 0, ""
    line = code.co_firstlineno
    while linecache.getline(code.co_filename, line).lstrip().startswith("@"):
        line += 1    # decorators: the first line of the code object
    return code.co_filename, line, linecache.getline(code.co_filename, line).rstrip("\n")


def _parse_configs(text: Optional[str]) -> list:
    if text is None:
        return [{}]
    try:
        configs = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"--configs {text!r} is not a Python list of dicts ({e})") from None
    if isinstance(configs, dict):
        configs = [configs]
    if not isinstance(configs, list) or not configs or not all(
            isinstance(c, dict) and all(isinstance(k, str) for k in c) for c in configs):
        raise ValueError(f"--configs {text!r}: expected a list of dicts with names as keys, "
                         "e.g. \"[{'BLOCK': 128}, {'BLOCK': 256}]\"")
    return configs


def _emit(prog, stage: str, kernel: Optional[str], output: str) -> None:
    """Write ``stage`` of the program's kernels (or of ``kernel``) to ``output``: one
    kernel's as it is; several kernels' texts each under a header naming the kernel,
    or one file per kernel when ``output`` is a directory."""
    from .errors import KernelSelectionError
    from .jit import join_kernel_texts
    chosen = {kernel: prog.kernel(kernel).asm} if kernel is not None else prog.asm_by_kernel
    data = {name: _stage(prog.backend, asm, stage) for name, asm in chosen.items()}
    if output != "-" and os.path.isdir(output):
        ext = _EXTENSION.get(stage, stage)
        for name, content in data.items():
            _write(os.path.join(output, f"{name}.{ext}"), content)
        print(f"wrote {len(data)} file(s) to {output}: "
              f"{', '.join(f'{name}.{ext}' for name in data)}", file=sys.stderr)
        return
    if len(data) == 1:
        _write(output, next(iter(data.values())))
        return
    names = list(data)
    if any(isinstance(content, bytes) for content in data.values()):
        raise KernelSelectionError(
            f"{len(names)} kernels were compiled ({', '.join(names)}) and {stage!r} is one "
            "binary per kernel: pick one with --kernel NAME, or write one file per kernel "
            "with -o DIRECTORY", names)
    header = (prog.backend.assembly_stage or "asm") if stage == "asm" else stage
    _write(output, join_kernel_texts(header, data))


def _stage(backend, asm, stage: str):
    """One kernel's ``stage`` (``asm``: the backend's assembly)."""
    if stage == "asm":
        return backend.assembly(asm)
    try:
        return asm[stage]   # a stage a missing tool kept from being made raises why
    except KeyError:
        raise KeyError(f"the {backend.name} backend produced no {stage!r} stage; "
                       f"available: {', '.join(asm)}") from None


def _write_bundle(dest: str, kernels: list, force: bool = False) -> None:
    from .compiler.bundle import describe_kernel, write_bundle
    for k in kernels:
        k.binary   # a binary a missing tool kept from being made (no ld.lld) raises why
    memory_only = sorted({k.kernel_name for k in kernels if not k.cache_key})
    if memory_only:
        raise ValueError(f"cannot bundle kernel(s) {', '.join(memory_only)}: they are cached "
                         "in memory only (see the warning above, or FLYDSL_CACHE_DISABLE)")
    count = write_bundle(dest, _store(), [(k.base_key, k.cache_key) for k in kernels],
                         index=[describe_kernel(k) for k in kernels], overwrite=force)
    print(f"wrote {count} kernel(s) to the bundle {dest}", file=sys.stderr)


# -- bundles ---------------------------------------------------------------
def _cmd_bundle_info(args) -> int:
    from .compiler.bundle import Bundle
    bundle = Bundle(args.path)
    try:
        keys = bundle.entry_keys()
        rows = {r.get("key"): r for r in bundle.index()}
        total = sum(bundle.file_size(rel) for rel in bundle.files())
        print(f"bundle {bundle.path}: {len(keys)} kernel(s), {total} bytes")
        for key in keys:
            print(_bundle_line(bundle, key, rows.get(key)))
    finally:
        bundle.close()
    return 0


def _bundle_line(bundle, key: str, row) -> str:
    """One kernel of a bundle: name, target, binary size, specialization, metadata."""
    entry = bundle.get(key)
    if entry is None:
        return f"  {key[:16]}  (unreadable)"
    m = entry.meta
    stage = m.get("binary_stage", "")
    size = len(entry.blobs.get(stage, b""))
    target = "/".join(str(t) for t in m.get("target", [])[:2])
    line = f"  {m.get('kernel', '?'):<24} {target:<14} {stage} {size} bytes  {key[:16]}"
    if row is not None:
        line += "\n      (" + ", ".join(row.get("specialization", [])) + ")"
        meta = row.get("metadata")
        if meta:
            line += "\n      " + ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))
    return line


def _cmd_bundle_merge(args) -> int:
    from .compiler.bundle import merge_bundles
    count = merge_bundles(args.output, args.inputs, overwrite=args.force)
    print(f"wrote {count} kernel(s) to the bundle {args.output}", file=sys.stderr)
    return 0


def _write(path: str, data) -> None:
    if path == "-":
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        return
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)


# -- cache -----------------------------------------------------------------
def _store():
    from .compiler.cache import DiskCache
    return DiskCache()


def _remote():
    from .compiler.remote import active_tier, store_spec
    from .compiler.resp import mask_url
    tier = active_tier()
    if tier is None and store_spec():
        raise OSError(f"the cache store FLYDSL_CACHE_STORE={mask_url(store_spec())} cannot "
                      "be used (see the warning above)")
    return tier


def _cmd_cache_info(args) -> int:
    from .compiler.cache import enabled, max_bytes
    store = _store()
    entries = store.entries()
    print(f"directory: {store.dir}")
    print(f"enabled:   {'yes' if enabled() else 'no (FLYDSL_CACHE_DISABLE)'}")
    print(f"entries:   {len(entries)}")
    print(f"bytes:     {store.total_bytes()} (entries {sum(size for _, size, _ in entries)}; "
          "with manifests, records, generated sources and leftovers)")
    cap = max_bytes()
    print(f"max bytes: {cap if cap is not None else 'unlimited'}")
    remote = _remote()
    if remote is not None:
        info = remote.info()
        others = info["other_secret_entries"]
        print(f"store:     {remote.description}: {info['entries']} entries, "
              + (f"{others} more signed with other secrets, " if others else "")
              + f"{info['records']} records, {info['bytes']} bytes")
    return 0


def _cmd_cache_list(args) -> int:
    import time
    from .compiler.cache import CacheEntry
    for path, size, mtime in _store().entries():
        try:
            with open(path, "rb") as f:
                what = _describe(CacheEntry.decode(f.read()).meta)
        except Exception:  # noqa: BLE001
            what = "(corrupt)"
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime))
        print(f"{os.path.basename(path)[:16]}  {size:>9}  {stamp}  {what}")
    remote = _remote()
    if remote is not None:     # read only: nothing is deleted, whatever its secret
        for kid, key in remote.stored_entries():
            entry, size, problem = remote.inspect_entry(kid, key)
            what = _describe(entry.meta) if entry is not None else f"({problem})"
            print(f"{key[:16]}  {size:>9}  {'(store)':>16}  {what}")
    return 0


def _describe(meta: dict) -> str:
    return f"{meta.get('kernel')} {meta.get('backend')}/{meta.get('target', ['', '?'])[1]}"


def _cmd_cache_clear(args) -> int:
    store = _store()
    print(f"removed {store.clear()} entries; {store.total_bytes()} bytes left")
    remote = _remote() if not args.local else None
    if remote is not None:
        print(f"removed {remote.clear()} entries from {remote.description}")
    return 0


def _cmd_cache_prune(args) -> int:
    from .compiler.cache import max_bytes
    store = _store()
    temps = store.remove_stale_temp_files()
    cap = args.max_bytes if args.max_bytes is not None else max_bytes()
    evicted = store.prune(cap) if cap is not None else 0
    print(f"removed {temps} stale temp files, evicted {evicted} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
