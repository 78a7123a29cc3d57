"""Paged block allocator with a keyed prefix cache (vLLM v1 ``BlockPool`` semantics).

The pool holds ``num_blocks`` blocks of ``block_size`` tokens.  Every block has a reference
count.  Blocks with count 0 sit in the *free queue*, a doubly linked list that is also the
eviction order: ``allocate`` takes blocks from its head, and a taken block that still held cached
content loses its prefix-cache entry (an eviction).  ``free`` puts blocks that hold cached content
at the tail (evicted last, in the order freed: a request frees its blocks last-first, so prefix
tails go before heads) and blocks without content at the head (reused first).

The prefix cache maps 128-bit content keys to blocks.  Keys are not de-duplicated (block tables
stay append-only): one key may be cached in several blocks, and ``lookup`` returns the block that
was cached earliest among those still cached, exactly like vLLM's insertion-ordered dict.

Array layout (structure of arrays; ``N = num_blocks``, ``T`` = hash-table slots, a power of two
>= 8N: at most an eighth full, which keeps probe runs short: at a quarter full, admit + free ran
~10 % slower on the Mooncake replay, from the longer probes and backward shifts)::

    block_fields  int32 (6, N)   rows: REF, FREE_PREV, FREE_NEXT, KEY_PREV, KEY_NEXT, CACHED
    block_keys    uint64 (N, 2)  the key a cached block holds ((0, 0) when it holds none)
    table         int32 (2, T)   linear-probing slots: row 0 = first block of the key's chain
                                 (-1: empty slot), row 1 = last block; the key itself is read
                                 from block_keys[first block]
    meta          int64 (10,)    free-queue head/tail, counters (see the ``META_*`` names)

Worked example: 4 blocks, block 1 and block 3 both cached under key K (1 first), block 2 in use::

    REF       = [0, 0, 1, 0]
    free queue: head 0 <-> 1 <-> 3 tail     FREE_PREV = [-1, 0, -1, 1]  FREE_NEXT = [1, 3, -1, -1]
    K's chain: 1 -> 3                       KEY_PREV  = [-1, -1, -1, 1] KEY_NEXT  = [-1, 3, -1, -1]
    CACHED    = [0, 1, 0, 1]                table[:, slot(K)] = (1, 3)
    lookup([K]) -> [1];  allocate(2) -> [0, 1] (block 1 is evicted: K's chain is now just 3)

Every method validates its whole input before changing anything: a call that raises a
:class:`~kvmm.errors.KvmmError` leaves every array exactly as it was.
"""

from __future__ import annotations

import os

import numpy as np

from kvmm._validate import as_count, as_index_array
from kvmm.allocators import _block_kernels as kernels
from kvmm.allocators._block_allocator_checks import (
    as_count_0d,
    as_salt,
    block_ids,
    copy_block_ids,
    copy_key_array,
    count_array,
    csr_offsets,
    key_array,
    offsets_array,
    one_block_id,
    python_keys,
    raise_ids,
    raise_offsets,
)
from kvmm.allocators._block_kernels import (
    CACHED,
    ERR_COPY,
    ERR_OFFSETS,
    FREE_NEXT,
    FREE_PREV,
    KEY_NEXT,
    KEY_PREV,
    META_EVICTIONS,
    META_FREE_HEAD,
    META_FREE_TAIL,
    META_HITS,
    META_NUM_CACHED,
    META_NUM_FREE,
    META_NUM_KEYS,
    META_QUERIES,
    META_SEED,
    META_TABLE_MASK,
    NUM_FIELDS,
    NUM_META,
    REF,
    STATUS_BITS,
)
from kvmm.allocators._hashing import derive_tenant_key, hash_block_keys, hash_many_block_keys, secret_words
from kvmm.errors import BadInputError, DTypeError, OutOfBlocksError, ShapeError

__all__ = ["BlockAllocator"]

_INT32 = np.dtype(np.int32)
_UINT64 = np.dtype(np.uint64)
_ZERO = 0
_NO_EXTRA = np.zeros(0, dtype=np.int64)  # admit_many without num_extra: no extra blocks for any request
_FAST = kernels.FAST  # compiled kernels called without the dispatcher (arguments of checked types)
_empty = np.empty  # (one global lookup, not two, on the per-request path)


class BlockAllocator:
    """Paged KV blocks with reference counts, a free queue in eviction order and a prefix cache.

    Args:
        num_blocks: blocks in the pool (>= 1).
        block_size: tokens per block (>= 1), used by :meth:`hash_blocks`.
        secret: 16-byte SipHash key for content keys; random (``os.urandom``) when ``None``.
        salt: tenant salt (0 <= salt < 2**64): allocators (or calls) with different salts never
            produce equal keys for equal tokens.

    Runtime complexity: O(num_blocks) to construct; every operation is O(items in the call)
    (hash-table operations expected O(1)).
    """

    def __init__(self, num_blocks: int, block_size: int, *, secret: bytes | None = None, salt: int = 0) -> None:
        num_blocks = as_count(num_blocks, "num_blocks", minimum=1)
        block_size = as_count(block_size, "block_size", minimum=1)
        if num_blocks >= 2**31 - 1:
            raise BadInputError(f"num_blocks must be < 2**31 - 1 (int32 block ids), got {num_blocks}")
        if secret is None:
            secret = os.urandom(16)
        if not isinstance(secret, (bytes, bytearray)) or len(secret) != 16:
            got = f"{len(secret)} bytes" if isinstance(secret, (bytes, bytearray)) else type(secret).__name__
            raise BadInputError(f"secret must be 16 bytes (a SipHash-2-4 key), got {got}")
        self.salt = as_salt(salt)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._k0, self._k1 = secret_words(bytes(secret))  # the key words only: the raw secret is not kept
        self._tenant = _tenant_key(self._k0, self._k1, self.salt)

        table_size = 1 << max(3, (8 * num_blocks - 1).bit_length())
        self.block_fields = np.full((NUM_FIELDS, num_blocks), -1, dtype=np.int32)
        self.block_fields[REF] = 0
        self.block_fields[CACHED] = 0
        ids = np.arange(num_blocks, dtype=np.int32)
        self.block_fields[FREE_PREV] = ids - 1  # initially every block, ascending: 0 <-> 1 <-> ... <-> N-1
        self.block_fields[FREE_NEXT] = ids + 1
        self.block_fields[FREE_NEXT, -1] = -1
        self.block_keys = np.zeros((num_blocks, 2), dtype=np.uint64)
        self.table = np.full((2, table_size), -1, dtype=np.int32)
        self.meta = np.zeros(NUM_META, dtype=np.int64)
        self.meta[META_FREE_HEAD] = 0
        self.meta[META_FREE_TAIL] = num_blocks - 1
        self.meta[META_NUM_FREE] = num_blocks
        # Seed of the table's slot mixer, so externally chosen keys (e.g. trace ids) cannot be
        # arranged to pile into one probe run without knowing it.
        self.meta[META_SEED] = int.from_bytes(os.urandom(8), "little") >> 1
        self.meta[META_TABLE_MASK] = table_size - 1

        self._ref_view = self._read_only_ref_view()

    def _read_only_ref_view(self) -> np.ndarray:
        ref = self.block_fields[REF].view()
        ref.flags.writeable = False
        return ref

    # copy.deepcopy and pickle copy a view as an array of its own: rebuild the view over the copy's
    # block_fields, or the copy's ref_counts would stop following its pool
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_ref_view"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._ref_view = self._read_only_ref_view()

    # ----------------------------------------------------------------- read-only state
    @property
    def ref_counts(self) -> np.ndarray:
        """Read-only int32 view: the reference count of every block."""
        return self._ref_view

    @property
    def num_free(self) -> int:
        """Blocks in the free queue (ref count 0, cached or not)."""
        return int(self.meta[META_NUM_FREE])

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (ref count > 0), in [0, 1].  Runtime complexity: O(1)."""
        return 1.0 - int(self.meta[META_NUM_FREE]) / self.num_blocks

    @property
    def num_cached(self) -> int:
        """Blocks that hold a prefix-cache key (in use or free)."""
        return int(self.meta[META_NUM_CACHED])

    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``queries`` (keys looked up), ``hits`` (keys found), ``evictions`` (cached
        blocks that lost their key to ``allocate`` or ``evict``), ``cached_blocks``, ``cached_keys``."""
        m = self.meta
        return {
            "queries": int(m[META_QUERIES]),
            "hits": int(m[META_HITS]),
            "evictions": int(m[META_EVICTIONS]),
            "cached_blocks": int(m[META_NUM_CACHED]),
            "cached_keys": int(m[META_NUM_KEYS]),
        }

    def free_queue(self) -> np.ndarray:
        """The free queue from head (next to be allocated) to tail, as int32 block ids.

        Runtime complexity: O(num_free).
        """
        return kernels.walk_free_queue(self.block_fields, self.meta)

    def block_key(self, block: int) -> tuple[int, int] | None:
        """The key a block holds, or ``None``.  Runtime complexity: O(1)."""
        b = one_block_id(self, block, "block")
        if not self.block_fields[CACHED, b]:
            return None
        return int(self.block_keys[b, 0]), int(self.block_keys[b, 1])

    def cached_map(self) -> dict[tuple[int, int], list[int]]:
        """``{key: [block ids in cache order]}`` (for tests and debugging; O(num_blocks))."""
        out: dict[tuple[int, int], list[int]] = {}
        head, tail = self.table
        for slot in np.flatnonzero(head >= 0):
            b = int(head[slot])
            key = (int(self.block_keys[b, 0]), int(self.block_keys[b, 1]))
            chain = []
            while b != -1:
                chain.append(b)
                b = int(self.block_fields[KEY_NEXT, b])
            out[key] = chain
        return out

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every state array (tests compare them before and after a failing call).

        Runtime complexity: O(num_blocks).
        """
        return {
            "block_fields": self.block_fields.copy(),
            "block_keys": self.block_keys.copy(),
            "table": self.table.copy(),
            "meta": self.meta.copy(),
        }

    # ----------------------------------------------------------------- block operations
    def allocate(self, n: int) -> np.ndarray:
        """Take ``n`` blocks from the head of the free queue; each gets ref count 1.

        A taken block that held a cached key loses it (counted in ``stats["evictions"]``).
        Raises :class:`OutOfBlocksError` if fewer than ``n`` blocks are free.
        Runtime complexity: O(n).
        """
        if type(n) is not int or n < 0:  # fast path for plain ints; full checks otherwise
            n = as_count_0d(n, "n")
        # the kernel checks n against the free count; the output is bounded by the pool size
        if n > self.num_blocks or not _FAST.allocate(self.block_fields, self.block_keys, self.table, self.meta,
                                                     out := np.empty(n, _INT32)):
            raise OutOfBlocksError(f"asked for {n} blocks but only {self.num_free} of {self.num_blocks} are free")
        return out

    def allocate_many(self, counts) -> tuple[np.ndarray, np.ndarray]:
        """Allocate for many requests at once: request ``r`` gets ``counts[r]`` blocks.

        Returns CSR arrays ``(offsets int64 [R+1], ids int32 [sum(counts)])``: request ``r``
        owns ``ids[offsets[r]:offsets[r+1]]``.  Blocks are taken from the head in request order,
        so the result equals consecutive :meth:`allocate` calls.  Raises
        :class:`OutOfBlocksError` (nothing allocated) if the total exceeds ``num_free``.
        Runtime complexity: O(R + sum(counts)).
        """
        counts = count_array(counts, "counts")
        # A count above num_free fails anyway; checking the largest first keeps int64 counts near
        # 2**63 from wrapping the sum around to a small total.
        total = int(counts.max()) if counts.size else 0
        in_all = total <= self.meta[META_NUM_FREE]
        if in_all:
            total = int(counts.sum())
        if total > self.meta[META_NUM_FREE]:
            raise OutOfBlocksError(f"counts ask for {total} blocks {'in all' if in_all else 'for one request'} "
                                   f"but only {self.num_free} of {self.num_blocks} are free")
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        out = np.empty(total, dtype=np.int32)
        _FAST.allocate(self.block_fields, self.block_keys, self.table, self.meta, out)  # fits: checked above
        return offsets, out

    def free(self, ids) -> None:
        """Decrement the ref counts of ``ids`` in the given order (pass a request's blocks last-first).

        Blocks of this call that reach 0 and hold a cached key are appended to the tail of the
        free queue in that order; those that hold none are put at the head, keeping their order
        (the first freed becomes the new head).  A block may appear several times (once per
        reference).  Raises :class:`DoubleFreeError` if a block would go below 0 (the whole batch
        is checked first; nothing changes).  Runtime complexity: O(len(ids)).
        """
        if not (type(ids) is np.ndarray and (ids.dtype is _INT32 or ids.dtype == np.int32) and ids.ndim == 1):
            ids = copy_block_ids(self, ids, "ids")  # (the test of block_ids, inlined: this is the per-request path)
        code = _FAST.free_in_order(self.block_fields, self.meta, ids)
        if code:
            if code == -ERR_COPY:  # e.g. free(ref_counts): ids share memory with the pool's state
                return self.free(copy_block_ids(self, ids, "ids"))
            raise_ids(self, code, ids, "ids")

    def free_requests(self, offsets, ids) -> None:
        """Free many requests' blocks (CSR ``offsets``/``ids``), each request's blocks last-first.

        Same as ``free(concatenation of ids[offsets[r]:offsets[r+1]][::-1] for r in order)``.
        Runtime complexity: O(R + len(ids)).
        """
        ids = block_ids(self, ids, "ids")
        offsets = offsets_array(offsets, "offsets")  # the kernel checks the CSR shape first
        order = np.empty(len(ids), _INT32)  # the kernel writes the freeing order here before it checks ids
        code = _FAST.free(self.block_fields, self.meta, ids, 1, offsets, order)
        if code:
            if code == -ERR_COPY:
                return self.free_requests(offsets.copy(), copy_block_ids(self, ids, "ids"))
            if code == -ERR_OFFSETS:
                raise_offsets(offsets, len(ids), "offsets")
            raise_ids(self, code, order, "ids (last-first per request)")

    def touch(self, ids) -> None:
        """Increment the ref counts of ``ids`` (prefix-cache hits taken by a request).

        A block with ref count 0 (a cached block waiting in the free queue) is taken out of the
        queue.  Runtime complexity: O(len(ids)).
        """
        ids = block_ids(self, ids, "ids")
        code = kernels.touch(self.block_fields, self.meta, ids)
        if code == -ERR_COPY:
            return self.touch(copy_block_ids(self, ids, "ids"))
        if code:
            raise_ids(self, code, ids, "ids")

    # ----------------------------------------------------------------- prefix cache
    def hash_blocks(self, tokens, parent=None, extra=None, *, salt: int | None = None) -> np.ndarray:
        """Chained 128-bit content keys of the full blocks of ``tokens``: ``(n_full, 2)`` uint64.

        ``key_i = SipHash-2-4-128(tenant_key, [domain, key_{i-1}, tokens of block i, extra_i])``
        with ``key_{-1} = parent`` (a key, e.g. the last key of an earlier call; ``None`` starts
        a chain) and ``tenant_key`` derived from the allocator's secret and ``salt`` (default:
        the allocator's).  ``extra``: per-block extra words (LoRA id, multimodal hash, ...) as
        ``(n_full, m)`` or ``(m,)`` (same words for every block) integers.  A trailing partial
        block is ignored.  Runtime complexity: O(len(tokens) + n_full * m).
        """
        toks = as_index_array(tokens, "tokens", dtype=np.int64)  # an empty list is fine, floats are not
        n_full = toks.shape[0] // self.block_size
        if parent is None:
            has_parent, p0, p1 = False, 0, 0
        else:
            pk = python_keys(parent, "parent")
            if pk.size != 2:
                raise ShapeError(f"parent must be one key (2 uint64 words), got shape {np.shape(parent)}")
            pk = copy_key_array(pk.reshape(1, 2), "parent")  # (negative words raise, as in lookup's keys)
            has_parent, p0, p1 = True, int(pk[0, 0]), int(pk[0, 1])
        if extra is None:
            ext = np.zeros((n_full, 0), dtype=np.uint64)
        else:
            ext = python_keys(extra, "extra")
            if ext.size == 0 and ext.dtype.kind not in "iu":
                ext = ext.astype(np.uint64)
            if ext.dtype.kind not in "iu":
                raise DTypeError(f"extra must hold integers, got dtype {ext.dtype}")
            if ext.ndim == 1:
                ext = np.broadcast_to(ext, (n_full, ext.shape[0]))
            if ext.ndim != 2 or ext.shape[0] != n_full:
                raise ShapeError(f"extra must have shape (m,) or ({n_full}, m) (one row per full block), "
                                 f"got {np.shape(extra)}")
            ext = np.ascontiguousarray(ext.astype(np.uint64))
        t0, t1 = self._tenant if salt is None else _tenant_key(self._k0, self._k1, as_salt(salt))
        u64 = np.uint64
        return hash_block_keys(u64(t0), u64(t1), has_parent, u64(p0), u64(p1), toks, self.block_size, ext)

    def hash_blocks_many(self, offsets, tokens, *, salt: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`hash_blocks` for many sequences (CSR ``offsets``/``tokens``) in one call.

        Each sequence's chain starts fresh (no parent, no extra words).  Returns CSR
        ``(key_offsets int64 [R+1], keys (K, 2) uint64)``; sequence ``r``'s keys equal
        ``hash_blocks(tokens[offsets[r]:offsets[r+1]])``.  Runtime complexity: O(len(tokens)).
        """
        toks = as_index_array(tokens, "tokens", dtype=np.int64)
        offsets = csr_offsets(offsets, toks.shape[0], "offsets")
        key_offsets = np.zeros(offsets.shape[0], dtype=np.int64)
        np.cumsum(np.diff(offsets) // self.block_size, out=key_offsets[1:])
        out = np.empty((int(key_offsets[-1]), 2), dtype=np.uint64)
        t0, t1 = self._tenant if salt is None else _tenant_key(self._k0, self._k1, as_salt(salt))
        hash_many_block_keys(np.uint64(t0), np.uint64(t1), offsets, toks, self.block_size, key_offsets, out)
        return key_offsets, out

    def cache_blocks(self, ids, keys) -> None:
        """Register full blocks under content keys (``keys``: ``(n, 2)`` uint64, or ``(n,)`` ints).

        Each block must be in use (ref count > 0) and may appear once.  A block that already
        holds the same key is left as it is (as vLLM's ``cache_full_blocks`` skips prefix hits);
        one that holds another key raises :class:`BadInputError`.  Keys are not de-duplicated: a
        key already cached elsewhere gets one more block (lookups keep returning the earlier
        one).  Runtime complexity: O(n) expected.
        """
        ids = block_ids(self, ids, "ids")
        keys = key_array(keys, "keys")
        if keys.shape[0] != ids.shape[0]:
            raise ShapeError(f"ids and keys must have the same length, got {ids.shape[0]} ids and {keys.shape[0]} keys")
        code = kernels.cache_blocks(self.block_fields, self.block_keys, self.table, self.meta, ids, keys)
        if code == -ERR_COPY:
            return self.cache_blocks(copy_block_ids(self, ids, "ids"), keys.copy())
        if code:
            raise_ids(self, code, ids, "ids")

    def lookup(self, keys) -> np.ndarray:
        """Block ids (int32) of the longest cached prefix of ``keys`` (stops at the first miss).

        Counts ``len(keys)`` queries and the returned number of hits.  Does not touch the blocks.
        Runtime complexity: O(hits + 1) expected.
        """
        keys = key_array(keys, "keys")
        out = np.empty(keys.shape[0], dtype=np.int32)
        h = _FAST.lookup(self.block_keys, self.table, self.meta, keys, out)
        if h < 0:  # -ERR_COPY: keys share memory with the pool's state
            return self.lookup(keys.copy())
        return out if h == keys.shape[0] else out[:h].copy()

    def lookup_many(self, offsets, keys) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` for many requests (CSR ``offsets``/``keys``) in one call.

        Returns CSR ``(hit_offsets int64 [R+1], hit_ids int32)``; request ``r``'s hits are
        ``hit_ids[hit_offsets[r]:hit_offsets[r+1]]``.  Runtime complexity: O(R + hits).
        """
        keys = key_array(keys, "keys")
        offsets = csr_offsets(offsets, keys.shape[0], "offsets")
        hit_offsets = np.empty(offsets.shape[0], dtype=np.int64)
        out = np.empty(keys.shape[0], dtype=np.int32)
        h = kernels.lookup_many(self.block_keys, self.table, self.meta, offsets, keys, hit_offsets, out)
        if h < 0:  # -ERR_COPY: keys or offsets share memory with the pool's state
            return self.lookup_many(offsets.copy(), keys.copy())
        return hit_offsets, out[:h].copy()

    def evict(self, ids) -> int:
        """Drop the cached keys of ``ids`` (blocks keep their ref counts and queue positions).

        Returns how many blocks lost a key (counted in ``stats["evictions"]``); blocks that hold
        none are skipped.  Runtime complexity: O(len(ids)) expected.
        """
        ids = block_ids(self, ids, "ids")
        code = kernels.evict(self.block_fields, self.block_keys, self.table, self.meta, ids)
        if code == -ERR_COPY:
            return self.evict(copy_block_ids(self, ids, "ids"))
        if code < 0:
            raise_ids(self, code, ids, "ids")
        return code  # blocks that lost a key

    def reset_prefix_cache(self) -> bool:
        """Forget every cached key, as vLLM's ``BlockPool.reset_prefix_cache``.

        Like vLLM it only succeeds when no block is in use (otherwise a running request's block
        table would point at blocks whose keys vanish): returns ``False`` and changes nothing if
        any ref count is > 0.  The free-queue order is kept; counters are kept; the dropped keys
        are not counted as evictions.  Runtime complexity: O(num_blocks).
        """
        if self.meta[META_NUM_FREE] != self.num_blocks:
            return False
        self.block_fields[KEY_PREV] = -1
        self.block_fields[KEY_NEXT] = -1
        self.block_fields[CACHED] = 0
        self.block_keys[:] = 0
        self.table[:] = -1
        self.meta[META_NUM_CACHED] = 0
        self.meta[META_NUM_KEYS] = 0
        return True

    # ----------------------------------------------------------------- fused request API
    def admit(self, keys, num_extra: int = _ZERO) -> tuple[np.ndarray, int]:
        """One request's whole admission in one call: lookup, touch the hits, allocate the rest.

        ``keys`` are the request's full-block keys; the ``h`` leading keys that are cached are
        touched, ``len(keys) - h + num_extra`` blocks are allocated, and the newly allocated
        blocks for keys ``h..`` are cached under those keys (their content is about to be
        computed).  Returns ``(block ids int32 [len(keys) + num_extra], h)``.  Equivalent to
        ``lookup``, ``touch``, ``allocate`` and ``cache_blocks`` in sequence; raises
        :class:`OutOfBlocksError` with nothing changed (not even counters) when the blocks do
        not fit.  Runtime complexity: O(len(keys) + num_extra) expected.
        """
        # The per-request path: only type, dtype and dimensions are tested here; the kernel tests
        # the key width, alignment and aliasing (-ERR_COPY: validate and retry with a copy).
        if not (type(keys) is np.ndarray and (keys.dtype is _UINT64 or keys.dtype == np.uint64) and keys.ndim == 2):
            keys = copy_key_array(keys, "keys")
        if num_extra is not _ZERO:  # the default (or any int 0: CPython has one) needs no test
            if type(num_extra) is not int or num_extra < 0:
                num_extra = as_count_0d(num_extra, "num_extra")
            if num_extra > self.meta[META_NUM_FREE]:  # before the output is sized by it
                self._raise_num_extra(num_extra)
        ids = _empty(len(keys) + num_extra, _INT32)
        hits = _FAST.admit(self.block_fields, self.block_keys, self.table, self.meta, keys, ids)
        if hits < 0:
            if hits == -ERR_COPY:
                return self.admit(copy_key_array(keys, "keys"), num_extra)
            hits = -hits >> STATUS_BITS  # ERR_OUT_OF_BLOCKS
            raise OutOfBlocksError(
                f"request needs {len(keys) - hits + num_extra} new blocks (+ {hits} cached hits) but only "
                f"{self.num_free} are free after taking its free cached hits; expected at most num_free new blocks")
        return ids, hits

    def _raise_num_extra(self, num_extra: int) -> None:
        raise OutOfBlocksError(f"request needs at least num_extra={num_extra} new blocks but only {self.num_free} "
                               f"are free; expected at most num_free new blocks")

    def admit_many(self, offsets, keys, num_extra=None) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`admit` for a scheduler step's requests (CSR ``offsets``/``keys``), in order.

        Stops at the first request whose blocks do not fit (like a scheduler that runs out of
        KV space; no error).  Returns ``(num_admitted, block_offsets int64, block_ids int32,
        num_hits int64)`` for the admitted requests.  Runtime complexity: O(R + blocks).
        """
        if not (type(keys) is np.ndarray and (keys.dtype is _UINT64 or keys.dtype == np.uint64) and keys.ndim == 2):
            keys = copy_key_array(keys, "keys")  # (as in admit, the kernel tests the rest)
        offsets = offsets_array(offsets, "offsets")  # the kernel checks the CSR shape first
        r = max(offsets.shape[0] - 1, 0)
        if num_extra is None:
            extra = _NO_EXTRA
            size = keys.shape[0]
        else:
            extra = count_array(num_extra, "num_extra")
            if extra.shape[0] != r:
                raise ShapeError(f"num_extra must have one count per request ({r}), got {extra.shape[0]}")
            # The admitted requests take at most num_free new blocks plus one hit per key, and a
            # request that does not fit writes only its hits: size the output by that, not by
            # sum(num_extra) (which may be huge, or wrap around int64).  Counts above num_free
            # never fit: clip them to num_free + 1 (same outcome, and the kernel's int64
            # arithmetic cannot overflow).
            num_free = int(self.meta[META_NUM_FREE])
            extra = np.minimum(extra, num_free + 1)
            size = keys.shape[0] + min(int(extra.sum()), num_free)
        block_offsets = np.empty(r + 1, dtype=np.int64)
        block_ids = np.empty(size, dtype=np.int32)
        hits = np.empty(r, dtype=np.int64)
        n, used = _FAST.admit_many(self.block_fields, self.block_keys, self.table, self.meta, offsets, keys, extra,
                                   block_offsets, block_ids, hits)
        if n == -ERR_COPY:
            return self.admit_many(offsets.copy(), copy_key_array(keys, "keys"), num_extra)
        if n < 0:
            raise_offsets(offsets, keys.shape[0], "offsets")
        if n == r and used == size:  # every request admitted, every slot used: the buffers as they are
            return n, block_offsets, block_ids, hits
        # views of this call's own buffers, not copies (the unused tails are small: see above)
        return n, block_offsets[:n + 1], block_ids[:used], hits[:n]

    # ----------------------------------------------------------------- invariants
    def check(self) -> None:
        """Assert every invariant (expensive: O(num_blocks + table size), for tests)."""
        f, keys, table, meta = self.block_fields, self.block_keys, self.table, self.meta
        n = self.num_blocks
        ref = f[REF]
        # Shapes and dtypes never change.
        assert f.shape == (NUM_FIELDS, n) and f.dtype == np.int32
        assert keys.shape == (n, 2) and keys.dtype == np.uint64
        assert table.dtype == np.int32 and table.shape[0] == 2 and meta.dtype == np.int64
        # Ref counts are never negative.
        assert (ref >= 0).all(), "negative ref count"
        # The free queue is a proper doubly linked list from head to tail ...
        order = []
        seen = np.zeros(n, dtype=bool)
        prev, b = -1, int(meta[META_FREE_HEAD])
        while b != -1:
            assert 0 <= b < n, f"free queue links to id {b}"
            assert not seen[b], f"block {b} twice in the free queue"  # no id twice
            seen[b] = True
            assert f[FREE_PREV, b] == prev, f"free_prev of {b} is {f[FREE_PREV, b]}, expected {prev}"
            order.append(b)
            prev, b = b, int(f[FREE_NEXT, b])
        assert int(meta[META_FREE_TAIL]) == prev, "free-queue tail does not end the list"
        # ... holding exactly the ref-0 blocks, and num_free counts them.
        assert len(order) == meta[META_NUM_FREE], "num_free disagrees with the queue length"
        assert np.array_equal(seen, ref == 0), "free queue is not exactly the ref-0 blocks"
        # Blocks in use are unlinked.
        assert (f[FREE_PREV][~seen] == -1).all() and (f[FREE_NEXT][~seen] == -1).all(), "in-use block still linked"
        # The cached map and the per-block keys agree: every occupied slot holds a chain of
        # cached blocks with the slot's key, linked both ways, reachable by linear probing.
        mask = int(meta[META_TABLE_MASK])
        assert table.shape[1] == mask + 1 and table.shape[1] >= 8 * n
        in_chain = np.zeros(n, dtype=bool)
        occupied = np.flatnonzero(table[0] >= 0)
        seen_keys = set()
        for slot in occupied:
            head, tail = int(table[0, slot]), int(table[1, slot])
            key = (int(keys[head, 0]), int(keys[head, 1]))
            assert key not in seen_keys, f"key {key} in two slots"
            seen_keys.add(key)
            ideal = int(kernels.slot_hash(keys[head, 0], keys[head, 1], meta[META_SEED])) & mask
            s = ideal
            while s != slot:  # linear probing: no empty slot between the ideal slot and this one
                assert table[0, s] >= 0, f"empty slot {s} breaks the probe run of key {key}"
                s = (s + 1) & mask
            prev, b = -1, head
            while b != -1:
                assert not in_chain[b], f"block {b} in two key chains"
                in_chain[b] = True
                assert f[CACHED, b] == 1 and (int(keys[b, 0]), int(keys[b, 1])) == key
                assert f[KEY_PREV, b] == prev
                prev, b = b, int(f[KEY_NEXT, b])
            assert prev == tail, f"tail of key {key}'s chain is {tail}, expected {prev}"
        assert (table[1][table[0] < 0] == -1).all(), "empty slot with a tail"
        # Every cached block is in exactly one chain; blocks without a key are fully reset.
        assert np.array_equal(in_chain, f[CACHED] == 1), "cached flag and key chains disagree"
        nc = ~in_chain
        assert (f[KEY_PREV][nc] == -1).all() and (f[KEY_NEXT][nc] == -1).all() and (keys[nc] == 0).all()
        assert ((f[CACHED] == 0) | (f[CACHED] == 1)).all()
        # Counters add up.
        assert meta[META_NUM_CACHED] == in_chain.sum(), "num_cached counter is off"
        assert meta[META_NUM_KEYS] == occupied.size, "num_keys counter is off"
        assert 0 <= meta[META_HITS] <= meta[META_QUERIES] and meta[META_EVICTIONS] >= 0


# =================================================================== helpers


def _tenant_key(k0: int, k1: int, salt: int) -> tuple[int, int]:
    t0, t1 = derive_tenant_key(np.uint64(k0), np.uint64(k1), np.uint64(salt))
    return int(t0), int(t1)

