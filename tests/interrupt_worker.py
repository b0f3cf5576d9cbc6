"""Child process for test_cpu_runtime.py: launch a kernel that never ends on its own,
print "ready" first; the test sends SIGINT. Prints what happened after the interrupt.

Usage: interrupt_worker.py BLOCKS [torch|native]   (torch: import it first, which loads
libgomp, so that a parallel launch runs as an OpenMP team; native: launch on a torch
tensor, the interrupted launch taking the native warm launch of runtime.native_launch)
"""
import signal
import sys
import time

# Ctrl-C as in an interactive program, whatever this process inherited: a test run
# started in the background of a shell inherits SIGINT ignored, and a signal that
# came before the kernel ran would then be lost.
signal.signal(signal.SIGINT, signal.default_int_handler)

import numpy as np  # noqa: E402

import flydsl  # noqa: E402
import flydsl.expr as fx  # noqa: E402


@flydsl.kernel
def spin(x: fx.Tensor, n: fx.Int32):
    i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
    v = x[i]
    while v < n:            # float32: v stops growing at 2**24, so n = 2**30 never ends
        v = v + 1.0
        x[i] = v


@flydsl.kernel
def inc(x: fx.Tensor):
    x[fx.thread_idx.x] = x[fx.thread_idx.x] + 1.0


def main() -> None:
    blocks = int(sys.argv[1])
    native = sys.argv[2:] == ["native"]
    if sys.argv[2:] in (["torch"], ["native"]):
        import torch
    from flydsl.runtime.drivers.openmp import TEAMS
    x = np.zeros(blocks * 64, np.float32)
    n = 2**30
    if native:
        x = torch.zeros(blocks * 64)
        n = 2**30 + 1                       # the facts of 3 (not divisible by 16): warm
    spin[1, 64](x, 3)                       # compiled, and ends at once
    spin[1, 64](x, 3)
    took = type(spin._last).__name__
    print("ready", flush=True)
    try:
        spin[blocks, 64](x, n)
    except KeyboardInterrupt:
        snapshot = x.copy() if not native else x.clone()
        time.sleep(0.5)
        still_writing = not np.array_equal(np.asarray(snapshot), np.asarray(x))
        y = np.zeros(64, np.float32)
        inc[1, 64](y)                       # the next launch runs normally
        print(f"interrupted still_writing={still_writing} next_launch_ok={bool(y.all())} "
              f"team={TEAMS.parallel is not None}"
              + (f" native={took == 'NativeFastLaunch'}" if native else ""), flush=True)


if __name__ == "__main__":
    main()
