"""FlyDSL's launch-time kernel attributes: ``kernel(..., value_attrs={...})``.

FlyDSL's ``@flyc.jit`` launchers pass AMDGPU function attributes when they call a
``@flyc.kernel``, e.g. ``value_attrs={"rocdl.waves_per_eu": 2}``. flydsl accepts the
ROCDL ones below: on ROCm each becomes the kernel's ROCDL attribute, which LLVM sees as
the function attribute in the table (``rocdl.waves_per_eu`` -> ``"amdgpu-waves-per-eu"``);
other backends compile the kernel as if none were given. The attributes are part of the
compile options, hence of every cache key: two calls with different attributes never
share a binary. A key outside the table is an error naming the kernel and the key; a
``None`` value is left out (FlyDSL's rule: ``{"rocdl.cluster_dims": None}`` sets nothing).

``"passthrough"`` (FlyDSL's LLVM function attribute list, as its flash-attention kernels
pass ``[["denormal-fp-math-f32", "preserve-sign,preserve-sign"], ["unsafe-fp-math",
"true"]]``) takes ``[key, value]`` pairs of strings. Accepted keys: the LLVM floating-point
attributes in :data:`PASSTHROUGH_FP` (value checked) and AMDGPU backend hints
``"amdgpu-..."`` (any string value). On ROCm they become the LLVM function's attributes
(``llvm.func``'s ``passthrough``; they are in the HSACO's IR and code object). On the CPU and
CUDA they are dropped: the ``amdgpu-*`` ones mean nothing there, and the fp-math ones only
*permit* faster, less exact code (no NaNs, reassociation) or select AMD's denormal flushing,
so those backends compute the IEEE result, which differs only on denormals and NaN/inf
inputs the kernel promised not to produce. Bare flag strings, other keys and other value
shapes are refused with an error naming the kernel and the entry.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ..errors import DSLTypeError, user_call_site


def _error(message: str, kernel: str) -> DSLTypeError:
    """A DSLTypeError naming ``kernel``, located at the user's kernel call."""
    filename, lineno, line = user_call_site()
    return DSLTypeError(message, kernel=kernel, filename=filename, lineno=lineno,
                        source_line=line)

#: value_attrs key -> (LLVM function attribute it becomes, kind of value)
KNOWN = {
    "rocdl.waves_per_eu": ("amdgpu-waves-per-eu", "int"),
    "rocdl.flat_work_group_size": ("amdgpu-flat-work-group-size", "range"),
    "passthrough": ("passthrough", "passthrough"),
}

_DENORMAL_MODES = ("ieee", "preserve-sign", "positive-zero", "dynamic")
_BOOLS = ("true", "false")
#: LLVM floating-point function attributes ``passthrough`` accepts -> allowed values
PASSTHROUGH_FP = {
    "denormal-fp-math": "denormal",
    "denormal-fp-math-f32": "denormal",
    "no-nans-fp-math": _BOOLS,
    "no-infs-fp-math": _BOOLS,
    "no-signed-zeros-fp-math": _BOOLS,
    "unsafe-fp-math": _BOOLS,
    "approx-func-fp-math": _BOOLS,
    "less-precise-fpmad": _BOOLS,
}


def check_value_attrs(attrs: Optional[Mapping[str, Any]], kernel: str) -> tuple:
    """``attrs`` as sorted ``(key, value)`` pairs (None values left out); DSLTypeError
    naming ``kernel`` for a key flydsl does not know or a value of the wrong kind."""
    if attrs is None:
        return ()
    if not isinstance(attrs, Mapping):
        raise _error(f"value_attrs must be a dict, got "
                     f"{type(attrs).__name__}", kernel)
    out = []
    for key, value in attrs.items():
        if key not in KNOWN:
            raise _error(f"value_attrs key {key!r} is not supported "
                         f"(supported: {', '.join(sorted(KNOWN))})", kernel)
        if value is None:
            continue
        out.append((key, _checked(key, value, kernel)))
    return tuple(sorted(out))


def _checked(key: str, value, kernel: str):
    kind = KNOWN[key][1]
    if kind == "passthrough":
        return _checked_passthrough(value, kernel)
    if kind == "int":
        value = getattr(value, "value", value)    # fx.Int32(2)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
            raise _error(f"value_attrs[{key!r}] must be an int in "
                         f"0..10 (waves per execution unit), got {value!r}", kernel)
        return value
    parts = str(value).split(",") if isinstance(value, str) else []
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) \
            or not 0 < int(parts[0]) <= int(parts[1]) <= 1024:
        raise _error(f"value_attrs[{key!r}] must be a string "
                     f"'min,max' of block sizes (1..1024), got {value!r}", kernel)
    return f"{int(parts[0])},{int(parts[1])}"


def _checked_passthrough(value, kernel: str) -> tuple:
    """``value`` as a tuple of ``(key, value)`` string pairs, each entry checked."""
    def bad(what: str):
        return _error(f"value_attrs['passthrough'] {what}; it takes "
                      f"a list of [key, value] string pairs, keys "
                      f"{', '.join(sorted(PASSTHROUGH_FP))} or 'amdgpu-...'", kernel)
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise bad(f"must be a list, got {value!r}")
    out = []
    for entry in value:
        if isinstance(entry, str):
            raise bad(f"entry {entry!r} is a bare flag (no value), which flydsl does not pass")
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 \
                or not all(isinstance(e, str) for e in entry):
            raise bad(f"entry {entry!r} is not a [key, value] pair of strings")
        k, v = entry
        allowed = PASSTHROUGH_FP.get(k)
        if allowed is None and not k.startswith("amdgpu-"):
            raise bad(f"key {k!r} is not supported")
        if allowed == "denormal":
            modes = [m.strip() for m in v.split(",")]
            ok = len(modes) in (1, 2) and all(m in _DENORMAL_MODES for m in modes)
            if not ok:
                raise bad(f"entry {entry!r}: the value must be '<mode>[,<mode>]' with modes "
                          f"{', '.join(_DENORMAL_MODES)}")
            v = ",".join(modes)
        elif allowed is not None and v not in allowed:
            raise bad(f"entry {entry!r}: the value must be 'true' or 'false'")
        out.append((k, v))
    if len({k for k, _ in out}) != len(out):
        raise bad(f"names a key twice: {value!r}")
    return tuple(sorted(out))


def attach_function_attrs(func_op, attrs: tuple) -> None:
    """Set checked ``attrs`` (:func:`check_value_attrs`) on a ``gpu.func`` as the ROCDL
    attributes the LLVM translation turns into AMDGPU function attributes, and
    ``passthrough`` as the list the lowered ``llvm.func`` hands to LLVM."""
    import mlir.ir as ir
    for key, value in attrs:
        if KNOWN[key][1] == "passthrough":
            func_op.attributes[key] = ir.ArrayAttr.get(
                [ir.ArrayAttr.get([ir.StringAttr.get(k), ir.StringAttr.get(v)])
                 for k, v in value])
        elif KNOWN[key][1] == "int":
            func_op.attributes[key] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), value)
        else:
            func_op.attributes[key] = ir.StringAttr.get(value)
