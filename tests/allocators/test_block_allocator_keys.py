"""Content keys: SipHash-2-4 kernels against the published vectors, chaining, secrets, salts."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator
from kvmm.allocators._hashing import secret_words, siphash128_bytes, siphash128_words
from kvmm.errors import DTypeError, ShapeError
from kvmm.testing.models import siphash as naive

REF_KEY = bytes(range(16))
# vectors_sip128 of the SipHash reference code (veorq/SipHash, vectors.h): SipHash-2-4 with
# 128-bit output, key 00 01 .. 0f, message 00 01 .. (len-1), for len = 0 .. 63.
SIP128 = """
a3817f04ba25a8e66df67214c7550293 da87c1d86b99af44347659119b22fc45 8177228da4a45dc7fca38bdef60affe4
9c70b60c5267a94e5f33b6b02985ed51 f88164c12d9c8faf7d0f6e7c7bcd5579 1368875980776f8854527a07690e9627
14eeca338b208613485ea0308fd7a15e a1f1ebbed8dbc153c0b84aa61ff08239 3b62a9ba6258f5610f83e264f31497b4
264499060ad9baabc47f8b02bb6d71ed 00110dc378146956c95447d3f3d0fbba 0151c568386b6677a2b4dc6f81e5dc18
d626b266905ef35882634df68532c125 9869e247e9c08b10d029934fc4b952f7 31fcefac66d7de9c7ec7485fe4494902
5493e99933b0a8117e08ec0f97cfc3d9 6ee2a4ca67b054bbfd3315bf85230577 473d06e8738db89854c066c47ae47740
a426e5e423bf4885294da481feaef723 78017731cf65fab074d5208952512eb1 9e25fc833f2290733e9344a5e83839eb
568e495abe525a218a2214cd3e071d12 4a29b54552d16b9a469c10528eff0aae c9d184ddd5a9f5e0cf8ce29a9abf691c
2db479ae78bd50d8882a8a178a6132ad 8ece5f042d5e447b5051b9eacb8d8f6f 9c0b53b4b3c307e87eaee08678141f66
abf248af69a6eae4bfd3eb2f129eeb94 0664da1668574b88b935f3027358aef4 aa4b9dc4bf337de90cd4fd3c467c6ab7
ea5c7f471faf6bde2b1ad7d4686d2287 2939b0183223fafc1723de4f52c43d35 7c3956ca5eeafc3e363e9d556546eb68
77c6077146f01c32b6b69d5f4ea9ffcf 37a6986cb8847edf0925f0f1309b54de a705f0e69da9a8f907241a2e923c8cc8
3dc47d1f29c448461e9e76ed904f6711 0d62bf01e6fc0e1a0d3c4751c5d3692b 8c03468bca7c669ee4fd5e084bbee7b5
528a5bb93baf2c9c4473cce5d0d22bd9 df6a301e95c95dad97ae0cc8c6913bd8 801189902c857f39e73591285e70b6db
e617346ac9c231bb3650ae34ccca0c5b 27d93437efb721aa401821dcec5adf89 89237d9ded9c5e78d8b1c9b166cc7342
4a6d8091bf5e7d651189fa94a250b14c 0e33f96055e7ae893ffc0e3dcf492902 e61c432b720b19d18ec8d84bdc63151b
f7e5aef549f782cf379055a608269b16 438d030fd0b7a54fa837f2ad201a6403 a590d3ee4fbf04e3247e0d27f286423f
5fe2c1a172fe93c4b15cd37caef9f538 2c97325cbd06b36eb2133dd08b3a017c 92c814227a6bca949ff0659f002ad39e
dce850110bd8328cfbd50841d6911d87 67f14984c7da791248e32bb5922583da 1938f2cf72d54ee97e94166fa91d2a36
74481e9646ed49fe0f6224301604698e 57fca5de98a9d6d8006438d0583d8a1d 9fecde1cefdc1cbed4763674d9575359
e3040c00eb28f15366ca73cbd872e740 7697009a6a831dfecca91c5993670f7a 5853542321f567a005d547a4f04759bd
5150d1772f50834a503e069a973fbd7c
""".split()
# vectors_sip64 (64-bit output), first entries and the paper's Appendix A example (15 bytes).
SIP64 = {0: "310e0edd47db6f72", 1: "fd67dc93c539f874", 8: "6224939a79f5f593", 15: "e545be4961ca29a1",
         63: "724506eb4c328a95"}


def kernel_bytes(key: bytes, msg: bytes) -> bytes:
    k0, k1 = secret_words(key)
    o0, o1 = siphash128_bytes(np.uint64(k0), np.uint64(k1), np.frombuffer(msg, dtype=np.uint8))
    return int(o0).to_bytes(8, "little") + int(o1).to_bytes(8, "little")


def test_reference_vectors_sip128_numba_and_naive():
    assert len(SIP128) == 64
    for n, expected in enumerate(SIP128):
        msg = bytes(range(n))
        assert kernel_bytes(REF_KEY, msg).hex() == expected, n
        assert naive.siphash(REF_KEY, msg, out_bits=128).hex() == expected, n


def test_reference_vectors_sip64_naive():
    for n, expected in SIP64.items():
        assert naive.siphash(REF_KEY, bytes(range(n))).hex() == expected
    # The paper states the 15-byte example as the integer 0xa129ca6149be45e5.
    assert int.from_bytes(naive.siphash(REF_KEY, bytes(range(15))), "little") == 0xA129CA6149BE45E5


@given(st.binary(min_size=16, max_size=16), st.lists(st.integers(0, 2**64 - 1), max_size=12))
def test_word_kernel_equals_byte_kernel_and_naive(key, words):
    arr = np.array(words, dtype=np.uint64)
    k0, k1 = secret_words(key)
    w = siphash128_words(np.uint64(k0), np.uint64(k1), arr)
    b = siphash128_bytes(np.uint64(k0), np.uint64(k1), arr.view(np.uint8))
    assert (int(w[0]), int(w[1])) == (int(b[0]), int(b[1])) == naive.siphash128_words(key, words)


@given(
    st.binary(min_size=16, max_size=16),
    st.integers(0, 2**64 - 1),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
    st.none() | st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    st.integers(0, 2),
)
def test_hash_blocks_equals_the_plain_python_reference(secret, salt, tokens, parent, m):
    a = BlockAllocator(4, 3, secret=secret, salt=salt)
    n_full = len(tokens) // 3
    extra = [[(i * 7 + j) % 5 for j in range(m)] for i in range(n_full)] if m else None
    got = a.hash_blocks(np.array(tokens, dtype=np.int64), parent=parent, extra=extra)
    assert got.shape == (n_full, 2) and got.dtype == np.uint64
    want = naive.block_keys(secret, salt, tokens, 3, parent, extra)
    assert [tuple(int(v) for v in row) for row in got] == want


def test_keys_are_deterministic_under_one_secret_and_dtype_independent():
    toks = np.arange(64) * 31 % 50000
    a = BlockAllocator(4, 16, secret=bytes(range(16)))
    b = BlockAllocator(8, 16, secret=bytes(range(16)))
    k = a.hash_blocks(toks)
    assert np.array_equal(k, b.hash_blocks(toks))
    assert np.array_equal(k, a.hash_blocks(toks.astype(np.int32)))
    assert np.array_equal(k, a.hash_blocks(toks.tolist()))
    assert np.array_equal(k, a.hash_blocks(np.concatenate([toks, [1, 2, 3]])))  # partial block ignored
    # Chaining: hashing the tail with the last key of the head as parent continues the chain.
    assert np.array_equal(k[2:], a.hash_blocks(toks[32:], parent=k[1]))


def test_other_secret_or_salt_gives_unrelated_keys():
    toks = np.arange(48)
    base = BlockAllocator(4, 16, secret=bytes(16)).hash_blocks(toks)
    other_secret = BlockAllocator(4, 16, secret=bytes(15) + b"\x01").hash_blocks(toks)
    other_salt = BlockAllocator(4, 16, secret=bytes(16), salt=1).hash_blocks(toks)
    per_call = BlockAllocator(4, 16, secret=bytes(16)).hash_blocks(toks, salt=1)
    assert np.array_equal(other_salt, per_call)
    for keys in (other_secret, other_salt):
        assert not (keys == base).all(axis=1).any()
    random_secret = [BlockAllocator(4, 16).hash_blocks(toks) for _ in range(2)]
    assert not np.array_equal(random_secret[0], random_secret[1])


def test_extra_keys_and_parent_change_keys():
    a = BlockAllocator(4, 4, secret=bytes(16))
    toks = np.arange(8)
    base = a.hash_blocks(toks)
    assert not np.array_equal(base, a.hash_blocks(toks, extra=[1]))
    assert not np.array_equal(a.hash_blocks(toks, extra=[1]), a.hash_blocks(toks, extra=[2]))
    assert np.array_equal(a.hash_blocks(toks, extra=[5]), a.hash_blocks(toks, extra=[[5], [5]]))
    # Starting a chain differs from continuing one from the zero key.
    assert not np.array_equal(base, a.hash_blocks(toks, parent=(0, 0)))


def test_one_changed_token_changes_its_block_and_every_later_one():
    a = BlockAllocator(4, 8, secret=bytes(16))
    toks = np.arange(80)
    base = a.hash_blocks(toks)
    for pos in (0, 13, 79):
        t2 = toks.copy()
        t2[pos] += 1
        k2 = a.hash_blocks(t2)
        blk = pos // 8
        assert np.array_equal(k2[:blk], base[:blk])
        assert not (k2[blk:] == base[blk:]).all(axis=1).any()


def test_no_collision_among_a_million_random_blocks():
    a = BlockAllocator(4, 16, secret=bytes(range(16)))
    rng = np.random.default_rng(7)
    toks = rng.integers(0, 32000, size=16 * 1_000_000)
    keys = a.hash_blocks(toks)
    assert keys.shape == (1_000_000, 2)
    assert np.unique(keys.view(np.dtype((np.void, 16)))).size == keys.shape[0]
    # Each output bit is a fair coin (a broken mixer would bias or fix some bits).
    bits = np.unpackbits(keys[:20000].view(np.uint8), axis=1).mean(axis=0)
    assert 0.47 < bits.min() and bits.max() < 0.53


def test_bad_token_input_raises():
    a = BlockAllocator(4, 2, secret=bytes(16))
    with pytest.raises(DTypeError, match="integer"):
        a.hash_blocks(np.array([1.0, 2.0]))
    with pytest.raises(ShapeError):
        a.hash_blocks(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ShapeError, match="parent"):
        a.hash_blocks([1, 2], parent=[1, 2, 3])
    with pytest.raises(ShapeError, match="extra"):
        a.hash_blocks([1, 2, 3, 4], extra=np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(DTypeError):
        a.hash_blocks([1, 2], extra=[0.5])
    assert a.hash_blocks([]).shape == (0, 2)


def test_hash_blocks_many_equals_one_call_per_sequence():
    a = BlockAllocator(4, 4, secret=bytes(range(16)), salt=3)
    rng = np.random.default_rng(1)
    lengths = [0, 3, 4, 9, 17, 8]
    tokens = rng.integers(0, 1000, size=sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    key_offsets, keys = a.hash_blocks_many(offsets, tokens)
    assert key_offsets.tolist() == np.concatenate([[0], np.cumsum([n // 4 for n in lengths])]).tolist()
    for r in range(len(lengths)):
        want = a.hash_blocks(tokens[offsets[r]:offsets[r + 1]])
        assert np.array_equal(keys[key_offsets[r]:key_offsets[r + 1]], want)
    _, other = a.hash_blocks_many(offsets, tokens, salt=4)
    assert not (other == keys).all(axis=1).any()
    with pytest.raises(DTypeError):
        a.hash_blocks_many([0, 2], np.ones(2))
