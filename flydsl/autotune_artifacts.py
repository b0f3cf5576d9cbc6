"""FlyDSL's offline autotune configs (``@autotune(..., artifact_name="rmsnorm")``).

With ``FLYDSL_AUTOTUNE_CONFIG_DIR`` set, a tuned function with an ``artifact_name``
looks its config up in ``<dir>/<name>-<sha256 of the identity>.json`` before using its
``default=`` or searching, and a forced search (``FLYDSL_AUTOTUNE=1``) writes the
winner there. The identity is the name, the ``key`` arguments by name (a tensor as its
shape, a dtype as its text) and the device (name, arch, compute units), so a file is
only ever read back for the same call axes on the same kind of device. A file that
does not parse, has another version or identity, or holds a config the call cannot
take is ignored with a warning (the default or a search then decides).

The file holds ``{"version": 1, "identity": {...}, "config": Config.to_dict()}``
(FlyDSL's layout of these files).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional

log = logging.getLogger("flydsl.autotune")

VERSION = 1
CONFIG_DIR_ENV = "FLYDSL_AUTOTUNE_CONFIG_DIR"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_name(name: Any) -> str:
    """``name`` stripped, if it is 1-64 ASCII letters, digits, '.', '_' or '-'."""
    if not isinstance(name, str):
        raise TypeError(f"autotune artifact_name must be a string, got {name!r}")
    name = name.strip()
    if not _NAME.fullmatch(name) or not any(c.isalnum() for c in name):
        raise ValueError(f"autotune artifact_name must use 1-64 letters, digits, '.', '_' "
                         f"or '-', got {name!r}")
    return name


def config_dir() -> Optional[Path]:
    """``FLYDSL_AUTOTUNE_CONFIG_DIR`` resolved, or None (artifacts off)."""
    text = os.environ.get(CONFIG_DIR_ENV, "").strip()
    return Path(text).expanduser().resolve() if text else None


def key_value(value: Any) -> Any:
    """A key argument as the identity records it: a tensor's shape, a dtype's text."""
    if hasattr(value, "shape"):
        return [int(s) for s in value.shape]
    if hasattr(value, "dtype") or type(value).__name__ == "dtype":
        return str(getattr(value, "dtype", value))
    return value


def device_identity(backend) -> dict:
    """The device a config was tuned for: its name, arch and compute units."""
    arch = backend.target.arch
    if backend.name == "cpu":
        return {"name": platform.processor() or platform.machine() or "cpu",
                "arch": arch, "compute_units": os.cpu_count() or 1}
    try:
        import torch
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return {"name": str(props.name), "arch": arch,
                    "compute_units": int(props.multi_processor_count)}
    except Exception as e:      # no torch driver: the arch alone names the device
        log.debug("autotune artifacts: no device properties: %s", e)
    return {"name": backend.name, "arch": arch, "compute_units": 0}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def locate(name: str, key: Mapping[str, Any], device: Mapping[str, Any]) -> tuple:
    """``(path, identity)`` of the artifact for these key values and device (the
    directory must be set)."""
    identity = json.loads(_canonical({"name": name, "key": dict(key), "device": dict(device)}))
    digest = hashlib.sha256(_canonical(identity).encode()).hexdigest()
    return config_dir() / f"{name}-{digest}.json", identity


def load(path: Path, identity: Mapping[str, Any]) -> Optional[dict]:
    """The config dict stored at ``path`` for ``identity``, or None (no file, or one
    that is not a valid artifact for it: warned)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("unsupported artifact version")
        if _canonical(data.get("identity")) != _canonical(identity):
            raise ValueError("artifact identity does not match")
        body = data.get("config")
        if not isinstance(body, dict):
            raise ValueError("config must be an object")
        if "pre_hook" in body:
            raise ValueError("offline configs cannot contain Config.pre_hook")
        return body
    except (OSError, ValueError, TypeError) as e:
        log.warning("Ignoring offline config %s: %s", path.name, e)
        return None


def write(path: Path, identity: Mapping[str, Any], body: Mapping[str, Any]) -> None:
    """Store ``body`` (a ``Config.to_dict()``) for ``identity`` at ``path``, atomically."""
    if json.loads(_canonical(dict(body))) != dict(body):
        raise ValueError(f"offline config values must keep their types in JSON: {body!r}")
    payload = {"version": VERSION, "identity": dict(identity), "config": dict(body)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2, sort_keys=True, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    log.info("Wrote offline config %s", path)
