"""Plain-Python SipHash-2-4 (64- and 128-bit output), straight from the paper's pseudo-code.

Slow and obviously correct: used to check the numba kernels in ``kvmm.allocators._hashing``
and by the plain-Python reference allocator to compute block keys.
"""

from __future__ import annotations

import struct

MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK


def _round(v: list[int]) -> None:
    v[0] = (v[0] + v[1]) & MASK
    v[1] = _rotl(v[1], 13) ^ v[0]
    v[0] = _rotl(v[0], 32)
    v[2] = (v[2] + v[3]) & MASK
    v[3] = _rotl(v[3], 16) ^ v[2]
    v[0] = (v[0] + v[3]) & MASK
    v[3] = _rotl(v[3], 21) ^ v[0]
    v[2] = (v[2] + v[1]) & MASK
    v[1] = _rotl(v[1], 17) ^ v[2]
    v[2] = _rotl(v[2], 32)


def siphash(key: bytes, message: bytes, *, out_bits: int = 64, c: int = 2, d: int = 4) -> bytes:
    """SipHash-c-d of ``message`` under the 16-byte ``key``; 8 or 16 output bytes (little-endian)."""
    assert len(key) == 16 and out_bits in (64, 128)
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]
    if out_bits == 128:
        v[1] ^= 0xEE
    tail_len = len(message) % 8
    words = [struct.unpack("<Q", message[i:i + 8])[0] for i in range(0, len(message) - tail_len, 8)]
    last = ((len(message) & 0xFF) << 56) | int.from_bytes(message[len(message) - tail_len:], "little")
    for m in words + [last]:
        v[3] ^= m
        for _ in range(c):
            _round(v)
        v[0] ^= m
    v[2] ^= 0xEE if out_bits == 128 else 0xFF
    for _ in range(d):
        _round(v)
    out = struct.pack("<Q", v[0] ^ v[1] ^ v[2] ^ v[3])
    if out_bits == 128:
        v[1] ^= 0xDD
        for _ in range(d):
            _round(v)
        out += struct.pack("<Q", v[0] ^ v[1] ^ v[2] ^ v[3])
    return out


def siphash128_words(key: bytes, words: list[int]) -> tuple[int, int]:
    """SipHash-2-4-128 of 64-bit words (little-endian bytes); the output as two words."""
    msg = b"".join(struct.pack("<Q", w & MASK) for w in words)
    return struct.unpack("<QQ", siphash(key, msg, out_bits=128))


TENANT_DOMAIN = 0x6B766D6D54454E54


def tenant_key(secret: bytes, salt: int) -> bytes:
    """The per-tenant SipHash key derived from the allocator secret and a salt."""
    return struct.pack("<QQ", *siphash128_words(secret, [TENANT_DOMAIN, salt]))


def block_keys(secret: bytes, salt: int, tokens: list[int], block_size: int,
               parent: tuple[int, int] | None = None, extra: list[list[int]] | None = None) -> list[tuple[int, int]]:
    """Chained keys of the full blocks, as documented in ``kvmm.allocators._hashing``."""
    key = tenant_key(secret, salt)
    out = []
    domain = 0 if parent is None else 1
    p = (0, 0) if parent is None else parent
    for i in range(len(tokens) // block_size):
        words = [domain, p[0], p[1]] + list(tokens[i * block_size:(i + 1) * block_size])
        if extra is not None:
            words += list(extra[i])
        p = siphash128_words(key, words)
        out.append(p)
        domain = 1
    return out
