"""numba kernels behind :class:`~kvmm.policies.StackDistanceTracker` and :class:`~kvmm.policies.ShardsTracker`.

Every kernel takes the tracker's arrays (structure-of-arrays, owned by the Python class) and a
small ``state`` vector.  Before each chunk of references the batch kernels check that every array
has room for the whole chunk; if not they return ``(position, GROW_*)`` *before touching
anything*, the Python owner grows that array (doubling) and calls again from ``position``.

Array layouts, worked example after the references ``a b a`` (keys a=7, b=9):

``slots``: open-addressing hash table (linear probing, load <= 1/2), two uint64 words per slot::

    slots[2*s]     = key stored in slot s
    slots[2*s + 1] = dense id + 1 of that key (0 = empty slot)
    e.g. hash(7) -> slot 3, hash(9) -> slot 0:  slots = [9, 2,  0, 0,  0, 0,  7, 1, ...]

Per dense id: ``id_keys`` (the key), ``id_last`` (time position of its latest reference; -1 =
no mark yet, or dropped by a fixed-size sample), ``id_hash`` (fixed-size SHARDS only)::

    id_keys = [7, 9]     id_last = [2, 1]

Time positions: each reference puts a *mark* at the next free position ``clock`` and removes the
key's previous mark, so every tracked key has exactly one mark, at its latest reference.  The
LRU stack distance of a reference is the number of marks strictly between the key's previous
position and ``clock`` (the distinct keys touched since), i.e. ``live - marks(0..prev)``.
Marks are bits in ``time_bits`` (64 positions per uint64 word); a Fenwick tree ``block_tree``
(1-based, int32) sums the marks per block of ``BLOCK_POSITIONS`` = 64 positions (one word), so
counting the marks up to a position is one popcount plus a walk of ~log2(T/64) tree nodes.  Marks
and tree take 3/16 byte per position (vs 4 bytes for a Fenwick tree over positions), so the
structure stays in L2.  (Blocks of 2, 4 or 8 words, with a popcount loop over the block, were
measured 3-10 % slower on Zipf streams and no faster on agent streams: the shorter tree walk does
not pay for the loop.)  Tree updates for the block holding ``clock`` are deferred within a chunk
(no count ever reads that block from the tree).
``time_owner[p]`` is the id referenced at time ``p`` (needed to renumber on compaction)::

    positions   0 1 2        clock = 3, live = 2
    time_bits   0b110        (marks at 1 = b and 2 = a)
    time_owner  0 1 0

When ``clock`` would pass the end of the time arrays, live marks are renumbered ``0..live-1`` in
time order (compaction, O(T)); the owner keeps T at 2-4x the live keys, so this costs O(1)
amortised per reference.

``state`` (int64): see the ``ST_*`` indices.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# the shared primitives (one open-addressing table, hash mixing, bit counts, prefetch), imported
# under the names this module's users read them by (the trackers, _shards_kernels, admission; replay's
# renumbering imports kvmm._kernels itself)
from kvmm._kernels import find_slot, get_or_insert_ids, lookup_ids, mix64, popcount, prefetch, rehash, trailing_zeros  # noqa: F401

# state vector indices
ST_IDS = 0  # dense ids handed out (distinct keys ever tracked)
ST_CLOCK = 1  # next free time position
ST_LIVE = 2  # live marks (keys currently on the LRU stack)
ST_COLD = 3  # cold misses among the sampled references (exact and fixed-rate modes)
ST_REFS = 4  # every reference offered, sampled or not
ST_SAMPLED = 5  # references that passed the sampling filter (== REFS in exact mode)
ST_HEAP = 6  # fixed-size SHARDS: entries in the max-heap of sampled keys
ST_ACTIVE = 7  # fixed-size SHARDS: 1 once the sample first overflowed (threshold in force)
ST_STRATA_KEYS = 8  # stratified SHARDS: distinct keys in the frequency sample (``strata_slots``)
ST_STRATA_REFS = 9  # stratified SHARDS: references to those keys
ST_LEN = 10

# kernel exit statuses
DONE = 0
GROW_TABLE = 1
GROW_IDS = 2
GROW_TIME = 3
GROW_HIST = 4
GROW_STRATA = 5
GROW_LOG = 6

#: references per chunk: pass 1 maps a chunk's keys to ids, pass 2 computes their distances
CHUNK = 4096
BLOCK_SHIFT = 0  # the Fenwick tree counts marks per block of 2**BLOCK_SHIFT words = 64 positions
BLOCK_POSITIONS = 64 << BLOCK_SHIFT
BLOCK_BITS = 6 + BLOCK_SHIFT  # position >> BLOCK_BITS = block
PREFETCH_SLOTS = 32  # pass 1 prefetches the hash slot of the key this many references ahead
PREFETCH_AHEAD = 16  # pass 2 prefetches id_last this many references ahead
PREFETCH_NEAR = 6  # ... and the mark word of the previous access this many ahead

TWO_POW_64 = 18446744073709551616.0


# --------------------------------------------------------------------------- batch kernels
@njit(cache=True, nogil=True)
def access_batch(keys, start, threshold, sampled_only, slots, id_keys, id_last, time_owner, time_bits, block_tree,
                 hist, state, distances, want_distances, id_buf, pos_buf, hash_buf, stratify, strata_max,
                 strata_slots, registers, log_ids, log_dist):
    """Stack distances of ``keys[start:]``: exact, or (``sampled_only``) of the references whose
    key hash is below ``threshold`` (fixed-rate SHARDS).  Returns ``(next position, status)``.

    ``hist[d]`` counts sampled references at (sampled) distance ``d``; cold misses go to
    ``state[ST_COLD]``.  ``distances[i]`` (when ``want_distances``) gets the distance, -1 for a
    cold miss, -2 for a reference the sampling filter skipped.

    ``stratify`` (stratified SHARDS): every reference whose key hash is ``<= strata_max`` (a
    superset of the sampled keys) also counts in ``strata_slots`` (open addressing like
    ``slots``, second word = the key's reference count), every reference updates the
    HyperLogLog ``registers`` (see :func:`count_strata`), and each sampled reference appends its
    (id, distance) to ``log_ids``/``log_dist`` at index ``state[ST_SAMPLED]``.

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
        if stratify:
            if (state[ST_STRATA_KEYS] + chunk) * 4 > strata_slots.shape[0]:
                return i, GROW_STRATA
            if state[ST_SAMPLED] + chunk > log_ids.shape[0]:
                return i, GROW_LOG
        if state[ST_CLOCK] + chunk > time_size:
            if (state[ST_LIVE] + chunk) * 2 > time_size:
                return i, GROW_TIME
            compact_time(time_owner, id_last, time_bits, block_tree, state, time_owner, time_bits, block_tree)
        # pass 0: hashes (a tight loop the compiler vectorises)
        for j in range(chunk):
            hash_buf[j] = mix64(keys[i + j])
        # pass 1: ids (a new key gets an id with id_last = -1: its first reference is cold)
        m = 0
        if stratify:
            count_strata(keys, i, chunk, hash_buf, strata_max, strata_slots, registers, state)
        for j in range(i, i + chunk):
            if j + PREFETCH_SLOTS < i + chunk:
                prefetch(slots, 2 * np.int64(hash_buf[j - i + PREFETCH_SLOTS] & mask))
            key = keys[j]
            h = hash_buf[j - i]
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
        # Tree updates for the block holding ``clock`` are deferred into ``pending``: a count
        # only reads tree blocks strictly before the previous access's block, which is never
        # after the clock's block, so it never needs them.  Saves one tree walk per reference.
        pending_block = clock >> BLOCK_BITS
        pending = 0
        # Agents re-read a context in the order they first read it, so consecutive references
        # often have consecutive previous positions.  ``last_pos``/``last_marks`` remember the
        # previous count (marks through ``last_pos``, after its mark was cleared; later marks go
        # to ``clock``, above it, so it stays exact): a count just above it adds the marks of at
        # most two words instead of walking the tree.
        last_pos = -(1 << 40)  # far below every position: the shortcut never fires first
        last_marks = 0
        log_at = state[ST_SAMPLED]
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
                if np.uint64(prev - last_pos - 1) < np.uint64(64):  # last_pos < prev <= last_pos + 64
                    marks = last_marks + marks_between(time_bits, last_pos, prev)
                else:
                    marks = marks_through(time_bits, block_tree, prev)
                d = live - marks
                last_pos = prev
                last_marks = marks - 1
                time_bits[prev >> 6] &= ~(np.uint64(1) << np.uint64(prev & 63))
                if (prev >> BLOCK_BITS) == pending_block:
                    pending -= 1
                else:
                    tree_add(block_tree, (prev >> BLOCK_BITS) + 1, -1)
            if (clock >> BLOCK_BITS) != pending_block:
                tree_add(block_tree, pending_block + 1, pending)
                pending_block = clock >> BLOCK_BITS
                pending = 0
            time_bits[clock >> 6] |= np.uint64(1) << np.uint64(clock & 63)
            pending += 1
            time_owner[clock] = ident
            id_last[ident] = clock
            clock += 1
            if stratify:
                log_ids[log_at + q] = ident
                log_dist[log_at + q] = d
            id_buf[q] = d  # the id is not needed any more; pass 3 reads the distance back
        if pending != 0:
            tree_add(block_tree, pending_block + 1, pending)
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
def count_strata(keys, start, chunk, hash_buf, strata_max, strata_slots, registers, state):
    """Stratified SHARDS's counting for ``keys[start:start+chunk]`` (hashes in ``hash_buf``).

    Every reference updates the HyperLogLog ``registers`` (``2**b`` uint8): register ``h & (2**b
    - 1)`` keeps the largest rank ``trailing zeros of (h >> b) + 1`` (``65 - b`` when ``h >> b``
    is 0).  References whose hash is ``<= strata_max`` also count in ``strata_slots`` (key,
    count) pairs; the caller guarantees room."""
    mask = np.uint64(strata_slots.shape[0] // 2 - 1)
    index_bits = np.uint64(trailing_zeros(np.uint64(registers.shape[0])))
    index_mask = np.uint64(registers.shape[0] - 1)
    n_keys = state[ST_STRATA_KEYS]
    n_refs = state[ST_STRATA_REFS]
    for j in range(chunk):
        h = hash_buf[j]
        rest = h >> index_bits
        rank = np.uint8(trailing_zeros(rest) + 1) if rest != 0 else np.uint8(65 - index_bits)
        slot = np.int64(h & index_mask)
        if rank > registers[slot]:
            registers[slot] = rank
        if h > strata_max:
            continue
        key = keys[start + j]
        s = find_slot(strata_slots, mask, key, h)
        if strata_slots[2 * s + 1] == 0:
            strata_slots[2 * s] = key
            n_keys += 1
        strata_slots[2 * s + 1] += np.uint64(1)
        n_refs += 1
    state[ST_STRATA_KEYS] = n_keys
    state[ST_STRATA_REFS] = n_refs


# --------------------------------------------------------------------------- maintenance kernels
@njit(cache=True, nogil=True)
def compact_time(time_owner, id_last, time_bits, block_tree, state, new_time_owner, new_time_bits, new_block_tree):
    """Renumber live marks to ``0 .. live-1`` (time order kept) into ``new_time_owner`` (may be
    ``time_owner`` itself: positions only move down); ``new_time_bits``/``new_block_tree`` (may be
    ``time_bits``/``block_tree``) must be sized for ``new_time_owner`` and are rebuilt.  Returns
    the new clock.  O(T/64 + live).

    Scans the set bits of ``time_bits`` (the live marks, in time order) instead of every position:
    dead positions (most of them) cost nothing but their share of a word, and no ``id_last`` entry
    is read, only the live ones rewritten.
    """
    clock = state[ST_CLOCK]
    j = 0
    for w in range((clock + 63) >> 6):
        word = time_bits[w]
        base = w << 6
        while word != 0:
            owner = time_owner[base + trailing_zeros(word)]
            new_time_owner[j] = owner
            id_last[owner] = j
            j += 1
            word &= word - np.uint64(1)
    # positions at or above the old clock already hold -1 (never written since the last fill)
    for p in range(j, min(clock, new_time_owner.shape[0])):
        new_time_owner[p] = -1
    state[ST_CLOCK] = j
    fill_marks(new_time_bits, new_block_tree, j)
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
def add_counts(ids, increments, counts, out):
    """``counts[ids[i]] += increments[i]`` in order; ``out[i]`` = the count just after."""
    for i in range(ids.shape[0]):
        counts[ids[i]] += increments[i]
        out[i] = counts[ids[i]]


@njit(cache=True, nogil=True)
def hash_keys(keys, out):
    """The 64-bit sampling hash of every key (for tests and the plain-Python references)."""
    for i in range(keys.shape[0]):
        out[i] = mix64(keys[i])


# --------------------------------------------------------------------------- helpers
@njit(cache=True, nogil=True, inline="always")
def marks_through(time_bits, block_tree, pos):
    """Marks at positions ``0 .. pos`` inclusive: earlier blocks from the tree, the rest by
    popcount of the words of ``pos``'s block up to ``pos`` (one word when ``BLOCK_SHIFT`` = 0)."""
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
def marks_between(time_bits, lo, hi):
    """Marks at positions ``lo+1 .. hi`` (``lo < hi <= lo + 64``: at most one word boundary)."""
    above_lo = ~((np.uint64(2) << np.uint64(lo & 63)) - np.uint64(1))  # bits lo+1..63 (none for 63)
    through_hi = (np.uint64(2) << np.uint64(hi & 63)) - np.uint64(1)  # bits 0..hi
    if (lo >> 6) == (hi >> 6):
        return popcount(time_bits[hi >> 6] & above_lo & through_hi)
    return popcount(time_bits[lo >> 6] & above_lo) + popcount(time_bits[hi >> 6] & through_hi)


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
