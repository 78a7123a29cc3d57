"""SHARDS: spatially hashed sampling of stack distances for traces too large to track exactly.

Waldspurger et al., "Efficient MRC Construction with SHARDS" (FAST '15).  A reference is kept
iff ``hash(key) < T`` with ``R = T / 2**64`` the sampling rate; a key is either always or never
sampled, so the sampled references form the full reference stream of a random ``R`` share of the
keys, and a distance ``d`` measured among them stands for ``d / R`` in the full stream.

* Fixed rate (``ShardsTracker(rate=0.01)``): memory ~ ``R x`` distinct keys.
* Fixed size (``ShardsTracker(fixed_size=32768)``): at most that many sampled keys; when a new
  one would exceed it, the sampled key with the largest hash is dropped and ``T`` falls to that
  hash.  Each reference is weighted by ``1/R`` at its time (equivalent to the paper's rescaling
  of the histogram whenever ``R`` drops).

Both apply SHARDS-adj: the difference between the references seen and the weighted sampled
references (``N - sum of weights``) is added to the smallest-distance bucket, which removes most
of the bias from a sample that happens to hold more or fewer hot keys than its share.

**Stratified fixed rate** (the default for ``rate < 1``; ``stratify_rate=None`` turns it off).
With few sampled keys (``R x distinct keys`` in the low thousands) most of SHARDS's error is luck
in *which* keys the sample holds: a sample with 20 % too many keys of ~200 references each moves
the miss ratio at small capacities by several points, and a sample with 2 % too many keys in all
stretches every scaled distance by 2 %.  Two-phase sampling (double sampling for stratification,
Neyman 1938) removes most of it, with two cheap counts over the whole stream:

* a larger hash-sampled set of keys, ``hash < stratify_rate * 2**64`` (default ``max(R, min(10
  R, 0.25))``; the sampled keys are a subset), whose references are only *counted*, in a hash
  table of counts;
* a HyperLogLog sketch of every reference (``2**DISTINCT_SKETCH_BITS`` = 64 Ki one-byte
  registers, relative standard error ~0.4 %), read with Ertl's improved estimator.

The distinct keys ``D`` are estimated by the inverse-variance weighted mean of ``counted keys /
stratify_rate`` and the sketch.  At query time keys fall into strata by frequency band
``floor(log2(references))``, bands merged from the hottest down until each stratum holds at
least ``MIN_STRATUM_KEYS`` sampled keys.  A sampled key in stratum ``g`` weighs ``(counted keys
of g / stratify_rate) / (sampled keys of g)``, all weights then scaled so they add up to ``D``
(instead of ``1/R`` each), and a sampled distance ``d`` stands for ``d * D / n`` with ``n`` the
sampled keys (the effective rate ``n / D`` instead of the nominal ``R``).  SHARDS-adj applies as
before.  With no sampled key yet the histogram holds ``D`` cold misses and, by SHARDS-adj, every
other reference in bucket 0.  Costs: the counts table (32-64 bytes per counted key, 16-byte slots at most half full:
a few times the sample's own memory at the default rate), 64 KiB of registers, and an (id,
distance) log of 8 bytes per sampled reference (kept because a key's stratum depends on its
final frequency, so memory grows with the sampled references, not only the sampled keys);
throughput about halves (still ~130-180 M refs/s at ``R = 0.01`` here).

Error (``bench/test_bench_stack_distance.py``: mean absolute miss-ratio error over 200
capacities up to the largest distance, across relabellings of the keys, which redraw the sampled
keys).  On 3 M Zipf-0.95 references over 2.2 * 10^5 distinct keys at ``R = 0.01`` (~2,200
sampled keys; key sampling alone gives plain SHARDS-adj an expected error of ~0.0068), over 40
draws: plain SHARDS-adj median 0.0038, 90th percentile 0.011, worst 0.018, 65 % of draws <=
0.005; stratified median 0.0018, 90th percentile 0.0037, worst 0.0055, 97 % <= 0.005.  At ``R =
0.05``: plain median 0.0023 (worst 0.0058), stratified 0.0010 (worst 0.0020).  On 10 M Zipf-0.9
references over 10^6 keys at ``R = 0.01``, 12 draws: plain median 0.0034 (worst 0.0052),
stratified 0.0008 (worst 0.0012); fixed size at 32 K keys: median 0.0009, worst 0.0021.
Stratification also lowered the median error 1.2-4.3x on Zipf 0.8, uniform, loop-plus-random,
agent-shaped and Mooncake block streams (``-k across_streams``; docs/performance.md).  The
paper reports MAE 0.0027 at ``R = 0.01`` and 0.0002-0.002 at ``s_max = 8 K``.  With ``R x
distinct keys`` below a few thousand, prefer the exact tracker or a higher rate.  Capacities
below ``1/R`` blocks cannot be resolved (one sampled distance step stands for ``1/R`` blocks).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvmm._arrays import grown
from kvmm._validate import as_count, as_fraction
from kvmm.errors import BadInputError, CapacityExceededError
from kvmm.policies.mrc import _shards_kernels as KS
from kvmm.policies.mrc import _stack_kernels as K
from kvmm.policies.mrc.stack_distance import DistanceHistogram, StackDistanceTracker, _as_key_words, _next_pow2

__all__ = ["ShardsTracker"]


#: fewest sampled keys in a frequency stratum (sparser bands are merged into their hotter neighbours)
MIN_STRATUM_KEYS = 8
#: by default the counted share of the keys is this many times the sampling rate, at most
#: STRATIFY_CAP (the accuracy gained beyond it is small and the counting costs time), at least rate
STRATIFY_FACTOR = 10
STRATIFY_CAP = 0.25
#: HyperLogLog registers (2**bits bytes) counting the distinct keys of the whole stream
DISTINCT_SKETCH_BITS = 16
AUTO = "auto"
_LOG_ID_LIMIT = 2**31  # the (id, distance) log stores int32


class ShardsTracker(StackDistanceTracker):
    """Sampled (SHARDS) stack-distance tracker: same queries as :class:`StackDistanceTracker`.

    Exactly one of ``rate`` (fixed-rate sampling, in (0, 1]) or ``fixed_size`` (at most that
    many sampled keys, >= 1) must be given.  ``stratify_rate`` (fixed rate only): the share of
    keys whose references are counted for the frequency strata, in ``[rate, 1]``; ``"auto"``
    (default) is ``max(rate, min(10 * rate, 0.25))`` below rate 1, and ``None`` gives plain
    SHARDS-adj (see the module docstring).  ``access(..., return_distances=True)`` returns the
    distances *among the sampled keys* (unscaled), -1 for a cold miss and -2 for a reference the
    sample skipped.  Per-group views are not available (use the exact tracker).

    Runtime complexity: O(1) per skipped reference, O(log T) per sampled one; ``histogram`` is
    O(sampled references + counted keys) when stratified.
    """

    def __init__(self, rate: float | None = None, *, fixed_size: int | None = None,
                 stratify_rate: float | str | None = AUTO, initial_keys: int = 1024) -> None:
        if (rate is None) == (fixed_size is None):
            raise BadInputError("give exactly one of rate= (fixed-rate SHARDS) or fixed_size= (fixed-size SHARDS)")
        self.stratify_rate: float | None = None
        if rate is not None:
            self.rate = as_fraction(rate, "rate")
            self.fixed_size = None
            # sample iff hash < threshold; rate 1 tracks every key (no filter at all)
            self._threshold = np.uint64(min(int(self.rate * K.TWO_POW_64), 2**64 - 1))
            self.stratify_rate = _stratify_rate(stratify_rate, self.rate)
            super().__init__(initial_keys)
            if self.stratify_rate is not None:
                # counted iff hash < stratify_rate * 2**64, i.e. hash <= ceil(that) - 1 =: strata_max
                # (>= 0 for any rate > 0; rate 1 counts every key); the sampled keys (hash <
                # threshold = floor(rate * 2**64) <= strata_max + 1) are always among the counted ones
                self._strata_max = np.uint64(min(math.ceil(self.stratify_rate * K.TWO_POW_64), 2**64) - 1)
                self._strata_slots = np.zeros(4 * self._id_keys.shape[0], dtype=np.uint64)  # grown on demand
                self._registers = np.zeros(1 << DISTINCT_SKETCH_BITS, dtype=np.uint8)
                self._log_ids = np.zeros(K.CHUNK, dtype=np.int32)
                self._log_dist = np.zeros(K.CHUNK, dtype=np.int32)
        else:
            if stratify_rate is not None and not (isinstance(stratify_rate, str) and stratify_rate == AUTO):
                raise BadInputError("stratify_rate needs fixed-rate sampling (rate=); fixed_size= samples without it")
            self.rate = None
            self.fixed_size = as_count(fixed_size, "fixed_size", minimum=1, maximum=1 << 26)  # its heap is preallocated
            super().__init__(min(as_count(initial_keys, "initial_keys", minimum=1), self.fixed_size + 1))
            self._id_hash = np.zeros(self._id_keys.shape[0], dtype=np.uint64)
            self._heap = np.zeros(self.fixed_size + 1, dtype=np.int64)
            self._whist = np.zeros(1024, dtype=np.float64)
            self._wcold = np.zeros(1, dtype=np.float64)
            self._threshold_box = np.zeros(1, dtype=np.uint64)

    @property
    def current_rate(self) -> float:
        """The sampling rate now in force (fixed size: falls as the sample fills)."""
        if self.rate is not None:
            return self.rate
        if self._state[K.ST_ACTIVE] == 0:
            return 1.0
        return float(self._threshold_box[0]) / K.TWO_POW_64

    @property
    def sampled_refs(self) -> int:
        return int(self._state[K.ST_SAMPLED])

    @property
    def distinct_keys_estimate(self) -> float:
        """Estimated distinct keys in the whole stream.  Stratified: the inverse-variance
        weighted mean of counted keys / ``stratify_rate`` and the HyperLogLog estimate (exact
        when ``stratify_rate`` is 1); else sampled keys still tracked / the current rate."""
        if self.stratify_rate is not None:
            return _combined_distinct(float(self._state[K.ST_STRATA_KEYS]), self.stratify_rate,
                                      hll_estimate(self._registers), self._registers.shape[0])
        live = int(np.count_nonzero(self._id_last[: int(self._state[K.ST_IDS])] >= 0))
        return live / self.current_rate

    def access(self, keys: Any, groups: Any = None, *, return_distances: bool = False) -> np.ndarray | None:
        """Process a batch of references (see :meth:`StackDistanceTracker.access`)."""
        key_words = _as_key_words(keys)
        if groups is not None:
            raise BadInputError("per-group views need the exact StackDistanceTracker; ShardsTracker takes no groups")
        distances = np.empty(key_words.shape[0] if return_distances else 0, dtype=np.int64)
        self._run(key_words, distances, return_distances)
        return distances if return_distances else None

    def histogram(self) -> DistanceHistogram:
        """Weighted histogram in full-stream units, with the SHARDS-adj correction in bucket 0
        (stratified: weights and distance scale from the frequency strata; before the first
        sampled key, the estimated distinct keys as cold misses and no distances)."""
        total = float(self._state[K.ST_REFS])
        if self.stratify_rate is not None and self._state[K.ST_IDS] > 0:
            counts, cold, scale = self._stratified_counts()
        elif self.stratify_rate is not None:
            # no sampled key: no distance is known, but the cold misses are (not 0 misses at c >= 1)
            counts, cold, scale = np.zeros(1), self.distinct_keys_estimate, 1.0
        elif self.rate is not None:
            weight = 1.0 / self.rate
            n_ids = int(self._state[K.ST_IDS])
            counts = self._hist[:max(n_ids, 1)].astype(np.float64) * weight
            cold = float(self._state[K.ST_COLD]) * weight
            scale = weight
        else:
            used = np.flatnonzero(self._whist)
            counts = self._whist[: (int(used[-1]) + 1 if used.size else 1)].copy()
            cold = float(self._wcold[0])
            scale = 1.0
        if total > 0:
            counts[0] += total - (cold + float(counts.sum()))  # SHARDS-adj
        return DistanceHistogram(counts, cold, total, scale)

    def stratum_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Stratified mode: ``(bands, weights)``, the frequency band (``floor(log2(references))``)
        of each sampled key (by dense id) and the weight (references it stands for per
        reference) the histogram gives it.  Runtime complexity: O(sampled refs + counted keys)."""
        if self.stratify_rate is None:
            raise BadInputError("stratum_weights needs a stratified tracker (rate= with stratify_rate not None)")
        return self._stratum_weights(self.distinct_keys_estimate)

    def _stratum_weights(self, distinct: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`stratum_weights` given the distinct-key estimate (read once per histogram)."""
        n_ids = int(self._state[K.ST_IDS])
        log_ids = self._log_ids[: int(self._state[K.ST_SAMPLED])]
        sampled_bands = _frequency_band(np.bincount(log_ids, minlength=n_ids))
        counted = self._strata_slots[1::2]
        band_weight = _band_weights(_frequency_band(counted[counted != 0]), sampled_bands, self.stratify_rate)
        # calibrated so the weights of the sampled keys add up to the distinct-key estimate
        counted_estimate = float(self._state[K.ST_STRATA_KEYS]) / self.stratify_rate
        calibration = distinct / counted_estimate if counted_estimate > 0 else 1.0
        return sampled_bands, band_weight[sampled_bands] * calibration

    def check(self) -> None:
        super().check()
        if self.stratify_rate is not None:
            self._check_strata()
        if self.fixed_size is None:
            return
        n_ids = int(self._state[K.ST_IDS])
        live = np.flatnonzero(self._id_last[:n_ids] >= 0)
        heap = self._heap[: int(self._state[K.ST_HEAP])]
        # the heap holds exactly the live sampled ids, never more than fixed_size
        assert np.array_equal(np.sort(heap), live) and live.size <= self.fixed_size
        # heap order: every parent's hash >= its children's
        h = self._id_hash[heap]
        kids = np.arange(1, heap.size)
        assert np.all(h[(kids - 1) // 2] >= h[kids])
        # each id's stored hash is the hash of its key
        expect = np.empty(n_ids, dtype=np.uint64)
        K.hash_keys(self._id_keys[:n_ids].copy(), expect)
        assert np.array_equal(self._id_hash[:n_ids], expect)
        if self._state[K.ST_ACTIVE]:
            # live keys are below the threshold, dropped ones at or above it
            assert np.all(self._id_hash[live] < self._threshold_box[0])
            dead = np.setdiff1d(np.arange(n_ids), live)
            assert np.all(self._id_hash[dead] >= self._threshold_box[0])

    # ------------------------------------------------------------------ internals
    def _check_strata(self) -> None:
        st = self._state
        n_ids, sampled = int(st[K.ST_IDS]), int(st[K.ST_SAMPLED])
        table = self._strata_slots.reshape(-1, 2)
        occupied = table[:, 1] != 0
        # the counts table is a power of two, at most half full, and its totals match the state
        assert table.shape[0] & (table.shape[0] - 1) == 0 and 2 * int(st[K.ST_STRATA_KEYS]) <= table.shape[0]
        assert int(occupied.sum()) == int(st[K.ST_STRATA_KEYS])
        assert int(table[occupied, 1].sum()) == int(st[K.ST_STRATA_REFS])
        # every counted key hashes at or below strata_max and is found by a probe from its hash
        counted_keys = table[occupied, 0].copy()
        hashes = np.empty(counted_keys.shape[0], dtype=np.uint64)
        K.hash_keys(counted_keys, hashes)
        assert np.all(hashes <= self._strata_max)
        found = np.empty(counted_keys.shape[0], dtype=np.int64)
        K.lookup_ids(counted_keys, self._strata_slots, found)
        assert np.array_equal(found, table[occupied, 1].astype(np.int64) - 1)  # lookup returns count - 1
        # sketch registers hold ranks 0 .. 65 - b, and each counted key's register at least its rank
        bits = self._registers.shape[0].bit_length() - 1
        assert int(self._registers.max()) <= 65 - bits
        rest = hashes >> np.uint64(bits)
        lowest_bit = (rest & (~rest + np.uint64(1))).astype(np.float64)  # a power of two: log2 is exact
        ranks = np.where(rest != 0, np.log2(np.maximum(lowest_bit, 1.0)) + 1, 65 - bits)
        assert np.all(self._registers[hashes & np.uint64(self._registers.shape[0] - 1)] >= ranks)
        # the log has one (id, distance) entry per sampled reference, and it is the histogram
        log_ids, log_dist = self._log_ids[:sampled], self._log_dist[:sampled]
        assert log_ids.shape[0] == sampled and np.all((log_ids >= 0) & (log_ids < n_ids))
        assert int((log_dist == -1).sum()) == int(st[K.ST_COLD])
        assert np.array_equal(np.bincount(log_dist[log_dist >= 0], minlength=self._hist.shape[0]), self._hist)
        # each sampled key is counted, with as many references as the log holds for it
        sampled_counts = np.empty(n_ids, dtype=np.int64)
        K.lookup_ids(self._id_keys[:n_ids].copy(), self._strata_slots, sampled_counts)
        assert np.array_equal(sampled_counts + 1, np.bincount(log_ids, minlength=n_ids))
        # ... and its first logged reference is its cold miss
        first = np.unique(log_ids, return_index=True)[1]
        assert np.all(log_dist[first] == -1) and first.size == n_ids

    def _stratified_counts(self) -> tuple[np.ndarray, float, float]:
        """(weighted counts by sampled distance, weighted cold misses, distance scale)."""
        n_ids = int(self._state[K.ST_IDS])
        log_ids = self._log_ids[: int(self._state[K.ST_SAMPLED])]
        log_dist = self._log_dist[: log_ids.shape[0]]
        distinct = self.distinct_keys_estimate
        _, key_weight = self._stratum_weights(distinct)
        warm = log_dist >= 0
        # (astype: bincount of nothing returns int64 even with weights, and SHARDS-adj adds a float)
        counts = np.bincount(log_dist[warm], weights=key_weight[log_ids[warm]], minlength=n_ids).astype(np.float64)
        cold = float(key_weight.sum())  # one cold miss per sampled key
        # a sampled distance d stands for d * (estimated distinct keys) / (sampled keys)
        return counts, cold, distinct / n_ids

    def _strata_args(self) -> tuple:
        if self.stratify_rate is None:
            return super()._strata_args()
        return True, self._strata_max, self._strata_slots, self._registers, self._log_ids, self._log_dist

    def _grow_sample_arrays(self, status: int, chunk: int) -> None:
        if status == K.GROW_STRATA:
            need = int(self._state[K.ST_STRATA_KEYS]) + chunk
            new = np.zeros(max(2 * self._strata_slots.shape[0], 4 * _next_pow2(need)), dtype=np.uint64)
            K.rehash(self._strata_slots, new)
            self._strata_slots = new
        elif status == K.GROW_LOG:
            cap = max(2 * self._log_ids.shape[0], int(self._state[K.ST_SAMPLED]) + chunk)
            self._log_ids = grown(self._log_ids, cap, 0)
            self._log_dist = grown(self._log_dist, cap, 0)
        else:  # pragma: no cover - kernels return only the statuses above
            raise AssertionError(f"unknown kernel status {status}")

    def _check_counts(self) -> None:
        if self.fixed_size is None:
            super()._check_counts()

    def _run(self, key_words: np.ndarray, distances: np.ndarray, want: bool) -> None:
        if self.rate is not None:
            # rate 1 samples everything: skip the hash filter (no threshold admits the top hash)
            return super()._run(key_words, distances, want, self._threshold, self.rate < 1.0)
        pos, n = 0, key_words.shape[0]
        while True:
            pos, status = KS.access_fixed_size(key_words, pos, self.fixed_size, self._slots, self._id_keys,
                                              self._id_last, self._id_hash, self._time_owner, self._time_bits,
                                              self._block_tree, self._heap, self._whist, self._wcold,
                                              self._threshold_box, self._state, distances, want)
            if status == K.DONE:
                return
            if status == K.GROW_HIST:
                self._whist = grown(self._whist, 2 * self._whist.shape[0], 0.0)
            else:
                self._grow(status, min(K.CHUNK, n - pos))

    def _grow_extra_ids(self, cap: int) -> None:
        if self.fixed_size is not None:
            self._id_hash = grown(self._id_hash, cap, 0)
        if self.stratify_rate is not None and cap > _LOG_ID_LIMIT:  # pragma: no cover - needs 2**31 sampled keys
            raise CapacityExceededError(f"stratified SHARDS logs sampled key ids as int32 (at most {_LOG_ID_LIMIT} "
                                        f"keys); {cap} requested: lower the rate or pass stratify_rate=None")


def _stratify_rate(stratify_rate: Any, rate: float) -> float | None:
    """The counted share of keys: ``"auto"`` -> ``max(rate, min(10 rate, 0.25))`` (none at rate 1)."""
    if stratify_rate is None or (isinstance(stratify_rate, str) and stratify_rate == AUTO and rate >= 1.0):
        return None
    if isinstance(stratify_rate, str):
        if stratify_rate != AUTO:
            raise BadInputError(f"stratify_rate must be a number in [rate, 1], 'auto' or None, got {stratify_rate!r}")
        return max(rate, min(STRATIFY_FACTOR * rate, STRATIFY_CAP))
    value = as_fraction(stratify_rate, "stratify_rate")
    if value < rate:
        raise BadInputError(f"stratify_rate must be at least rate ({rate}) so every sampled key is counted, "
                            f"got {stratify_rate!r}")
    return value


def _frequency_band(counts: np.ndarray) -> np.ndarray:
    """``floor(log2(count))`` of each positive count, exactly (frexp, no rounding)."""
    return (np.frexp(counts.astype(np.float64))[1] - 1).astype(np.int64)


def _band_weights(counted_bands: np.ndarray, sampled_bands: np.ndarray, stratify_rate: float) -> np.ndarray:
    """Weight of a sampled key in each frequency band.

    Bands are merged into strata from the hottest down until each holds ``MIN_STRATUM_KEYS``
    sampled keys (a too-small coldest remainder joins the stratum above).  A stratum's weight is
    its estimated number of keys (counted keys / ``stratify_rate``) over its sampled keys.
    Example: counted bands ``[0, 0, 0, 1]`` at rate 0.5, sampled ``[0, 1]``, ``MIN_STRATUM_KEYS``
    1: band 1 weighs 2 / 1, band 0 weighs 6 / 1.
    """
    top = int(max(counted_bands.max(initial=0), sampled_bands.max(initial=0)))
    counted = np.bincount(counted_bands, minlength=top + 1).astype(np.float64)
    sampled = np.bincount(sampled_bands, minlength=top + 1).astype(np.float64)
    stratum = np.empty(top + 1, dtype=np.int64)
    current, held = 0, 0.0
    for band in range(top, -1, -1):
        stratum[band] = current
        held += sampled[band]
        if held >= MIN_STRATUM_KEYS:
            current, held = current + 1, 0.0
    if current > 0 and stratum[0] == current:  # the coldest bands never filled a stratum
        stratum[stratum == current] -= 1
    keys_estimate = np.bincount(stratum, weights=counted) / stratify_rate
    keys_sampled = np.bincount(stratum, weights=sampled)
    return keys_estimate[stratum] / np.maximum(keys_sampled[stratum], 1.0)


def hll_estimate(registers: np.ndarray) -> float:
    """Distinct-count estimate from HyperLogLog registers (``2**b`` of them, ranks ``0 .. 65 -
    b``): Ertl's improved raw estimator ("New cardinality estimation algorithms for HyperLogLog
    sketches", 2017, section 4), unbiased from 0 to far beyond the register count without
    HLL++'s empirical bias tables.  Relative standard error ~1.04 / sqrt(2**b).  Infinite when
    every register holds the top rank (the sketch then bounds nothing, as in Ertl's algorithm).
    Runtime complexity: O(2**b)."""
    m = registers.shape[0]
    q = 64 - (m.bit_length() - 1)
    hist = np.bincount(registers, minlength=q + 2).astype(np.float64)
    if hist[0] == m:
        return 0.0
    if hist[q + 1] == m:
        return math.inf
    z = m * _tau(1.0 - hist[q + 1] / m)
    for k in range(q, 0, -1):
        z = 0.5 * (z + hist[k])
    z += m * _sigma(hist[0] / m)
    return float(m * m / (2.0 * np.log(2.0)) / z)


def _sigma(x: float) -> float:
    """Ertl's sigma(x) = x + sum_k x**(2**k) 2**(k-1), for 0 <= x < 1."""
    y, z = 1.0, x
    while True:
        x *= x
        before = z
        z += x * y
        y += y
        if z == before:
            return z


def _tau(x: float) -> float:
    """Ertl's tau(x) = (1 - x - sum_k (1 - x**(2**-k))**2 2**-k) / 3, for 0 <= x <= 1."""
    if x == 0.0 or x == 1.0:
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = float(np.sqrt(x))
        before = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == before:
            return z / 3.0


def _combined_distinct(counted: float, stratify_rate: float, sketch: float, registers: int) -> float:
    """Inverse-variance weighted mean of two independent distinct-key estimates: ``counted /
    stratify_rate`` (variance ``D (1 - r) / r``, exact at ``r = 1``) and the sketch (relative
    standard error 1.04 / sqrt(registers)); the sketch alone while nothing is counted, the
    counted keys alone when the sketch is saturated (infinite)."""
    from_counted = counted / stratify_rate
    if stratify_rate >= 1.0 or (from_counted > 0.0 and not math.isfinite(sketch)):
        return from_counted
    if from_counted <= 0.0:  # no key counted yet (variance estimate 0): the sketch alone
        return sketch
    var_counted = from_counted * (1.0 - stratify_rate) / stratify_rate
    var_sketch = (1.04 * max(sketch, 1.0)) ** 2 / registers
    return (from_counted / var_counted + sketch / var_sketch) / (1.0 / var_counted + 1.0 / var_sketch)
