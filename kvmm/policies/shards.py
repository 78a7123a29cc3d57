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
references (``N - sum of 1/R``) is added to the smallest-distance bucket, which removes most of
the bias from a sample that happens to hold more or fewer hot keys than its share.

Error (measured here, see ``bench/test_bench_stack_distance.py`` and
``tests/test_stack_distance_shards.py``): mean absolute MRC error (miss ratio, averaged over 200
capacities up to the largest distance) on 10 M Zipf-0.9 references over 10^6 keys, across 12
relabellings of the keys (which hot keys land in the sample is luck): median 0.0028, worst
0.0065 at ``R = 0.01``; median 0.0011, worst 0.0028 at 32 K keys; median 0.0008, worst 0.0025
at ``R = 0.1``.  0.0019 at ``R = 0.1`` on 2 M references over 10^5 keys.
The paper reports MAE 0.0027 at ``R = 0.01`` and 0.0002-0.002 at ``s_max = 8 K``.
The error grows as the sample holds fewer keys (small traces at low rates): with ``R x distinct
keys`` below a few thousand, use the exact tracker or a higher rate.  On 3 M Zipf-0.95 references
over 2.2 * 10^5 distinct keys, ``R = 0.01`` samples ~2,200 keys; key sampling alone then gives an
expected absolute miss-ratio error of ~0.0068 (the SHARDS-adj estimate at capacity ``c`` is
``sum over sampled keys of misses_k(c) / (R N)``, with variance ``(1 - R) / R * sum_k
misses_k(c)**2 / N**2``), and the measured MAE over 16 draws of the sampled keys is median
0.0042, range 0.0017-0.0144; at ``R = 0.05`` median 0.0023, worst 0.0038
(``bench/test_bench_stack_distance.py::test_shards_sampling_error``).  Capacities below ``1/R`` blocks cannot be
resolved (one sampled distance step stands for ``1/R`` blocks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm._arrays import grown
from kvmm._validate import as_count, as_fraction
from kvmm.errors import BadInputError
from kvmm.policies import _stack_kernels as K
from kvmm.policies.stack_distance import DistanceHistogram, StackDistanceTracker, _as_key_words

__all__ = ["ShardsTracker"]


class ShardsTracker(StackDistanceTracker):
    """Sampled (SHARDS) stack-distance tracker: same queries as :class:`StackDistanceTracker`.

    Exactly one of ``rate`` (fixed-rate sampling, in (0, 1]) or ``fixed_size`` (at most that
    many sampled keys, >= 1) must be given.  ``access(..., return_distances=True)`` returns the
    distances *among the sampled keys* (unscaled), -1 for a cold miss and -2 for a reference the
    sample skipped.  Per-group views are not available (use the exact tracker).

    Runtime complexity: O(1) per skipped reference, O(log T) per sampled one.
    """

    def __init__(self, rate: float | None = None, *, fixed_size: int | None = None, initial_keys: int = 1024) -> None:
        if (rate is None) == (fixed_size is None):
            raise BadInputError("give exactly one of rate= (fixed-rate SHARDS) or fixed_size= (fixed-size SHARDS)")
        if rate is not None:
            self.rate = as_fraction(rate, "rate")
            self.fixed_size = None
            # sample iff hash < threshold; rate 1 tracks every key (no filter at all)
            self._threshold = np.uint64(min(int(self.rate * K.TWO_POW_64), 2**64 - 1))
            super().__init__(initial_keys)
        else:
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

    def access(self, keys: Any, groups: Any = None, *, return_distances: bool = False) -> np.ndarray | None:
        """Process a batch of references (see :meth:`StackDistanceTracker.access`)."""
        key_words = _as_key_words(keys)
        if groups is not None:
            raise BadInputError("per-group views need the exact StackDistanceTracker; ShardsTracker takes no groups")
        distances = np.empty(key_words.shape[0] if return_distances else 0, dtype=np.int64)
        self._run(key_words, distances, return_distances)
        return distances if return_distances else None

    def histogram(self) -> DistanceHistogram:
        """Weighted histogram in full-stream units, with the SHARDS-adj correction in bucket 0."""
        total = float(self._state[K.ST_REFS])
        if self.rate is not None:
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

    def check(self) -> None:
        super().check()
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
    def _check_counts(self) -> None:
        if self.fixed_size is None:
            super()._check_counts()

    def _run(self, key_words: np.ndarray, distances: np.ndarray, want: bool) -> None:
        if self.rate is not None:
            # rate 1 samples everything: skip the hash filter (no threshold admits the top hash)
            return super()._run(key_words, distances, want, self._threshold, self.rate < 1.0)
        pos, n = 0, key_words.shape[0]
        while True:
            pos, status = K.access_fixed_size(key_words, pos, self.fixed_size, self._slots, self._id_keys,
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
