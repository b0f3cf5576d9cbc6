"""The kernels the kit carries: the examples the GPU benchmarks and GPU tests run
(vector add, row softmax, layernorm, the tiled matmul in fp32 and fp16, the
layout-model GEMM, the 3-stage cp.async GEMM, the warp-specialized TMA + wgmma GEMM
in bf16 and in scaled fp8 (sm_90a kits only), FlashAttention-2 forward (d 64 and 128, causal and not),
the FA3-style TMA + wgmma FlashAttention forward (sm_90a kits only) and 128-bit
vector add, the atomic block sum and warp-shuffle sums),
each with its inputs, its torch reference and its work.

``build`` and ``run`` read the same list, so the kernels compiled are those launched.
Inputs come from an *arrays* object (:class:`HostArrays` at build time, torch on the
GPU at run time) so shapes, dtypes and specializations match on both sides.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


class HostArrays:
    """Host stand-ins (build side): uninitialized numpy arrays of the real shapes
    (torch CPU tensors for bfloat16, which numpy lacks)."""

    def randn(self, shape, dtype="float32"):
        if dtype == "bfloat16":
            import torch
            return torch.empty(shape, dtype=torch.bfloat16)
        return np.empty(shape, dtype)

    empty = randn
    zeros = randn


@dataclass(frozen=True)
class Case:
    """One kernel the kit runs: ``module.fn(*make(arrays))`` writes ``args[out]``."""

    name: str
    module: str                       # under examples/: "vector_add", "layout.layout_gemm"
    fn: str
    make: Callable                    # arrays -> argument tuple
    out: int                          # index of the output argument
    reference: Callable               # (torch, args) -> expected output
    torch_op: Callable                # (torch, args) -> a callable doing the same in torch
    work: float                       # bytes moved (rate in GB/s) or flops (TFLOP/s)
    unit: str                         # "GB/s" or "TFLOP/s"
    rtol: float = 1e-5
    atol: float = 1e-5
    triton: Optional[str] = None      # name in .triton_kernels, if any
    archs: tuple = ()                 # the kit archs that carry it (empty: every one)
    gpu_only: bool = False            # its host code needs torch CUDA tensors (no stub run)

    def function(self):
        """The flydsl function to launch (examples/ must be on sys.path)."""
        return getattr(importlib.import_module(self.module), self.fn)


def _vadd(n: int) -> Case:
    return Case(f"vector_add f32 n=2^{n.bit_length() - 1}", "vector_add", "vadd",
                lambda t: (t.randn(n), t.randn(n), t.empty(n), n), 2,
                lambda torch, a: a[0] + a[1],
                lambda torch, a: lambda: torch.add(a[0], a[1], out=a[2]),
                12.0 * n, "GB/s", 0, 0, triton="vadd")


def _softmax(rows: int, cols: int) -> Case:
    return Case(f"row softmax f32 {rows}x{cols}", "softmax", "softmax",
                lambda t: (t.randn((rows, cols)), t.empty((rows, cols)), 256), 1,
                lambda torch, a: torch.softmax(a[0], dim=1),
                lambda torch, a: lambda: torch.softmax(a[0], dim=1),
                8.0 * rows * cols, "GB/s", 1e-4, 1e-6, triton="softmax")


def _layernorm(rows: int, cols: int) -> Case:
    return Case(f"layernorm f32 {rows}x{cols}", "layernorm", "layernorm",
                lambda t: (t.randn((rows, cols)), t.randn(cols), t.randn(cols),
                           t.empty((rows, cols))), 3,
                lambda torch, a: torch.nn.functional.layer_norm(a[0], (cols,), a[1], a[2]),
                lambda torch, a: lambda: torch.nn.functional.layer_norm(a[0], (cols,), a[1], a[2]),
                8.0 * rows * cols, "GB/s", 1e-4, 1e-4)


def _matmul(n: int, dtype: str) -> Case:
    return Case(f"tiled matmul {dtype} {n}^3", "matmul", "matmul",
                lambda t: (t.randn((n, n), dtype), t.randn((n, n), dtype),
                           t.empty((n, n), dtype)), 2,
                lambda torch, a: (a[0].float() @ a[1].float()).to(a[2].dtype),
                lambda torch, a: lambda: torch.matmul(a[0], a[1]),
                2.0 * n ** 3, "TFLOP/s", 1e-2, (1e-3 if dtype == "float32" else 2e-2) * n ** 0.5)


def _layout_gemm(n: int, module: str = "layout_gemm",
                 label: str = "layout GEMM f16->f32 {n}^3 (mma.sync)") -> Case:
    """C = A @ B.T, f16 in, f32 out: the layout GEMM, or another example with its
    ``gemm(A, B, C)`` signature (``gemm_cp_async``: cp.async + ldmatrix, sm_80+)."""
    return Case(label.format(n=n), module, "gemm",
                lambda t: (t.randn((n, n), "float16"), t.randn((n, n), "float16"),
                           t.empty((n, n), "float32")), 2,
                lambda torch, a: a[0].float() @ a[1].float().T,
                lambda torch, a: lambda: torch.matmul(a[0], a[1].T),
                2.0 * n ** 3, "TFLOP/s", 1e-2, 2e-2 * n ** 0.5)


def _vadd_2d(m: int, n: int) -> Case:
    return Case(f"128-bit vector add f32 {m}x{n}", "vector_add_2d", "vector_add",
                lambda t: (t.randn((m, n)), t.randn((m, n)), t.empty((m, n))), 2,
                lambda torch, a: a[0] + a[1],
                lambda torch, a: lambda: torch.add(a[0], a[1], out=a[2]),
                12.0 * m * n, "GB/s", 0, 0)


def _block_sum(n: int) -> Case:
    """Shared memory, barriers and a float atomic (tests/test_gpu_runtime.py's)."""
    return Case(f"block sum (atomics) f32 n={n}", "block_sum", "block_sum",
                lambda t: (t.randn(n), t.zeros(1)), 1,
                lambda torch, a: a[0].double().sum().reshape(1),
                lambda torch, a: lambda: a[0].sum(),
                4.0 * n, "GB/s", 1e-5, 1e-4 * n ** 0.5)


def _warp_sums(rows: int) -> Case:
    """Warp shuffles: one sum per 32 lanes (tests/test_gpu_runtime.py's)."""
    return Case(f"warp shuffle sums f32 {rows}x32", "warp_reduce", "warp_sums",
                lambda t: (t.randn(rows * 32), t.empty(rows)), 1,
                lambda torch, a: a[0].view(rows, 32).sum(dim=1),
                lambda torch, a: lambda: a[0].view(rows, 32).sum(dim=1),
                4.0 * rows * 33, "GB/s", 1e-5, 1e-5)


def _sm90_gemm(n: int) -> Case:
    """examples/gemm_sm90.py: TMA + mbarrier 4-stage pipeline + wgmma, warp-specialized
    (sm_90a only), bf16 in, f32 out, against torch.matmul in bf16."""
    return Case(f"TMA+wgmma GEMM bf16->f32 {n}^3 (sm_90a, warp-specialized, 4 stages)",
                "gemm_sm90", "gemm",
                lambda t: (t.randn((n, n), "bfloat16"), t.randn((n, n), "bfloat16"),
                           t.empty((n, n), "float32")), 2,
                lambda torch, a: a[0].float() @ a[1].float().T,
                lambda torch, a: lambda: torch.matmul(a[0], a[1].T),
                2.0 * n ** 3, "TFLOP/s", 1e-2, 2e-2 * n ** 0.5, archs=("sm_90a",),
                gpu_only=True)


def _fp8_operands(t, n: int) -> tuple:
    """e4m3 A and B (n x n), per-row / per-column f32 scales ((n, 1) and (1, n), as
    torch._scaled_mm takes them) and a bf16 C, as torch tensors on both sides (made
    from bf16 ones: torch has no randn in fp8, numpy no fp8)."""
    import torch
    a, b = (t.randn((n, n), "bfloat16").to(torch.float8_e4m3fn) for _ in range(2))
    sa, sb = (t.randn(shape, "bfloat16").float().abs() + 0.5 for shape in ((n, 1), (1, n)))
    return a, b, t.empty((n, n), "bfloat16"), sa, sb


def _sm90_gemm_fp8(n: int) -> Case:
    """examples/gemm_sm90.py in fp8: e4m3 A and B, C = (A @ B.T) * scale_a[row] *
    scale_b[col] in bf16, against torch._scaled_mm with the same scales and use_fast_accum (the
    kernel's accumulation: in the wgmma accumulators throughout; sm_90a only)."""
    return Case(f"TMA+wgmma GEMM fp8 e4m3 row/col-scaled->bf16 {n}^3 (sm_90a, "
                "warp-specialized, 4 stages)",
                "gemm_sm90", "gemm", lambda t: _fp8_operands(t, n), 2,
                lambda torch, a: (a[0].float() @ a[1].float().T) * a[3] * a[4],
                lambda torch, a: lambda: torch._scaled_mm(a[0], a[1].T, a[3], a[4],
                                                          out_dtype=torch.bfloat16,
                                                          use_fast_accum=True),
                2.0 * n ** 3, "TFLOP/s", 1e-2, 2e-2 * n ** 0.5, archs=("sm_90a",),
                gpu_only=True)


def _flash_attention(b: int, h: int, s: int, d: int, causal: bool) -> Case:
    """examples/flash_attention.py (FlashAttention-2 forward: cp.async, ldmatrix,
    mma.sync; sm_80+), bf16, against torch's SDPA; O is checked (LSE is written too)."""
    sdpa = (lambda torch, a:
            torch.nn.functional.scaled_dot_product_attention(a[0], a[1], a[2], is_causal=causal))
    return Case(f"flash attention fwd bf16 b{b} h{h} s{s} d{d}{' causal' if causal else ''}",
                "flash_attention", "flash_attention",
                lambda t: (t.randn((b, h, s, d), "bfloat16"), t.randn((b, h, s, d), "bfloat16"),
                           t.randn((b, h, s, d), "bfloat16"), t.empty((b, h, s, d), "bfloat16"),
                           t.empty((b, h, s)), None, causal), 3,
                sdpa, lambda torch, a: lambda: sdpa(torch, a),
                4.0 * b * h * s * s * d / (2 if causal else 1), "TFLOP/s", 2e-2, 2e-2,
                gpu_only=True)


def _flash_attention_sm90(b: int, h: int, s: int, d: int, causal: bool) -> Case:
    """examples/flash_attention_sm90.py (FA3-style forward: TMA, mbarriers, wgmma with P
    in registers, warp-specialized; sm_90a only), bf16, against torch's SDPA; O is
    checked (LSE is written too)."""
    sdpa = (lambda torch, a:
            torch.nn.functional.scaled_dot_product_attention(a[0], a[1], a[2], is_causal=causal))
    return Case(f"flash attention FA3 fwd bf16 b{b} h{h} s{s} d{d}{' causal' if causal else ''} "
                "(sm_90a, TMA+wgmma, warp-specialized)",
                "flash_attention_sm90", "flash_attention",
                lambda t: (t.randn((b, h, s, d), "bfloat16"), t.randn((b, h, s, d), "bfloat16"),
                           t.randn((b, h, s, d), "bfloat16"), t.empty((b, h, s, d), "bfloat16"),
                           t.empty((b, h, s)), None, causal), 3,
                sdpa, lambda torch, a: lambda: sdpa(torch, a),
                4.0 * b * h * s * s * d / (2 if causal else 1), "TFLOP/s", 2e-2, 2e-2,
                archs=("sm_90a",), gpu_only=True)


def all_cases(arch: Optional[str] = None) -> list:
    """Every case the kit for ``arch`` carries (None: every case), in the order the run
    reports them."""
    cases = [_vadd(1 << 24), _vadd(1 << 20), _softmax(4096, 4096), _layernorm(4096, 4096),
             _matmul(2048, "float32"), _matmul(2048, "float16"), _layout_gemm(4096),
             _layout_gemm(4096, "gemm_cp_async",
                          "cp.async GEMM f16->f32 {n}^3 (3 stages, ldmatrix, mma.sync)"),
             _sm90_gemm(4096), _sm90_gemm_fp8(4096),
             *(_flash_attention(4, h, 4096, d, causal)
               for (h, d) in ((32, 64), (16, 128)) for causal in (False, True)),
             _flash_attention_sm90(4, 16, 4096, 128, False),
             _flash_attention_sm90(4, 32, 4096, 64, True),
             _vadd_2d(8192, 8192), _block_sum(100_000), _block_sum(1 << 24),
             _warp_sums(1 << 18)]
    return [c for c in cases if arch is None or not c.archs or arch in c.archs]


#: Folders under the kit's examples/ that hold the cases' modules.
EXAMPLE_DIRS = ("", "layout")
