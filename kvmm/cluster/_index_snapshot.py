"""``BlockIndex.restore``'s check of a snapshot: every array's name, dtype and shape, and the
invariants that tie them together, all before anything is replaced.

A snapshot is trusted by the numba kernels afterwards (row numbers index arrays without bounds
checks), so a dict from an index with more instances or media, a partial dict, or arrays of the
wrong dtype would corrupt memory or break a later call; each is a :class:`BadInputError` here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from kvmm.allocators._block_kernels import slot_hash
from kvmm.cluster import _index_kernels as K
from kvmm.errors import BadInputError, DTypeError, ShapeError

#: Name -> dtype of every array a snapshot holds (``BlockIndex.snapshot``'s keys).
SNAPSHOT_DTYPES = {"keys": np.uint64, "holders": np.uint64, "links": np.int64, "live": np.uint8,
                   "free_rows": np.int64, "table": np.int64, "meta": np.int64, "order": np.int64}
# numba reads module globals as constants; named copies of the meta slots keep the kernels readable.
M_MASK_SLOT, M_SEED_SLOT, M_MAX_SLOT = K.M_MASK, K.M_SEED, K.M_MAX
M_HEAD_SLOT, M_TAIL_SLOT, M_ENTRIES_SLOT = K.M_HEAD, K.M_TAIL, K.M_ENTRIES

_TABLE_FAULTS = {
    1: "table names a row outside [-1, capacity)",
    2: "table names a free row",
    3: "table names a live row twice",
    4: "table does not name every live row",
    5: "an empty table slot keeps a hash",
    6: "a table slot keeps a hash that is not its key's",
    7: "a table entry is not reachable from its ideal slot",
}
_LRU_FAULTS = {
    1: "the LRU list names a row outside the live rows",
    2: "the LRU list's PREV links do not mirror NEXT",
    3: "the LRU list visits a row twice",
    4: "the LRU list does not end at meta's tail",
    5: "the LRU list does not hold every live row",
    6: "a free row is linked",
}


def checked_snapshot(index, snap: Any) -> dict[str, np.ndarray]:
    """Copies of ``snap``'s arrays, each checked against ``index`` (its instances, media and
    budget) and against each other; :class:`BadInputError` (or a subclass) names the first fault.
    Runtime complexity: O(capacity x media x words + table size)."""
    if not isinstance(snap, dict):
        raise DTypeError(f"snapshot must be the dict BlockIndex.snapshot() returns, got {type(snap).__name__}")
    want = set(SNAPSHOT_DTYPES) | {"key_width"}
    if set(snap) != want:
        missing, extra = sorted(want - set(snap), key=str), sorted(set(snap) - want, key=str)
        raise BadInputError(f"snapshot must hold exactly the arrays {sorted(want)}; missing {missing}, unexpected {extra}")
    out = {}
    for name, dtype in SNAPSHOT_DTYPES.items():
        arr = snap[name]
        if type(arr) is not np.ndarray or arr.dtype != dtype:
            got = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
            raise DTypeError(f"snapshot[{name!r}] must be a {np.dtype(dtype).name} array, got {got}")
        out[name] = np.ascontiguousarray(arr).copy()
    out["key_width"] = _key_width(snap["key_width"])
    _check_shapes(index, out)
    _check_contents(index, out)
    return out


def _key_width(arr: Any) -> int:
    if type(arr) is not np.ndarray or arr.dtype.kind not in "iu" or arr.shape != (1,) or int(arr[0]) not in (0, 1, 2):
        raise BadInputError(f"snapshot['key_width'] must be a one-element integer array holding 0 (undecided), 1 or 2, "
                            f"got {arr!r}")
    return int(arr[0])


def _check_shapes(index, s: dict) -> None:
    cap = s["live"].shape[0] if s["live"].ndim == 1 else -1
    if cap < 1:
        raise ShapeError(f"snapshot['live'] must have shape (capacity,) with capacity >= 1, got {s['live'].shape}")
    if index.max_entries is not None and cap > index.max_entries:
        raise ShapeError(f"snapshot has capacity {cap}, more than this index's max_entries={index.max_entries}")
    size = s["table"].shape[1] if s["table"].ndim == 2 else 0
    expected = {"keys": (cap, 2), "holders": (cap, len(index.media), index._words), "links": (2, cap),
                "free_rows": (cap,), "table": (2, size), "meta": (K.NUM_META,),
                "order": (cap, index.max_holders or 0)}
    for name, shape in expected.items():
        if s[name].shape != shape:
            raise ShapeError(f"snapshot[{name!r}] must have shape {shape} for an index of {index.num_instances} "
                             f"instances, media {list(index.media)} and capacity {cap}; got {s[name].shape}")
    if size & (size - 1) or size < 2 * cap:
        raise ShapeError(f"snapshot['table'] must have a power-of-two number of slots >= 2 x capacity ({2 * cap}), "
                         f"got {size}")


def _check_contents(index, s: dict) -> None:
    meta, live, keys, holders = s["meta"], s["live"], s["keys"], s["holders"]
    cap = live.shape[0]
    if live.max() > 1:
        raise BadInputError("snapshot['live'] must hold only 0 and 1")
    live_rows = np.flatnonzero(live)
    budget = -1 if index.max_entries is None else index.max_entries
    facts = [
        (meta[K.M_MAX] == budget, f"meta's budget {meta[K.M_MAX]} is not this index's ({budget})"),
        (meta[K.M_SEED] == index.meta[K.M_SEED], "meta's hash seed is not this index's"),
        (meta[K.M_HOLDER_CAP] == index.meta[K.M_HOLDER_CAP], "meta's holder cap is not this index's"),
        (meta[K.M_INSTANCES] == index.num_instances, "meta's instance count is not this index's"),
        (meta[K.M_MASK] == s["table"].shape[1] - 1, "meta's table mask does not match the table"),
        (meta[K.M_ENTRIES] == live_rows.shape[0], "meta's entry count is not the number of live rows"),
        (meta[K.M_FREE] == cap - live_rows.shape[0], "meta's free count is not the number of free rows"),
        ((meta[K.M_STORED:K.M_INSTANCES] >= 0).all(), "a counter in meta is negative"),
        (np.array_equal(holders.reshape(cap, -1).any(axis=1), live.astype(bool)),
         "a live row without holders or a free row with some"),
        (not (holders & ~index._full).any(), f"a holder bit for an instance beyond {index.num_instances}"),
        (not keys[live == 0].any(), "a free row keeps a key"),
        (s["key_width"] != 0 or live_rows.shape[0] == 0, "an undecided key width with entries"),
        (s["key_width"] != 1 or not keys[live_rows, 1].any(), "key_width 1 with a second key word"),
        (np.unique(keys[live_rows], axis=0).shape[0] == live_rows.shape[0], "a key held in two rows"),
        (np.array_equal(np.sort(s["free_rows"][:cap - live_rows.shape[0]]), np.flatnonzero(live == 0)),
         "the free stack is not exactly the free rows"),
    ]
    for ok, fault in facts:
        if not ok:
            raise BadInputError(f"snapshot is not consistent: {fault}; expected a BlockIndex.snapshot() of this index")
    code = _table_fault(keys, live, s["table"], meta)
    if code == 0:
        code = 10 * _lru_fault(live, s["links"], meta)
    if code == 0 and _order_fault(s["order"], holders, live):
        code = 100
    if code:
        fault = _TABLE_FAULTS[code] if code < 10 else _LRU_FAULTS[code // 10] if code < 100 else \
            "a holder list (max_holders) does not name exactly the row's holders, each once"
        raise BadInputError(f"snapshot is not consistent: {fault}; expected a BlockIndex.snapshot() of this index")


@njit(cache=True, nogil=True)
def _table_fault(keys, live, table, meta):
    """0, or the code (``_TABLE_FAULTS``) of the first way ``table`` differs from a linear-probing table of the live rows."""
    cap = live.shape[0]
    size = table.shape[1]
    mask = meta[M_MASK_SLOT]
    seen = np.zeros(cap, dtype=np.uint8)
    for s in range(size):
        r = table[0, s]
        if r < -1 or r >= cap:
            return 1
        if r == -1:
            if table[1, s] != 0:
                return 5
            continue
        if not live[r]:
            return 2
        if seen[r]:
            return 3
        seen[r] = 1
        h = np.int64(slot_hash(keys[r, 0], keys[r, 1], meta[M_SEED_SLOT]))
        if table[1, s] != h:
            return 6
        j = h & mask
        while j != s:  # linear probing: no empty slot between the ideal slot and this one
            if table[0, j] == -1:
                return 7
            j = (j + 1) & mask
    for r in range(cap):
        if live[r] and not seen[r]:
            return 4
    return 0


@njit(cache=True, nogil=True)
def _order_fault(order, holders, live):
    """1 when a row's holder list (under a holder cap) is not its set holder bits, each once,
    packed at the front and -1 padded (a free row: all -1); else 0."""
    cap = order.shape[1]
    if cap == 0:
        return 0
    num_media = holders.shape[1]
    for r in range(live.shape[0]):
        n = 0
        while n < cap and order[r, n] != -1:
            n += 1
        for k in range(n, cap):
            if order[r, k] != -1:
                return 1
        count = 0
        for m in range(num_media):
            for w in range(holders.shape[2]):
                x = holders[r, m, w]
                while x:
                    count += 1
                    x &= x - np.uint64(1)
        if count != n or (n > 0 and not live[r]):
            return 1
        for k in range(n):
            c = order[r, k]
            if c < 0:
                return 1
            i = c // num_media
            if i >> 6 >= holders.shape[2] or not (holders[r, c % num_media, i >> 6] >> np.uint64(i & 63)) & np.uint64(1):
                return 1
            for q in range(k):
                if order[r, q] == c:
                    return 1
    return 0


@njit(cache=True, nogil=True)
def _lru_fault(live, links, meta):
    """0, or the code (``_LRU_FAULTS``) of the first fault of the LRU list (kept only under a budget)."""
    cap = live.shape[0]
    for r in range(cap):
        if not live[r] and (links[0, r] != -1 or links[1, r] != -1):
            return 6
    if meta[M_MAX_SLOT] < 0:  # no budget: no list
        for r in range(cap):
            if links[0, r] != -1 or links[1, r] != -1:
                return 6
        return 0 if meta[M_HEAD_SLOT] == -1 and meta[M_TAIL_SLOT] == -1 else 4
    seen = np.zeros(cap, dtype=np.uint8)
    prev = -1
    r = meta[M_HEAD_SLOT]
    count = 0
    while r != -1:
        if r < 0 or r >= cap or not live[r]:
            return 1
        if links[0, r] != prev:
            return 2
        if seen[r]:
            return 3
        seen[r] = 1
        count += 1
        prev = r
        r = links[1, r]
    if prev != meta[M_TAIL_SLOT]:
        return 4
    if count != meta[M_ENTRIES_SLOT]:
        return 5
    return 0
