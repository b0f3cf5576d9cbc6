"""Counter-based random numbers for kernel bodies (FlyDSL's ``fx.random``).

Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") keyed
by a *seed* and counted by an *offset*, with Triton's conventions, so that the
streams are bit-for-bit those of FlyDSL and Triton:

* ``randint4x(seed, offset, n_rounds=10)`` -- four ``Uint32`` words; ``randint`` the
  first of them.
* ``rand4x`` / ``rand`` -- ``Float32`` in ``[0, 1)``: each word read as an ``Int32``,
  negatives folded onto ``-w - 1``, times ``4.6566127342e-10``.
* ``randn4x`` / ``randn`` -- ``Float32`` standard normals by Box-Muller from pairs
  of those uniforms (the first uniform clamped to at least ``1e-7``).

The seed is widened to 64 bits (a signed one sign-extends) and split over the two key
words; an offset wider than 32 bits fills the second counter word; words 2 and 3 of
the counter are zero. The same ``(seed, offset)`` always gives the same numbers, so
no state is threaded through a kernel: use the element index as the offset.

Called inside a kernel the functions emit code; called on the host with plain ints or
``fx.Uint32(...)``-style host scalars they compute the same numbers in Python (a
reference for tests and host code).

``fx.random.universal`` is the same surface; FlyDSL keeps it as the portable form
beside target overrides, and flydsl has one implementation on every target.

Example::

    @flydsl.kernel
    def dropout(x: fx.Tensor, y: fx.Tensor, seed: fx.Int32, p: fx.Float32):
        i = fx.block_idx.x * fx.block_dim.x + fx.thread_idx.x
        keep = fx.random.rand(seed, fx.Uint32(i)) >= p
        y[i] = keep.select(x[i] / (1.0 - p), 0.0)
"""
from . import universal
from .universal import rand, rand4x, randint, randint4x, randn, randn4x

__all__ = ["randint", "randint4x", "rand", "rand4x", "randn", "randn4x"]
