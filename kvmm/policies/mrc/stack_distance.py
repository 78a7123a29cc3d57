"""Exact LRU stack distances, miss-ratio curves and working-set sizing (EfficientAgent).

The *stack distance* of a reference is the number of distinct other keys referenced since the
previous reference to the same key (Mattson et al., 1970).  An LRU cache of capacity ``c`` hits a
reference exactly when its distance is ``< c``, so one pass over a trace gives the miss ratio of
LRU at *every* capacity (the miss-ratio curve, MRC), and from it the *reuse working set*: the
smallest cache that gets a target share of the hits an unlimited cache would get.

    >>> import numpy as np
    >>> from kvmm.policies import StackDistanceTracker
    >>> t = StackDistanceTracker()
    >>> t.access(np.array([1, 2, 1, 3, 2, 1], dtype=np.int64), return_distances=True)
    array([-1, -1,  1, -1,  2,  2])
    >>> t.mrc([0, 1, 2, 3]).tolist()   # miss ratio at capacities 0..3 (3 cold misses of 6 refs)
    [1.0, 1.0, 0.8333333333333334, 0.5]
    >>> t.working_set(1.0)
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm._arrays import grown
from kvmm._validate import as_array, as_count, as_fraction, as_index_array
from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.policies.mrc import _stack_kernels as K

__all__ = ["StackDistanceTracker", "DistanceHistogram"]

# the kernel's stratification arguments when stratification is off (never written)
_NO_STRATA_SLOTS = np.zeros(2, dtype=np.uint64)
_NO_REGISTERS = np.zeros(1, dtype=np.uint8)
_NO_LOG = np.zeros(0, dtype=np.int32)
MAX_INITIAL_KEYS = 1 << 24  # keys preallocated at construction (about 1 GiB of tables); more grow on demand


#: the sampling threshold of an unsampled run (every key is tracked; ``sample`` is False)
_NO_THRESHOLD = np.uint64(0)


@dataclass(frozen=True)
class DistanceHistogram:
    """A stack-distance histogram and everything derived from it.

    ``counts[d]`` is the (weighted) number of references whose stack distance ``D`` satisfies
    ``floor(D / scale) == d``; ``scale`` is 1 for exact histograms (so ``counts[d]`` counts
    references at distance exactly ``d``) and ``1/R`` for a fixed-rate SHARDS sample at rate
    ``R``.  ``cold`` is the (weighted) number of first references, ``total`` the number of
    references the histogram stands for (cold included).  Counts may be floats (sampled, weighted
    by ``1/R``); for a SHARDS histogram ``counts[0]`` carries the SHARDS-adj correction
    ``total - (cold + sum(counts))`` and may be negative.

    A reference hits an LRU cache of capacity ``c`` iff its distance is ``< c``.  Miss ratios
    count cold misses as misses, so ``mrc(c)`` never falls below ``cold / total``.
    """

    counts: np.ndarray
    cold: float
    total: float
    scale: float = 1.0

    @property
    def max_hits(self) -> float:
        """Hits of an unlimited cache (every non-cold reference)."""
        return float(self.total - self.cold)

    @property
    def max_capacity(self) -> int:
        """The smallest capacity at which every non-cold reference hits."""
        nz = np.flatnonzero(self.counts)
        if nz.size == 0:
            return 0
        return int(np.floor(int(nz[-1]) * self.scale)) + 1 if self.scale != 1.0 else int(nz[-1]) + 1

    def hits(self, capacities: Any = None) -> np.ndarray:
        """(Weighted) hits of an LRU cache at each capacity (default ``0 .. max_capacity``).

        Runtime complexity: O(len(counts) + len(capacities)).
        """
        caps = _as_capacities(capacities, self.max_capacity)
        cum = np.concatenate(([0], np.cumsum(self.counts)))
        if self.scale == 1.0:
            idx = np.minimum(caps, self.counts.shape[0])
        else:
            # bucket d holds distances in [d*scale, (d+1)*scale): hit iff d < c/scale
            idx = np.minimum(np.ceil(caps / self.scale).astype(np.int64), self.counts.shape[0])
        hits = cum[idx].astype(np.float64)
        return np.clip(hits, 0.0, max(self.max_hits, 0.0))

    def mrc(self, capacities: Any = None) -> np.ndarray:
        """Miss ratio of an LRU cache at each capacity (cold misses included).

        ``capacities``: non-negative integers; default ``0, 1, ..., max_capacity`` (so entry
        ``c`` is the miss ratio at capacity ``c``).  With no references every miss ratio is 1.
        Runtime complexity: O(len(counts) + len(capacities)).
        """
        hits = self.hits(capacities)
        if self.total <= 0:
            return np.ones_like(hits)
        return np.clip(1.0 - hits / self.total, 0.0, 1.0)

    def hit_ratio(self, capacity: int) -> float:
        """Hit ratio of an LRU cache of ``capacity`` (1 - miss ratio)."""
        return float(1.0 - self.mrc(np.array([_as_capacity(capacity)]))[0])

    def working_set(self, fraction: float = 0.9) -> int:
        """Smallest capacity whose hits reach ``fraction`` of the unlimited-cache hits.

        ``fraction`` in (0, 1]; 0 when there are no hits at all.
        Runtime complexity: O(len(counts)).
        """
        fraction = as_fraction(fraction, "fraction")
        target = fraction * self.max_hits
        if target <= 0:
            return 0
        cum = np.cumsum(self.counts)  # cum[k] = hits at capacity (k+1) buckets
        # tolerate float rounding of weighted sums
        k = int(np.searchsorted(cum, target * (1 - 1e-12), side="left")) + 1  # buckets needed
        k = min(k, self.counts.shape[0])
        if self.scale == 1.0:
            return k
        # smallest integer c with ceil(c/scale) >= k, i.e. c > (k-1)*scale
        return int(np.floor((k - 1) * self.scale)) + 1


class StackDistanceTracker:
    """Exact LRU stack distance of every reference, streamed in batches.

    ``access(keys)`` takes int64 or uint64 key arrays; state carries across calls and memory
    grows with the number of distinct keys (about 100 bytes each, arrays grown by doubling), not
    with the trace length.  Keys are mapped to dense ids by an open-addressing hash table inside
    the kernel; distances count marks at last-access times (a bit per time position, a Fenwick
    tree over blocks of 64 positions; compacted when the time arrays fill).  See
    :mod:`kvmm.policies.mrc._stack_kernels` for the array layouts.

    ``groups=`` tags each reference (an agent, a request): :meth:`group_histogram` then gives the
    histogram of that group's references *in the shared cache* (how that agent fares in an LRU
    cache shared with everyone else).

    Runtime complexity: ``access`` O(n log T) for n references (T <= 4x distinct keys); every
    query O(distinct keys).
    """

    def __init__(self, initial_keys: int = 1024) -> None:
        # preallocation only (the tables grow): bounded so nonsense fails clearly, not with MemoryError
        initial_keys = as_count(initial_keys, "initial_keys", minimum=1, maximum=MAX_INITIAL_KEYS)
        cap = max(16, _next_pow2(initial_keys))
        self._slots = np.zeros(4 * cap, dtype=np.uint64)  # 2*cap slots, 2 words each
        self._id_keys = np.zeros(cap, dtype=np.uint64)
        self._id_last = np.full(cap, -1, dtype=np.int64)
        self._time_owner = np.full(_time_size(4 * cap), -1, dtype=np.int32)
        self._time_bits = np.zeros(self._time_owner.shape[0] // 64, dtype=np.uint64)
        self._block_tree = np.zeros(self._time_owner.shape[0] // K.BLOCK_POSITIONS + 1, dtype=np.int32)
        self._hist = np.zeros(cap, dtype=np.int64)
        self._state = np.zeros(K.ST_LEN, dtype=np.int64)
        # scratch for the kernel's two passes (not state)
        self._id_buf = np.empty(K.CHUNK, dtype=np.int64)
        self._pos_buf = np.empty(K.CHUNK, dtype=np.int64)
        self._hash_buf = np.empty(K.CHUNK, dtype=np.uint64)
        # per-group histograms: sorted unique (group, distance) pairs with counts; distance -1 = cold
        self._group_ids = np.zeros(0, dtype=np.int64)
        self._group_dist = np.zeros(0, dtype=np.int64)
        self._group_count = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ public API
    @property
    def num_refs(self) -> int:
        """References processed so far."""
        return int(self._state[K.ST_REFS])

    @property
    def num_keys(self) -> int:
        """Distinct keys seen so far."""
        return int(self._state[K.ST_IDS])

    @property
    def cold_misses(self) -> int:
        return int(self._state[K.ST_COLD])

    def access(self, keys: Any, groups: Any = None, *, return_distances: bool = False) -> np.ndarray | None:
        """Process a batch of references in order.

        ``keys``: 1-D int64 or uint64 array (other integer dtypes are widened; int64 keys are
        reinterpreted bit-for-bit as uint64, so -1 and 2**64-1 are the same key).  ``groups``:
        optional 1-D integer array of the same length (agent or request id of each reference).
        Returns the stack distances (int64, -1 for a cold miss) when ``return_distances``.
        Raises :class:`~kvmm.errors.DTypeError` / :class:`~kvmm.errors.ShapeError` before any
        state changes.  Runtime complexity: O(n log T).
        """
        key_words = _as_key_words(keys)
        group_arr = None
        if groups is not None:
            group_arr = _as_groups(groups, key_words.shape[0])
        want = return_distances or group_arr is not None
        distances = np.empty(key_words.shape[0] if want else 0, dtype=np.int64)
        self._run(key_words, distances, want)
        if group_arr is not None:
            self._merge_groups(group_arr, distances)
        return distances if return_distances else None

    def histogram(self) -> DistanceHistogram:
        """The distance histogram of every reference so far (exact: ``counts[d]`` int64)."""
        n_ids = int(self._state[K.ST_IDS])
        return DistanceHistogram(self._hist[:max(n_ids, 0)].copy(), float(self._state[K.ST_COLD]),
                                 float(self._state[K.ST_REFS]), 1.0)

    def mrc(self, capacities: Any = None) -> np.ndarray:
        """LRU miss ratio at each capacity (default ``0 .. max distance + 1``), cold misses
        included; see :meth:`DistanceHistogram.mrc`.  One pass gives every capacity."""
        return self.histogram().mrc(capacities)

    def hit_ratio(self, capacity: int) -> float:
        """LRU hit ratio at ``capacity`` (cold misses count as misses)."""
        return self.histogram().hit_ratio(capacity)

    def working_set(self, fraction: float = 0.9) -> int:
        """Smallest capacity reaching ``fraction`` of the hits of an unlimited cache."""
        return self.histogram().working_set(fraction)

    def groups(self) -> np.ndarray:
        """The group ids seen so far (sorted)."""
        return np.unique(self._group_ids)

    def group_histogram(self, group: int) -> DistanceHistogram:
        """Distance histogram restricted to the references tagged ``group`` (distances still
        measured in the shared stream).  Unknown group: an empty histogram; a group that is not
        an integer (``None``, ``1.5``): :class:`~kvmm.errors.DTypeError`."""
        group = as_count(group, "group", minimum=-(2**63), maximum=2**63 - 1)
        lo = int(np.searchsorted(self._group_ids, group, side="left"))
        hi = int(np.searchsorted(self._group_ids, group, side="right"))
        dist = self._group_dist[lo:hi]
        cnt = self._group_count[lo:hi]
        cold = int(cnt[dist < 0].sum())
        warm = dist >= 0
        size = int(dist[warm].max()) + 1 if warm.any() else 0
        counts = np.zeros(size, dtype=np.int64)
        np.add.at(counts, dist[warm], cnt[warm])
        return DistanceHistogram(counts, float(cold), float(cnt.sum()), 1.0)

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every state array (used by tests to prove failed calls change nothing)."""
        return {name: value.copy() for name, value in vars(self).items()
                if isinstance(value, np.ndarray) and name not in ("_id_buf", "_pos_buf", "_hash_buf")}

    def check(self) -> None:
        """Assert every invariant (expensive: O(table + time arrays))."""
        st = self._state
        n_ids, clock, live = int(st[K.ST_IDS]), int(st[K.ST_CLOCK]), int(st[K.ST_LIVE])
        table = self._slots.reshape(-1, 2)
        # the hash table size is a power of two and at most half full
        assert table.shape[0] & (table.shape[0] - 1) == 0
        assert 2 * n_ids <= table.shape[0]
        # every occupied slot maps its key to an id whose recorded key is that key, ids are dense
        occupied = table[:, 1] != 0
        ids = table[occupied, 1].astype(np.int64) - 1
        assert ids.size == n_ids and np.array_equal(np.sort(ids), np.arange(n_ids))
        assert np.array_equal(self._id_keys[ids], table[occupied, 0])
        # every key is found by a probe from its hash (no hole between home slot and slot)
        found = np.empty(n_ids, dtype=np.int64)
        K.lookup_ids(self._id_keys[:n_ids].copy(), self._slots, found)
        assert np.array_equal(found, np.arange(n_ids))
        # marks: each live id owns exactly one time position below clock, owner arrays agree
        last = self._id_last[:n_ids]
        live_ids = np.flatnonzero(last >= 0)
        assert live_ids.size == live and live <= n_ids
        assert np.all(last[live_ids] < clock) and clock <= self._time_owner.shape[0]
        assert np.array_equal(self._time_owner[last[live_ids]], live_ids)
        assert np.unique(last[live_ids]).size == live
        # the mark bits are set exactly at the live ids' last positions
        marks = np.zeros(self._time_owner.shape[0], dtype=np.uint8)
        marks[last[live_ids]] = 1
        assert np.array_equal(np.unpackbits(self._time_bits.view(np.uint8), bitorder="little"), marks)
        # the block tree is exactly the Fenwick tree of the per-block mark counts
        per_block = marks.reshape(-1, K.BLOCK_POSITIONS).sum(axis=1)
        assert np.array_equal(self._block_tree, _fenwick_of(per_block))
        self._check_counts()
        # group tables are sorted by (group, distance), unique, with positive counts
        if self._group_ids.size:
            order = np.lexsort((self._group_dist, self._group_ids))
            assert np.array_equal(order, np.arange(order.size))
            assert np.all(self._group_count > 0)

    # ------------------------------------------------------------------ internals
    def _check_counts(self) -> None:
        st = self._state
        # every processed (sampled) reference is in the histogram or a cold miss
        assert int(self._hist.sum()) + int(st[K.ST_COLD]) == int(st[K.ST_SAMPLED])
        # cold misses are the first references of the keys: one per id
        assert int(st[K.ST_COLD]) == int(st[K.ST_IDS])
        # distances are < distinct keys, so the histogram (sized with the id arrays) fits
        assert self._hist.shape[0] >= int(st[K.ST_IDS])

    def _run(self, key_words: np.ndarray, distances: np.ndarray, want: bool,
             threshold: np.uint64 = _NO_THRESHOLD, sample: bool = False) -> None:
        """Feed the whole batch to the kernel, growing arrays whenever it stops for room.

        ``sample``: track only keys whose hash is below ``threshold`` (fixed-rate SHARDS).
        """
        pos = 0
        n = key_words.shape[0]
        while True:
            pos, status = K.access_batch(key_words, pos, threshold, sample, self._slots, self._id_keys,
                                         self._id_last, self._time_owner, self._time_bits, self._block_tree,
                                         self._hist, self._state, distances, want, self._id_buf, self._pos_buf,
                                         self._hash_buf, *self._strata_args())
            if status == K.DONE:
                break
            self._grow(status, min(K.CHUNK, n - pos))
        assert pos == n

    def _grow(self, status: int, chunk: int) -> None:
        """Grow the array the kernel ran out of, with room for ``chunk`` more references."""
        need = int(self._state[K.ST_IDS]) + chunk
        if status == K.GROW_TABLE:
            n_slots = max(2 * (self._slots.shape[0] // 2), 2 * _next_pow2(need))  # doubled; load <= 1/2
            new = np.zeros(2 * n_slots, dtype=np.uint64)
            K.rehash(self._slots, new)
            self._slots = new
        elif status == K.GROW_IDS:
            cap = max(2 * self._id_keys.shape[0], _next_pow2(need))
            self._id_keys = grown(self._id_keys, cap, 0)
            self._id_last = grown(self._id_last, cap, -1)
            self._hist = grown(self._hist, cap, 0)
            self._grow_extra_ids(cap)
        elif status == K.GROW_TIME:
            size = _time_size(4 * (int(self._state[K.ST_LIVE]) + chunk))
            new_owner = np.full(size, -1, dtype=np.int32)
            new_bits = np.zeros(size // 64, dtype=np.uint64)
            new_tree = np.zeros(size // K.BLOCK_POSITIONS + 1, dtype=np.int32)
            K.compact_time(self._time_owner, self._id_last, self._time_bits, self._block_tree, self._state, new_owner,
                           new_bits, new_tree)
            self._time_owner, self._time_bits, self._block_tree = new_owner, new_bits, new_tree
        else:
            self._grow_sample_arrays(status, chunk)

    def _grow_extra_ids(self, cap: int) -> None:
        """Hook for subclasses with more per-id arrays."""

    def _grow_sample_arrays(self, status: int, chunk: int) -> None:  # pragma: no cover - exact mode never asks
        """Hook for subclasses whose kernels stop for arrays of their own."""
        raise AssertionError(f"unknown kernel status {status}")

    def _strata_args(self) -> tuple:
        """The kernel's stratified-sampling arguments: switched off for the exact tracker."""
        return False, np.uint64(0), _NO_STRATA_SLOTS, _NO_REGISTERS, _NO_LOG, _NO_LOG

    def _merge_groups(self, groups: np.ndarray, distances: np.ndarray) -> None:
        g = np.concatenate((self._group_ids, groups))
        d = np.concatenate((self._group_dist, distances))
        c = np.concatenate((self._group_count, np.ones(groups.shape[0], dtype=np.int64)))
        order = np.lexsort((d, g))
        g, d, c = g[order], d[order], c[order]
        if g.size:
            start = np.concatenate(([True], (g[1:] != g[:-1]) | (d[1:] != d[:-1])))
            idx = np.flatnonzero(start)
            self._group_count = np.add.reduceat(c, idx)
            self._group_ids = g[idx]
            self._group_dist = d[idx]


def _as_key_words(keys: Any) -> np.ndarray:
    """Keys as a contiguous uint64 array (a view when already int64/uint64)."""
    arr = as_array(keys, "keys")
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.uint64)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"keys must be an integer array (int64 or uint64), got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ShapeError(f"keys must be 1-dimensional, got shape {arr.shape}")
    if arr.dtype == np.uint64 or arr.dtype == np.int64:
        return np.ascontiguousarray(arr).view(np.uint64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64).view(np.uint64)
    return arr.astype(np.uint64)


def _as_groups(groups: Any, n: int) -> np.ndarray:
    arr = as_index_array(groups, "groups")
    if arr.shape[0] != n:
        raise ShapeError(f"groups must be 1-dimensional with one entry per key ({n}), got shape {arr.shape}")
    return arr


def _as_capacity(x: Any) -> int:
    if isinstance(x, (bool, np.bool_)):
        raise DTypeError(f"capacity must be an integer, got {x!r}")
    if isinstance(x, (float, np.floating)):
        if not np.isfinite(x) or x != int(x):
            raise BadInputError(f"capacity must be a non-negative integer, got {x!r}")
        x = int(x)
    if not isinstance(x, (int, np.integer)):
        raise DTypeError(f"capacity must be a non-negative integer, got {x!r} ({type(x).__name__})")
    if x < 0:
        raise BadInputError(f"capacity must be >= 0, got {x}")
    return min(int(x), _CAPACITY_CLAMP)


def _as_capacities(capacities: Any, max_capacity: int) -> np.ndarray:
    if capacities is None:
        return np.arange(max_capacity + 1, dtype=np.int64)
    arr = as_array(capacities, "capacities")  # ragged lists and booleans are KvmmErrors, not numpy's
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise ShapeError(f"capacities must be 1-dimensional, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise BadInputError("capacities contain NaN or infinity; expected non-negative integers")
        if np.any(arr != np.floor(arr)):
            raise BadInputError("capacities must be whole numbers of blocks; got fractional values")
    elif arr.dtype.kind not in "iu":
        raise DTypeError(f"capacities must be non-negative integers, got dtype {arr.dtype}")
    if np.any(arr < 0):
        raise BadInputError(f"capacities must be >= 0, got minimum {arr.min()}")
    # Every capacity at or above the number of distinct keys behaves the same (nothing is ever
    # evicted), so clamp huge ones (uint64 >= 2**63, 1e30) instead of letting int64 wrap them.
    if arr.dtype.kind == "f":
        arr = np.minimum(arr, float(_CAPACITY_CLAMP))
    elif arr.dtype.kind == "u":
        arr = np.minimum(arr.astype(np.uint64), np.uint64(_CAPACITY_CLAMP))
    return arr.astype(np.int64)


#: capacities above this are clamped to it (no trace has 2**62 distinct keys)
_CAPACITY_CLAMP = 1 << 62


def _time_size(n: int) -> int:
    """Time arrays hold whole blocks of marks (``K.BLOCK_POSITIONS`` positions)."""
    block = K.BLOCK_POSITIONS
    return max(block, (int(n) + block - 1) // block * block)


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n (and >= 2)."""
    return 1 << max(int(n) - 1, 1).bit_length()


def _fenwick_of(marks: np.ndarray) -> np.ndarray:
    """Reference Fenwick tree (1-based) of a count vector, built from prefix sums."""
    n = marks.shape[0]
    prefix = np.concatenate(([0], np.cumsum(marks)))
    i = np.arange(1, n + 1)
    low = i & (-i)
    tree = np.zeros(n + 1, dtype=np.int64)
    tree[1:] = prefix[i] - prefix[i - low]
    return tree
