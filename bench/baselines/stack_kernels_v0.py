"""The stack-distance kernel as first committed (5464a2d), kept as the same-run baseline of bench/.

A verbatim copy of ``kvmm/policies/_stack_kernels.py`` at commit 5464a2d ("StackDistanceTracker
(exact, Fenwick over mark blocks, in-kernel hash ids)"), the version the performance issue
measured, plus ``V0Tracker``: the exact-mode driver of that commit's ``StackDistanceTracker``
(``_run`` / ``_grow``).  Not part of the package.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from kvmm._arrays import grown as _grown  # stack_distance._grown, moved to kvmm._arrays; same function
from kvmm.policies.mrc.stack_distance import _next_pow2  # unchanged since 5464a2d

# state vector indices
ST_IDS = 0  # dense ids handed out (distinct keys ever tracked)
ST_CLOCK = 1  # next free time position
ST_LIVE = 2  # live marks (keys currently on the LRU stack)
ST_COLD = 3  # cold misses among the sampled references (exact and fixed-rate modes)
ST_REFS = 4  # every reference offered, sampled or not
ST_SAMPLED = 5  # references that passed the sampling filter (== REFS in exact mode)
ST_HEAP = 6  # fixed-size SHARDS: entries in the max-heap of sampled keys
ST_ACTIVE = 7  # fixed-size SHARDS: 1 once the sample first overflowed (threshold in force)
ST_LEN = 8

# kernel exit statuses
DONE = 0
GROW_TABLE = 1
GROW_IDS = 2
GROW_TIME = 3
GROW_HIST = 4

#: references per chunk: pass 1 maps a chunk's keys to ids, pass 2 computes their distances
CHUNK = 4096
BLOCK_SHIFT = 3  # the Fenwick tree counts marks per block of 2**3 words = 512 positions
BLOCK_POSITIONS = 64 << BLOCK_SHIFT
PREFETCH_AHEAD = 16  # pass 2 prefetches id_last this many references ahead
PREFETCH_NEAR = 6  # ... and the mark word of the previous access this many ahead

HASH_MULT1 = np.uint64(0xBF58476D1CE4E5B9)
HASH_MULT2 = np.uint64(0x94D049BB133111EB)
HASH_ADD = np.uint64(0x9E3779B97F4A7C15)
TWO_POW_64 = 18446744073709551616.0


# --------------------------------------------------------------------------- batch kernels
@njit(cache=True, nogil=True)
def access_batch(keys, start, threshold, sampled_only, slots, id_keys, id_last, time_owner, time_bits, block_tree,
                 hist, state, distances, want_distances, id_buf, pos_buf):
    """Stack distances of ``keys[start:]``: exact, or (``sampled_only``) of the references whose
    key hash is below ``threshold`` (fixed-rate SHARDS).  Returns ``(next position, status)``.

    ``hist[d]`` counts sampled references at (sampled) distance ``d``; cold misses go to
    ``state[ST_COLD]``.  ``distances[i]`` (when ``want_distances``) gets the distance, -1 for a
    cold miss, -2 for a reference the sampling filter skipped.

    Works chunk by chunk in two passes so cache misses overlap instead of queueing behind each
    other: pass 1 maps keys to dense ids (independent hash probes); pass 2 counts marks,
    prefetching ``id_last`` of the references ahead.
    Runtime complexity: O(log T) per reference (T = time array size), amortised.
    """
    mask = np.uint64(slots.shape[0] // 2 - 1)
    table_size = slots.shape[0] // 2
    time_size = time_owner.shape[0]
    n = keys.shape[0]
    i = start
    while i < n:
        chunk = min(CHUNK, n - i)
        n_ids = state[ST_IDS]
        if (n_ids + chunk) * 2 > table_size:
            return i, GROW_TABLE
        if n_ids + chunk > id_keys.shape[0]:
            return i, GROW_IDS
        if state[ST_CLOCK] + chunk > time_size:
            if (state[ST_LIVE] + chunk) * 2 > time_size:
                return i, GROW_TIME
            compact_time(time_owner, id_last, time_bits, block_tree, state, time_owner)
        # pass 1: ids (a new key gets an id with id_last = -1: its first reference is cold)
        m = 0
        for j in range(i, i + chunk):
            key = keys[j]
            h = mix64(key)
            if sampled_only and h >= threshold:
                if want_distances:
                    distances[j] = -2
                continue
            s = find_slot(slots, mask, key, h)
            tag = slots[2 * s + 1]
            if tag == 0:
                tag = np.uint64(n_ids + 1)
                slots[2 * s] = key
                slots[2 * s + 1] = tag
                id_keys[n_ids] = key
                id_last[n_ids] = -1
                n_ids += 1
            id_buf[m] = np.int64(tag) - 1
            pos_buf[m] = j
            m += 1
        state[ST_IDS] = n_ids
        # pass 2: distances
        clock = state[ST_CLOCK]
        live = state[ST_LIVE]
        cold = state[ST_COLD]
        for q in range(m):
            if q + PREFETCH_AHEAD < m:
                prefetch(id_last, id_buf[q + PREFETCH_AHEAD])
            if q + PREFETCH_NEAR < m:
                ahead = id_last[id_buf[q + PREFETCH_NEAR]]
                if ahead >= 0:
                    prefetch(time_bits, ahead >> 6)
            ident = id_buf[q]
            prev = id_last[ident]
            if prev < 0:
                live += 1
                cold += 1
                d = -1
            else:
                d = live - marks_through(time_bits, block_tree, prev)
                mark_clear(time_bits, block_tree, prev)
            mark_set(time_bits, block_tree, clock)
            time_owner[clock] = ident
            id_last[ident] = clock
            clock += 1
            id_buf[q] = d  # the id is not needed any more; pass 3 reads the distance back
        # pass 3: histogram (independent increments, off the critical path of pass 2)
        for q in range(m):
            d = id_buf[q]
            if d >= 0:
                hist[d] += 1
            if want_distances:
                distances[pos_buf[q]] = d
        state[ST_CLOCK] = clock
        state[ST_LIVE] = live
        state[ST_COLD] = cold
        state[ST_SAMPLED] += m
        state[ST_REFS] += chunk
        i += chunk
    return i, DONE


@njit(cache=True, nogil=True)
def access_fixed_size(keys, start, max_keys, slots, id_keys, id_last, id_hash, time_owner, time_bits, block_tree,
                      heap, whist, wstate, threshold_box, state, distances, want_distances):
    """Fixed-size SHARDS over ``keys[start:]``: track at most ``max_keys`` sampled keys.

    Until the set first overflows every key is sampled (``state[ST_ACTIVE] == 0``, rate 1).
    When a new sampled key makes the set exceed ``max_keys``, the key with the largest hash is
    dropped (its mark removed) and the threshold ``threshold_box[0]`` falls to that hash, so the
    rate R = threshold / 2^64 only decreases and a dropped key is never sampled again.  Each
    sampled reference adds weight ``1/R`` (the references it stands for) at scaled distance
    ``floor(d / R)`` into ``whist`` (float64); cold misses add ``1/R`` to ``wstate[0]``.
    ``heap`` is a max-heap of the live sampled ids keyed by ``id_hash`` (``state[ST_HEAP]``).
    Returns ``(next position, status)``; checks room per chunk like :func:`access_batch` (a
    GROW_HIST stop happens before the reference is applied).
    Runtime complexity: O(log T + log max_keys) per sampled reference, O(1) per skipped one.
    """
    mask = np.uint64(slots.shape[0] // 2 - 1)
    table_size = slots.shape[0] // 2
    time_size = time_owner.shape[0]
    n = keys.shape[0]
    n_ids = state[ST_IDS]
    clock = state[ST_CLOCK]
    live = state[ST_LIVE]
    heap_len = state[ST_HEAP]
    active = state[ST_ACTIVE] != 0
    threshold = threshold_box[0]
    rate = np.float64(threshold) / TWO_POW_64 if active else 1.0
    hist_len = whist.shape[0]
    status = DONE
    i = start
    chunk_end = start
    while i < n:
        if i == chunk_end:  # room for a whole chunk of (possibly all new) sampled keys?
            chunk = min(CHUNK, n - i)
            state[ST_CLOCK] = clock
            if (n_ids + chunk) * 2 > table_size:
                status = GROW_TABLE
                break
            if n_ids + chunk > id_keys.shape[0]:
                status = GROW_IDS
                break
            if clock + chunk > time_size:
                if (live + chunk) * 2 > time_size:
                    status = GROW_TIME
                    break
                clock = compact_time(time_owner, id_last, time_bits, block_tree, state, time_owner)
            chunk_end = i + chunk
        key = keys[i]
        h = mix64(key)
        if active and h >= threshold:
            if want_distances:
                distances[i] = -2
            i += 1
            continue
        s = find_slot(slots, mask, key, h)
        tag = slots[2 * s + 1]
        if tag == 0:
            ident = n_ids
            n_ids += 1
            slots[2 * s] = key
            slots[2 * s + 1] = np.uint64(ident + 1)
            id_keys[ident] = key
            id_hash[ident] = h
            id_last[ident] = -1
            # first reference: cold.  (A dropped key never comes back: its hash is at or
            # above the threshold from then on.)
            d = -1
            wstate[0] += 1.0 / rate
            live += 1
            heap_len = heap_push(heap, heap_len, id_hash, ident)
        else:
            ident = np.int64(tag) - 1
            prev = id_last[ident]
            d = live - marks_through(time_bits, block_tree, prev)
            scaled = np.int64(d / rate)
            if scaled >= hist_len:
                status = GROW_HIST
                break
            mark_clear(time_bits, block_tree, prev)
            whist[scaled] += 1.0 / rate
        mark_set(time_bits, block_tree, clock)
        time_owner[clock] = ident
        id_last[ident] = clock
        clock += 1
        state[ST_SAMPLED] += 1
        if want_distances:
            distances[i] = d
        i += 1
        if live > max_keys:
            victim = heap[0]
            heap_len = heap_pop(heap, heap_len, id_hash)
            mark_clear(time_bits, block_tree, id_last[victim])
            id_last[victim] = -1
            live -= 1
            threshold = id_hash[victim]
            active = True
            rate = np.float64(threshold) / TWO_POW_64
    state[ST_IDS] = n_ids
    state[ST_CLOCK] = clock
    state[ST_LIVE] = live
    state[ST_REFS] += i - start
    state[ST_HEAP] = heap_len
    state[ST_ACTIVE] = 1 if active else 0
    threshold_box[0] = threshold
    return i, status


# --------------------------------------------------------------------------- maintenance kernels
@njit(cache=True, nogil=True)
def compact_time(time_owner, id_last, time_bits, block_tree, state, new_time_owner):
    """Renumber live marks to ``0 .. live-1`` (time order kept) into ``new_time_owner`` (may be
    ``time_owner`` itself: positions only move down); ``time_bits``/``block_tree`` must be sized
    for ``new_time_owner`` and are rebuilt.  Returns the new clock.  O(T)."""
    clock = state[ST_CLOCK]
    j = 0
    for p in range(clock):
        owner = time_owner[p]
        if owner >= 0 and id_last[owner] == p:
            new_time_owner[j] = owner
            id_last[owner] = j
            j += 1
    for p in range(j, new_time_owner.shape[0]):
        new_time_owner[p] = -1
    state[ST_CLOCK] = j
    fill_marks(time_bits, block_tree, j)
    return j


@njit(cache=True, nogil=True)
def fill_marks(time_bits, block_tree, count):
    """Set marks at exactly positions ``0 .. count-1`` and rebuild the word tree.  O(T/64)."""
    n_words = time_bits.shape[0]
    for w in range(n_words):
        lo = w * 64
        if count >= lo + 64:
            time_bits[w] = np.uint64(0xFFFFFFFFFFFFFFFF)
        elif count <= lo:
            time_bits[w] = np.uint64(0)
        else:
            time_bits[w] = (np.uint64(1) << np.uint64(count - lo)) - np.uint64(1)
    n_blocks = block_tree.shape[0] - 1
    block_tree[:] = 0
    for w in range(n_words):
        block_tree[(w >> BLOCK_SHIFT) + 1] += popcount(time_bits[w])
    for idx in range(1, n_blocks + 1):  # O(n) Fenwick build: push each node into its parent
        parent = idx + (idx & (-idx))
        if parent <= n_blocks:
            block_tree[parent] += block_tree[idx]


@njit(cache=True, nogil=True)
def rehash(old_slots, new_slots):
    """Move every entry of ``old_slots`` into the (larger, empty) ``new_slots``."""
    mask = np.uint64(new_slots.shape[0] // 2 - 1)
    for s in range(old_slots.shape[0] // 2):
        tag = old_slots[2 * s + 1]
        if tag != 0:
            key = old_slots[2 * s]
            t = find_slot(new_slots, mask, key, mix64(key))
            new_slots[2 * t] = key
            new_slots[2 * t + 1] = tag


@njit(cache=True, nogil=True)
def lookup_ids(keys, slots, out):
    """Dense id of every key (-1 when unknown).  Read-only."""
    mask = np.uint64(slots.shape[0] // 2 - 1)
    for i in range(keys.shape[0]):
        key = keys[i]
        s = find_slot(slots, mask, key, mix64(key))
        out[i] = np.int64(slots[2 * s + 1]) - 1


@njit(cache=True, nogil=True)
def get_or_insert_ids(keys, slots, id_keys, state, out):
    """Dense id of every key, inserting unknown keys (ids ``state[0]``, ``state[0]+1``, ...).

    The caller guarantees room: ``2 * (state[0] + len(keys)) <= table size`` and
    ``state[0] + len(keys) <= len(id_keys)``.  Used by the admission policies' per-key counters.
    """
    mask = np.uint64(slots.shape[0] // 2 - 1)
    n_ids = state[0]
    for i in range(keys.shape[0]):
        key = keys[i]
        s = find_slot(slots, mask, key, mix64(key))
        tag = slots[2 * s + 1]
        if tag == 0:
            tag = np.uint64(n_ids + 1)
            slots[2 * s] = key
            slots[2 * s + 1] = tag
            id_keys[n_ids] = key
            n_ids += 1
        out[i] = np.int64(tag) - 1
    state[0] = n_ids


@njit(cache=True, nogil=True)
def hash_keys(keys, out):
    """The 64-bit sampling hash of every key (for tests and the plain-Python references)."""
    for i in range(keys.shape[0]):
        out[i] = mix64(keys[i])


# --------------------------------------------------------------------------- helpers
@intrinsic
def prefetch(typingctx, arr, index):
    """Hint the CPU to load ``arr[index]`` into cache (``llvm.prefetch``: read, high locality).

    Only a hint: it never faults, so a stale or out-of-range index is harmless.
    """
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]], wraparound=False,
                                       boundscheck=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def popcount(typingctx, word):
    """Number of set bits of a uint64 (``llvm.ctpop.i64``, one instruction on x86-64/arm64)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.ctpop.i64")
        return builder.call(fn, [args[0]])

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def mix64(key):
    """splitmix64 finaliser: a bijective, well-mixed 64-bit hash (for slots and for sampling)."""
    z = key + HASH_ADD
    z = (z ^ (z >> np.uint64(30))) * HASH_MULT1
    z = (z ^ (z >> np.uint64(27))) * HASH_MULT2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def find_slot(slots, mask, key, h):
    """Slot holding ``key``, or the empty slot where it would go (linear probing)."""
    s = np.int64(h & mask)
    while True:
        if slots[2 * s + 1] == 0 or slots[2 * s] == key:
            return s
        s = (s + 1) & np.int64(mask)


@njit(cache=True, nogil=True, inline="always")
def marks_through(time_bits, block_tree, pos):
    """Marks at positions ``0 .. pos`` inclusive: earlier 512-position blocks from the tree, the
    rest by popcount of at most 8 words (one cache line)."""
    w = pos >> 6
    first = (w >> BLOCK_SHIFT) << BLOCK_SHIFT
    # bits 0..(pos & 63) inclusive; for bit 63, 2 << 63 wraps to 0 and 0 - 1 is all ones
    low_mask = (np.uint64(2) << np.uint64(pos & 63)) - np.uint64(1)
    total = popcount(time_bits[w] & low_mask)
    for k in range(first, w):
        total += popcount(time_bits[k])
    i = w >> BLOCK_SHIFT  # 1-based prefix over blocks 0 .. block-1
    while i > 0:
        total += block_tree[i]
        i &= i - 1
    return total


@njit(cache=True, nogil=True, inline="always")
def mark_set(time_bits, block_tree, pos):
    w = pos >> 6
    time_bits[w] |= np.uint64(1) << np.uint64(pos & 63)
    tree_add(block_tree, (w >> BLOCK_SHIFT) + 1, 1)


@njit(cache=True, nogil=True, inline="always")
def mark_clear(time_bits, block_tree, pos):
    w = pos >> 6
    time_bits[w] &= ~(np.uint64(1) << np.uint64(pos & 63))
    tree_add(block_tree, (w >> BLOCK_SHIFT) + 1, -1)


@njit(cache=True, nogil=True, inline="always")
def tree_add(tree, i, delta):
    """Add ``delta`` at 1-based index ``i`` of a Fenwick tree."""
    n = tree.shape[0] - 1
    while i <= n:
        tree[i] += delta
        i += i & (-i)


@njit(cache=True, nogil=True, inline="always")
def heap_push(heap, heap_len, id_hash, ident):
    """Push ``ident`` on the max-heap keyed by ``id_hash``; return the new length."""
    pos = heap_len
    key = id_hash[ident]
    while pos > 0:
        parent = (pos - 1) >> 1
        if id_hash[heap[parent]] >= key:
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = ident
    return heap_len + 1


@njit(cache=True, nogil=True, inline="always")
def heap_pop(heap, heap_len, id_hash):
    """Remove the root (largest hash) of the max-heap; return the new length."""
    heap_len -= 1
    last = heap[heap_len]
    key = id_hash[last]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= heap_len:
            break
        if child + 1 < heap_len and id_hash[heap[child + 1]] > id_hash[heap[child]]:
            child += 1
        if id_hash[heap[child]] <= key:
            break
        heap[pos] = heap[child]
        pos = child
    if heap_len > 0:
        heap[pos] = last
    return heap_len


# --------------------------------------------------------------------------- the 5464a2d driver
class V0Tracker:
    """Exact LRU stack distances with the 5464a2d kernel (the driver of that commit, exact mode)."""

    def __init__(self, initial_keys: int = 1024) -> None:
        cap = max(16, 1 << int(max(int(initial_keys), 1) - 1).bit_length())
        self._slots = np.zeros(4 * cap, dtype=np.uint64)
        self._id_keys = np.zeros(cap, dtype=np.uint64)
        self._id_last = np.full(cap, -1, dtype=np.int64)
        self._time_owner = np.full(_time_size(4 * cap), -1, dtype=np.int32)
        self._time_bits = np.zeros(self._time_owner.shape[0] // 64, dtype=np.uint64)
        self._block_tree = np.zeros(self._time_owner.shape[0] // BLOCK_POSITIONS + 1, dtype=np.int32)
        self._hist = np.zeros(cap, dtype=np.int64)
        self._state = np.zeros(ST_LEN, dtype=np.int64)
        self._id_buf = np.empty(CHUNK, dtype=np.int64)
        self._pos_buf = np.empty(CHUNK, dtype=np.int64)

    def access(self, keys: np.ndarray) -> None:
        key_words = np.ascontiguousarray(keys).view(np.uint64)
        distances = np.empty(0, dtype=np.int64)
        pos = 0
        n = key_words.shape[0]
        while True:
            pos, status = access_batch(key_words, pos, np.uint64(0), False, self._slots, self._id_keys,
                                       self._id_last, self._time_owner, self._time_bits, self._block_tree,
                                       self._hist, self._state, distances, False, self._id_buf, self._pos_buf)
            if status == DONE:
                break
            self._grow(status, min(CHUNK, n - pos))

    def hits_by_distance(self) -> np.ndarray:
        """Histogram: element d counts references with stack distance d."""
        return self._hist.copy()

    def _grow(self, status: int, chunk: int) -> None:
        need = int(self._state[ST_IDS]) + chunk
        if status == GROW_TABLE:
            slots = max(self._slots.shape[0] // 2 * 2, 2 * _next_pow2(need))
            new = np.zeros(2 * slots, dtype=np.uint64)
            rehash(self._slots, new)
            self._slots = new
        elif status == GROW_IDS:
            cap = max(2 * self._id_keys.shape[0], _next_pow2(need))
            self._id_keys = _grown(self._id_keys, cap, 0)
            self._id_last = _grown(self._id_last, cap, -1)
            self._hist = _grown(self._hist, cap, 0)
        elif status == GROW_TIME:
            size = _time_size(4 * (int(self._state[ST_LIVE]) + chunk))
            new_owner = np.full(size, -1, dtype=np.int32)
            self._time_bits = np.zeros(size // 64, dtype=np.uint64)
            self._block_tree = np.zeros(size // BLOCK_POSITIONS + 1, dtype=np.int32)
            compact_time(self._time_owner, self._id_last, self._time_bits, self._block_tree, self._state, new_owner)
            self._time_owner = new_owner
        else:  # pragma: no cover
            raise AssertionError(f"unknown kernel status {status}")


def _time_size(n: int) -> int:
    block = BLOCK_POSITIONS
    return max(block, (int(n) + block - 1) // block * block)

