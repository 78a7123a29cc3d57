"""Miss-ratio curves of traces too large for one machine: spatial partitioning on Dask.

Method (``distributed_mrc``): the key space is split by a hash into ``P`` parts.  Part ``p``
holds every reference whose key hashes to ``p``, in trace order; one worker runs the exact
:class:`~kvmm.policies.StackDistanceTracker` over it.  Each part is a spatial sample of the
trace at rate ``1/P`` (SHARDS with ``P`` disjoint thresholds), so a stack distance ``d`` inside
a part stands for about ``d * P`` in the whole trace.  The ``P`` histograms are added and read
with scale ``P``: the miss ratio at capacity ``c`` is the sum over parts of the misses at
``c / P`` divided by all references, i.e. the reference-weighted average of the ``P`` sampled
MRCs.  Every part is covered, so every reference counts (cold misses are exact), and the
sampling errors of the parts largely cancel.

Streaming: the driver reads the trace in chunks (``trace_chunks``: any iterable of key
arrays, e.g. :func:`kvmm.traces.iter_trace_chunks`), splits each chunk by part and sends each
piece to that part's actor; memory per worker is O(keys in its part), on the driver O(chunk).
At most ``max_inflight`` chunks are in flight.

Accuracy (tests/policies/mrc/test_distributed_mrc.py, bundled Mooncake traces, MAE of the miss ratio over
200 capacities up to the largest distance, against the exact single-process MRC): at most
0.005 at ``P = 4`` and ``P = 16``.  Capacities below ``P`` blocks are not resolved (one
distance step of a part stands for ``P`` blocks).

    >>> import numpy as np
    >>> from kvmm.policies import StackDistanceTracker, distributed_mrc
    >>> keys = np.random.default_rng(0).zipf(1.2, 50_000) % 5_000
    >>> exact = StackDistanceTracker()
    >>> exact.access(keys)
    >>> hist = distributed_mrc(np.array_split(keys, 5), None, parts=4)   # no client: in-process
    >>> np.round(hist.mrc([100, 1000, 4000]), 3).tolist(), np.round(exact.mrc([100, 1000, 4000]), 3).tolist()
    ([0.458, 0.248, 0.097], [0.456, 0.248, 0.097])
    >>> hist.cold == exact.histogram().cold        # distinct keys: exact
    True

A pure loop larger than a part's share of the cache is the worst case: the parts hold unequal
numbers of the loop's keys, so their LRU cliffs fall at different capacities.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from kvmm._validate import as_array, as_count
from kvmm.errors import BadInputError
from kvmm.policies.mrc import _stack_kernels as K
from kvmm.policies.mrc.stack_distance import DistanceHistogram, StackDistanceTracker

__all__ = ["distributed_mrc", "key_parts", "PartTracker"]


def distributed_mrc(trace_chunks: Iterable[Any], client: Any = None, *, parts: int = 4,
                    max_inflight: int = 4, initial_keys: int = 1024) -> DistanceHistogram:
    """The LRU stack-distance histogram of a trace, computed over ``parts`` key partitions.

    ``trace_chunks``: an iterable of 1-D integer key arrays, in trace order.  ``client``: a
    ``dask.distributed.Client`` (each part runs in a Dask actor, spread over the workers), or
    ``None`` to run the same partitioned computation in this process.  Returns a
    :class:`~kvmm.policies.DistanceHistogram` with ``scale = parts`` (``mrc``, ``working_set``,
    ``hit_ratio`` as usual; ``cold`` is the exact number of distinct keys).
    Runtime complexity: O(n log k) over the workers for n references and k keys per part.
    """
    parts = as_count(parts, "parts", minimum=1)
    max_inflight = as_count(max_inflight, "max_inflight", minimum=1)
    try:
        chunks = iter(trace_chunks)
    except TypeError:
        raise BadInputError(f"trace_chunks must be an iterable of key arrays, got {type(trace_chunks).__name__}") from None
    if client is None:
        actors = [PartTracker(initial_keys) for _ in range(parts)]
    else:
        actors = _start_actors(client, parts, initial_keys)
    sent = [0] * parts
    inflight: deque = deque()
    for chunk in chunks:
        keys = _as_keys(chunk)
        part = key_parts(keys, parts)
        order = np.argsort(part, kind="stable")  # stable: each part keeps trace order
        bounds = np.searchsorted(part[order], np.arange(parts + 1))
        calls = []
        for p in range(parts):
            piece = keys[order[bounds[p]:bounds[p + 1]]]
            if piece.size:
                calls.append(actors[p].access(sent[p], piece))
                sent[p] += 1
        if client is not None:  # in process, each call has already run
            inflight.append(calls)
            while len(inflight) > max_inflight:
                _wait(inflight.popleft())
    for calls in inflight:
        _wait(calls)
    results = [a.histogram() for a in actors]
    if client is not None:
        results = [r.result() for r in results]
    return merge_part_histograms(results, parts)


def merge_part_histograms(results: list[tuple[np.ndarray, float, float]], parts: int) -> DistanceHistogram:
    """Add the parts' ``(counts, cold, total)`` and read distances at scale ``parts``."""
    width = max((r[0].shape[0] for r in results), default=1)
    counts = np.zeros(max(width, 1), dtype=np.float64)
    for c, _, _ in results:
        counts[: c.shape[0]] += c
    cold = float(sum(r[1] for r in results))
    total = float(sum(r[2] for r in results))
    return DistanceHistogram(counts, cold, total, float(parts))


def key_parts(keys: np.ndarray, parts: int) -> np.ndarray:
    """The part of each key: a splitmix64 hash of its 64-bit word, modulo ``parts`` (int64).

    >>> key_parts(np.array([0, 1, 2, 3], dtype=np.int64), 4).tolist()
    [3, 1, 2, 1]
    """
    h = np.empty(keys.shape[0], dtype=np.uint64)
    K.hash_keys(keys.view(np.uint64), h)  # the trackers' own key hash (mix64)
    return (h % np.uint64(parts)).astype(np.int64)


class PartTracker:
    """One part's exact tracker (a Dask actor, or a plain object without a client).

    Pieces carry a per-part sequence number, so they are applied in trace order even if they
    arrive out of order.
    """

    def __init__(self, initial_keys: int = 1024) -> None:
        self.tracker = StackDistanceTracker(initial_keys)
        self.next_seq = 0
        self.pending: dict[int, np.ndarray] = {}

    def access(self, seq: int, keys: np.ndarray) -> int:
        self.pending[seq] = keys
        while self.next_seq in self.pending:
            self.tracker.access(self.pending.pop(self.next_seq))
            self.next_seq += 1
        return self.next_seq

    def histogram(self) -> tuple[np.ndarray, float, float]:
        if self.pending:
            raise BadInputError(f"part tracker still waits for piece {self.next_seq} ({len(self.pending)} pending)")
        h = self.tracker.histogram()
        return np.asarray(h.counts, dtype=np.float64), float(h.cold), float(h.total)


def _start_actors(client: Any, parts: int, initial_keys: int) -> list:
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise BadInputError("the Dask cluster has no workers")
    futures = [client.submit(PartTracker, initial_keys, actor=True, workers=[workers[p % len(workers)]],
                             allow_other_workers=True, pure=False) for p in range(parts)]
    return [f.result() for f in futures]


def _wait(calls: list) -> None:
    for call in calls:
        call.result()


def _as_keys(chunk: Any) -> np.ndarray:
    arr = as_array(chunk, "trace chunk")  # ragged nested lists: ShapeError, not numpy's ValueError
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise BadInputError(f"each trace chunk must be a 1-D integer key array, got shape {arr.shape} dtype {arr.dtype}")
    return np.ascontiguousarray(arr.astype(np.uint64, copy=False).view(np.int64) if arr.dtype.kind == "u"
                                else arr.astype(np.int64, copy=False))
