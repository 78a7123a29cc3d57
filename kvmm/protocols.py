"""The small Protocols every kvmm component speaks.

Policies return scores or decisions; structures act on them.  Any object with these methods
works (they are ``typing.Protocol`` classes, checked structurally, ``runtime_checkable`` for
``isinstance`` tests), so a researcher's new policy needs no base class from us.

Keys are hashable Python values at the Protocol level (ints, tuples of two uint64 words, ...);
array-valued batch methods live on the concrete classes, which stay free to be faster.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "TierBackend",
    "EvictionPolicy",
    "EvictionPolicyBase",
    "FastHooks",
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
    whose lists and target are sizes, as in libCacheSim).

    Self-eviction: ``on_insert`` and ``on_access`` return the keys the policy evicted *on its
    own* during that event (usually none: an empty tuple), as cachetools' ``expire()`` returns
    what it expired.  Those keys are no longer tracked: the owner removes them from its storage
    and does not call ``on_remove`` for them.  2Q's Am keeps a quota of its own, LIRS's demoted
    LIR key pushes out Q's oldest (a hit too), SLRU's and W-TinyLFU's hits cool segments down
    into an eviction; the other orders never evict on their own.  A policy that returns ``None``
    (written before this rule) evicts nothing on its own.

    Optional capabilities (``attach``, ``on_evict``, ``touch``, ``adapt``, ``fast_hooks``,
    ``keys``, ``check``, ``victims(..., incoming=, incoming_size=)``, ``protected`` on the
    events, ``offline``, ``self_evicting``) are declared, with their defaults, on
    :class:`EvictionPolicyBase`; an owner uses them only on a policy derived from it.  Any other
    object with these four methods works as a policy that has none of them (an owner never
    probes for them).  A policy whose ``on_insert`` / ``on_access`` take the key only (the
    protocol before sizes) still works with ManagedTier, which then calls them without sizes.
    """

    def on_insert(self, key: Hashable, size: int = 1) -> Iterable[Hashable] | None: ...

    def on_access(self, key: Hashable, size: int | None = None) -> Iterable[Hashable] | None: ...

    def on_remove(self, key: Hashable) -> None: ...

    def victims(self, n: int, protected: Iterable[Hashable] = ()) -> list[Hashable]: ...


class FastHooks(NamedTuple):
    """A policy's events without the per-event checks (:meth:`EvictionPolicyBase.fast_hooks`),
    for an owner that guarantees what they check: an accessed key is tracked, an inserted one
    is not, a size is an integer ``>= 0``.  They make the same state changes as the checked
    events and return the same (the keys evicted on the policy's own; ``None`` counts as none),
    protecting only the key of the event.

    * ``access(key)``: ``on_access(key)``;
    * ``insert(key, size)``: ``on_insert(key, size)``;
    * ``insert_many(keys)``: ``on_insert`` of each key in order (sizes ignored: an order that
      does not look at sizes), or None;
    * ``evict_first()``: removes and returns the first victim, as ``victims(1)`` then
      ``on_remove`` would (nothing protected), or None.

    Only orders that never evict on their own (LRU, FIFO) have the last two: a batch owner then
    evicts and inserts a whole request at once.
    """

    access: Callable[[Hashable], Any]
    insert: Callable[[Hashable, int], Any]
    insert_many: Callable[[Iterable[Hashable]], None] | None = None
    evict_first: Callable[[], Hashable] | None = None


class EvictionPolicyBase:
    """Every optional capability of an :class:`EvictionPolicy`, with its default.  kvmm's orders
    derive from it; a policy of your own derives from it to get any of these used (an owner
    treats any other object as the four Protocol methods and nothing more).

    A subclass implements the four Protocol methods with these signatures:

    * ``on_insert(key, size=1, protected=())`` and ``on_access(key, size=None, protected=())``
      return the keys evicted on the policy's own (an empty tuple when none); ``protected``:
      keys it must not evict on its own (the owner's pinned entries; 2Q and LIRS also keep the
      key of the event, while SLRU's cooling, as libCacheSim's, knows no protection and can
      evict even the key it was hit on);
    * ``on_remove(key)``;
    * ``victims(n, protected=(), *, incoming=..., incoming_size=1)``: ``incoming`` the key whose
      insertion needs the room and ``incoming_size`` its size (ARC adapts to a ghost before it
      chooses; orders that do not need them accept and ignore them; left out: no key named).

    Documented as absent from the Protocol: an order's own queries (``admits``: whether
    libCacheSim stores a miss, whose arguments differ by order; ``frequency``, ``lists``, ...),
    which no owner calls.
    """

    #: The policy needs its future references (Belady): no online owner (the simulator's tiers,
    #: an engine's cache) can drive it, and they refuse it.
    offline: ClassVar[bool] = False
    #: ``on_insert`` / ``on_access`` may return keys (2Q, LIRS, SLRU, W-TinyLFU).  False promises
    #: they never do, so an owner may ignore what they return (and a recency ranking over the
    #: policy, vLLM's ``lru``, may use it).
    self_evicting: ClassVar[bool] = False

    def attach(self, capacity: int) -> None:
        """Told the capacity (the owner's units) of the tier that adopts it, before any event
        (ManagedTier, vLLM).  Default: ignored."""

    def on_evict(self, key: Hashable) -> None:
        """``key`` leaves as a victim the owner chose from :meth:`victims` without naming the
        incoming entry (vLLM's batch ``evict(n)``, LMCache's candidates), not as a delete: 2Q
        keeps it as a ghost, LIRS as a non-resident entry.  Default: ``on_remove``."""
        self.on_remove(key)  # type: ignore[attr-defined]

    def touch(self, key: Hashable) -> None:
        """A reference the owner does not count as a use (vLLM re-ranks the chunks a request only
        stored): ARC keeps the key in its list, LFU its count.  Default: nothing changes."""

    def adapt(self, key: Hashable) -> bool:
        """A miss on ``key`` reported before the owner makes room for it (vLLM's
        ``on_store_miss``): ARC adapts its target on a ghost now.  Returns whether ``key`` was a
        ghost.  Default: nothing changes, False."""
        return False

    def fast_hooks(self) -> FastHooks | None:
        """The events without per-event checks (:class:`FastHooks`), or None (the default, and
        for a subclass of a built-in order, whose own events must run)."""
        return None

    def resident_size(self) -> int | None:
        """The total size the policy accounts to its residents, in the owner's units, or None
        (the default) for an order that does not account sizes.  ManagedTier's ``check`` holds
        it to the bytes it manages."""
        return None

    def keys(self) -> list[Hashable]:
        """The tracked keys in eviction order (next victim first).  An owner's ``check`` reads it."""
        raise NotImplementedError(f"{type(self).__name__} lists no keys; expected keys() for an EvictionPolicyBase")

    def check(self) -> None:
        """Assert every invariant (used by tests).  Default: none."""


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
