"""fx.random (flydsl.extension.random): Philox 4x32-10 / 4x64-10 and its uniform and
normal conversions, bit-exact with FlyDSL's (and Triton's) streams.

References: Random123's known-answer vectors, numpy's own Philox (4x64) bit generator,
and a vectorised numpy Philox 4x32 written here; kernels run on the CPU backend.
"""
import numpy as np
import pytest

import flydsl
import flydsl.expr as fx
from flydsl.expr.host_scalar import HostScalar
from flydsl.extension.random import universal

# Random123's known-answer vectors for philox4x32_10 and philox4x64_10 (also FlyDSL's
# test expectations for the zero counter and key).
KAT32 = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
KAT64_ZERO = (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)


def philox4x32_numpy(seed, offsets, n_rounds=10):
    """Philox 4x32 over an array of offsets, Triton's layout: the seed as 64 bits over
    the two key words, the offset's low and high 32 bits as counter words 0 and 1."""
    offsets = np.asarray(offsets)
    wide = offsets.astype(np.uint64)
    c0 = wide.astype(np.uint32)
    c1 = (wide >> np.uint64(32)).astype(np.uint32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    s = seed % (1 << 64)
    k0 = np.full_like(c0, s & 0xFFFFFFFF)
    k1 = np.full_like(c0, s >> 32)
    for _ in range(n_rounds):
        pb = c2.astype(np.uint64) * np.uint64(0xCD9E8D57)
        pa = c0.astype(np.uint64) * np.uint64(0xD2511F53)
        c0, c1, c2, c3 = ((pb >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0,
                          pb.astype(np.uint32),
                          (pa >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1,
                          pa.astype(np.uint32))
        k0 = k0 + np.uint32(0x9E3779B9)
        k1 = k1 + np.uint32(0xBB67AE85)
    return np.stack([c0, c1, c2, c3], axis=-1)


def uniform_numpy(words):
    signed = np.asarray(words, dtype=np.uint32).view(np.int32).astype(np.int64)
    folded = np.where(signed < 0, -signed - 1, signed)
    return folded.astype(np.float32) * np.float32(4.6566127342e-10)


def normal_pair_numpy(u1, u2):
    u1 = np.maximum(u1, np.float32(1e-7))
    theta = np.float32(6.283185307179586) * u2
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    return r * np.cos(theta), r * np.sin(theta)


def u32(v):
    return HostScalar(v, fx.UInt32)


def u64(v):
    return HostScalar(v, fx.UInt64)


def values(words):
    return tuple(int(w.value) for w in words)


def test_public_names_are_flydsls():
    assert fx.random.__all__ == ["randint", "randint4x", "rand", "rand4x", "randn", "randn4x"]
    assert not hasattr(fx.random, "philox")
    assert fx.random.universal.randint4x is fx.random.randint4x


@pytest.mark.parametrize("counter,key,expected", KAT32)
def test_philox4x32_known_answers(counter, key, expected):
    assert values(universal.philox_impl(*map(u32, counter), *map(u32, key))) == expected


def test_philox4x64_known_answer_and_numpy_philox():
    zero = u64(0)
    words = universal.philox(zero, zero, zero, zero, zero)
    assert values(words) == KAT64_ZERO
    assert all(w.dtype is fx.Uint64 for w in words)
    # numpy's Philox is 4x64-10 with these constants; it bumps the counter before a block
    gen = np.random.Philox(counter=[0, 0, 0, 0], key=[5, 7])
    expected = tuple(int(x) for x in gen.random_raw(4))
    assert values(universal.philox_impl(*map(u64, (1, 0, 0, 0, 5, 7)))) == expected


def test_randint4x_matches_numpy_reference_on_the_host():
    assert values(fx.random.randint4x(0, 0)) == KAT32[0][2]
    for seed, offset in ((0, 0), (7, 12345), (0x9E3779B9, 0xFFFFFFF0), (-5, 11)):
        ref = tuple(int(x) for x in philox4x32_numpy(seed, [offset])[0])
        assert values(fx.random.randint4x(seed, u32(offset))) == ref
        assert int(fx.random.randint(seed, u32(offset)).value) == ref[0]
        uniforms = [w.value for w in fx.random.rand4x(seed, u32(offset))]
        assert uniforms == [float(u) for u in uniform_numpy(ref)]
        assert all(0.0 <= u < 1.0 for u in uniforms)


def test_wide_offsets_and_seeds_follow_tritons_split():
    # a 64-bit offset fills counter word 1; a 64-bit seed fills key word 1
    ref = philox4x32_numpy(2**40 + 9, np.array([2**33 + 1], np.uint64))[0]
    assert values(fx.random.randint4x(u64(2**40 + 9), u64(2**33 + 1))) == tuple(map(int, ref))
    # 32-bit words give the same stream as 64-bit ones holding the same value
    assert values(fx.random.randint4x(u32(7), u32(12345))) == \
        values(fx.random.randint4x(u64(7), u64(12345)))
    # a signed seed sign-extends into key word 1: another stream than its unsigned bits
    signed = fx.random.randint4x(HostScalar(-5, fx.Int32), u32(11))
    assert values(signed) != values(fx.random.randint4x(u32(0xFFFFFFFB), u32(11)))


@pytest.mark.parametrize("word", [0, 1, 2**63 - 1, 2**63, 2**64 - 1])
def test_uint64_to_uniform(word):
    signed = word - 2**64 if word >= 2**63 else word
    folded = -signed - 1 if signed < 0 else signed
    out = universal.uint_to_uniform_float(u64(word))
    assert out.dtype is fx.Float32
    assert out.value == float(np.float32(folded) * np.float32(1.0842020432385337e-19))


def test_narrow_words_are_refused():
    with pytest.raises(NotImplementedError, match="32- or 64-bit"):
        fx.random.randint4x(0, HostScalar(3, fx.Int16))


BLOCK = 64


@flydsl.kernel(known_block_size=[BLOCK, 1, 1])
def _draw(words: fx.Tensor, floats: fx.Tensor, wide: fx.Tensor, seed: fx.Int32,
          seed64: fx.UInt64):
    i = fx.block_idx.x * BLOCK + fx.thread_idx.x
    offset = fx.UInt32(i)
    w = fx.random.randint4x(seed, offset)
    u = fx.random.rand4x(seed, offset)
    n = fx.random.randn4x(seed, offset)
    for j in fx.range_constexpr(4):
        words[i, j] = w[j]
        floats[i, j] = u[j]
        floats[i, 4 + j] = n[j]
    floats[i, 8] = fx.random.rand(seed, offset)
    floats[i, 9] = fx.random.randn(seed, offset)
    z = fx.UInt64(0)
    w64 = fx.random.universal.philox(seed64, fx.UInt64(i), z, z, z)
    for j in fx.range_constexpr(4):
        wide[i, j] = w64[j]


@flydsl.jit
def _launch(words: fx.Tensor, floats: fx.Tensor, wide: fx.Tensor, seed: fx.Int32,
            seed64: fx.UInt64):
    _draw(words, floats, wide, seed, seed64).launch(grid=(2, 1, 1), block=(BLOCK, 1, 1))


@pytest.mark.parametrize("seed", [7, -5])
def test_kernel_streams_match_the_references(seed):
    n = 2 * BLOCK
    words = np.zeros((n, 4), np.uint32)
    floats = np.zeros((n, 10), np.float32)
    wide = np.zeros((n, 4), np.uint64)
    _launch(words, floats, wide, seed, 0x89ABCDEF01234567)

    ref = philox4x32_numpy(seed, np.arange(n, dtype=np.uint32))
    np.testing.assert_array_equal(words, ref)
    uniform = uniform_numpy(ref)
    np.testing.assert_array_equal(floats[:, :4], uniform)
    n0, n1 = normal_pair_numpy(uniform[:, 0], uniform[:, 1])
    n2, n3 = normal_pair_numpy(uniform[:, 2], uniform[:, 3])
    np.testing.assert_allclose(floats[:, 4:8], np.stack([n0, n1, n2, n3], 1),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(floats[:, 8], floats[:, 0])   # rand is rand4x's first
    np.testing.assert_array_equal(floats[:, 9], floats[:, 4])   # randn is randn4x's first
    for i in (0, 1, n - 1):
        expected = values(universal.philox(u64(0x89ABCDEF01234567), u64(i), u64(0), u64(0),
                                           u64(0)))
        assert tuple(int(x) for x in wide[i]) == expected
