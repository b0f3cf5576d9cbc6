"""torch.compile(backend="flydsl") on small real models, against eager and inductor (CPU).

    python benchmarks/torch_models.py [--quick] [--runs N] [--run-s S] [--threads N]
                                      [--clock wall|cpu] [--rows NAME,...] [--breakdown]

Rows (``--rows`` takes names, comma separated):

* ``block`` / ``block_train``: a pre-norm transformer block (LayerNorm, multi-head
  attention with an explicit softmax, a GELU-tanh MLP, residuals; d=256, 8 heads,
  8 x 128 tokens), inference and one training step (forward, loss, backward);
* ``mlp``: Linear, GELU, Linear (d=256 -> 1024 -> 256);
* ``ffn``: RMSNorm + SwiGLU, a Llama-style FFN (d=256, hidden 688);
* ``attn_scores``: softmax(q k^T * scale + mask) v over 8 x 8 heads x 128 x 32;
* ``mlp_ln``: LayerNorm, Linear, GELU, Linear, GELU (d=256 -> 512 -> 256);
* ``loss``: cross entropy with label smoothing written out (log_softmax, gather,
  mean over the classes) on 1024 x 1000 logits;
* ``adamw``: one AdamW step (functional) over 10 parameter tensors (0.9M floats).

Everything runs in this one process with ``torch.set_num_threads(--threads)``
and as many flydsl CPU threads (``FLYDSL_CPU_THREADS``, unless set; default 1:
the steadiest comparison on a shared machine). Each model is checked
against eager, then the three variants are timed with their runs interleaved
(min and median of 7 runs, ``--runs``, or 3 with ``--quick``: on a noisy shared
machine more runs steady the ratios; a run is as many back-to-back
calls as last about 50 ms, ``--run-s``). ratio = flydsl time / other time: lower
is better. ``--clock cpu`` times the process's CPU time (``time.process_time``)
instead of the wall clock: on a machine shared with other work it leaves out the
time spent waiting for a core; with one thread it is the time the work took, with
more it is the CPU time of all threads (busy-waiting included), not a duration.

``--breakdown`` adds, per row, where eager's time goes: its ATen calls (recorded
once with a ``TorchDispatchMode``) replayed with the same arguments, the matmuls
(``mm``, ``addmm`` with its copy of the bias, ``bmm``, ``baddbmm``) alone and the
other ops alone, timed interleaved with the three variants. ``floor`` is the
matmuls' share of eager: they are torch's in every variant, so no backend that
keeps them goes below that fraction of eager's time by fusing what is around them.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import calls_per_run, interleaved_min_median, print_table  # noqa: E402

os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

D, HEADS, BATCH, SEQ = 256, 8, 8, 128


class Attention(nn.Module):
    """Multi-head self-attention with an explicit (causal-masked) softmax."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d: int = D, heads: int = HEADS):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class MLP(nn.Module):
    def __init__(self, d: int = D):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLUFFN(nn.Module):
    """Llama-style FFN: x + down(silu(gate(n)) * up(n)), n = rmsnorm(x)."""

    def __init__(self, d: int = D, hidden: int = 688):
        super().__init__()
        self.norm = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.norm(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class LayerNormMLP(nn.Module):
    """A new user's 2-layer MLP: LayerNorm, Linear, GELU, Linear, GELU (d=256 -> 512)."""

    def __init__(self, d: int = D, hidden: int = 2 * D):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc2(F.gelu(self.fc1(self.norm(x)))))


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, eps: float = 0.1) -> torch.Tensor:
    """Cross entropy with label smoothing, written out: log_softmax, the target's
    log-probability and the mean log-probability over the classes."""
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, target[:, None]).squeeze(-1)
    return ((1.0 - eps) * nll - eps * logp.mean(dim=-1)).mean()


def adamw_step(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list,
               lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 1e-2, step: int = 10) -> tuple:
    """One AdamW step over parameter lists, functional (new parameters and moments;
    torch.optim's single-tensor loop written out: about ten pointwise ops per
    parameter). The in-place form is not timed: dynamo's own graph of it (backend
    "eager") ran 3-4x slower than eager here, before any backend sees it."""
    bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
    new: tuple = ([], [], [])
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m = m + (g - m) * (1 - beta1)
        v = v * beta2 + g * g * (1 - beta2)
        p = p * (1 - lr * weight_decay) - (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps)
        for out, t in zip(new, (p, m, v)):
            out.append(t)
    return new


def attention_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v."""
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return s.softmax(dim=-1) @ v


def _tokens() -> torch.Tensor:
    return torch.randn(BATCH, SEQ, D, generator=torch.Generator().manual_seed(0))


def _model(cls) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _inference(model: nn.Module) -> tuple[Callable, tuple]:
    def run(m, x):
        with torch.no_grad():
            return m(x)
    return run, (model, _tokens())


def _training(model: nn.Module) -> tuple[Callable, tuple]:
    """One step: forward, a mean-square loss, backward; returns (loss, grads)."""
    model.train()

    def run(m, x):
        for p in m.parameters():
            p.grad = None
        loss = m(x).square().mean()
        loss.backward()
        return (loss.detach(), *[p.grad for p in m.parameters()])
    return run, (model, _tokens())


def _scores() -> tuple[Callable, tuple]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, SEQ, D // HEADS, generator=g) for _ in range(3))
    mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)
    return (lambda f, *a: f(*a)), (attention_scores, q, k, v, mask)


def _loss() -> tuple[Callable, tuple]:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(BATCH * SEQ, 1000, generator=g)
    target = torch.randint(0, 1000, (BATCH * SEQ,), generator=g)
    return (lambda f, *a: f(*a)), (smoothed_loss, logits, target)


#: Parameter shapes of the optimizer row: a small MLP's weights and biases.
_PARAM_SHAPES = [(1024, 256), (1024,), (256, 1024), (256,), (512, 256), (512,), (256, 512),
                 (256,), (256,), (256,)]


def _adam() -> tuple[Callable, tuple]:
    g = torch.Generator().manual_seed(0)
    state = [[torch.randn(s, generator=g) for s in _PARAM_SHAPES] for _ in range(4)]
    state[3] = [v.abs() for v in state[3]]            # second moments are >= 0
    return (lambda f, *a: tuple(t for ts in f(*a) for t in ts)), (adamw_step, *state)


#: row name -> (description, builder of (runner, (model or fn, *inputs)))
ROWS: dict = {
    "block": ("transformer block, inference", lambda: _inference(_model(Block))),
    "block_train": ("transformer block, train step", lambda: _training(_model(Block))),
    "mlp": ("MLP Linear-GELU-Linear", lambda: _inference(_model(MLP))),
    "ffn": ("RMSNorm + SwiGLU FFN", lambda: _inference(_model(SwiGLUFFN))),
    "attn_scores": ("softmax attention scores", _scores),
    "mlp_ln": ("MLP LayerNorm-Linear-GELU-Linear-GELU", lambda: _inference(_model(LayerNormMLP))),
    "loss": ("log_softmax loss, label smoothing", _loss),
    "adamw": ("AdamW step, 10 parameters", _adam),
}


def _check(got, want, what: str) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-4, atol=2e-5, msg=lambda m: f"{what}: {m}")


#: The matmul ops (torch's BLAS calls in every variant: fusion works around them).
_MATMULS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation")


def record_aten_calls(fn: Callable[[], object]) -> list:
    """The ATen calls (op, args, kwargs) of one call of ``fn``, in order."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            self.calls.append((func, args, kwargs))
            return func(*args, **kwargs)
    with Recorder() as rec:
        fn()
    return rec.calls


def breakdown_rows(name: str, fns: dict, runs: int, run_s: float, clock) -> list:
    """Where eager's time goes on row ``name``: its ATen calls replayed (same
    arguments) as the matmuls alone and as the other ops alone, timed interleaved
    with the three variants. The matmuls are torch's in every variant, so
    matmul / eager is the lowest fly/eager that fusing the rest can reach."""
    calls = record_aten_calls(fns["eager"])
    is_mm = [getattr(op.overloadpacket, "__name__", "") in _MATMULS for op, _, _ in calls]

    def replay(which: bool) -> Callable[[], None]:
        picked = [c for c, m in zip(calls, is_mm) if m == which]

        def run() -> None:
            for op, args, kwargs in picked:
                op(*args, **kwargs)
        return run
    timed = dict(fns, **{"eager matmuls": replay(True), "eager other ops": replay(False)})
    per_run = {k: calls_per_run(fn, run_s, clock) for k, fn in timed.items()}
    stats = interleaved_min_median(timed, runs=runs, calls=per_run, clock=clock)
    (e, e_med) = stats["eager"]
    (m, m_med) = stats["eager matmuls"]
    ms = lambda s: f"{s * 1e3:.3f}"
    return [[name, k, ms(v), ms(v_med), f"{v / e:.2f}", f"{v_med / e_med:.2f}"]
            for k, (v, v_med) in stats.items()] + \
        [[name, "floor (matmuls / eager)", "", "", f"{m / e:.2f}", f"{m_med / e_med:.2f}"]]


#: Untimed calls of a compiled variant before it is timed (at most WARM_S seconds): on
#: the CPU, flydsl times its first calls of each fused group and graph against their
#: eager ops (flydsl.torch.trials: up to about 55 calls, half of them eager), and
#: timing those calls counted eager's time against flydsl (an optimizer step's first
#: runs took 0.5-10 ms a call where it settles at 0.4).
WARM_CALLS, WARM_S = 80, 3.0


def warm_up(fn: Callable[[], object]) -> None:
    """Call ``fn`` :data:`WARM_CALLS` times, or for :data:`WARM_S` seconds if less."""
    end = time.perf_counter() + WARM_S
    for _ in range(WARM_CALLS):
        fn()
        if time.perf_counter() > end:
            break


def bench_row(name: str, runs: int, run_s: float, clock=time.perf_counter,
              breakdown: Optional[list] = None) -> list:
    title, build = ROWS[name]
    run, (target, *inputs) = build()
    variants = {"eager": target}
    torch._dynamo.reset()
    for backend in ("flydsl", "inductor"):
        variants[backend] = torch.compile(target, backend=backend)
    want = run(variants["eager"], *inputs)
    for backend in ("flydsl", "inductor"):
        _check(run(variants[backend], *inputs), want, f"{name} {backend}")
    fns = {k: (lambda f=f: run(f, *inputs)) for k, f in variants.items()}
    for backend in ("flydsl", "inductor"):
        warm_up(fns[backend])
    calls = {k: calls_per_run(fn, run_s, clock) for k, fn in fns.items()}
    stats = interleaved_min_median(fns, runs=runs, calls=calls, clock=clock)
    if breakdown is not None:
        breakdown += breakdown_rows(name, fns, runs, run_s, clock)
    (e, e_med), (f, f_med), (i, i_med) = stats["eager"], stats["flydsl"], stats["inductor"]
    ms = lambda s: f"{s * 1e3:.3f}"
    return [title, ms(e), ms(f), ms(i), ms(e_med), ms(f_med), ms(i_med),
            f"{f / e:.2f}", f"{f_med / e_med:.2f}", f"{f / i:.2f}", f"{f_med / i_med:.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 runs of ~10 ms (a smoke run)")
    ap.add_argument("--runs", type=int, default=7, help="interleaved runs per variant (default 7)")
    ap.add_argument("--run-s", type=float, default=0.05,
                    help="seconds per timed run (default 0.05)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter (default); cpu: time.process_time")
    ap.add_argument("--rows", default=",".join(ROWS), help="rows, comma separated")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time eager's matmuls and its other ATen calls apart "
                         "(the matmul floor of fly/eager)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # flydsl's CPU launches get as many host threads as torch (read at first launch)
    os.environ.setdefault("FLYDSL_CPU_THREADS", str(args.threads))
    names = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in names if r not in ROWS]
    if unknown:
        sys.exit(f"--rows: unknown {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    if args.runs < 1:
        sys.exit("--runs must be at least 1")
    if args.run_s <= 0:
        sys.exit("--run-s must be positive")
    runs, run_s = (3, 0.01) if args.quick else (args.runs, args.run_s)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    shares: Optional[list] = [] if args.breakdown else None
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(bench_row(name, runs, run_s, clock, shares))
    print_table(
        f"torch.compile on CPU, ms per call ({torch.get_num_threads()} torch thread(s), "
        f"{args.clock} clock, min and median of {runs} interleaved runs"
        f"{', quick' if args.quick else ''})",
        ["model", "eager", "flydsl", "inductor", "eager med", "flydsl med", "inductor med",
         "fly/eager", "fly/eager med", "fly/ind", "fly/ind med"],
        rows, left=1,
        footer=["fly/eager, fly/ind: flydsl time / eager or inductor time (lower is better; "
                "targets: <= 1.0 vs eager on every row, <= 1.1 vs inductor on the block; "
                "on mlp_ln, ffn, loss and adamw, where fusion matters: <= 0.85 vs eager "
                "and <= 1.1 vs inductor)."])
    if shares:
        print_table(
            f"where eager's time goes, ms per call ({args.clock} clock, min and median of "
            f"{runs} interleaved runs)",
            ["row", "timed", "min", "median", "/ eager", "/ eager med"], shares, left=2,
            footer=["eager matmuls / other ops: eager's own ATen calls replayed with the "
                    "same arguments, the matmuls (mm, addmm with its bias copy, bmm, "
                    "baddbmm) alone and the rest alone; floor: the matmuls' share of "
                    "eager, the lowest fly/eager that fusing the other ops can reach."])


if __name__ == "__main__":
    main()
