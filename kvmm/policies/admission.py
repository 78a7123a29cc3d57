"""Admission policies: which of a request's blocks are written to a (slower, larger) tier.

Every policy speaks :class:`~kvmm.protocols.AdmissionPolicy`: ``admit(request)`` gets an
:class:`AdmissionRequest` (or any object with ``keys`` and ``cached``, optionally ``gpu_hit``)
and returns a boolean mask over the request's blocks.  Blocks already ``cached`` in the tier are
never admitted.  Policies are small dataclasses validated in ``__post_init__``; their learned
state lives in arrays (keys counted by an open-addressing hash table inside numba).

* :class:`WriteAll` - write every block the tier lacks (LMCache's default).
* :class:`StoreThreshold` - vLLM-style: write a block once it has been offered ``k`` times.
* :class:`SelectiveWriteThrough` - SGLang-style ``write_through_selective``: write a block once
  it has been hit in the fast tier ``hits`` times (default: on the second hit).
* :class:`RefillFilter` - EfficientAgent: when the tier is smaller than the reuse working set
  (estimated online by a :class:`~kvmm.policies.StackDistanceTracker` over the requests seen),
  skip requests that would refill more than ``max_refill_blocks`` blocks of evicted context and
  keep writing extensions of prefixes still cached; when the tier holds the working set, write
  everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvmm._arrays import grown
from kvmm._validate import as_count, as_fraction
from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.policies.mrc import _stack_kernels as K
from kvmm.policies.mrc.stack_distance import StackDistanceTracker, _as_key_words, _next_pow2

__all__ = ["AdmissionRequest", "WriteAll", "StoreThreshold", "SelectiveWriteThrough", "RefillFilter", "admission_mask"]


@dataclass
class AdmissionRequest:
    """One request's view for admission.

    ``keys``: block keys in prefix order (int64/uint64).  ``cached``: bool, block already in the
    target tier.  ``gpu_hit``: bool, block served from the fast tier this time (optional; used by
    :class:`SelectiveWriteThrough`).
    """

    keys: np.ndarray
    cached: np.ndarray
    gpu_hit: np.ndarray | None = None


@dataclass
class WriteAll:
    """Write every block the tier does not hold yet.  Stateless."""

    def admit(self, request: Any) -> np.ndarray:
        """Runtime complexity: O(blocks)."""
        _, cached, _ = _as_request(request)
        return ~cached


@dataclass
class StoreThreshold:
    """vLLM-style store threshold: write a block once it has been offered ``k`` times (this
    offer included), i.e. skip blocks seen fewer times.  ``k = 1`` is write-all."""

    k: int = 2
    _counter: _KeyCounter = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.k = as_count(self.k, "k", minimum=1)
        self._counter = _KeyCounter()

    def admit(self, request: Any) -> np.ndarray:
        """Runtime complexity: O(blocks)."""
        keys, cached, _ = _as_request(request)
        counts = self._counter.add(keys, np.ones(keys.shape[0], dtype=np.int64))
        return ~cached & (counts >= self.k)


@dataclass
class SelectiveWriteThrough:
    """SGLang-style selective write-through: write a block once it has been *hit* in the fast
    tier ``hits`` times (``request.gpu_hit``; without it no block counts as hit)."""

    hits: int = 2
    _counter: _KeyCounter = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.hits = as_count(self.hits, "hits", minimum=1)
        self._counter = _KeyCounter()

    def admit(self, request: Any) -> np.ndarray:
        """Runtime complexity: O(blocks)."""
        keys, cached, gpu_hit = _as_request(request)
        counts = self._counter.add(keys, gpu_hit.astype(np.int64))
        return ~cached & (counts >= self.hits)


@dataclass
class RefillFilter:
    """EfficientAgent's admission filter for a tier of ``capacity_blocks`` blocks.

    Every request's keys feed a :class:`StackDistanceTracker`; every ``update_every`` requests
    the reuse working set is re-estimated as ``tracker.working_set(fraction)``.  While the tier
    is smaller than that estimate (or always, with ``adaptive=False``), a request that would
    refill more than ``max_refill_blocks`` blocks writes nothing; requests that extend a prefix
    still cached (few blocks to write) are written.  In a tier that cannot hold the working set a
    refilled context pushes out prefixes that are still cached and is itself evicted before
    anyone reads it.  When the tier is at least the estimate, every uncached block is written
    (like :class:`WriteAll`).

    What counts as refill (``refill``):

    * ``"evicted"`` (default): uncached blocks *seen before* (the tracker has a distance for
      them): context that was evicted, or never kept, and is being recomputed.  Brand-new
      context never counts, so an agent's first request and its fresh tool output are written.
    * ``"any"``: every uncached block (a size-only filter, blind to whether a large write is a
      refill or new context).  Always filtering this way in a tier that holds the working set
      withholds useful writes: the kind of loss the paper reports (4.3x worse than write-all).

    Before the first estimate the tier counts as large enough.
    """

    capacity_blocks: int
    max_refill_blocks: int = 8
    fraction: float = 0.9
    adaptive: bool = True
    refill: str = "evicted"
    update_every: int = 64
    working_set_estimate: int = field(default=0, init=False)
    filtering: bool = field(default=False, init=False)
    requests_seen: int = field(default=0, init=False)
    _tracker: StackDistanceTracker = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.capacity_blocks = as_count(self.capacity_blocks, "capacity_blocks", minimum=0)
        self.max_refill_blocks = as_count(self.max_refill_blocks, "max_refill_blocks", minimum=0)
        self.fraction = as_fraction(self.fraction, "fraction")
        if not isinstance(self.adaptive, (bool, np.bool_)):
            raise DTypeError(f"adaptive must be a bool, got {self.adaptive!r}")
        if self.refill not in ("evicted", "any"):
            raise BadInputError(f"refill must be 'evicted' or 'any', got {self.refill!r}")
        self.update_every = as_count(self.update_every, "update_every", minimum=1)
        self._tracker = StackDistanceTracker()
        self.filtering = not self.adaptive

    @property
    def tracker(self) -> StackDistanceTracker:
        return self._tracker

    def admit(self, request: Any) -> np.ndarray:
        """Runtime complexity: O(blocks log T), plus O(distinct keys) every ``update_every`` calls."""
        keys, cached, _ = _as_request(request)
        distances = self._tracker.access(keys, return_distances=True)
        self.requests_seen += 1
        if self.adaptive and self.requests_seen % self.update_every == 0:
            self.working_set_estimate = self._tracker.working_set(self.fraction)
            self.filtering = self.capacity_blocks < self.working_set_estimate
        uncached = ~cached
        if not self.filtering:
            return uncached
        counted = uncached if self.refill == "any" else uncached & (distances >= 0)
        if int(np.count_nonzero(counted)) > self.max_refill_blocks:
            return np.zeros(keys.shape[0], dtype=bool)
        return uncached


def admission_mask(decision: Any, n: int, policy: Any = None) -> np.ndarray:
    """An ``admit`` result as a boolean mask over the request's ``n`` blocks.

    ``admit`` may return a bool mask of shape ``(n,)`` or integer indices in ``[0, n)``; anything
    else (another shape, a float array, an index out of range, negative ones included, which
    numpy would silently wrap) raises :class:`~kvmm.errors.BadInputError` naming ``policy``'s
    class.  Runtime complexity: O(n).
    """
    arr = np.asarray(decision)
    if arr.dtype == np.bool_ and arr.shape == (n,):
        return arr
    if arr.dtype != np.bool_ and arr.ndim == 1 and arr.size == 0:  # no index (an empty list arrives as float64)
        return np.zeros(n, dtype=bool)
    if arr.dtype.kind in "iu" and arr.ndim == 1 and arr.min() >= 0 and arr.max() < n:
        mask = np.zeros(n, dtype=bool)
        mask[arr] = True
        return mask
    who = "admission" if policy is None else f"{type(policy).__name__}.admit"
    raise BadInputError(f"{who} returned {arr.dtype} of shape {arr.shape}; expected a boolean mask of shape "
                        f"({n},) or indices in [0, {n})")


class _KeyCounter:
    """Per-key int64 counters: keys mapped to dense ids by the numba hash table (no dict)."""

    def __init__(self, initial_keys: int = 1024) -> None:
        cap = _next_pow2(initial_keys)
        self.slots = np.zeros(4 * cap, dtype=np.uint64)
        self.id_keys = np.zeros(cap, dtype=np.uint64)
        self.counts = np.zeros(cap, dtype=np.int64)
        self.state = np.zeros(1, dtype=np.int64)

    def add(self, keys: np.ndarray, increments: np.ndarray) -> np.ndarray:
        """Add ``increments`` to each key's counter (in order; repeated keys accumulate) and
        return every key's count after its own increment."""
        need = int(self.state[0]) + keys.shape[0]
        if 2 * need > self.slots.shape[0] // 2:
            new = np.zeros(2 * _next_pow2(2 * need), dtype=np.uint64)
            K.rehash(self.slots, new)
            self.slots = new
        if need > self.id_keys.shape[0]:
            cap = _next_pow2(need)
            self.id_keys = grown(self.id_keys, cap, 0)
            self.counts = grown(self.counts, cap, 0)
        ids = np.empty(keys.shape[0], dtype=np.int64)
        K.get_or_insert_ids(keys, self.slots, self.id_keys, self.state, ids)
        out = np.empty(keys.shape[0], dtype=np.int64)
        K.add_counts(ids, increments, self.counts, out)
        return out


def _as_request(request: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a request view: (uint64 keys, bool cached, bool gpu_hit)."""
    try:
        keys, cached = request.keys, request.cached
    except AttributeError:
        raise DTypeError(f"request must have .keys and .cached (an AdmissionRequest), got {type(request).__name__}") from None
    if (type(keys) is np.ndarray and keys.ndim == 1 and keys.dtype.kind in "iu" and keys.dtype.itemsize == 8
            and keys.flags.c_contiguous and type(cached) is np.ndarray and cached.dtype == np.bool_
            and cached.shape == keys.shape):  # fast path (hot in simulations): nothing to convert
        gpu_hit = getattr(request, "gpu_hit", None)
        if gpu_hit is None:
            return keys.view(np.uint64), cached.copy(), np.zeros(keys.shape[0], dtype=bool)
        if type(gpu_hit) is np.ndarray and gpu_hit.dtype == np.bool_ and gpu_hit.shape == keys.shape:
            return keys.view(np.uint64), cached.copy(), gpu_hit.copy()
    words = _as_key_words(keys)
    n = words.shape[0]
    cached = _as_mask(cached, "cached", n)
    gpu_hit = getattr(request, "gpu_hit", None)
    gpu_hit = np.zeros(n, dtype=bool) if gpu_hit is None else _as_mask(gpu_hit, "gpu_hit", n)
    return words, cached, gpu_hit


def _as_mask(x: Any, name: str, n: int) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except (ValueError, RecursionError):  # ragged, or nested deeper than numpy's 64 dimensions
        raise ShapeError(f"request.{name} is a ragged or too deeply nested sequence; expected {n} booleans") from None
    if arr.size == 0 and arr.dtype != np.bool_:
        arr = arr.astype(np.bool_)  # an empty list arrives as float64; accept it like empty keys
    if arr.dtype != np.bool_:
        raise DTypeError(f"request.{name} must be a boolean array, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ShapeError(f"request.{name} must have shape ({n},) (one entry per key), got {arr.shape}")
    return arr.copy()
