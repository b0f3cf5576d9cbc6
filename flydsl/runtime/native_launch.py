"""The native warm launch: a specialization's guards, packing and call, in C.

The generated Python warm launch (:mod:`flydsl.runtime.fastpath`) spends most of a
tiny launch reading torch tensors' attributes through the interpreter and calling
the kernel through ctypes. For specializations whose arguments are all of the kinds
below, this module builds an object of ``native_launch.c`` that does the same work
in the same order, with the same guards, and calls the kernel's packed entry
directly (the GIL released, as ctypes does) for a one-block grid without dynamic
shared memory; other launches hand the packed values to the Python submit.

Kinds handled natively: torch CPU tensors and numpy arrays (read at numpy's C ABI
field offsets, checked on sample arrays first) whose rank is the parameter's; ints of an
integer parameter (type ``int``, range within int64); floats of an f32/f64 parameter;
bools of a bool parameter; omitted scalar arguments (int, float or bool defaults,
packed once);
constexprs of type int, bool, str or None; overlap checks between 1-D contiguous
tensors. Anything else (other tensor kinds, GPU drivers, debug or
profiled kernels, kernels that print) keeps the Python warm launch.

The C file is compiled once per interpreter and source version with the C compiler
the CPU backend links with (``cc``/``gcc``/``clang``, else ziglang's ``zig cc``) into
flydsl's private cache folder. Where none works, or ``FLYDSL_NATIVE_LAUNCH=0``, the
Python warm launch is used: same behaviour, slower.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from typing import Callable, Optional, Sequence

import numpy as np

from .dispatch import ENV_SOURCE
from .interrupts import interrupted
from .packing import BoundLaunch, SlotTable
from .tensors import is_torch_tensor, torch_writable

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_launch.c")
_MODULE = "_flydsl_native_launch"
_K_TORCH, _K_INT, _K_F32, _K_F64, _K_BOOL, _K_NUMPY = 1, 2, 3, 4, 5, 6
_INT64 = (-(1 << 63), 1 << 63)
#: The C side's bounds (native_launch.c: MAX_RANK, MAX_SLOTS, the 64 ranges).
_MAX_RANK, _MAX_SLOTS, _MAX_PARAMS = 16, 512, 64

_lock = threading.Lock()
_module = None          # the loaded extension, False once it could not be built
_problem: Optional[str] = None


def enabled() -> bool:
    """Whether warm launches may be native (``FLYDSL_NATIVE_LAUNCH`` is not ``0``)."""
    return os.environ.get("FLYDSL_NATIVE_LAUNCH", "1") != "0"


def problem() -> Optional[str]:
    """Why the native launch module could not be built (None: it was, or not tried)."""
    return _problem


def _compilers() -> list[list[str]]:
    found = []
    cc = os.environ.get("CC")
    for cand in ([cc] if cc else []) + ["cc", "gcc", "clang"]:
        path = shutil.which(cand)
        if path:
            found.append([path])
    try:
        import ziglang  # noqa: F401  - flydsl's own dependency (ld.lld for HSACO)
        found.append([sys.executable, "-m", "ziglang", "cc"])
    except ImportError:
        pass
    return found


def _build(path: str) -> None:
    include = sysconfig.get_paths()["include"]
    errors = []
    for argv in _compilers():
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        try:
            proc = subprocess.run([*argv, "-O2", "-shared", "-fPIC", "-I", include, _SOURCE,
                                   "-o", tmp], capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                os.chmod(tmp, 0o600)      # private as every cache file (loading needs read only)
                os.replace(tmp, path)     # atomic: concurrent builders agree
                return
            errors.append(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip()[-800:]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{' '.join(argv)}: {e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise OSError("; ".join(errors) or "no C compiler (cc, gcc, clang, ziglang)")


def load():
    """The extension module, built on first use (None where it cannot be)."""
    global _module, _problem
    if _module is not None:
        return _module or None
    with _lock:
        if _module is not None:
            return _module or None
        try:
            _module = _load()
        except Exception as e:  # noqa: BLE001 - the Python warm launch stays
            _module, _problem = False, f"{type(e).__name__}: {e}"
    return _module or None


def _load():
    from ..private_files import cache_dir, private_folder
    with open(_SOURCE, "rb") as f:
        source = f.read()
    tag = hashlib.sha256(source + sys.version.encode() + sys.executable.encode()
                         + str(sysconfig.get_config_var("EXT_SUFFIX")).encode()).hexdigest()[:16]
    folder = os.path.join(cache_dir(), "native")
    why = private_folder(cache_dir()) or private_folder(folder)
    if why:
        raise OSError(f"{folder} {why}")
    path = os.path.join(folder, f"{_MODULE}-{tag}.so")
    if not os.path.exists(path):
        _build(path)
    try:
        return _import(path)
    except ImportError:   # a damaged file (a truncated copy of the cache): built again
        _build(path)
        return _import(path)


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, path)
    spec = importlib.util.spec_from_file_location(_MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_SHIM = ("aoti_torch_get_data_ptr", "aoti_torch_get_sizes", "aoti_torch_get_strides",
         "aoti_torch_get_dim", "aoti_torch_get_dtype", "aoti_torch_get_device_type",
         "aoti_torch_get_layout")
_shim_tried = False
_shim_lock = threading.Lock()


def torch_shim(module) -> bool:
    """Point the module at torch's stable C shim (libtorch's AOTInductor ABI: tensor
    facts without the interpreter), once, if torch has it and it agrees with torch's
    Python API on sample tensors; whether it is in use."""
    global _shim_tried
    if not _shim_tried:
        with _shim_lock:   # another thread waits: the shim is in use before it is checked
            if not _shim_tried:
                try:
                    _install_shim(module)
                except Exception:  # noqa: BLE001 - tensors are read through torch's Python API
                    pass
                _shim_tried = True
    return module.torch_facts(_sample_tensors()[0]) is not None


def _sample_tensors() -> list:
    import torch
    x = torch.arange(24.0).reshape(4, 6)
    return [x, x[1:, ::2], x.t(), torch.zeros((), dtype=torch.int8), torch.empty(0),
            torch.ones(3, dtype=torch.float16)[1:]]


def _install_shim(module) -> None:
    import _ctypes
    import ctypes
    import torch
    # the libtorch_cpu torch loaded, never a second copy (its static initializers would
    # register torch's operators again)
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"),
                      mode=getattr(os, "RTLD_NOLOAD", 0))
    fns = tuple(_ctypes.dlsym(lib._handle, name) for name in _SHIM)
    cpu = ctypes.CFUNCTYPE(ctypes.c_int32)(_ctypes.dlsym(lib._handle,
                                                         "aoti_torch_device_type_cpu"))()
    strided = ctypes.CFUNCTYPE(ctypes.c_int32)(_ctypes.dlsym(lib._handle,
                                                             "aoti_torch_layout_strided"))()
    module.torch_shim(fns, cpu, strided)
    codes: dict = {}
    for t in _sample_tensors():
        facts = module.torch_facts(t)
        if (facts is None or facts[:3] != (t.data_ptr(), tuple(t.shape), t.stride())
                or facts[4] != cpu or codes.setdefault(t.dtype, facts[3]) != facts[3]):
            module.torch_shim(fns, cpu + 1000, strided + 1000)  # answers "cannot" always
            raise RuntimeError("torch's C shim disagrees with its Python API")
    if len(set(codes.values())) != len(codes):
        module.torch_shim(fns, cpu + 1000, strided + 1000)
        raise RuntimeError("torch's C shim gives two dtypes one code")
    _install_is_neg(module, lib)


#: at::native::is_neg(const at::Tensor &): the negative bit in one call (the shim has
#: no reader for it; the tensor's is_neg() method costs about 0.1 us per tensor).
_IS_NEG = "_ZN2at6native6is_negERKNS_6TensorE"


def _install_is_neg(module, lib) -> None:
    """Read the negative bit through libtorch's ``at::native::is_neg`` where torch
    exports it and it agrees with torch's Python API on sample tensors (plain ones and
    negative views); otherwise the C side asks each tensor's ``is_neg()``."""
    import _ctypes
    import torch
    try:
        address = _ctypes.dlsym(lib._handle, _IS_NEG)
    except OSError:
        return
    module.torch_is_neg(address)   # no launch reads it yet: the shim is being installed
    try:
        z = torch.complex(torch.arange(4.0), torch.arange(4.0))
        negative = [z.conj().imag, torch._neg_view(torch.ones(3))]
        agrees = all(t.is_neg() for t in negative) and all(
            module.torch_neg(t) is t.is_neg() for t in _sample_tensors() + negative + [z.imag])
    except Exception:  # noqa: BLE001 - the Python API answers instead
        agrees = False
    if not agrees:
        module.torch_is_neg(0)


def _dtype_code(module, sample) -> int:
    """The shim's code of ``sample``'s dtype (-1: read through the Python API)."""
    if not torch_shim(module):
        return -1
    facts = module.torch_facts(sample)
    return -1 if facts is None else facts[3]


_numpy_checked: Optional[bool] = None


def numpy_layout(module) -> bool:
    """Point the module at numpy's ndarray fields (numpy's C ABI: data, nd, dimensions,
    strides, base, descr, flags, each a pointer apart after the object header), once,
    if they agree with numpy's Python API on sample arrays; whether it is in use."""
    global _numpy_checked
    if _numpy_checked is None:
        _numpy_checked = False
        try:
            _numpy_checked = _check_numpy_layout(module)
        except Exception:  # noqa: BLE001 - numpy arrays keep the Python warm launch
            pass
    return _numpy_checked


def _check_numpy_layout(module) -> bool:
    import ctypes
    if sys.implementation.name != "cpython":
        return False
    word = ctypes.sizeof(ctypes.c_void_p)
    data = object.__basicsize__
    module.numpy_layout(data, data + word, data + 2 * word, data + 3 * word, data + 5 * word,
                        data + 6 * word)
    x = np.arange(24.0).reshape(4, 6)
    frozen = np.zeros(3, np.int16)
    frozen.flags.writeable = False
    samples = [x, x[1:, ::-2], x.T, np.zeros((), np.int8), np.empty(0), frozen,
               np.zeros(5, np.dtype(">i4"))[1:]]
    for a in samples:
        facts = module.numpy_facts(a)
        if facts != (a.ctypes.data, a.ndim, a.shape, a.strides, a.dtype, facts[5]) \
                or facts[4] is not a.dtype or bool(facts[5] & 0x0400) != a.flags.writeable:
            return False
    return True


def _refresh(library):
    """``(entry function, its address)`` of a library, loaded and counted as used."""
    return library.entry()


def _arg(module, entry, layout, off: int, written: bool, ranged: bool):
    """The C description of one runtime parameter, or None where it is not handled."""
    kind, info = layout
    if entry[0] == "default":
        # prepacked once: only values that cannot change (a default array may move)
        if ranged or kind == "tensor" or type(entry[1]) not in (int, float, bool):
            return None
        return (0, 0, off, 0, 0, 0, 0, 0, 0, 0, None, None, 0, 0, 0, 0, -1)
    _, pos, key, param_kind, sample = entry
    if kind == "tensor" and type(sample) is np.ndarray:
        t, dtype, nd, inner, aligned, wide = key
        if (nd != info or nd > _MAX_RANK or (ranged and not (nd == 1 and inner))
                or not numpy_layout(module)):
            return None
        return (_K_NUMPY, pos, off, nd, sample.itemsize, int(inner), int(aligned), int(wide),
                int(written), int(ranged), t, dtype, 0, 0, 0, 0, -1)
    if kind == "tensor":
        if not (is_torch_tensor(sample) and len(key) == 7):
            return None
        t, dtype, nd, inner, device, aligned, wide = key
        if (device.type != "cpu" or nd != info or nd > _MAX_RANK
                or (ranged and not (nd == 1 and inner))):
            return None
        return (_K_TORCH, pos, off, nd, sample.element_size(), int(inner), int(aligned),
                int(wide), int(written), int(ranged), t, dtype, 0, 0, 0, 0,
                _dtype_code(module, sample))
    if ranged:
        return None
    if type(sample) is int and info.kind == "int":
        lo, hi = info.int_limits
        if lo < _INT64[0] or hi > _INT64[1]:
            return None
        not_int32 = param_kind == "infer" and info.bits == 64
        return (_K_INT, pos, off, 0, 0, 0, 0, 0, 0, 0, int, None, lo, hi - 1, int(key[3]),
                int(not_int32), -1)
    if type(sample) is float and info.kind != "int" and info.mlir in ("f32", "f64"):
        return (_K_F32 if info.mlir == "f32" else _K_F64, pos, off, 0, 0, 0, 0, 0, 0, 0,
                float, None, 0, 0, 0, 0, -1)
    if type(sample) is bool and info.kind == "bool":
        return (_K_BOOL, pos, off, 0, 0, 0, 0, 0, 0, 0, bool, None, 0, 0, 0, 0, -1)
    return None


def native_fast_launch(bound: BoundLaunch, nargs: int, env: tuple,
                       constexprs: Sequence[tuple[int, object]], runtime: Sequence[tuple],
                       name: str, pairs: Sequence[tuple]) -> Optional[Callable]:
    """The native warm launch of one specialization (the arguments of
    :func:`~flydsl.runtime.fastpath.build_fast_launch`), or None when it does not
    apply: see the module docstring."""
    native = getattr(bound, "native", None)
    if native is None or ENV_SOURCE is None or not enabled():
        return None
    if len(runtime) > _MAX_PARAMS:
        return None
    library, dims_at = native
    if dims_at + 9 > _MAX_SLOTS:
        return None
    consts = []
    for pos, value in constexprs:
        if type(value) not in (int, bool, str, type(None)):
            return None
        consts.append((pos, type(value), value))
    module = load()
    if module is None:
        return None
    ranged = {k for i, j, _ in pairs for k in (i, j)}
    args, template = [], SlotTable(dims_at)
    for i, (entry, layout, off, pack) in enumerate(
            zip(runtime, bound.layout, bound.offsets, bound.packers)):
        desc = _arg(module, entry, layout, off, i in bound.written, i in ranged)
        if desc is None:
            return None
        if entry[0] == "default":
            pack(template.values, entry[1])
        args.append(desc)
    env_dict, env_keys = ENV_SOURCE
    # built after the first launch, not a second one: a specialization launched once
    # stays the first to unload (its first native call counts it, through _refresh)
    fn, address = library.entry(used=False)
    return module.new(nargs, env_dict, env_keys, tuple(env), tuple(consts), tuple(args),
                      tuple((i, j, int(bool(o))) for i, j, o in pairs), dims_at, dims_at,
                      bytes(template.values)[:8 * dims_at], library, fn, address, _refresh,
                      bound.local, bound.new_buffer, bound.submit, interrupted, name,
                      torch_writable)


__all__ = ["enabled", "load", "native_fast_launch", "problem"]
