"""FlyDSL's launch-time kernel attributes: ``kernel(..., value_attrs={...})``.

FlyDSL's ``@flyc.jit`` launchers pass AMDGPU function attributes when they call a
``@flyc.kernel``, e.g. ``value_attrs={"rocdl.waves_per_eu": 2}``. flydsl accepts the
ROCDL ones below: on ROCm each becomes the kernel's ROCDL attribute, which LLVM sees as
the function attribute in the table (``rocdl.waves_per_eu`` -> ``"amdgpu-waves-per-eu"``);
other backends compile the kernel as if none were given. The attributes are part of the
compile options, hence of every cache key: two calls with different attributes never
share a binary. A key outside the table is an error naming the kernel and the key; a
``None`` value is left out (FlyDSL's rule: ``{"rocdl.cluster_dims": None}`` sets nothing).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ..errors import DSLTypeError

#: value_attrs key -> (LLVM function attribute it becomes, kind of value)
KNOWN = {
    "rocdl.waves_per_eu": ("amdgpu-waves-per-eu", "int"),
    "rocdl.flat_work_group_size": ("amdgpu-flat-work-group-size", "range"),
}


def check_value_attrs(attrs: Optional[Mapping[str, Any]], kernel: str) -> tuple:
    """``attrs`` as sorted ``(key, value)`` pairs (None values left out); DSLTypeError
    naming ``kernel`` for a key flydsl does not know or a value of the wrong kind."""
    if attrs is None:
        return ()
    if not isinstance(attrs, Mapping):
        raise DSLTypeError(f"kernel {kernel!r}: value_attrs must be a dict, got "
                           f"{type(attrs).__name__}", kernel=kernel)
    out = []
    for key, value in attrs.items():
        if key not in KNOWN:
            raise DSLTypeError(f"kernel {kernel!r}: value_attrs key {key!r} is not supported "
                               f"(supported: {', '.join(sorted(KNOWN))})", kernel=kernel)
        if value is None:
            continue
        out.append((key, _checked(key, value, kernel)))
    return tuple(sorted(out))


def _checked(key: str, value, kernel: str):
    kind = KNOWN[key][1]
    if kind == "int":
        value = getattr(value, "value", value)    # fx.Int32(2)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
            raise DSLTypeError(f"kernel {kernel!r}: value_attrs[{key!r}] must be an int in "
                               f"0..10 (waves per execution unit), got {value!r}",
                               kernel=kernel)
        return value
    parts = str(value).split(",") if isinstance(value, str) else []
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) \
            or not 0 < int(parts[0]) <= int(parts[1]) <= 1024:
        raise DSLTypeError(f"kernel {kernel!r}: value_attrs[{key!r}] must be a string "
                           f"'min,max' of block sizes (1..1024), got {value!r}", kernel=kernel)
    return f"{int(parts[0])},{int(parts[1])}"


def attach_function_attrs(func_op, attrs: tuple) -> None:
    """Set checked ``attrs`` (:func:`check_value_attrs`) on a ``gpu.func`` as the ROCDL
    attributes the LLVM translation turns into AMDGPU function attributes."""
    import mlir.ir as ir
    for key, value in attrs:
        if KNOWN[key][1] == "int":
            func_op.attributes[key] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), value)
        else:
            func_op.attributes[key] = ir.StringAttr.get(value)
