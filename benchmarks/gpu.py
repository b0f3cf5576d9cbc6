"""GPU benchmarks: the example kernels against torch on the same GPU, same process.

    python benchmarks/gpu.py [--quick]

Rows: vector add (GB/s against torch's ``a + b`` and against a device-to-device
copy ``b.copy_(a)``), row softmax against ``torch.softmax``, the tiled matmul in
fp32 and fp16 against ``torch.matmul`` (TF32 off), and the host time per launch
against torch's ``a + b`` on 1-element tensors. Needs a GPU, torch built for it
and cuda-python (hip-python on ROCm); without them it says what is missing and
exits with status 1.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

from common import print_table  # noqa: E402

#: Targets reported at the end (issue 5).
VADD_VS_COPY_TARGET = 0.90
LAUNCH_OVERHEAD_TARGET = 1.5


def gpu_backend_or_exit() -> str:
    """The GPU backend to benchmark, or exit with a message saying what is missing."""
    try:
        import torch
    except ImportError:
        sys.exit("benchmarks/gpu.py: torch is not installed; it needs torch with GPU support")
    if not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no GPU found (torch.cuda.is_available() is False); "
                 "run it on a machine with an NVIDIA or AMD GPU")
    backend = os.environ.get("FLYDSL_COMPILE_BACKEND", "").strip()
    if backend not in ("cuda", "rocm"):
        backend = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    from flydsl.compiler.backends import lookup_backend_class
    from flydsl.runtime import devices
    from flydsl.runtime.drivers import get_driver
    driver = lookup_backend_class(backend).driver
    if devices.device_count(driver) == 0:
        try:
            get_driver(driver)
            why = "the driver sees no device"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            why = str(e)
        sys.exit(f"benchmarks/gpu.py: torch sees a GPU but flydsl's {backend} driver cannot "
                 f"use it: {why}")
    os.environ["FLYDSL_COMPILE_BACKEND"] = backend
    return backend


# -- timing ----------------------------------------------------------------------------

def gpu_ms(fn, iters: int = 20, warmup: int = 3) -> float:
    """Median device time of ``fn()`` in ms (events on torch's current stream, where
    flydsl launches go too)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_us(fn, launches: int, rounds: int = 5) -> float:
    """Best wall time per call of ``fn()`` in us over ``launches`` back-to-back calls."""
    import torch
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(launches):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / launches)
    return best * 1e6


def ms(t: float) -> str:
    return f"{t:.3f} ms"


# -- benchmarks ----------------------------------------------------------------------------

def bench_vadd(n: int) -> tuple[list, float]:
    import torch
    from vector_add import vadd
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    vadd(a, b, c, n)
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    t_fly = gpu_ms(lambda: vadd(a, b, c, n))
    t_add = gpu_ms(lambda: torch.add(a, b, out=c))
    t_copy = gpu_ms(lambda: b.copy_(a))
    gbs = lambda nbytes, t: nbytes / (t * 1e-3) / 1e9  # noqa: E731
    fly, add, copy = gbs(12 * n, t_fly), gbs(12 * n, t_add), gbs(8 * n, t_copy)
    label = f"vector add 2^{n.bit_length() - 1} f32"
    rows = [[label + " vs a+b", ms(t_fly), f"{fly:.0f} GB/s", ms(t_add), f"{add:.0f} GB/s",
             f"{fly / add:.2f}"],
            [label + " vs b.copy_(a)", ms(t_fly), f"{fly:.0f} GB/s", ms(t_copy),
             f"{copy:.0f} GB/s", f"{fly / copy:.2f}"]]
    return rows, fly / copy


def bench_softmax(rows: int, cols: int) -> list:
    import torch
    from softmax import softmax
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty_like(x)
    softmax(x, y, 256)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-6)
    t_fly = gpu_ms(lambda: softmax(x, y, 256))
    t_torch = gpu_ms(lambda: torch.softmax(x, dim=1))
    gbs = lambda t: 8 * rows * cols / (t * 1e-3) / 1e9  # noqa: E731
    return [f"row softmax {rows}x{cols} f32", ms(t_fly), f"{gbs(t_fly):.0f} GB/s",
            ms(t_torch), f"{gbs(t_torch):.0f} GB/s", f"{t_torch / t_fly:.2f}"]


def bench_matmul(n: int, dtype_name: str) -> list:
    import torch
    from matmul import matmul
    dtype = getattr(torch, dtype_name)
    torch.backends.cuda.matmul.allow_tf32 = False   # a plain fp32 GEMM to compare with
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    matmul(a, b, c)
    want = a.float() @ b.float()
    tol = 1e-3 * n ** 0.5 if dtype == torch.float32 else 2e-2 * n ** 0.5
    torch.testing.assert_close(c.float(), want, rtol=1e-2, atol=tol)
    iters = 5 if n >= 4096 else 20
    t_fly = gpu_ms(lambda: matmul(a, b, c), iters=iters, warmup=1)
    t_torch = gpu_ms(lambda: torch.matmul(a, b), iters=iters, warmup=1)
    tf = lambda t: 2 * n ** 3 / (t * 1e-3) / 1e12  # noqa: E731
    return [f"tiled matmul {n}^3 {dtype_name}", ms(t_fly), f"{tf(t_fly):.2f} TFLOP/s",
            ms(t_torch), f"{tf(t_torch):.2f} TFLOP/s", f"{t_torch / t_fly:.3f}"]


def bench_launch_overhead(launches: int) -> tuple[list, float]:
    import torch
    from vector_add import vadd, vadd_kernel
    a = torch.ones(1, device="cuda")
    b = torch.ones(1, device="cuda")
    c = torch.empty(1, device="cuda")
    vadd(a, b, c, 1)
    assert c.item() == 2.0
    t_jit = host_us(lambda: vadd(a, b, c, 1), launches)
    direct = vadd_kernel[1, 256]
    t_direct = host_us(lambda: direct(a, b, c, 1), launches)
    t_torch = host_us(lambda: a + b, launches)
    t_torch_out = host_us(lambda: torch.add(a, b, out=c), launches)
    rows = [["flydsl @jit vadd(a, b, c, 1)", f"{t_jit:.2f}", f"{t_jit / t_torch:.2f}x"],
            ["flydsl vadd_kernel[1, 256](a, b, c, 1)", f"{t_direct:.2f}",
             f"{t_direct / t_torch:.2f}x"],
            ["torch a + b", f"{t_torch:.2f}", "1.00x"],
            ["torch.add(a, b, out=c)", f"{t_torch_out:.2f}", f"{t_torch_out / t_torch:.2f}x"]]
    return rows, (t_jit / t_torch, t_direct / t_torch)


def main() -> None:
    quick = "--quick" in sys.argv
    backend = gpu_backend_or_exit()
    import torch

    import flydsl
    from flydsl.errors import FlydslError
    target = flydsl.get_backend().target
    print(f"device: {torch.cuda.get_device_name()} | flydsl backend {backend}, arch "
          f"{target.arch} | torch {torch.__version__}")
    try:
        vadd_rows, vs_copy = bench_vadd(1 << (24 if quick else 28))
        rows = vadd_rows + [bench_softmax(*((1024, 4096) if quick else (8192, 8192)))]
        size = 1024 if quick else 4096
        rows += [bench_matmul(size, "float32"), bench_matmul(size, "float16")]
        overhead_rows, vs_torch = bench_launch_overhead(2000 if quick else 20000)
    except FlydslError as e:
        sys.exit(f"benchmarks/gpu.py: flydsl failed: {e}")
    print_table("flydsl vs torch on the GPU (median device time; ratio = flydsl rate / "
                "reference rate, higher is better for flydsl)",
                ["benchmark", "flydsl", "flydsl rate", "reference", "ref rate", "ratio"], rows)
    print_table("host time per launch, 1-element tensors (us; lower is better)",
                ["launch", "us/launch", "vs torch a+b"], overhead_rows)
    print("\ntargets:")
    print(f"  vector add >= {VADD_VS_COPY_TARGET:.0%} of d2d copy bandwidth: {vs_copy:.0%} "
          f"({'met' if vs_copy >= VADD_VS_COPY_TARGET else 'NOT met'})")
    for how, ratio in zip(("@flydsl.jit vadd", "vadd_kernel[1, 256]"), vs_torch):
        print(f"  launch overhead <= {LAUNCH_OVERHEAD_TARGET}x torch a+b ({how}): {ratio:.2f}x "
              f"({'met' if ratio <= LAUNCH_OVERHEAD_TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
