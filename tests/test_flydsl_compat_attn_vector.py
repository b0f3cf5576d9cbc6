"""Upstream FlyDSL's attention kernels on flydsl (issue 31): ``Vector.broadcast_to``, which
they use to splat a scalar (``Vec.from_elements([scale], fx.Float32).broadcast_to(16)``)."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx


# -- Vector.broadcast_to ----------------------------------------------------------------

@flydsl.kernel
def broadcasts(x: fx.Tensor, out: fx.Tensor):
    one = fx.Vector.from_elements([x[0]], fx.Float32).broadcast_to(4)    # upstream's use
    rows = fx.Vector.from_elements([x[1], x[2]], fx.Float32).broadcast_to((3, 2))
    for i in fx.range_constexpr(4):
        out[i] = one[i]
    for i in fx.range_constexpr(6):
        out[4 + i] = rows[i]


def test_vector_broadcast_to_repeats_by_numpy_rules():
    x, out = np.array([5.0, 1.0, 2.0], np.float32), np.zeros(10, np.float32)
    broadcasts[1, 1](x, out)
    np.testing.assert_array_equal(out[:4], np.broadcast_to(x[:1], 4))
    np.testing.assert_array_equal(out[4:], np.broadcast_to(x[1:], (3, 2)).ravel())


@flydsl.kernel
def bad_broadcast(x: fx.Tensor, out: fx.Tensor):
    v = fx.Vector.from_elements([x[0], x[1]], fx.Float32).broadcast_to(3)
    out[0] = v[0]


def test_vector_broadcast_to_an_incompatible_shape_is_a_located_error():
    x, out = np.zeros(2, np.float32), np.zeros(1, np.float32)
    with pytest.raises(flydsl.DSLError, match=r"shape \(2,\) cannot be broadcast to \(3,\)") \
            as info:
        bad_broadcast[1, 1](x, out)
    assert "broadcast_to(3)" in info.value.source_line
