"""The small Protocols every kvmm component speaks.

Policies return scores or decisions; structures act on them.  Any object with these methods
works (they are ``typing.Protocol`` classes, checked structurally, ``runtime_checkable`` for
``isinstance`` tests), so a researcher's new policy needs no base class from us.

Keys are hashable Python values at the Protocol level (ints, tuples of two uint64 words, ...);
array-valued batch methods live on the concrete classes, which stay free to be faster.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "TierBackend",
    "EvictionPolicy",
    "TokenScorer",
    "AdmissionPolicy",
    "StagingPolicy",
    "Router",
]


@runtime_checkable
class TierBackend(Protocol):
    """A memory tier that stores KV data under keys and models how long moving it takes.

    Implementations: ``ArenaTier`` (real bytes in RAM), ``MmapTier`` (file-backed, survives a
    restart), ``RedisTier`` (shared remote pool), ``SimulatedTier`` (capacity and timing only).

    Contract:
      * ``used_bytes <= capacity_bytes`` at all times; ``put`` that would exceed it raises
        :class:`~kvmm.errors.CapacityExceededError` and stores nothing.
      * ``get``/``delete`` of a missing key raise :class:`~kvmm.errors.UnknownKeyError`.
      * ``put`` of an existing key replaces its value (``used_bytes`` adjusted).
    """

    name: str

    @property
    def capacity_bytes(self) -> int: ...

    @property
    def used_bytes(self) -> int: ...

    def put(self, key: Hashable, data: np.ndarray) -> None: ...

    def get(self, key: Hashable) -> np.ndarray: ...

    def delete(self, key: Hashable) -> None: ...

    def contains(self, key: Hashable) -> bool: ...

    def transfer_seconds(self, nbytes: int) -> float:
        """Modelled time to move ``nbytes`` to or from this tier: ``latency + nbytes / bandwidth``."""
        ...


@runtime_checkable
class EvictionPolicy(Protocol):
    """An eviction order over keys.  The policy only orders; the caller removes.

    ``victims(n, protected)`` returns up to ``n`` keys in eviction order, skipping keys in
    ``protected``; it does not remove them (the caller calls ``on_remove`` for those it evicts).

    Sizes: ``on_insert(key, size)`` gives the entry's size in the caller's units (bytes under
    :class:`~kvmm.tiers.ManagedTier`), ``on_access(key, size)`` a new size after an overwrite
    (``None``: unchanged).  Both default so that a caller that never passes sizes gets
    entry-count semantics (every size 1).  A policy may ignore sizes in its order (LRU, FIFO,
    LFU: the caller evicts a prefix of ``victims`` until the bytes fit) or account in them (ARC,
    whose lists and target are sizes, as in libCacheSim).  Optional extensions a caller may
    detect: ``victims(..., incoming=key, incoming_size=size)`` (the entry that needs the room),
    ``attach(capacity)`` (the capacity, in the same units, of the tier that adopts it) and
    ``on_evict(key)`` (the key leaves as a victim the caller chose, not as a delete: 2Q keeps it
    as a ghost, LIRS as a non-resident entry; a caller that evicts without naming the incoming
    entry, such as vLLM's batch ``evict(n)``, calls it instead of ``on_remove``).
    A policy whose hooks take the key only (the protocol before sizes) still works with
    ManagedTier, which then calls them without sizes.
    """

    def on_insert(self, key: Hashable, size: int = 1) -> None: ...

    def on_access(self, key: Hashable, size: int | None = None) -> None: ...

    def on_remove(self, key: Hashable) -> None: ...

    def victims(self, n: int, protected: Iterable[Hashable] = ()) -> list[Hashable]: ...


@runtime_checkable
class TokenScorer(Protocol):
    """Scores a sequence's live tokens for token-level KV eviction (higher = keep).

    ``observe(seq_id, **evidence)`` folds one step's evidence into the scorer; ``scores(seq_id)``
    returns a float array over the sequence's *live* tokens in logical order (the order of
    ``TokenTable.live_mask``), ``+inf`` for tokens the scorer protects.  Evidence keywords (a
    scorer ignores those it does not use):

    * ``attention``: attention probabilities over all live tokens, new ones last:
      ``(heads, queries, live)``, ``(queries, live)`` or ``(live,)``;
    * ``keys``: keys of the new tokens only, ``(new, kv_heads, head_dim)`` (pre-RoPE unless the
      scorer says otherwise);
    * ``positions``: original positions of the new tokens, ``(new,)``;
    * ``queries``: ``(heads, queries, head_dim)``.

    Optional hooks, called by :func:`kvmm.compress.evict_to_budget` when present:
    ``on_evict(seq_id, live_indices)`` (indices into the live tokens before the eviction, so
    per-token state stays aligned) and ``forget(seq_id)`` (sequence finished).
    """

    def observe(self, seq_id: int, **evidence: Any) -> None: ...

    def scores(self, seq_id: int) -> np.ndarray: ...


@runtime_checkable
class AdmissionPolicy(Protocol):
    """Decides which of a request's blocks are written to a (slower, larger) tier.

    ``admit(request)`` gets a request view (at least ``keys``: the request's block keys in
    prefix order, and ``cached``: a boolean mask of which are already in the tier) and returns
    a boolean mask (or index array) of the blocks to write.
    """

    def admit(self, request: Any) -> np.ndarray: ...


@runtime_checkable
class StagingPolicy(Protocol):
    """Decides when a claimed slow-tier hit is copied into the protected fast tier.

    ``on_claim`` is told of a new claim; ``due(now)`` returns the claim ids to stage now.
    On-demand stages at first use, immediate at claim time, timely (the commitment ledger)
    when the predicted time until use falls to the predicted time to make it ready.
    """

    name: str

    def on_claim(self, claim_id: int, now: float) -> None: ...

    def due(self, now: float) -> Sequence[int]: ...


@runtime_checkable
class Router(Protocol):
    """Picks the instance of a cluster that serves a request.

    ``route(request, view)`` returns an instance index in ``[0, view.num_instances)``.  It is
    called once per request, in arrival order, so it must be cheap and deterministic (the same
    sequence of requests and views gives the same choices); it may keep state of its own (a
    round-robin cursor, a memory of where prefixes were sent) but must not change the view.

    * ``request`` (:class:`~kvmm.cluster.RouteRequest`): ``index`` (request number in the
      trace), ``arrival_s``, ``block_ids`` (int64 trace block ids in prefix order),
      ``input_length``, ``output_length``, ``session`` (conversation id, ``-1`` when the
      trace has none).
    * ``view`` (:class:`~kvmm.cluster.ClusterView`): what a router may read, owned by the
      simulator and updated in place between calls: ``num_instances``, ``queue_lengths``
      (int64, waiting + inbound requests per instance), ``running`` (int64, running requests),
      ``kv_utilisation`` (float64 in [0, 1], GPU pool blocks in use / pool blocks), ``index``
      (a :class:`~kvmm.cluster.BlockIndex` or ``None``: ``index.prefix_hits(block_ids)`` gives
      the longest held prefix per instance and medium) and ``now`` (seconds); and the load in
      tokens and blocks (``waiting``, ``inbound``, ``prefill_tokens``, ``running_tokens``,
      ``running_blocks``, ``queued_blocks``, ``kv_blocks_used``, ``kv_blocks_total``,
      ``block_tokens``), exact or as of the last metrics scrape (``metrics_interval_s``,
      ``scraped_at``; docs/cluster.md, "What a router sees").

    The simulator calls it through :func:`kvmm.cluster.routers.checked_route`, which turns an
    out-of-range or non-integer answer into a :class:`~kvmm.errors.KvmmError`.
    """

    def route(self, request: Any, view: Any) -> int: ...
