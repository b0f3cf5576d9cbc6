"""Validated compile options.

Pass pipelines are built from these values only, never from raw user
strings: the MLIR bindings are built with assertions, and a malformed pass
option aborts the whole process instead of raising.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class CompileOptions:
    """Options that change generated code; all of them are part of the cache key."""

    opt_level: int = 3
    #: Bounds-check every tensor access (CPU backend), see ``FLYDSL_DEBUG``.
    debug: bool = False
    #: Check shared-memory accesses for races (CPU backend), see ``FLYDSL_RACECHECK``;
    #: ``debug`` checks them too.
    racecheck: bool = False
    #: Allow reassociation and approximate math (``fast`` on every float op).
    fast_math: bool = False
    #: Fuse ``a * b + c`` into FMAs (``contract`` on every float op), as nvcc and clang do.
    fp_contract: bool = True
    #: Record memory accesses for the profiler (CPU backend): ``"memory"`` or ``""``,
    #: see ``FLYDSL_PROFILE`` and :func:`flydsl.profile`.
    profile: str = ""
    #: FlyDSL's launch-time ``value_attrs`` of a kernel call, checked and sorted
    #: (:mod:`flydsl.compiler.function_attrs`): function attributes on ROCm.
    function_attrs: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.opt_level, int) or isinstance(self.opt_level, bool) \
                or not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt_level must be an int in 0..3, got {self.opt_level!r}")
        for name in ("debug", "racecheck", "fast_math", "fp_contract"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CompileOptions.{name} must be a bool, "
                                f"got {getattr(self, name)!r}")
        if not isinstance(self.function_attrs, tuple):
            raise TypeError(f"CompileOptions.function_attrs must be a tuple of (name, value) "
                            f"pairs, got {self.function_attrs!r}")
        if self.profile not in ("", "memory"):
            raise ValueError(f"CompileOptions.profile (FLYDSL_PROFILE) must be 'memory' or "
                             f"empty, got {self.profile!r}")

    @classmethod
    def from_env(cls, **overrides) -> "CompileOptions":
        """Options from ``FLYDSL_OPT_LEVEL``, ``FLYDSL_DEBUG``, ``FLYDSL_RACECHECK``,
        ``FLYDSL_FAST_MATH``, ``FLYDSL_FP_CONTRACT`` (on unless 0/false/no/off) and
        ``FLYDSL_PROFILE``."""
        values = {}
        level = os.environ.get("FLYDSL_OPT_LEVEL")
        if level:
            if not level.isdigit():
                raise ValueError(f"FLYDSL_OPT_LEVEL must be 0..3, got {level!r}")
            values["opt_level"] = int(level)
        values["debug"] = env_flag("FLYDSL_DEBUG")
        values["racecheck"] = env_flag("FLYDSL_RACECHECK")
        values["fast_math"] = env_flag("FLYDSL_FAST_MATH")
        contract = os.environ.get("FLYDSL_FP_CONTRACT", "").strip().lower()
        values["fp_contract"] = contract not in ("0", "false", "no", "off")
        values["profile"] = os.environ.get("FLYDSL_PROFILE", "").strip().lower()
        values.update(overrides)
        return cls(**values)

    def key(self) -> tuple:
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))


def env_flag(name: str) -> bool:
    """A boolean environment switch: 1/true/yes/on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
