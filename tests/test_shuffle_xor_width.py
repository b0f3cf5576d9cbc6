"""One XOR-shuffle rule for ``fx.shuffle_xor(v, off, width)``, ``fx.gpu.shuffle_xor`` and
``v.shuffle_xor(off, width)``: the warp is cut into segments of ``width`` lanes and lane
``k`` reads lane ``k ^ off`` unless that lane lies past the end of ``k``'s segment, when
``k`` keeps its own value (``shfl.sync.bfly``'s clamp, MLIR ``gpu.shuffle xor``). The
two spellings used to disagree once ``off >= width``: one refused, one wrapped."""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx


def _expected(values: np.ndarray, off: int, width: int) -> np.ndarray:
    out = values.copy()
    for k in range(values.size):
        src = k ^ off
        if src < (k | (width - 1)) + 1:
            out[k] = values[src]
    return out


@flydsl.kernel
def _three_spellings(a: fx.Tensor, out: fx.Tensor, off: fx.Int32,
                     OFF: fx.Constexpr[int], W: fx.Constexpr[int]):
    t = fx.thread_idx.x
    v = a[t]
    out[0, t] = fx.shuffle_xor(v, OFF, W)        # static offset
    out[1, t] = v.shuffle_xor(OFF, W)            # the value method, FlyDSL's spelling
    out[2, t] = fx.gpu.shuffle_xor(v, off, W)    # runtime offset


@pytest.mark.parametrize("off,width", [(1, 8), (8, 8), (12, 8), (3, 4), (16, 16), (5, 32)])
def test_every_spelling_follows_the_hardware_rule(off, width):
    a = np.arange(32, dtype=np.float32) * 3 + 1
    out = np.zeros((3, 32), np.float32)
    _three_spellings[1, 32](a, out, off, off, width)
    want = _expected(a, off, width)
    for row in range(3):
        np.testing.assert_array_equal(out[row], want, err_msg=f"spelling {row}")


def test_offset_past_the_segment_reads_an_earlier_segment_but_never_a_later_one():
    a = np.arange(32, dtype=np.float32)
    out = np.zeros((3, 32), np.float32)
    _three_spellings[1, 32](a, out, 8, 8, 8)
    assert list(out[0, :8]) == list(a[:8])        # lanes 0-7: 8..15 is later: own value
    assert list(out[0, 8:16]) == list(a[:8])      # lanes 8-15: read 0..7


def test_a_width_that_is_not_a_power_of_two_is_refused_at_its_line():
    @flydsl.kernel
    def bad(a: fx.Tensor):
        t = fx.thread_idx.x
        a[t] = a[t].shuffle_xor(1, 6)

    with pytest.raises(flydsl.DSLError, match="power of two") as info:
        bad[1, 32](np.zeros(32, np.float32))
    assert "test_shuffle_xor_width.py" in str(info.value)
