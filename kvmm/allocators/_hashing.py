"""Keyed SipHash-2-4 (128-bit output) kernels for the prefix cache's content keys.

SipHash-2-4 is a keyed pseudo-random function (Aumasson and Bernstein, 2012): without the
128-bit key nobody can find two inputs with equal outputs faster than by guessing, so a client
that controls its prompt cannot forge a block that collides with another tenant's block.  The
128-bit output variant ("SipHash128", ``vectors_sip128`` in the reference code) differs from the
64-bit one only in the constants ``0xee`` at initialisation and finalisation and a second
finalisation pass with ``0xdd``.

Messages here are whole 64-bit little-endian words, so one block's key is one SipHash call over

    [domain, parent_lo, parent_hi, token_0, ..., token_{B-1}, extra_0, ..., extra_{m-1}]

(``domain`` is 1 for a block whose parent key is given, 0 for the first block of a chain when
no parent is given), under a *tenant key* derived from the allocator's secret and the salt::

    tenant_key = SipHash128(secret, [TENANT_DOMAIN, salt])

so two salts give unrelated key families.  Tokens are hashed as 64-bit signed integers, so the
same token values give the same key whatever their integer dtype.

Runtime complexity: O(words) per key; ``hash_block_keys`` is O(n_full * (block_size + m)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["secret_words", "siphash128_bytes", "siphash128_words", "derive_tenant_key", "hash_block_keys",
           "hash_many_block_keys"]

#: First word of the message that derives a tenant key from (secret, salt).
TENANT_DOMAIN = 0x6B766D6D54454E54  # "kvmmTENT"

_C0 = np.uint64(0x736F6D6570736575)
_C1 = np.uint64(0x646F72616E646F6D)
_C2 = np.uint64(0x6C7967656E657261)
_C3 = np.uint64(0x7465646279746573)
_EE = np.uint64(0xEE)
_DD = np.uint64(0xDD)
_FF = np.uint64(0xFF)


def secret_words(secret: bytes) -> tuple[int, int]:
    """The two little-endian 64-bit words (k0, k1) of a 16-byte SipHash key."""
    return int.from_bytes(secret[:8], "little"), int.from_bytes(secret[8:16], "little")


@njit(cache=True, nogil=True)
def _rotl(x, b):
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True, nogil=True)
def _sip_round(v0, v1, v2, v3):
    v0 += v1
    v1 = _rotl(v1, 13)
    v1 ^= v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16)
    v3 ^= v2
    v0 += v3
    v3 = _rotl(v3, 21)
    v3 ^= v0
    v2 += v1
    v1 = _rotl(v1, 17)
    v1 ^= v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True, nogil=True)
def _sip_init(k0, k1):
    # The 128-bit variant flips v1 with 0xee before absorbing anything.
    return k0 ^ _C0, (k1 ^ _C1) ^ _EE, k0 ^ _C2, k1 ^ _C3


@njit(cache=True, nogil=True)
def _sip_absorb(v0, v1, v2, v3, m):
    # c = 2 compression rounds per 64-bit word.
    v3 ^= m
    v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    v0 ^= m
    return v0, v1, v2, v3


@njit(cache=True, nogil=True)
def _sip_finish128(v0, v1, v2, v3, last_word):
    # last_word = (message length mod 256) << 56 | the 0..7 trailing bytes.
    v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, last_word)
    v2 ^= _EE
    for _ in range(4):  # d = 4 finalisation rounds
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    out0 = v0 ^ v1 ^ v2 ^ v3
    v1 ^= _DD
    for _ in range(4):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    out1 = v0 ^ v1 ^ v2 ^ v3
    return out0, out1


@njit(cache=True, nogil=True)
def siphash128_bytes(k0, k1, data):
    """SipHash-2-4 with 128-bit output of a ``uint8`` array (the reference byte interface).

    Returns the two little-endian output words ``(out0, out1)``: the 16 output bytes are
    ``out0.to_bytes(8, "little") + out1.to_bytes(8, "little")``.  Runtime complexity: O(len).
    """
    k0 = np.uint64(k0)
    k1 = np.uint64(k1)
    v0, v1, v2, v3 = _sip_init(k0, k1)
    n = data.shape[0]
    full = n // 8
    for w in range(full):
        m = np.uint64(0)
        for j in range(8):
            m |= np.uint64(data[8 * w + j]) << np.uint64(8 * j)
        v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, m)
    last = np.uint64(n & 0xFF) << np.uint64(56)
    for j in range(n - 8 * full):
        last |= np.uint64(data[8 * full + j]) << np.uint64(8 * j)
    return _sip_finish128(v0, v1, v2, v3, last)


@njit(cache=True, nogil=True)
def siphash128_words(k0, k1, words):
    """SipHash-2-4-128 of a ``uint64`` array read as its little-endian bytes.

    Equal to ``siphash128_bytes(k0, k1, words.view(np.uint8))`` (tests check this) without the
    byte loop.  Runtime complexity: O(len).
    """
    k0 = np.uint64(k0)
    k1 = np.uint64(k1)
    v0, v1, v2, v3 = _sip_init(k0, k1)
    n = words.shape[0]
    for w in range(n):
        v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, np.uint64(words[w]))
    last = np.uint64((8 * n) & 0xFF) << np.uint64(56)
    return _sip_finish128(v0, v1, v2, v3, last)


@njit(cache=True, nogil=True)
def derive_tenant_key(k0, k1, salt):
    """The tenant key ``SipHash128(secret, [TENANT_DOMAIN, salt])`` as two words."""
    msg = np.empty(2, dtype=np.uint64)
    msg[0] = np.uint64(TENANT_DOMAIN)
    msg[1] = np.uint64(salt)
    return siphash128_words(k0, k1, msg)


@njit(cache=True, nogil=True)
def hash_block_keys(t0, t1, has_parent, parent0, parent1, tokens, block_size, extra):
    """Chained 128-bit keys of the full blocks of ``tokens`` (int64) under tenant key (t0, t1).

    ``extra`` is ``(n_full, m)`` uint64 (m may be 0): extra words mixed into each block's key.
    Returns an ``(n_full, 2)`` uint64 array.  Runtime complexity: O(n_full * (block_size + m)).
    """
    n_full = tokens.shape[0] // block_size
    out = np.empty((n_full, 2), dtype=np.uint64)
    _hash_chain_into(np.uint64(t0), np.uint64(t1), has_parent, np.uint64(parent0), np.uint64(parent1),
                     tokens, 0, n_full, block_size, extra, out, 0)
    return out


@njit(cache=True, nogil=True)
def hash_many_block_keys(t0, t1, token_offsets, tokens, block_size, key_offsets, out):
    """Keys of many token sequences (CSR ``token_offsets``), each chain starting fresh.

    Writes sequence ``r``'s keys to ``out[key_offsets[r]:key_offsets[r+1]]``.
    Runtime complexity: O(len(tokens)).
    """
    no_extra = np.zeros((0, 0), dtype=np.uint64)
    for r in range(token_offsets.shape[0] - 1):
        n_full = (token_offsets[r + 1] - token_offsets[r]) // block_size
        _hash_chain_into(np.uint64(t0), np.uint64(t1), False, np.uint64(0), np.uint64(0),
                         tokens[token_offsets[r]:], 0, n_full, block_size, no_extra, out, key_offsets[r])


@njit(cache=True, nogil=True)
def _hash_chain_into(t0, t1, has_parent, p0, p1, tokens, first, n_full, block_size, extra, out, out_start):
    # Blocks first .. n_full-1 of tokens; extra has one row per block, or zero columns.
    m = extra.shape[1]
    domain = np.uint64(1) if has_parent else np.uint64(0)
    nbytes = 8 * (3 + block_size + m)
    last = np.uint64(nbytes & 0xFF) << np.uint64(56)
    for i in range(first, n_full):
        v0, v1, v2, v3 = _sip_init(t0, t1)
        v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, domain)
        v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, p0)
        v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, p1)
        base = i * block_size
        for j in range(block_size):
            v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, np.uint64(tokens[base + j]))
        for j in range(m):
            v0, v1, v2, v3 = _sip_absorb(v0, v1, v2, v3, extra[i, j])
        p0, p1 = _sip_finish128(v0, v1, v2, v3, last)
        out[out_start + i, 0] = p0
        out[out_start + i, 1] = p1
        domain = np.uint64(1)  # every later block has a parent: the previous key
