"""KV events as a router receives them: batched, delayed, sometimes lost (docs/cluster_index.md).

A serving engine does not tell the router about each block the moment it moves.  vLLM's
scheduler collects a step's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` events
and its ``ZmqEventPublisher`` sends them as one ``KVEventBatch`` per step from a background
thread (``vllm/distributed/kv_events.py``); the subscriber (llm-d's ``kvevents`` pool,
``pkg/kvcache/kvevents/zmq_subscriber.go`` in ``llm-d/llm-d-kv-cache-manager``) applies them
as they arrive.  ZMQ PUB/SUB drops messages past its high-water mark or while a subscriber
reconnects, so a batch can be lost whole; vLLM keeps a replay buffer, but a subscriber that
does not ask for a replay never sees the lost batch.

:class:`EventStream` is that path's configuration; :class:`EventFeed` runs it against a
:class:`~kvmm.cluster.BlockIndex`:

* an instance **publishes** its events with the time they happen (:meth:`EventFeed.publish`);
  the events of one instance at one time form one batch (one engine step), and with
  ``batch_interval_s > 0`` every event until the next multiple of the interval joins the same
  batch (a publisher that flushes on a timer);
* a batch is **sent** when its interval closes (at once without an interval), **lost** with
  probability ``drop_rate`` (a seeded draw per batch, in delivery order) and otherwise
  **applied** ``delay_s`` after it was sent, in the order batches arrive (ties: in the order
  they were opened);
* the router's side calls :meth:`EventFeed.deliver_until` before it reads the index, so the
  index holds exactly the batches delivered by then; removals are applied leniently (a lost
  store makes the later removal of the same block unknown to the index);
* **speculative indexing** (``speculative_ttl_s``, llm-d's ``speculativeIndexing`` with
  ``speculativeTTL`` "2s" by default, ``pkg/epp/framework/plugins/scheduling/scorer/
  preciseprefixcache/precise_prefix_cache.go`` in ``llm-d/llm-d-inference-scheduler``): when
  the router sends a request to an instance, :meth:`EventFeed.routed` stores its blocks for
  that instance on the medium ``"speculative"`` at once, and removes them ``speculative_ttl_s``
  later.  As in llm-d, the speculative holder is an entry of its own (llm-d's ``PodEntry`` with
  ``Speculative: true``): an engine event that confirms the blocks stores them on ``"GPU"``,
  which stays when the speculative entry expires, and each routed request's expiry removes its
  own blocks even when a later request re-inserted them (llm-d's TTL cache evicts per request).

``EventStream()`` (every field zero, no speculation) is the exact stream: each event reaches
the index the moment it happens, as before this module existed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm._validate import as_count, as_positive_float
from kvmm.errors import BadInputError

__all__ = ["EventStream", "EventFeed", "SPECULATIVE_MEDIUM"]

#: The index medium of speculative entries (llm-d's speculative PodEntry has no device tier, so
#: its scorer weighs it as an unknown tier: 1.0, like the GPU).
SPECULATIVE_MEDIUM = "speculative"


@dataclass(frozen=True)
class EventStream:
    """How KV events travel from the instances to the block index.

    ``delay_s``: seconds from a batch being sent to it being applied (network, subscriber
    queue).  ``batch_interval_s``: the publisher sends every this many seconds (0: each engine
    step's events at once, as vLLM's publisher does).  ``drop_rate``: probability that a batch
    is lost (independent per batch).  ``seed``: of the drop draws.  ``speculative_ttl_s``:
    llm-d's speculative indexing with that TTL (``None``: off; llm-d's default TTL is 2 s).
    ``record``: keep every applied operation in :attr:`EventFeed.applied` (tests replay it).
    """

    delay_s: float = 0.0
    batch_interval_s: float = 0.0
    drop_rate: float = 0.0
    seed: int = 0
    speculative_ttl_s: float | None = None
    record: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay_s", as_positive_float(self.delay_s, "delay_s", allow_zero=True))
        object.__setattr__(self, "batch_interval_s",
                           as_positive_float(self.batch_interval_s, "batch_interval_s", allow_zero=True))
        rate = as_positive_float(self.drop_rate, "drop_rate", allow_zero=True)
        if not rate < 1.0:
            raise BadInputError(f"drop_rate must be in [0, 1): the probability that a batch is lost, got {rate!r}")
        object.__setattr__(self, "drop_rate", rate)
        object.__setattr__(self, "seed", as_count(self.seed, "seed"))
        if self.speculative_ttl_s is not None:
            object.__setattr__(self, "speculative_ttl_s", as_positive_float(self.speculative_ttl_s, "speculative_ttl_s"))
        if not isinstance(self.record, bool):
            raise BadInputError(f"record must be a bool, got {self.record!r}")

    @property
    def exact(self) -> bool:
        """Does every event reach the index the moment it happens (no delay, batching, loss or speculation)?"""
        return (self.delay_s == 0.0 and self.batch_interval_s == 0.0 and self.drop_rate == 0.0
                and self.speculative_ttl_s is None)


class _Batch:
    __slots__ = ("instance", "sent_at", "ops", "closed")

    def __init__(self, instance: int, sent_at: float) -> None:
        self.instance, self.sent_at, self.ops, self.closed = instance, sent_at, [], False


class EventFeed:
    """One :class:`EventStream` feeding ``index`` (see the module docstring).

    ``stats``: ``batches`` sent, ``batches_dropped``, ``events`` and ``events_dropped`` (blocks
    stored or removed), ``speculative_inserts`` / ``speculative_expiries`` (routed requests),
    ``max_lag_s`` (the longest time from an event to its batch being applied).  Runtime
    complexity: O(log batches in flight) per batch, plus the index calls.
    """

    def __init__(self, index: Any, stream: EventStream) -> None:
        if not isinstance(stream, EventStream):
            raise BadInputError(f"stream must be an EventStream, got {type(stream).__name__}")
        if stream.speculative_ttl_s is not None and SPECULATIVE_MEDIUM not in index.media:
            raise BadInputError(f"speculative indexing needs an index with the medium {SPECULATIVE_MEDIUM!r}; "
                                f"its media are {list(index.media)}")
        self.index, self.stream = index, stream
        self.exact = stream.exact
        self._rng = np.random.default_rng(stream.seed)
        self._open: dict[int, _Batch] = {}  # instance -> its batch still taking events
        self._queue: list = []  # heap of (applied at, seq, batch)
        self._seq = 0
        self._expiries: list = []  # FIFO of (expires at, instance, block ids): one TTL, so already in time order
        self._next_expiry = 0
        self.applied: list[tuple] | None = [] if stream.record else None
        self.stats = {"batches": 0, "batches_dropped": 0, "events": 0, "events_applied": 0, "events_dropped": 0,
                      "speculative_inserts": 0, "speculative_expiries": 0, "max_lag_s": 0.0}

    # ------------------------------------------------------------------ the instances' side
    def publish(self, instance: int, t: float, medium: str, stored: Any, removed: Any) -> None:
        """Instance ``instance`` stored and removed these block ids on ``medium`` at time ``t``
        (removals first, as the hierarchy reports a move).  Runtime complexity: O(1) amortised
        (O(blocks) when the stream is exact: applied at once)."""
        if self.exact:
            self._apply_op(instance, medium, stored, removed)
            return
        n = len(stored) + len(removed)
        if not n:
            return
        self.stats["events"] += n
        interval = self.stream.batch_interval_s
        sent_at = (math.floor(t / interval) + 1) * interval if interval > 0 else t
        batch = self._open.get(instance)
        if batch is None or batch.closed or batch.sent_at != sent_at:
            batch = self._open[instance] = _Batch(instance, sent_at)
            heapq.heappush(self._queue, (sent_at + self.stream.delay_s, self._seq, batch))
            self._seq += 1
            self.stats["batches"] += 1
        batch.ops.append((medium, t, np.asarray(stored, dtype=np.int64), np.asarray(removed, dtype=np.int64)))

    # ------------------------------------------------------------------ the router's side
    def deliver_until(self, t: float) -> None:
        """Apply (or lose) every batch due by ``t`` and expire the speculative entries due by
        then, in time order (a batch before an expiry of the same time).  Runtime complexity:
        O(batches due x log in flight) plus the index calls."""
        queue, expiries = self._queue, self._expiries
        while True:
            tb = queue[0][0] if queue else math.inf
            te = expiries[self._next_expiry][0] if self._next_expiry < len(expiries) else math.inf
            if tb > t and te > t:
                break
            if tb <= te:
                at, _, batch = heapq.heappop(queue)
                batch.closed = True
                if self.stream.drop_rate and self._rng.random() < self.stream.drop_rate:
                    self.stats["batches_dropped"] += 1
                    self.stats["events_dropped"] += sum(len(s) + len(r) for _, _, s, r in batch.ops)
                    continue
                for medium, happened, stored, removed in batch.ops:
                    self.stats["max_lag_s"] = max(self.stats["max_lag_s"], at - happened)
                    self.stats["events_applied"] += len(stored) + len(removed)
                    self._apply_op(batch.instance, medium, stored, removed)
            else:
                _, instance, ids = expiries[self._next_expiry]
                self._next_expiry += 1
                self.stats["speculative_expiries"] += 1
                self._apply_op(instance, SPECULATIVE_MEDIUM, (), ids)
        if self._next_expiry > 1024 and self._next_expiry * 2 > len(expiries):  # forget the expired
            del expiries[:self._next_expiry]
            self._next_expiry = 0

    def routed(self, instance: int, block_ids: np.ndarray, t: float) -> None:
        """The router sent a request with ``block_ids`` to ``instance`` at ``t``: with
        speculative indexing, its blocks are held speculatively until ``t + ttl``.
        Runtime complexity: O(blocks)."""
        ttl = self.stream.speculative_ttl_s
        if ttl is None or not len(block_ids):
            return
        ids = np.array(block_ids, dtype=np.int64)
        self._apply_op(instance, SPECULATIVE_MEDIUM, ids, ())
        self._expiries.append((t + ttl, instance, ids))
        self.stats["speculative_inserts"] += 1

    def check(self) -> None:
        """Assert the feed's invariants (tests): every published event is applied, lost or in a
        batch still in flight; batches in flight are open and ordered by due time; the
        speculative expiries are in time order."""
        pending = sum(len(s) + len(r) for _, _, b in self._queue for _, _, s, r in b.ops)
        st = self.stats
        assert st["events"] == st["events_applied"] + st["events_dropped"] + pending
        assert all(not b.closed for _, _, b in self._queue)
        assert all(b.sent_at + self.stream.delay_s == at for at, _, b in self._queue)
        assert 0 <= st["batches_dropped"] <= st["batches"] and st["speculative_expiries"] <= st["speculative_inserts"]
        times = [e[0] for e in self._expiries]
        assert times == sorted(times) and 0 <= self._next_expiry <= len(times)
        self.index.check()

    @property
    def in_flight(self) -> int:
        """Batches sent or open but not applied (or lost) yet."""
        return len(self._queue)

    def _apply_op(self, instance: int, medium: str, stored: Any, removed: Any) -> None:
        index = self.index
        if len(removed):
            index.removed(instance, np.asarray(removed, dtype=np.int64), medium, lenient=True)
        if len(stored):
            index.stored(instance, np.asarray(stored, dtype=np.int64), medium)
        if self.applied is not None:
            self.applied.append((instance, medium, np.array(stored, dtype=np.int64), np.array(removed, dtype=np.int64)))
