"""A cluster in the simulator: routed instances over private and shared tiers.

``simulate(SimConfig(cluster=ClusterConfig(...)))`` comes here.  What it models:

* **Instances**: ``ClusterConfig.instances`` colocated instances (:class:`kvmm.sim.engine.Instance`),
  each with its own GPU pool, protected staging tier, ledger and the config's ``tiers`` as
  private tiers, exactly as one instance runs alone; they share one request table.
* **Routing**: requests are routed one at a time in arrival order.  When request ``r`` arrives
  at ``t``, every engine has been run up to the step that spans ``t`` (each engine's event
  loop pauses before processing events past ``t`` until ``r`` is routed), so the router sees
  each instance's queue (waiting + routed but not yet arrived) and its uncached prompt tokens,
  the running batch and the KV it holds, and GPU pool use as of that step, and the block index
  as of then.  With ``ClusterConfig.metrics_interval_s > 0`` the per-instance signals are
  those of the last scrape instead (every engine is run to each multiple of the interval that
  precedes an arrival, and the view copies the rows then); docs/cluster.md says which.
* **Shared tiers**: one ``ManagedTier`` per shared level, in every instance's hierarchy after
  its private levels; its policy sees every instance's lookups and writes.  The engines run
  interleaved, each up to the next routing time, so accesses reach it in time order to within
  one engine step.
* **Fabric**: an instance reads a shared level over its own link (``FabricSpec.link_bandwidth``,
  one FIFO queue per instance and level, as every lower tier has) with ``latency_s`` added; all
  instances' reads from shared levels also share the fabric's ``aggregate_bandwidth`` (and the
  level's own read bandwidth, whichever is smaller) through one FIFO :class:`FabricQueue`: a
  copy completes when both its link and the aggregate have carried it.  Writes are not charged
  (as for private tiers: they are off the critical path).
* **Block index**: when the router reads it, a :class:`~kvmm.cluster.BlockIndex` over media
  ``("GPU", <private level names>...)`` is fed by each instance's GPU prefix cache (a block is
  stored when a request's prefill keys it, removed when the pool hands it out again) and
  private tiers (writes and evictions), as vLLM's KV events report them.  Shared levels are
  not indexed: every instance reaches them alike.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from kvmm.cluster.event_stream import SPECULATIVE_MEDIUM, EventFeed
from kvmm.cluster.index import BlockIndex
from kvmm.cluster.routers import checked_route, make_router
from kvmm.cluster.view import LOAD_FIELDS, ClusterView, RouteRequest
from kvmm.errors import BadInputError
from kvmm.policies.admission import WriteAll
from kvmm.sim.config import SimConfig
from kvmm.sim.demotion import LoggedSimulatedTier
from kvmm.sim.engine.instance import Instance
from kvmm.sim.engine.requests import RequestTable
from kvmm.sim.levels import TierLevel, make_admission, make_eviction
from kvmm.sim.pooled_store import SegmentedStore, local_level
from kvmm.sim.results import collect, prompt_tokens
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.simulated import SimulatedTier
from kvmm.traces.trace import KVTrace

__all__ = ["simulate_cluster", "SharedLevel", "FabricQueue", "sessions_of"]


class SharedLevel:
    """One shared level as every instance sees it: the effective :class:`TierLevel` (its spec
    with the fabric's link bandwidth and latency folded in), the one ``ManagedTier`` (or one
    instance's view of a :class:`~kvmm.sim.pooled_store.SegmentedStore`) and the one admission
    policy all instances use.  ``over_fabric``: reads from it cross the fabric (False for the
    reader's own segment of a pooled store)."""

    __slots__ = ("level", "tier", "admission", "over_fabric")

    def __init__(self, level: TierLevel, tier: Any, admission: Any, over_fabric: bool = True) -> None:
        self.level, self.tier, self.admission, self.over_fabric = level, tier, admission, over_fabric


class FabricQueue:
    """The fabric's aggregate bandwidth, shared FIFO by every instance's reads from shared levels.

    ``transfer(start, link_done, nbytes)``: a copy that may start at ``start`` and that its own
    link finishes at ``link_done`` also needs ``nbytes / bandwidth`` of the aggregate after the
    copies before it; it completes when both have carried it.  Runtime complexity: O(1).
    """

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = float(bandwidth)
        self.free_at = 0.0
        self.bytes = 0
        self.busy_s = 0.0

    def transfer(self, start: float, link_done: float, nbytes: int) -> float:
        seconds = nbytes / self.bandwidth
        self.free_at = max(self.free_at, start) + seconds
        self.bytes += nbytes
        self.busy_s += seconds
        return max(link_done, self.free_at)


def simulate_cluster(cfg: SimConfig, serving: Any, trace: KVTrace, arrival: np.ndarray, ledger_factory: Callable,
                     progress: Callable | None, engine_hook: Callable | None) -> Any:
    """Run the cluster; returns the pooled :class:`~kvmm.sim.SimResult` (see the module docstring)."""
    cl = cfg.cluster
    n_inst = cl.instances
    if np.any(np.diff(arrival) < 0):
        raise BadInputError("the trace's requests are not in arrival order; expected nondecreasing timestamps")
    block_bytes = int(trace.block_tokens) * serving.kv_bytes_per_token
    logged = cl.uses_index or any(lv.write_back for lv in tuple(cfg.tiers) + cl.shared_tiers)
    shared, stores = _shared_levels(cfg, n_inst, block_bytes, logged)
    router, view, index, feeds, stream = cluster_control(cfg, n_inst, ("GPU",) + tuple(lv.name for lv in cfg.tiers),
                                                         block_tokens=int(trace.block_tokens))
    table = RequestTable(trace, arrival, priority_share=cfg.high_priority_share, priority_seed=cfg.priority_seed)
    key_space = np.unique(table.ids) if logged else None  # one for every instance
    instances = [Instance(cfg, serving, table, ledger_factory, progress, assigned=[] if n_inst > 1 else None,
                          shared=shared(i), tier_events=feeds[i], key_space=key_space, index=i) for i in range(n_inst)]
    for feed, inst in zip(feeds, instances):
        if isinstance(feed, _StreamFeed):
            feed.engine = inst  # its events are stamped with the engine's clock
    if cl.shared_tiers and cl.fabric is not None:
        aggregate = min([cl.fabric.aggregate_bandwidth] + [lv.spec.read_bandwidth for lv in cl.shared_tiers])
        queue = FabricQueue(aggregate)
        for inst in instances:
            inst.fabric_queue = queue
    view.kv_blocks_total[:] = [inst.hier.num_blocks for inst in instances]
    routed = np.zeros(n_inst, dtype=np.int64)
    if n_inst == 1:  # nothing to choose: the one instance runs alone, exactly as without a cluster
        routed[0] = trace.num_requests
        end = instances[0].run()
    else:
        end, queue_ratio = _drive(instances, table, router, view, routed, stream)
    for inst in instances:
        inst.warn_if_unbounded()
        if engine_hook is not None:
            engine_hook(inst)
    result = collect(cfg, serving, instances, [table] * n_inst, arrival, end, prompt_tokens(trace))
    mean = routed.mean()
    fabric = instances[0].fabric_queue
    policies = dict(result.policies, router=router)
    if stream is not None:
        policies["kv_events"] = stream
    if any(s is not None for s in stores):
        policies["shared_store"] = stores
    return replace(result, policies=policies, instances=n_inst,
                   requests_per_instance=tuple(routed.tolist()),
                   load_imbalance=float(routed.max() / mean) if mean > 0 else 1.0,
                   queue_imbalance=float(queue_ratio) if n_inst > 1 else 1.0,
                   index_entries=len(index) if index is not None else 0,
                   fabric_bytes=int(fabric.bytes) if fabric is not None else 0)


def _drive(engines: list, table: RequestTable, router: Any, view: Any, routed: np.ndarray,
           stream: Any = None) -> tuple[float, float]:
    """Interleave the instances' event loops, routing each request when every instance has
    reached its arrival time.  Returns ``(end time, time-averaged max/mean queue ratio)``.

    A paused loop waits for the time it asked for (``wants``); a heap holds them, so each arrival
    resumes only the engines whose wait it ends, and refreshes the rows of only those (and books
    the request on the engine it is routed to).  With ``view.metrics_interval_s > 0`` the rows
    are kept apart from the view (``LiveRows``) and copied into it at each scrape: before the
    first request at or after a multiple ``s`` of the interval is routed, every engine is run to
    ``s`` (as to an arrival) and the view takes the rows as of then.
    Runtime complexity: O(engine steps + requests x log instances), plus O(instances) per scrape.
    """
    trace = table.trace
    n = table.n
    n_inst = len(engines)
    loops = [e.steps_until_done() for e in engines]
    ready = [(-math.inf, i) for i in range(n_inst)]  # heap of (time the loop waits for, engine)
    wants = [-math.inf] * n_inst
    ends = [0.0] * n_inst
    at = table.arrival_py
    offsets = table.offsets_py
    ids = table.ids
    inp = table.input_len_py
    out = table.output_len_py
    session = sessions_of(trace).tolist()
    interval = view.metrics_interval_s
    rows = LiveRows(view) if interval > 0 else view  # exact: the engines write the view itself
    feed = RowFeed(table, view.index)
    queue = rows.queue_lengths
    ratio_sum = 0.0
    ratio_n = 0
    heappush, heappop = heapq.heappush, heapq.heappop

    def advance(t: float) -> None:
        """Run every engine whose loop waits for a time before ``t`` up to ``t``; refresh its row."""
        while ready and (ready[0][0] < t or t == math.inf):
            waited, i = heappop(ready)
            if waited != wants[i]:
                continue  # stale: the engine was idle (inf) and has been queued again at -inf
            e, loop = engines[i], loops[i]
            e.horizon = t
            try:
                w = next(loop)
                while w < t:  # arrivals up to w are all routed: go on
                    w = next(loop)
                wants[i] = w
                heappush(ready, (w, i))
            except StopIteration as stop:
                wants[i], ends[i] = math.nan, stop.value  # finished (only once t is inf)
            feed.refresh(rows, i, e, t)

    scraped = -math.inf
    for p in range(n + 1):
        t = at[p] if p < n else math.inf
        if interval > 0 and p < n:
            s = math.floor(t / interval) * interval
            if s > scraped:  # a scrape since the last request: the view takes the rows as of then
                advance(s)
                rows.copy_to(view)
                view.scraped_at = scraped = s
        advance(t)
        if p == n:
            break
        view.now = t
        if interval == 0:
            view.scraped_at = t
        mean_q = queue.mean()
        if mean_q > 0:
            ratio_sum += queue.max() / mean_q
            ratio_n += 1
        block_ids = ids[offsets[p]:offsets[p + 1]]
        request = RouteRequest(index=p, arrival_s=t, block_ids=block_ids, input_length=inp[p],
                               output_length=out[p], session=session[p])
        if stream is not None:  # the index as the KV events delivered by t built it
            stream.deliver_until(t)
        i = checked_route(router, request, view)
        if stream is not None:
            stream.routed(i, request.block_ids, t)  # speculative indexing (when on)
        eng = engines[i]
        eng.arrival_ids.append(p)
        eng.arrival_times.append(t)
        routed[i] += 1
        feed.routed(rows, i, p, block_ids)  # routed, not yet arrived: the next router sees it queued
        if wants[i] == math.inf:  # idle: it has something to do now
            wants[i] = -math.inf
            heappush(ready, (-math.inf, i))
    return max(ends), (ratio_sum / ratio_n if ratio_n else 1.0)


class LiveRows:
    """The exact per-instance rows of a view whose signals are scraped: the engines write here,
    and each scrape copies these into the view (``copy_to``).  Runtime complexity: O(instances)
    per copy."""

    def __init__(self, view: Any) -> None:
        for name in LOAD_FIELDS:
            setattr(self, name, getattr(view, name).copy())

    def copy_to(self, view: Any) -> None:
        for name in LOAD_FIELDS:
            getattr(view, name)[:] = getattr(self, name)


class RowFeed:
    """Fills one instance's row of the view (:meth:`refresh`) and books a routed request on it
    (:meth:`routed`).  A request routed but not arrived counts its uncached prompt tokens as the
    index knew them when it was routed (its prompt less the longest prefix the index says the
    instance holds on any medium, the last token always computed), or its whole prompt without an
    index; once it arrives, the engine's own figure (its lookup of the GPU and lower tiers)."""

    def __init__(self, table: RequestTable, index: Any) -> None:
        self.table = table
        self.index = index
        self.bt = table.block_tokens
        self.prompt_blocks = np.diff(table.offsets)  # prompt blocks per request
        self.inbound_tokens = [0] * table.n  # uncached prompt tokens of a routed request, as known at routing

    def routed(self, rows: Any, i: int, r: int, block_ids: np.ndarray) -> None:
        inp = self.table.input_len_py[r]
        uncached = inp
        if self.index is not None and block_ids.shape[0]:
            held = int(self.index.prefix_hits(block_ids)[i].max())
            uncached = inp - min(held * self.bt, inp - 1)
        self.inbound_tokens[r] = uncached
        rows.queue_lengths[i] += 1
        rows.inbound[i] += 1
        rows.prefill_tokens[i] += uncached
        rows.queued_blocks[i] += int(self.prompt_blocks[r])

    def refresh(self, rows: Any, i: int, engine: Instance, t: float) -> None:
        """Instance ``i``'s row as of ``t``: waiting and routed-not-arrived requests and their
        prefill, the batch of the step in flight (or the running batch: decodes and prefills),
        the KV its running requests hold, GPU pool use.  Runtime complexity: O(waiting +
        inbound + prefilling), the waiting part in numpy."""
        table = self.table
        pt = table.prefill_tokens
        waiting = engine.waiting
        w = len(waiting)
        arrivals = engine.arrival_ids
        na = engine.next_arrival
        queued_tokens = queued_blocks = 0
        if w:
            order = np.array(waiting, dtype=np.int64)
            queued_tokens = int(pt[order].sum())
            queued_blocks = int(self.prompt_blocks[order].sum())
        for r in arrivals[na:]:
            queued_tokens += self.inbound_tokens[r]
            queued_blocks += int(self.prompt_blocks[r])
        prefilling = engine.prefilling
        running_tokens = engine.decode_context
        in_flight = engine.step_end > t
        if in_flight:
            queued_tokens += engine.prefill_in_flight  # whole prefills of the step in flight (0 when chunked)
        if prefilling:
            done = engine.scheduler.prefilled
            inp = table.input_len_py
            for r in prefilling:
                left = int(pt[r]) - done.get(r, 0)
                queued_tokens += left
                running_tokens += inp[r] - left
        rows.waiting[i] = w
        rows.inbound[i] = len(arrivals) - na
        rows.queue_lengths[i] = w + len(arrivals) - na
        rows.prefill_tokens[i] = queued_tokens
        rows.queued_blocks[i] = queued_blocks
        rows.running[i] = engine.batch_in_flight if in_flight else len(engine.running) + len(prefilling)
        rows.running_tokens[i] = running_tokens
        rows.running_blocks[i] = engine.held.blocks
        pool = engine.hier.pool
        free = pool.num_free
        rows.kv_blocks_used[i] = pool.num_blocks - free
        rows.kv_utilisation[i] = 1.0 - free / pool.num_blocks  # pool.usage, read once


def sessions_of(trace: KVTrace) -> np.ndarray:
    """Each request's conversation id: the ``chat_id`` of the first turn its ``parent_chat_id``
    chain leads to (Bailian traces), or -1 for every request of a trace without those columns.
    Runtime complexity: O(requests)."""
    cols = getattr(trace, "columns", None) or {}
    n = trace.num_requests
    if "chat_id" not in cols or "parent_chat_id" not in cols:
        return np.full(n, -1, dtype=np.int64)
    chat, parent = cols["chat_id"].tolist(), cols["parent_chat_id"].tolist()
    root: dict[int, int] = {}
    out = np.empty(n, dtype=np.int64)
    for r in range(n):  # a parent comes before its children in a trace in arrival order
        c, pc = int(chat[r]), int(parent[r])
        root[c] = root.get(pc, pc) if pc >= 0 else c
        out[r] = root[c]
    return out


def _shared_level(level: TierLevel, fabric: Any, block_bytes: int, logged: bool, with_tier: bool = True) -> SharedLevel:
    """The one tier, policy and admission of a shared level, and its spec as an instance sees it
    (``with_tier=False``: no tier, for a level whose blocks a SegmentedStore holds)."""
    spec = level.spec
    if fabric is not None:
        spec = replace(spec, read_bandwidth=min(spec.read_bandwidth, fabric.link_bandwidth),
                       write_bandwidth=min(spec.write_bandwidth, fabric.link_bandwidth),
                       latency_s=spec.latency_s + fabric.latency_s)
    seen = replace(level, spec=spec, capacity_bytes=None)
    tier = None
    if with_tier:
        backend = (LoggedSimulatedTier if logged else SimulatedTier)(level.spec.capacity_bytes, spec=level.spec)
        tier = ManagedTier(backend, make_eviction(level.eviction))
    return SharedLevel(seen, tier, make_admission(level.admission, level.spec.capacity_bytes // block_bytes))


def _shared_levels(cfg: SimConfig, instances: int, block_bytes: int, logged: bool) -> tuple:
    """``(shared levels of instance i (a function), the SegmentedStore or None of each level)``.
    A plain level is one SharedLevel every instance holds; a pooled store's level is one view
    per instance, preceded by the instance's own segment as a level of its own when the store
    has segments on the instances' nodes (reads from it skip the fabric)."""
    cl = cfg.cluster
    layouts = cl.store or (None,) * len(cl.shared_tiers)
    plain, stores = [], []
    for lv, layout in zip(cl.shared_tiers, layouts):
        level = _shared_level(lv, cl.fabric, block_bytes, logged, with_tier=layout is None)
        plain.append(level)
        stores.append(None if layout is None else SegmentedStore(lv, layout, instances, logged))

    def of(i: int) -> tuple:
        local, remote = [], []
        for level, store in zip(plain, stores):
            if store is None:
                remote.append(level)
                continue
            if store.home(i) >= 0:
                local.append(SharedLevel(local_level(store.level), store.local_view(i), WriteAll(), over_fabric=False))
            remote.append(SharedLevel(level.level, store.view(i), level.admission))
        return tuple(local + remote)  # the levels that skip the fabric first (staging reads the rest over it)

    return of, tuple(stores)


def cluster_routing(cfg: SimConfig, instances: int, media: tuple, block_tokens: int = 0) -> tuple:
    """``(router, view, index or None, per-instance index feeds or Nones)`` of a routed run over
    ``instances`` instances whose index (when the router uses one) tracks ``media``; the routed
    prefill instances of :mod:`kvmm.sim.pd` use it (their index is fed at once: a delayed
    :class:`~kvmm.cluster.EventStream` is refused there)."""
    events = cfg.cluster.events
    if events is not None and not events.exact:
        raise BadInputError("a delayed, batched, lossy or speculative EventStream is modelled for colocated cluster "
                            "instances only, not for the routed prefill instances of pd=; expected events=None or "
                            "EventStream()")
    return cluster_control(cfg, instances, media, block_tokens)[:4]


def cluster_control(cfg: SimConfig, instances: int, media: tuple, block_tokens: int = 0) -> tuple:
    """``(router, view, index or None, per-instance index feeds or Nones, EventFeed or None)``
    of a routed run over ``instances`` instances whose index (when the router uses one) tracks
    ``media`` (plus ``"speculative"`` with speculative indexing), fed through
    ``ClusterConfig.events`` when it is set.  The view knows the trace's ``block_tokens`` and
    the config's ``metrics_interval_s``."""
    cl = cfg.cluster
    router = make_router(cl.router, instances, **dict(cl.router_params)) if isinstance(cl.router, str) \
        else copy.deepcopy(cl.router)
    index = stream = None
    feeds: list = [None] * instances
    if cl.uses_index:
        if cl.events is not None and cl.events.speculative_ttl_s is not None:
            media = tuple(media) + (SPECULATIVE_MEDIUM,)
        index = BlockIndex(instances, media=media, max_entries=cl.index_max_entries, max_holders=cl.index_max_holders)
        if cl.events is None:
            feeds = [_index_feed(index, i) for i in range(instances)]
        else:
            stream = EventFeed(index, cl.events)
            feeds = [_StreamFeed(stream, i, index.media) for i in range(instances)]
    view = ClusterView(instances, index=index, block_tokens=block_tokens, metrics_interval_s=cl.metrics_interval_s)
    return router, view, index, feeds, stream


class _StreamFeed:
    """The events callback of one instance's hierarchy when an EventStream carries them: each
    move is published with the time its engine is at (``engine``, set once it exists)."""

    __slots__ = ("stream", "instance", "media", "engine")

    def __init__(self, stream: Any, instance: int, media: tuple) -> None:
        self.stream, self.instance, self.media, self.engine = stream, instance, media, None

    def __call__(self, medium: int, stored: list, removed: list) -> None:
        # no engine: PD's prefill instances, whose stream is exact (the time is not read)
        self.stream.publish(self.instance, self.engine.now if self.engine is not None else 0.0, self.media[medium],
                            stored, removed)


def _index_feed(index: Any, instance: int) -> Callable:
    """The events callback of one instance's hierarchy: GPU and private-tier moves -> the index."""
    media = index.media

    def feed(medium: int, stored: list, removed: list) -> None:
        name = media[medium]
        if len(removed):
            index.removed(instance, np.asarray(removed, dtype=np.int64), name, lenient=True)
        if len(stored):
            index.stored(instance, np.asarray(stored, dtype=np.int64), name)

    return feed
