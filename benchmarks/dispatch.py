"""Launch overhead and cache effectiveness on the CPU backend.

    python benchmarks/dispatch.py

1. Cold compile vs warm-process first call (disk-cache hit) of the vector-add
   @flydsl.jit, each in a fresh process.
2. Per-launch overhead of an in-memory hit (empty kernel, and a 3-tensor
   kernel on 1-element arrays) vs calling the compiled symbol directly
   through ctypes with a prebuilt argument table.
3. The warm launch's overlap check (runtime.specialization): the 3-tensor kernel
   as is vs the same kernel with every tensor ``may_alias`` (no check: the warm
   path of before the check), interleaved, min and median; also with interleaved
   views ``k(x[1::2], b, x[0::2])``, whose check compares elements, not hulls.

    python benchmarks/dispatch.py --overlap-only     # section 3 alone

4. Warm launch against torch: a 1-element ``vadd_kernel[1, 256](a, b, c, n)`` on torch
   CPU tensors, and the README's ``vadd(a, b, c, n)`` @flydsl.jit that launches it, vs
   ``a + b`` in the same process, interleaved, min and median (about 0.5 s per row),
   with torch's default threads and with one; where the time of the @flydsl.jit call
   goes (its body, its launch, the wrapper, the host views it no longer builds); then
   where the time of the direct launch goes, piece by piece: the Python layers of ``k[grid, block](...)``, the
   native warm launch (runtime/native_launch.c: guards, packing, the entry call), the
   kernel's entry alone, and what the generated Python warm launch (its twin, the warm
   path before the native one) spends reading torch tensors.

    python benchmarks/dispatch.py --warm-only        # section 4 alone
    PYTHONPATH=<old checkout> python benchmarks/dispatch.py --warm-only   # old code
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import statistics
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
os.environ.setdefault("FLYDSL_COMPILE_BACKEND", "cpu")

from common import (calls_per_run, interleaved_min_median, per_call_us,  # noqa: E402
                    print_table)

FIRST_CALL = textwrap.dedent('''
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    sys.path.insert(0, {examples!r})
    import vector_add
    t1 = time.perf_counter()
    a = np.ones(1024, np.float32); c = np.empty_like(a)
    vector_add.vadd(a, a, c, a.size)
    t2 = time.perf_counter()
    print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3}}))
''').format(examples=os.path.join(HERE, "..", "examples"))


def first_call(cache_dir: str) -> dict:
    env = dict(os.environ, FLYDSL_CACHE_DIR=cache_dir, FLYDSL_COMPILE_BACKEND="cpu")
    out = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import flydsl
    import flydsl.expr as fx

    @flydsl.kernel
    def add3(a: fx.Tensor, b: fx.Tensor, c: fx.Tensor):
        c[0] = a[0] + b[0]

    a = np.ones(1, np.float32)
    b = np.ones(1, np.float32)
    c = np.zeros(1, np.float32)
    if "--warm-only" in sys.argv[1:]:
        warm_launch_vs_torch()
        return
    if "--overlap-only" in sys.argv[1:]:
        add3[1, 1](a, b, c)
        overlap_check_rows(add3, a, b, c)
        return

    with tempfile.TemporaryDirectory() as d:
        cold = [first_call(os.path.join(d, f"c{i}")) for i in range(3)]
        warm = [first_call(os.path.join(d, "c0")) for _ in range(3)]
    cold_ms = min(r["first_call_ms"] for r in cold)
    warm_ms = min(r["first_call_ms"] for r in warm)
    print_table("first call of the vector-add @flydsl.jit in a fresh process",
                ["case", "first call", "ratio to cold"],
                [["cold compile (empty cache)", f"{cold_ms:.1f} ms", "1.00"],
                 ["warm process (disk hit)", f"{warm_ms:.1f} ms", f"{warm_ms / cold_ms:.3f}"]])

    @flydsl.kernel
    def empty():
        pass

    from vector_add import vadd
    launch_empty = empty[1, 1]
    launch_empty()
    add3[1, 1](a, b, c)
    vadd(a, b, c, 1)

    # Baselines: the compiled packed symbols called straight through ctypes.
    compiled = next(iter(empty._compiled.values()))
    lib = compiled.launcher.lib
    fn = lib._flydsl_packed_empty
    fn.argtypes = [ctypes.c_void_p]
    slots = (ctypes.c_int64 * 9)(1, 1, 1, 1, 1, 1, 0, 1, 0)
    table = (ctypes.c_void_p * 9)(*[ctypes.addressof(slots) + 8 * i for i in range(9)])
    tptr = ctypes.addressof(table)
    raw_empty = per_call_us(lambda: fn(tptr))

    c3 = next(iter(add3._compiled.values()))
    fn3 = c3.launcher.lib._flydsl_packed_add3
    fn3.argtypes = [ctypes.c_void_p]
    n3 = 3 * 5 + 9
    vals = (ctypes.c_int64 * n3)()
    for k, arr in enumerate((a, b, c)):
        vals[5 * k:5 * k + 5] = (arr.ctypes.data, arr.ctypes.data, 0, 1, 1)
    vals[15:24] = (1, 1, 1, 1, 1, 1, 0, 1, 0)
    table3 = (ctypes.c_void_p * n3)(*[ctypes.addressof(vals) + 8 * i for i in range(n3)])
    t3 = ctypes.addressof(table3)
    raw_add3 = per_call_us(lambda: fn3(t3))

    # ... and the raw (unpacked) kernel symbols with ctypes converting each argument,
    # as a user calling the compiled function by hand would.
    # Kernel symbols are internal to their library (only packed entries are exported),
    # so "converted args" means building the argument table from Python on every call,
    # as a user calling the packed entry by hand would.
    def call_converted(entry, values):
        vals = (ctypes.c_int64 * len(values))(*values)
        table = (ctypes.c_void_p * len(values))(*[ctypes.addressof(vals) + 8 * i
                                                  for i in range(len(values))])
        return entry(ctypes.addressof(table))

    raw_empty_conv = per_call_us(lambda: call_converted(fn, (1, 1, 1, 1, 1, 1, 0, 1, 0)))

    def call_raw3():
        pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
        call_converted(fn3, (pa, pa, 0, a.shape[0], a.strides[0] // 4,
                             pb, pb, 0, b.shape[0], b.strides[0] // 4,
                             pc, pc, 0, c.shape[0], c.strides[0] // 4, 1, 1, 1, 1, 1, 1, 0, 1, 0))
    raw_add3_conv = per_call_us(call_raw3)

    fly_empty = per_call_us(lambda: launch_empty())
    fly_empty_idx = per_call_us(lambda: empty[1, 1]())
    fly_add3 = per_call_us(lambda: add3[1, 1](a, b, c))
    fly_vadd = per_call_us(lambda: vadd(a, b, c, 1))
    def row(name, t, packed, converted):
        return [name, f"{t:.2f}", f"{t / packed:.2f}", f"{t / converted:.2f}"]
    rows = [
        row("empty: ctypes, packed symbol, prebuilt table", raw_empty, raw_empty, raw_empty_conv),
        row("empty: ctypes, packed symbol, table built per call", raw_empty_conv, raw_empty,
            raw_empty_conv),
        row("empty: launch = k[1, 1]; launch()", fly_empty, raw_empty, raw_empty_conv),
        row("empty: k[1, 1]()", fly_empty_idx, raw_empty, raw_empty_conv),
        row("3 tensors: ctypes, packed symbol, prebuilt table", raw_add3, raw_add3, raw_add3_conv),
        row("3 tensors: ctypes, packed symbol, table per call", raw_add3_conv, raw_add3,
            raw_add3_conv),
        row("3 tensors: k[1, 1](a, b, c)", fly_add3, raw_add3, raw_add3_conv),
        row("vadd @flydsl.jit (4 args, grid math)", fly_vadd, raw_add3, raw_add3_conv),
    ]
    print_table("per-launch host overhead, in-memory hit (CPU backend, 1 block x 1 thread)",
                ["launch", "us/call", "vs packed ctypes", "vs per-call table"], rows)
    overlap_check_rows(add3, a, b, c)
    warm_launch_vs_torch()


def _timed(fns: dict, run_s: float = 0.05, runs: int = 10,
           clock=time.perf_counter_ns) -> dict:
    """``{name: (min, median)}`` ns per call by ``clock``, interleaved: ``runs`` runs of
    about ``run_s`` seconds each per variant (``runs * run_s`` seconds in all per row).
    ``time.thread_time_ns`` counts this thread's CPU time only: on a loaded machine
    it leaves out the time other processes took the core (not their cache misses)."""
    calls = {name: calls_per_run(fn, run_s) for name, fn in fns.items()}
    for fn in fns.values():
        for _ in range(200):
            fn()
    times: dict = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            count = calls[name]
            t0 = clock()
            for _ in range(count):
                fn()
            times[name].append((clock() - t0) / count)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


def warm_launch_vs_torch() -> None:
    """Section 4 (see the module docstring)."""
    try:
        import torch
    except ImportError:
        print("\n(warm launch vs torch: torch is not installed)")
        return
    from vector_add import vadd, vadd_kernel
    a, b, c, n = torch.ones(1), torch.ones(1), torch.zeros(1), 1
    launch = vadd_kernel[1, 256]
    for _ in range(2):
        launch(a, b, c, n)
        vadd(a, b, c, n)
    threads = torch.get_num_threads()
    rows = []
    for count in (threads, 1):
        torch.set_num_threads(count)
        for clock in (time.perf_counter_ns, time.thread_time_ns):
            stats = _timed({"torch a + b": lambda: a + b,
                            "vadd_kernel[1, 256](a, b, c, n)": lambda: launch(a, b, c, n),
                            "vadd(a, b, c, n) @flydsl.jit": lambda: vadd(a, b, c, n)},
                           clock=clock)
            (t_lo, t_med), (k_lo, k_med), (j_lo, j_med) = stats.values()
            rows.append([f"{count}", "wall" if clock is time.perf_counter_ns else "thread CPU",
                         f"{t_lo:.0f} / {t_med:.0f}", f"{k_lo:.0f} / {k_med:.0f}",
                         f"{j_lo:.0f} / {j_med:.0f}",
                         f"{k_lo / t_lo:.2f} / {k_med / t_med:.2f}",
                         f"{j_lo / t_lo:.2f} / {j_med / t_med:.2f}"])
    torch.set_num_threads(threads)
    print_table("warm launch of a 1-element vadd on torch CPU tensors vs torch's a + b "
                "(ns per call, min / median, interleaved, ~0.5 s per row)",
                ["torch threads", "clock", "torch a + b", "vadd_kernel[1, 256]",
                 "vadd @flydsl.jit", "kernel / torch", "jit / torch"], rows)
    jit_call_breakdown(vadd, vadd_kernel, (a, b, c, n))
    warm_launch_breakdown(launch, vadd_kernel, (a, b, c, n))


def jit_call_breakdown(jit_fn, kernel, args: tuple) -> None:
    """Where a warm call of the README's ``vadd`` @flydsl.jit goes (thread CPU ns per
    call): its body called directly, the launch it makes, and the wrapper's own parts."""
    import importlib
    from flydsl.compiler.kernel_function import CompilationContext
    jit = importlib.import_module("flydsl.jit")
    body = jit_fn.fn
    n = args[3]
    pieces = {
        "vadd(a, b, c, n): the whole warm @flydsl.jit call": lambda: jit_fn(*args),
        "  its body called directly (vadd.fn(a, b, c, n))": lambda: body(*args),
        "    vadd_kernel(a, b, c, n).launch(grid=, block=)":
            lambda: kernel(*args).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1)),
        "    vadd_kernel[1, 256](a, b, c, n)": lambda: kernel[1, 256](*args),
        "  host views of a, b, c (what each call built before)":
            lambda: tuple(map(jit.host_tensor_view, args[:3])),
        "  CompilationContext.get_compile_hints() (a thread-local miss)":
            CompilationContext.get_compile_hints,
        "an empty Python call (the timing loop's own cost)": lambda: None,
    }
    stats = _timed(pieces, run_s=0.05, clock=time.thread_time_ns)
    names = list(pieces)
    whole, inner = stats[names[0]][0], stats[names[1]][0]
    rows = [[name, f"{lo:.0f}", f"{med:.0f}"] for name, (lo, med) in stats.items()]
    rows.insert(2, ["  the @flydsl.jit wrapper itself (whole - body)", f"{whole - inner:.0f}", ""])
    print_table("where a warm call of the README's vadd @flydsl.jit on three 1-element torch "
                "tensors goes (thread CPU ns per call)", ["piece", "min ns", "median ns"], rows,
                left=1)


def warm_launch_breakdown(launch, kernel, args: tuple) -> None:
    """Where the time of one warm launch ``launch(*args)`` goes (ns per call)."""
    fast = kernel._last
    python = getattr(fast, "flydsl_python", None)
    grid, block = (1, 1, 1), (256, 1, 1)
    compiled = next(iter(kernel._compiled.values()))
    bound = fast.flydsl_bound
    slots = bound.new_buffer()
    for pack, arg in zip(bound.packers, args):
        pack(slots.values, arg)
    d = compiled.launcher.dims_at
    slots.values[d:d + 9] = (*grid, *block, 0, 1, 0)
    call, table = compiled.launcher.library.call, slots.table_ptr
    t = args[0]
    pieces = {
        "k[1, 256](a, b, c, n): the whole warm launch": lambda: launch(*args),
        "  its warm launch: fast(args, grid, block, 0, None)":
            lambda: fast(args, grid, block, 0, None),
        "  the kernel's entry alone (ctypes, prebuilt table)": lambda: call(table),
        "an empty Python call (the timing loop's own cost)": lambda: None,
    }
    if python is not None:
        pieces["the generated Python warm launch (the old path)"] = \
            lambda: python(args, grid, block, 0, None)
    reads = {"t.dtype": lambda: t.dtype, "t.is_cpu": lambda: t.is_cpu,
             "t.stride()": lambda: t.stride(), "t.shape": lambda: t.shape,
             "t.data_ptr()": lambda: t.data_ptr()}
    stats = _timed({**pieces, **reads}, run_s=0.02, clock=time.thread_time_ns)
    names = list(pieces)
    empty, whole, alone = stats[names[3]][0], stats[names[0]][0], stats[names[1]][0]
    rows = [[name, f"{lo:.0f}", f"{med:.0f}"] for name, (lo, med) in stats.items()
            if name in pieces]
    rows.insert(2, ["  the Python layers of k[...](...) (whole - warm launch)",
                    f"{whole - alone:.0f}", ""])
    per_tensor = sum(stats[name][0] - empty for name in reads)
    rows.append(["torch reads of one tensor from Python (the old path reads 3)",
                 f"{per_tensor:.0f}", ""])
    native = type(fast).__name__ == "NativeFastLaunch"
    print_table("where a warm launch of vadd_kernel[1, 256] on three 1-element torch tensors "
                f"goes (thread CPU ns per call; warm launch: "
                f"{'native' if native else 'generated Python'})",
                ["piece", "min ns", "median ns"], rows, left=1,
                footer=["The native warm launch reads each tensor's facts through torch's C "
                        "shim (no Python objects made),",
                        "packs them on the C stack and calls the kernel's entry for a "
                        "one-block grid; the old path read them",
                        "through torch's Python API (the last row, per tensor) and called "
                        "the entry through ctypes."])


def _python(fast):
    """The generated Python warm launch of ``fast`` (itself, or its native one's twin)."""
    return getattr(fast, "flydsl_python", fast)


def overlap_check_rows(add3, a, b, c) -> None:
    """Warm launches of ``add3`` with and without the overlap check, interleaved: on
    three 1-element arrays, and on interleaved views ``x[1::2], b, x[0::2]``."""
    import flydsl
    unchecked = flydsl.kernel(may_alias=("a", "b", "c"))(add3.fn)
    checked_launch, unchecked_launch = add3[1, 1], unchecked[1, 1]
    x = np.ones(4, np.float32)
    odd, even = x[1::2], x[0::2]     # 2 elements each, 8 bytes apart
    for args in ((a, b, c), (odd, b, even)):
        checked_launch(*args)
        unchecked_launch(*args)
    stats = interleaved_min_median({
        "not checked (may_alias: the old warm path)": lambda: unchecked_launch(a, b, c),
        "overlap checked (c written: 2 pairs)": lambda: checked_launch(a, b, c),
        "overlap checked, in place k(a, b, a)": lambda: checked_launch(a, b, a),
        "not checked, k(x[1::2], b, x[0::2])": lambda: unchecked_launch(odd, b, even),
        "overlap checked, k(x[1::2], b, x[0::2])": lambda: checked_launch(odd, b, even),
    }, runs=15, calls=20000, warmup_calls=1000)
    print_table("warm launch, 3 numpy tensors: the overlap check (interleaved runs)",
                ["launch", "min us/call", "median us/call"],
                [[name, f"{lo * 1e6:.3f}", f"{med * 1e6:.3f}"]
                 for name, (lo, med) in stats.items()])
    # The check is Python in the generated warm launch: time that alone (its submit
    # replaced by a no-op), where a launch's own noise does not hide 0.1 us.
    fast = {}
    for args, how in (((a, b, c), ""), ((odd, b, even), ", x[1::2], b, x[0::2]")):
        checked_launch(*args)
        unchecked_launch(*args)
        # the generated Python (a native warm launch keeps it as flydsl_python)
        fast[f"not checked (may_alias){how}"] = (_python(unchecked._last), args)
        fast[f"overlap checked{how}"] = (_python(add3._last), args)
    for f, _ in fast.values():
        f.__globals__["_submit"] = lambda *_: None
    dims = ((1, 1, 1), (1, 1, 1))
    stats = interleaved_min_median({name: (lambda f=f, args=args: f(args, *dims, 0, None))
                                    for name, (f, args) in fast.items()},
                                   runs=15, calls=100000, warmup_calls=1000)
    for name, (f, args) in fast.items():
        assert f(args, *dims, 0, None), name   # each took its own warm launch
    print_table("generated warm launch alone (guards + packing, no submit), 3 numpy tensors",
                ["launch", "min ns/call", "median ns/call"],
                [[name, f"{lo * 1e9:.0f}", f"{med * 1e9:.0f}"]
                 for name, (lo, med) in stats.items()])


if __name__ == "__main__":
    main()
