"""``python -m flydsl.gpu_kit run KIT``: run each case from the kit's bundle in offline
mode (a kernel the bundle lacks is reported, never compiled), check it against torch
on the device, time it next to torch and Triton, and write ``results.json`` and
``results.md``. Imports no MLIR, llvmlite or compiler module.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .build import BUNDLE_NAME


def run(kit: str, out=None, only=None, *, stub: bool = False) -> int:
    """Run the kit at ``kit``; results go to ``out`` (default: the kit). Returns the
    exit status: 0 when every case ran and matched torch."""
    kit = os.path.abspath(kit)
    if not _runs_the_kits_flydsl(kit):
        return _rerun_with_the_kits_flydsl(kit)
    _go_offline(kit)
    from .build import _add_example_paths
    from .cases import EXAMPLE_DIRS, all_cases
    _add_example_paths(os.path.join(kit, "examples"), EXAMPLE_DIRS)
    device = StubDevice() if stub else TorchDevice()
    wanted = set(only.split(",")) if only else None
    started = time.perf_counter()
    with open(os.path.join(kit, "manifest.json")) as f:
        arch = json.load(f)["arch"]
    rows = [run_case(case, device) for case in all_cases(arch)
            if wanted is None or case.name in wanted]
    report = _report(kit, device, rows, time.perf_counter() - started)
    _write(out or kit, report)
    fine = ("ok", "launched", "gpu only") if device.stub else ("ok",)
    return 0 if all(r["status"] in fine for r in rows) else 1


def _runs_the_kits_flydsl(kit: str) -> bool:
    import flydsl
    here = os.path.dirname(os.path.abspath(flydsl.__file__))
    return here == os.path.join(kit, "flydsl")


def _rerun_with_the_kits_flydsl(kit: str) -> int:
    """The kit's keys are those of its own flydsl sources: run under them."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (kit, os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.call([sys.executable, "-m", "flydsl.gpu_kit", "run", kit,
                            *sys.argv[sys.argv.index("run") + 2:]], env=env, cwd=kit)


def _go_offline(kit: str) -> None:
    """Kernels from the kit's bundle only, through an empty local cache."""
    import flydsl
    os.environ["FLYDSL_CACHE_BUNDLE"] = os.path.join(kit, BUNDLE_NAME)
    os.environ["FLYDSL_CACHE_DIR"] = tempfile.mkdtemp(prefix="flydsl-kit-cache-")
    os.environ["FLYDSL_COMPILE_BACKEND"] = "cuda"
    flydsl.set_offline()


# -- devices ---------------------------------------------------------------------------
class TorchDevice:
    """torch tensors on the GPU; device-event timing on torch's current stream."""
    stub = False

    def __init__(self):
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("flydsl.gpu_kit run: torch sees no GPU (use --stub-driver "
                             "for a dry run over a stub driver)")
        self.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False   # plain fp32 GEMMs to compare with
        self.name = torch.cuda.get_device_name()

    def randn(self, shape, dtype="float32"):
        return self.torch.randn(shape, device="cuda", dtype=getattr(self.torch, dtype))

    def empty(self, shape, dtype="float32"):
        return self.torch.empty(shape, device="cuda", dtype=getattr(self.torch, dtype))

    def zeros(self, shape, dtype="float32"):
        return self.torch.zeros(shape, device="cuda", dtype=getattr(self.torch, dtype))

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def time_ms(self, fn) -> float:
        """Median device time of ``fn()`` (about 0.5 s of calls, 3 to 50 of them)."""
        torch = self.torch
        fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        iters = max(3, min(50, int(0.5 / max(time.perf_counter() - t0, 1e-6))))
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def check(self, case, args) -> tuple:
        """(matches, max abs error) of the output against torch's reference."""
        got = args[case.out].float()
        want = case.reference(self.torch, args).float()
        err = (got - want).abs().max().item() if got.numel() else 0.0
        ok = bool(self.torch.allclose(got, want, rtol=case.rtol, atol=case.atol))
        return ok, err


class StubDevice:
    """Host memory behind ``__cuda_array_interface__``, for a stub libcuda (tests): the
    kernels load and launch through the driver, but nothing runs, so nothing is
    checked or timed."""
    stub = True
    name = "stub CUDA driver (no GPU)"

    def randn(self, shape, dtype="float32"):
        return _HostBacked(shape, dtype)

    empty = zeros = randn

    def sync(self) -> None:
        from flydsl.runtime import devices
        devices.synchronize()


class _HostBacked:
    """A "device" array over host memory, shaped like the tensor it stands for."""

    def __init__(self, shape, dtype):
        import numpy as np
        self.host = np.zeros(shape, dtype)
        self.shape = self.host.shape
        self.__cuda_array_interface__ = {
            "version": 3, "shape": self.host.shape, "typestr": self.host.dtype.str,
            "data": (self.host.ctypes.data, False), "strides": None}


# -- one case --------------------------------------------------------------------------
def run_case(case, device) -> dict:
    """Launch ``case`` from the bundle, check and time it, and its torch/Triton twins."""
    from flydsl import NotPrecompiled
    row = {"case": case.name, "unit": case.unit}
    if device.stub and case.gpu_only:
        return dict(row, status="gpu only", reason="its host code needs torch CUDA tensors "
                    "(TMA descriptors): not launched over the stub driver")
    try:
        args = case.make(device)
        fn = case.function()
        launch = lambda: fn(*args)   # noqa: E731
        launch()
        device.sync()
    except NotPrecompiled as e:
        return dict(row, status="skipped", reason=str(e))
    except Exception as e:  # noqa: BLE001 - one case failing does not stop the others
        return dict(row, status="error", reason=f"{type(e).__name__}: {e}")
    if device.stub:
        return dict(row, status="launched")
    ok, err = device.check(case, args)
    row.update(status="ok" if ok else "wrong", max_abs_error=err)
    row["flydsl"] = _timed(device, launch, case)
    row["torch"] = _timed(device, case.torch_op(device.torch, args), case)
    triton_fn = _triton(case, args)
    if triton_fn is not None:
        row["triton"] = _timed(device, triton_fn, case)
    return row


def _timed(device, fn, case) -> dict:
    try:
        ms = device.time_ms(fn)
    except Exception as e:  # noqa: BLE001 - a baseline failing is reported, not raised
        return {"error": f"{type(e).__name__}: {e}"}
    scale = 1e9 if case.unit == "GB/s" else 1e12
    return {"ms": round(ms, 4), "rate": round(case.work / (ms * 1e-3) / scale, 2)}


def _triton(case, args):
    if case.triton is None:
        return None
    try:
        from . import triton_kernels
    except Exception:  # noqa: BLE001 - no Triton (or a broken one): no Triton column
        return None
    return triton_kernels.launcher(case.triton, args)


# -- the report ------------------------------------------------------------------------
def _report(kit: str, device, rows: list, seconds: float) -> dict:
    from flydsl.compiler import kernel_compiler
    with open(os.path.join(kit, "manifest.json")) as f:
        manifest = json.load(f)
    return {"device": device.name, "stub_driver": device.stub, "seconds": round(seconds, 1),
            "python": sys.version.split()[0], "kit": manifest,
            "compiled_here": [k for k in kernel_compiler.compiled_keys],
            "imported": sorted(m for m in ("mlir", "llvmlite") if m in sys.modules),
            "compiler_modules": sorted(m for m in sys.modules if m.startswith(_COMPILER)),
            "versions": _versions(), "rows": rows}


#: Modules that trace, lower or generate code (the run side never needs them; the
#: cache, bundles, specialization and launch code it does need import none of them).
_COMPILER = ("flydsl.compiler.frontend.builder", "flydsl.compiler.llvm_codegen",
             "flydsl.compiler.llvm_ir", "flydsl.compiler.hsaco", "flydsl.passes.",
             "flydsl._mlir", "mlir", "llvmlite")


def _versions() -> dict:
    out = {}
    for name in ("torch", "numpy", "triton"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out


def _write(folder: str, report: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(folder, "results.md"), "w") as f:
        f.write(markdown(report))
    print(markdown(report))


def markdown(report: dict) -> str:
    """The results as a Markdown table: one row per case and implementation."""
    lines = [f"flydsl GPU kit on {report['device']} ({report['seconds']} s; "
             f"python {report['python']}, {', '.join(f'{k} {v}' for k, v in report['versions'].items())})",
             "", "| case | impl | correct | ms | rate |", "|---|---|---|---|---|"]
    for row in report["rows"]:
        if "flydsl" not in row:
            note = row.get("reason", "stub driver: loaded and launched, not checked or timed")
            lines.append(f"| {row['case']} | flydsl | {row['status']} | | {note} |")
            continue
        correct = f"{row['status']} (max err {row['max_abs_error']:.2g})"
        for impl in ("flydsl", "torch", "triton"):
            t = row.get(impl)
            if t is None:
                continue
            if "error" in t:
                lines.append(f"| {row['case']} | {impl} | | | {t['error']} |")
                continue
            lines.append(f"| {row['case']} | {impl} | {correct if impl == 'flydsl' else ''} | "
                         f"{t['ms']:.4f} | {t['rate']:.1f} {row['unit']} |")
    return "\n".join(lines) + "\n"
