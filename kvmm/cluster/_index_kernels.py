"""numba kernels of :class:`~kvmm.cluster.BlockIndex` (the array layout is documented there).

The kernels trust their inputs: the class validates instances, media, offsets and key shapes
before calling them.  The one failure a kernel finds itself, a strict removal of a key not
held, it undoes before returning, so a call that raises changes nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from kvmm.allocators._block_kernels import slot_hash

# Slots of meta.
M_ENTRIES, M_HEAD, M_TAIL, M_FREE, M_MASK, M_MAX, M_SEED = range(7)
M_STORED, M_REMOVED, M_IGNORED, M_EVICTED, M_CLEARED, M_LOOKUPS = range(7, 13)
M_HOLDER_CAP, M_CAPPED = 13, 14  # holders kept per key (0: no cap); holders dropped by that cap
M_INSTANCES = 15  # the index's instances (the kernels check batch groups against it)
NUM_META = 16
STAT_SLOTS = {"stored": M_STORED, "removed": M_REMOVED, "lenient_ignored": M_IGNORED,
              "budget_evictions": M_EVICTED, "cleared": M_CLEARED, "lookups": M_LOOKUPS,
              "holder_evictions": M_CAPPED}
# Rows of links (the LRU list, least recently used at the head).
PREV, NEXT = 0, 1


# ------------------------------------------------------------------ hash table and LRU list
@njit(cache=True, nogil=True)
def _key_of(flat, j):
    """Key ``j`` of an (n, 1) or (n, 2) uint64 array as two words."""
    if flat.shape[1] == 2:
        return flat[j, 0], flat[j, 1]
    return flat[j, 0], np.uint64(0)


@njit(cache=True, nogil=True)
def _find(keys, table, meta, k0, k1):
    """Slot holding key (k0, k1), or ``-(empty slot) - 1`` where it would be inserted (its hash
    is then in ``table[1]``'s future slot: the caller writes it, see :func:`_insert`)."""
    mask = meta[M_MASK]
    h = np.int64(slot_hash(k0, k1, meta[M_SEED]))
    s = h & mask
    while True:
        r = table[0, s]
        if r == -1:
            return -s - 1
        if table[1, s] == h and keys[r, 0] == k0 and keys[r, 1] == k1:
            return s
        s = (s + 1) & mask


@njit(cache=True, nogil=True)
def _insert(keys, table, meta, s, r):
    """Put row ``r`` (its key already in ``keys``) into the empty slot ``s``."""
    table[0, s] = r
    table[1, s] = np.int64(slot_hash(keys[r, 0], keys[r, 1], meta[M_SEED]))


@njit(cache=True, nogil=True)
def _delete_slot(keys, table, meta, s):
    # Backward-shift deletion (no tombstones): a later member of the probe run moves into the hole
    # unless its ideal slot lies cyclically in (hole, j].
    mask = meta[M_MASK]
    hole = s
    j = s
    while True:
        j = (j + 1) & mask
        if table[0, j] == -1:
            break
        ideal = table[1, j] & mask
        if (j > hole and (ideal <= hole or ideal > j)) or (j < hole and (ideal <= hole and ideal > j)):
            table[0, hole] = table[0, j]
            table[1, hole] = table[1, j]
            hole = j
    table[0, hole] = -1
    table[1, hole] = 0


@njit(cache=True, nogil=True)
def _unlink(links, meta, r):
    p = links[PREV, r]
    n = links[NEXT, r]
    if p == -1:
        meta[M_HEAD] = n
    else:
        links[NEXT, p] = n
    if n == -1:
        meta[M_TAIL] = p
    else:
        links[PREV, n] = p
    links[PREV, r] = -1
    links[NEXT, r] = -1


@njit(cache=True, nogil=True)
def _push_tail(links, meta, r):
    t = meta[M_TAIL]
    links[PREV, r] = t
    links[NEXT, r] = -1
    if t == -1:
        meta[M_HEAD] = r
    else:
        links[NEXT, t] = r
    meta[M_TAIL] = r


@njit(cache=True, nogil=True)
def _touch(links, meta, r):
    if meta[M_TAIL] != r:
        _unlink(links, meta, r)
        _push_tail(links, meta, r)


@njit(cache=True, nogil=True)
def _drop_row(keys, holders, links, live, free_rows, table, meta, order, r):
    """Forget entry row ``r`` for every holder; the row goes back to the free stack."""
    s = _find(keys, table, meta, keys[r, 0], keys[r, 1])
    _delete_slot(keys, table, meta, s)
    if meta[M_MAX] >= 0:  # the LRU list is kept only under a budget
        _unlink(links, meta, r)
    holders[r, :, :] = 0
    order[r, :] = -1
    keys[r, 0] = 0
    keys[r, 1] = 0
    live[r] = 0
    free_rows[meta[M_FREE]] = r
    meta[M_FREE] += 1
    meta[M_ENTRIES] -= 1


@njit(cache=True, nogil=True)
def _order_touch(order, r, code):
    """Make holder ``code`` (instance x media + medium) the most recent of row ``r``'s holder
    list (oldest first, -1 padded), as llm-d's per-key pod LRU does on Add; when the list is
    full, its oldest holder leaves it first.  Returns that holder's code, or -1."""
    cap = order.shape[1]
    n = 0
    pos = -1
    while n < cap and order[r, n] != -1:
        if order[r, n] == code:
            pos = n
        n += 1
    victim = -1
    if pos < 0 and n == cap:
        victim = order[r, 0]
        pos = 0
    if pos >= 0:  # close the gap (the touched or the evicted holder's place)
        for k in range(pos, n - 1):
            order[r, k] = order[r, k + 1]
        n -= 1
    order[r, n] = code
    return victim


@njit(cache=True, nogil=True)
def _order_drop(order, r, code):
    """Take holder ``code`` out of row ``r``'s holder list (a no-op when it is not there)."""
    cap = order.shape[1]
    found = False
    k = 0
    while k < cap and order[r, k] != -1:
        if found:
            order[r, k - 1] = order[r, k]
        elif order[r, k] == code:
            found = True
        k += 1
    if found:
        order[r, k - 1] = -1


#: What a store or removal kernel returns for groups that do not check out (nothing changed).
INVALID = -(1 << 62)
#: What the store kernel returns when the free rows may not suffice (nothing changed: grow, call again).
GROW = -(1 << 61)


@njit(cache=True, nogil=True)
def _groups_valid(holders, meta, instances, media, offsets, flat):
    """Every group valid: instance and medium in range, offsets rising from 0 to the number of
    keys, one more offset than groups.  The batch calls check this inside their one kernel
    call (the class names the fault afterwards), so a batch of one group pays no more numpy
    reductions than a single call does."""
    g = instances.shape[0]
    num_instances = meta[M_INSTANCES]
    if media.shape[0] != g or offsets.shape[0] != g + 1 or offsets[0] != 0 or offsets[g] != flat.shape[0]:
        return False
    for q in range(g):
        if instances[q] < 0 or instances[q] >= num_instances or media[q] < 0 or media[q] >= holders.shape[1]:
            return False
        if offsets[q + 1] < offsets[q]:
            return False
    return True


@njit(cache=True, nogil=True)
def _empty(holders, r):
    for m in range(holders.shape[1]):
        for w in range(holders.shape[2]):
            if holders[r, m, w] != 0:
                return False
    return True


# ------------------------------------------------------------------ operations
@njit(cache=True, nogil=True)
def store_many(keys, holders, links, live, free_rows, table, meta, order, instances, media, offsets, flat):
    """Group g: instance ``instances[g]`` holds ``flat[offsets[g]:offsets[g+1]]`` on medium
    ``media[g]``; keys last-first, each made most recently used (with a budget).  With a holder
    cap (``order`` has columns), the holder becomes the key's most recent one and the oldest
    leaves a full list.  Returns 0; :data:`INVALID` (groups that do not check out) or :data:`GROW` (fewer free rows than keys,
    up to the budget) change nothing."""
    if not _groups_valid(holders, meta, instances, media, offsets, flat):
        return INVALID
    bounded = meta[M_MAX] >= 0
    need = meta[M_ENTRIES] + flat.shape[0]
    if bounded and need > meta[M_MAX]:
        need = meta[M_MAX]
    if need > live.shape[0]:
        return GROW
    capped = order.shape[1] > 0
    num_media = holders.shape[1]
    for g in range(instances.shape[0]):
        inst = instances[g]
        m = media[g]
        w = inst >> 6
        bit = np.uint64(1) << np.uint64(inst & 63)
        for j in range(offsets[g + 1] - 1, offsets[g] - 1, -1):
            k0, k1 = _key_of(flat, j)
            s = _find(keys, table, meta, k0, k1)
            if s >= 0:
                r = table[0, s]
                if bounded:
                    _touch(links, meta, r)
            else:
                if bounded and meta[M_ENTRIES] >= meta[M_MAX]:
                    _drop_row(keys, holders, links, live, free_rows, table, meta, order, meta[M_HEAD])
                    meta[M_EVICTED] += 1
                    s = _find(keys, table, meta, k0, k1)  # the deletion may have shifted the probe run
                meta[M_FREE] -= 1
                r = free_rows[meta[M_FREE]]
                keys[r, 0] = k0
                keys[r, 1] = k1
                live[r] = 1
                _insert(keys, table, meta, -s - 1, r)
                if bounded:
                    _push_tail(links, meta, r)
                meta[M_ENTRIES] += 1
            if capped:
                victim = _order_touch(order, r, inst * num_media + m)
                if victim >= 0:  # the key's oldest holder is forgotten (it never leaves the row empty)
                    vi = victim // num_media
                    holders[r, victim % num_media, vi >> 6] &= ~(np.uint64(1) << np.uint64(vi & 63))
                    meta[M_CAPPED] += 1
            holders[r, m, w] |= bit
        meta[M_STORED] += offsets[g + 1] - offsets[g]
    return 0


@njit(cache=True, nogil=True)
def remove_many(keys, holders, links, live, free_rows, table, meta, order, instances, media, offsets, flat, lenient, log):
    """Group g: instance ``instances[g]`` stops holding its keys on ``media[g]``, first to last.

    Returns the number removed, or ``-(j + 1)`` for the first key ``j`` not held in strict mode
    (every bit cleared before it is set again: nothing changed), or :data:`INVALID` (groups
    that do not check out: nothing changed).  ``log``: (keys, 2) scratch."""
    if not _groups_valid(holders, meta, instances, media, offsets, flat):
        return INVALID
    n_log = 0
    ignored = 0
    for g in range(instances.shape[0]):
        inst = instances[g]
        m = media[g]
        w = inst >> 6
        bit = np.uint64(1) << np.uint64(inst & 63)
        for j in range(offsets[g], offsets[g + 1]):
            k0, k1 = _key_of(flat, j)
            s = _find(keys, table, meta, k0, k1)
            if s >= 0 and holders[table[0, s], m, w] & bit:
                r = table[0, s]
                holders[r, m, w] &= ~bit
                log[n_log, 0] = r
                log[n_log, 1] = g
                n_log += 1
            elif lenient:
                ignored += 1
            else:
                for q in range(n_log - 1, -1, -1):  # undo: the table is untouched so far
                    gq = log[q, 1]
                    iq = instances[gq]
                    holders[log[q, 0], media[gq], iq >> 6] |= np.uint64(1) << np.uint64(iq & 63)
                return -(j + 1)
    # Entries left without a holder go only now, so the undo above never has to restore the table
    # (nor the holder lists of a cap).
    if order.shape[1] > 0:
        num_media = holders.shape[1]
        for q in range(n_log):
            gq = log[q, 1]
            _order_drop(order, log[q, 0], instances[gq] * num_media + media[gq])
    for q in range(n_log):
        r = log[q, 0]
        if live[r] and _empty(holders, r):
            _drop_row(keys, holders, links, live, free_rows, table, meta, order, r)
    meta[M_REMOVED] += n_log
    meta[M_IGNORED] += ignored
    return n_log


@njit(cache=True, nogil=True)
def clear_instance(keys, holders, links, live, free_rows, table, meta, order, inst, media):
    """Instance ``inst`` holds nothing more on each medium of ``media``."""
    w = inst >> 6
    bit = np.uint64(1) << np.uint64(inst & 63)
    capped = order.shape[1] > 0
    num_media = holders.shape[1]
    for r in range(live.shape[0]):
        if live[r]:
            for q in range(media.shape[0]):
                if capped and holders[r, media[q], w] & bit:
                    _order_drop(order, r, inst * num_media + media[q])
                holders[r, media[q], w] &= ~bit
            if _empty(holders, r):
                _drop_row(keys, holders, links, live, free_rows, table, meta, order, r)
    meta[M_CLEARED] += 1


@njit(cache=True, nogil=True)
def prefix_hits_many(keys, holders, links, table, meta, offsets, flat, full, out, alive, rows):
    """``out[r, i, m]``: how many of request r's keys, from the first, instance i holds on medium
    m.  ``full``: the word mask of valid instances; ``alive`` (media, words) and ``rows`` (keys)
    are scratch.  With a budget, each request's longest run found is touched last-first."""
    bounded = meta[M_MAX] >= 0
    num_media = holders.shape[1]
    num_words = holders.shape[2]
    for q in range(offsets.shape[0] - 1):
        a = offsets[q]
        b = offsets[q + 1]
        for m in range(num_media):
            for w in range(num_words):
                alive[m, w] = full[w]
        stop = b - a  # the run length the holders still alive at the end get
        best = 0
        for j in range(a, b):
            k0, k1 = _key_of(flat, j)
            s = _find(keys, table, meta, k0, k1)
            if s < 0:
                stop = j - a
                break
            r = table[0, s]
            if bounded:
                rows[j] = r
            any_alive = np.uint64(0)
            for m in range(num_media):
                for w in range(num_words):
                    h = holders[r, m, w]
                    dead = alive[m, w] & ~h
                    while dead:  # a holder's run ends at key j
                        out[q, (w << 6) + trailing_zeros(dead), m] = j - a
                        dead &= dead - np.uint64(1)
                    alive[m, w] &= h
                    any_alive |= alive[m, w]
            if not any_alive:
                break
            best = j - a + 1
        for m in range(num_media):
            for w in range(num_words):
                rest = alive[m, w]
                while rest:
                    out[q, (w << 6) + trailing_zeros(rest), m] = stop
                    rest &= rest - np.uint64(1)
        if bounded:
            for j in range(a + best - 1, a - 1, -1):
                _touch(links, meta, rows[j])
    meta[M_LOOKUPS] += offsets.shape[0] - 1


@njit(cache=True, nogil=True)
def find_rows(keys, table, meta, flat, out):
    """``out[j]``: the entry row of key j, or -1."""
    for j in range(flat.shape[0]):
        k0, k1 = _key_of(flat, j)
        s = _find(keys, table, meta, k0, k1)
        out[j] = table[0, s] if s >= 0 else -1


@njit(cache=True, nogil=True)
def rebuild_table(keys, live, table, meta):
    """Insert every live row into an empty table (after growth)."""
    for r in range(live.shape[0]):
        if live[r]:
            s = _find(keys, table, meta, keys[r, 0], keys[r, 1])
            _insert(keys, table, meta, -s - 1, r)
