"""Testing aids.

* :func:`do_bench` (:mod:`.bench`): time a call in milliseconds on the active
  backend's device: device events and an L2 flush on GPUs, ``perf_counter`` and a
  host cache flush on the CPU.
* :mod:`.stub_drivers`: stand-in ``libcuda``/``libamdhip64`` libraries that run
  flydsl's GPU launch code, and the real bindings, on machines without a GPU.

``import flydsl.testing`` stays cheap: ``do_bench`` loads its module on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bench import do_bench


def __getattr__(name: str) -> Any:
    if name == "do_bench":
        from .bench import do_bench
        return do_bench
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["do_bench"]
