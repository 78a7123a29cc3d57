"""``BlockIndex.check()``: every invariant of the arrays, one assertion each (tests only)."""

from __future__ import annotations

import numpy as np

from kvmm.allocators._block_kernels import slot_hash
from kvmm.cluster import _index_kernels as K


def check_index(index) -> None:
    meta, live, keys, holders = index.meta, index.live, index.keys, index.holder_bits
    cap = live.shape[0]
    live_rows = np.flatnonzero(live)
    # the entry count is the number of live rows, within the budget
    assert meta[K.M_ENTRIES] == live_rows.shape[0], (meta[K.M_ENTRIES], live_rows.shape[0])
    if index.max_entries is not None:
        assert meta[K.M_ENTRIES] <= index.max_entries and cap <= index.max_entries
    # an entry exists only while someone holds it; a free row holds nothing and no key
    any_holder = holders.reshape(cap, -1).any(axis=1)
    assert np.array_equal(any_holder, live.astype(bool)), "a live row without holders or a free row with some"
    assert not keys[live == 0].any(), "a free row keeps a key"
    # no bit for an instance beyond num_instances
    assert not (holders & ~index._full).any(), "a holder bit for an instance that does not exist"
    # one key kind: word 1 is zero for key_width 1 (and nothing is stored before the width is decided)
    if index.key_width == 1:
        assert not keys[live_rows, 1].any()
    if index.key_width is None:
        assert live_rows.shape[0] == 0
    # live keys are distinct
    assert len({(int(a), int(b)) for a, b in keys[live_rows]}) == live_rows.shape[0], "a key held in two rows"
    # free stack: exactly the free rows, each once; free + live = capacity
    num_free = int(meta[K.M_FREE])
    assert num_free + live_rows.shape[0] == cap
    assert sorted(index.free_rows[:num_free].tolist()) == np.flatnonzero(live == 0).tolist()
    # table: a power of two at least twice the capacity; each live row in one slot, reached by its
    # probe run from its ideal slot without an empty slot in between; every other slot empty
    rows, hashes = index.table
    size = rows.shape[0]
    assert size & (size - 1) == 0 and size >= 2 * cap and meta[K.M_MASK] == size - 1
    assert sorted(rows[rows >= 0].tolist()) == live_rows.tolist(), "table slots do not name the live rows once each"
    assert ((rows == -1) | (rows >= 0)).all() and not hashes[rows == -1].any(), "an empty slot keeps a hash"
    for s in np.flatnonzero(rows >= 0):
        r = rows[s]
        h = int(slot_hash(keys[r, 0], keys[r, 1], meta[K.M_SEED]))
        assert int(hashes[s]) & (2**64 - 1) == h, f"slot {s} keeps a hash that is not its key's"
        ideal = h & (size - 1)
        j = ideal
        while j != s:
            assert rows[j] != -1, f"row {r} in slot {s} is not reachable from its ideal slot {ideal}"
            j = (j + 1) & (size - 1)
    # LRU list (under a budget): from the head through NEXT visits every live row once, PREV mirrors
    # NEXT, ends at the tail; without a budget it is not kept (empty)
    links = index.links
    if index.max_entries is None:
        assert meta[K.M_HEAD] == -1 and meta[K.M_TAIL] == -1 and (links == -1).all(), "an LRU list without a budget"
        live_rows_on_list = np.zeros(0, dtype=np.int64)
    else:
        live_rows_on_list = live_rows
    seen, prev, r = [], -1, int(meta[K.M_HEAD])
    while r != -1:
        assert live[r] and links[K.PREV, r] == prev and len(seen) <= cap
        seen.append(r)
        prev, r = r, int(links[K.NEXT, r])
    assert prev == meta[K.M_TAIL] and sorted(seen) == live_rows_on_list.tolist(), "LRU list is not the live rows"
    assert (links[:, live == 0] == -1).all(), "a free row is linked"
    # counters never go negative
    assert (meta[[K.M_STORED, K.M_REMOVED, K.M_IGNORED, K.M_EVICTED, K.M_CLEARED, K.M_LOOKUPS, K.M_CAPPED]] >= 0).all()
    # holder cap: each live row's list names exactly its holders, each once, within the cap,
    # packed at the front; free rows (and every row without a cap) hold no list
    order = index.order
    assert order.shape == (cap, index.max_holders or 0) and meta[K.M_HOLDER_CAP] == (index.max_holders or 0)
    num_media = len(index.media)
    for r in range(cap):
        codes = [int(c) for c in order[r] if c != -1]
        assert (order[r, :len(codes)] != -1).all(), f"row {r}'s holder list has a gap"
        held = {i * num_media + m for i, m in ((i, index._medium_ids[name]) for i, name in index._holders_of_row(r))} \
            if live[r] else set()
        if index.max_holders is not None:
            assert len(codes) == len(set(codes)) and set(codes) == held, f"row {r}'s holder list is not its holders"
            assert len(held) <= index.max_holders
