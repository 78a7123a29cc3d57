"""Prefill/decode disaggregation: prefill instances hand each request's KV to a decode instance.

What it models (``SimConfig(pd=PDConfig(P, D, link))``), with the same event loop as a colocated
instance (:class:`~kvmm.sim.engine.Instance`) in two roles:

* **Prefill instances** (P, :class:`PrefillRole`): each owns a GPU pool (a
  :class:`~kvmm.allocators.BlockAllocator` with prefix caching, the run's KV pool) and a FCFS
  queue; an arrival goes to the instance with the fewest queued prompt tokens (or the cluster's
  router, below).  Their steps prefill only (the scheduler's prompt budget counts whole prompts;
  chunks when chunked prefill is on).  The first token comes at the end of the request's last
  prefill step (TTFT), as in vLLM / Dynamo disaggregated serving.  A request holds its prompt
  blocks until its KV has left; then they join the prefix cache.
* **Link**: every decode instance has one ingress link (FIFO queue, the ``link`` spec's bandwidth
  and latency).  A request's whole prompt KV (``input_length x KV bytes per token``) crosses it.
  The hand-off is decided when its prefill step starts: without overlap the copy starts after
  the step; with ``layerwise_overlap`` layer ``i`` is sent while the later layers compute, so a
  free link finishes ``1 / layers`` of the copy after the step.
* **Decode instances** (D, :class:`DecodeRole`): the request goes to the one with the fewest
  running + inbound requests (a request stops counting when the decode stretch that finishes
  it starts); it joins the running batch at the first step boundary after its KV arrived and
  the pool (no prefix caching: decode-side KV is private) can hold its prompt + output blocks.
  Its steps decode one token per running request, timed by the run's latency model; stretches
  without joins are advanced in one jump.
* Lower tiers and staging are not modelled in PD mode (``tiers`` are ignored).

The instances run in strict time order (:func:`drive_lockstep`): an instance acts at time ``t``
only when every other has acted before ``t``, so a hand-off sees the decode loads as of its
step and a decode step sees every hand-off decided before it.  Arrivals are routed first at
equal times, one at a time: an idle prefill instance starts on an arrival at once, so requests
with the same timestamp do not share its first step.  TPOT = (finish - first token) / (output
tokens - 1): it includes the hand-off.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

import numpy as np

from kvmm.cluster.routers import checked_route
from kvmm.cluster.view import RouteRequest
from kvmm.errors import BadInputError
from kvmm.policies.staging.ledger import CommitmentLedger
from kvmm.sim.engine.cluster import RowFeed, cluster_routing, sessions_of
from kvmm.sim.engine.instance import Colocated, Instance
from kvmm.sim.engine.requests import RequestTable
from kvmm.sim.engine.scheduler import StepPlan
from kvmm.sim.results import SimResult, latency_metrics

__all__ = ["simulate_pd", "PrefillRole", "DecodeRole", "Link", "drive_lockstep"]


def simulate_pd(cfg, serving, trace, arrival: np.ndarray, progress=None):
    """Run a disaggregated replay; returns a :class:`~kvmm.sim.SimResult`.

    With ``cfg.cluster`` the cluster's router picks each request's prefill instance (instead
    of the fewest queued prompt tokens), seeing each prefill instance's queue, whether it is
    prefilling and its GPU pool use, and a block index of the prefill pools when it reads one.
    """
    pd = cfg.pd
    table = RequestTable(trace, arrival)
    link = Link(pd, serving, pd.decode_instances)
    router = view = index = None
    feeds = [None] * pd.prefill_instances
    key_space = None
    if cfg.cluster is not None:  # routed prefill instances (kvmm.cluster): the index tracks their GPUs only
        router, view, index, feeds = cluster_routing(cfg, pd.prefill_instances, ("GPU",),
                                                     block_tokens=int(trace.block_tokens))
        key_space = np.unique(table.ids) if index is not None else None
    prefill_role, decode_role = PrefillRole(link), DecodeRole(link)
    prefills = [Instance(cfg, serving, table, CommitmentLedger, progress, assigned=[], tier_events=feeds[i],
                         key_space=key_space, index=i, role=prefill_role, with_tiers=False)
                for i in range(pd.prefill_instances)]
    decodes = [Instance(cfg, serving, table, CommitmentLedger, progress, assigned=[], index=i, role=decode_role,
                        with_tiers=False, prefix_cache=False) for i in range(pd.decode_instances)]
    link.decodes = decodes
    _check_pools(table, prefills[0], decodes[0], serving)
    if router is not None:
        sessions = sessions_of(trace).tolist()
        pick = _routed(router, view, prefills, table, sessions)
    else:
        pick = _fewest_queued_tokens(prefills, table)
    routed = np.zeros(len(prefills), dtype=np.int64)

    def route(r: int, t: float) -> Instance:
        p = pick(r, t)
        routed[p] += 1
        return prefills[p]

    end = drive_lockstep(prefills, decodes, table, route, link)
    result = _result(cfg, serving, table, prefills, decodes, link, end)
    if router is None:
        return result
    mean = routed.mean()
    return replace(result, policies={"router": router}, requests_per_instance=tuple(routed.tolist()),
                   load_imbalance=float(routed.max() / mean) if mean > 0 else 1.0,
                   index_entries=len(index) if index is not None else 0)


class Link:
    """The decode instances' ingress links and loads: which decode instance gets each request,
    and when its KV arrives there.  Runtime complexity: O(decode instances) per hand-off."""

    def __init__(self, pd, serving, decode_instances: int) -> None:
        self.spec = pd.link
        self.overlap = pd.layerwise_overlap
        self.layers = serving.layers
        self.kvb = serving.kv_bytes_per_token
        self.load = np.zeros(decode_instances, dtype=np.int64)  # running + inbound requests
        self.free_at = np.zeros(decode_instances)
        self.busy_s = np.zeros(decode_instances)
        self.bytes_sent = 0
        self.decodes: list[Instance] = []
        self.woken: list[tuple[Instance, float]] = []  # (decode instance, KV arrival): the driver wakes idle ones

    def hand_off(self, r: int, input_len: int, now: float, end: float) -> tuple[int, float]:
        """Send ``r``'s prompt KV, its prefill step running from ``now`` to ``end``: ``(decode
        instance, arrival time of its KV there)``."""
        d = int(np.argmin(self.load))
        self.load[d] += 1
        nbytes = input_len * self.kvb
        copy_s = nbytes / self.spec.read_bandwidth
        if self.overlap:
            done = max(max(self.free_at[d], now) + copy_s, end + copy_s / self.layers)
        else:
            done = max(self.free_at[d], end) + copy_s
        self.free_at[d] = done
        self.busy_s[d] += copy_s
        self.bytes_sent += nbytes
        arrive = done + self.spec.latency_s
        inst = self.decodes[d]
        inst.arrival_ids.append(r)
        inst.arrival_times.append(arrive)
        self.woken.append((inst, arrive))
        return d, arrive


class PrefillRole(Colocated):
    """A prefill instance: no lookup at arrival (the prompt counts whole against the step
    budget), prompt blocks only, and each request handed to a decode instance after its prefill."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def arrive(self, inst: Instance, r: int) -> None:
        table = inst.table
        table.prefill_tokens[r] = table.input_len_py[r]  # its hit is known when it takes its blocks
        inst.waiting.append(r)
        inst.stats.max_waiting = max(inst.stats.max_waiting, len(inst.waiting))

    def take(self, inst: Instance, r: int) -> bool:
        table = inst.table
        keys, _ = table.blocks(r)
        got = inst.hier.take(keys, 0)  # the prompt's blocks only: the decode instance holds the rest
        if got is None:
            return False
        inst.held[r] = got[0]
        h = got[1]
        table.gpu_at_take[r] = h
        inp = table.input_len_py[r]
        hit = min(h * inst.bt, inp - 1)
        table.prefill_tokens[r] = inp - hit
        inst.stats.gpu_hit_tokens += hit
        return True

    def step_started(self, inst: Instance, plan: StepPlan, now: float, end: float) -> None:
        """Requests whose prompt this step completes are handed off now (their links booked); one
        with a single output token needs no decode instance: its blocks go back now."""
        table = inst.table
        for r in _completing(inst, plan):
            if table.output_len_py[r] > 1:
                _, arrive = self.link.hand_off(r, table.input_len_py[r], now, end)
                inst.hold_until(r, arrive)
            else:
                inst.hier.release(inst.held.pop(r))

    def prefill_done(self, inst: Instance, r: int, now: float) -> int:
        table = inst.table
        table.first_token[r] = now
        table.remaining[r] = table.output_len_py[r] - 1
        if table.remaining[r] <= 0:
            table.finish[r] = now  # its blocks went back when its step started
            return 1
        inst.handed_off += 1  # its blocks go when its KV has left (hold_until)
        return 0

    def check_pool_fits(self, inst: Instance) -> None:
        return None  # checked for both roles by _check_pools


class DecodeRole(Colocated):
    """A decode instance: requests arrive with their KV; they join the running batch at a step
    boundary when the batch has room and the pool holds their prompt + output blocks."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def arrive(self, inst: Instance, r: int) -> None:
        inst.waiting.append(r)

    def schedule(self, inst: Instance, now: float) -> StepPlan:
        table, waiting, running = inst.table, inst.waiting, inst.running
        max_seqs = inst.scheduler.max_seqs
        joined = 0
        while joined < len(waiting) and len(running) < max_seqs:
            r = waiting[joined]
            got = inst.hier.take(np.zeros((0, 2), dtype=np.uint64), _decode_blocks(table, r))
            if got is None:
                break
            inst.held[r] = got[0]
            inst.join_decode(r)
            joined += 1
        del waiting[:joined]
        if joined:
            inst.stats.max_running = max(inst.stats.max_running, len(running))
        return StepPlan()

    def step_started(self, inst: Instance, plan: StepPlan, now: float, end: float) -> None:
        self.stretch_started(inst, np.asarray(inst.running, dtype=np.int64), 1)

    def stretch_started(self, inst: Instance, run: np.ndarray, k: int) -> None:
        """The requests this stretch finishes stop counting as load when it starts."""
        finishing = int(np.count_nonzero(inst.table.finish_step[run] - inst.decode_steps <= k))
        if finishing:
            self.link.load[inst.index] -= finishing

    def check_pool_fits(self, inst: Instance) -> None:
        return None


def drive_lockstep(prefills: list, decodes: list, table: RequestTable, route, link: Link) -> float:
    """Run the instances in strict time order; returns the end time.

    Each instance's loop (``lockstep``) pauses before every step and idle wake-up with the time
    it wants to act at; a heap of those times resumes the earliest first.  Arrivals are routed
    (``route(r, t) -> prefill instance``) before any instance acts at the same time; an idle
    instance routed a request acts on it at once, before the next arrival is routed.  An idle
    decode instance handed a request is woken when its KV arrives.  Runtime
    complexity: O(steps x log instances).
    """
    instances = prefills + decodes
    for inst in instances:
        inst.lockstep = True
        inst.horizon = -math.inf  # more requests may come: no instance ends before its feeders
    loops = [inst.steps_until_done() for inst in instances]
    slot = {id(inst): i for i, inst in enumerate(instances)}
    wants = [-math.inf] * len(instances)
    heap = [(-math.inf, i) for i in range(len(instances))]
    ends = [0.0] * len(instances)
    live_prefills = len(prefills)
    at, n, nxt = table.arrival_py, table.n, 0

    def wake(inst: Instance, t: float) -> None:
        i = slot[id(inst)]
        if inst.idle and wants[i] > t:
            wants[i] = t
            heapq.heappush(heap, (t, i))

    def resume(i: int, t: float) -> None:
        nonlocal live_prefills
        try:
            w = loops[i].send(None if t == -math.inf else t)
            wants[i] = w
            if w != math.inf:
                heapq.heappush(heap, (w, i))
        except StopIteration as stop:
            wants[i], ends[i] = math.nan, stop.value
            if i < len(prefills):
                live_prefills -= 1
                if live_prefills == 0:  # no more hand-offs: decode instances may end once done
                    for d in decodes:
                        d.horizon = math.inf
                        wake(d, ends[i])
        for inst, arrive in link.woken:
            wake(inst, arrive)
        link.woken.clear()

    while heap or nxt < n:
        t_arrival = at[nxt] if nxt < n else math.inf
        if nxt < n and (not heap or t_arrival <= heap[0][0]):
            inst = route(nxt, t_arrival)
            inst.arrival_ids.append(nxt)
            inst.arrival_times.append(t_arrival)
            nxt += 1
            if nxt == n:  # every request is routed: prefill instances may end once done
                for p in prefills:
                    p.horizon = math.inf
                    wake(p, t_arrival)
            if inst.idle:  # an idle instance starts on an arrival at once (before the next one is routed)
                i = slot[id(inst)]
                wants[i] = t_arrival
                resume(i, t_arrival)
            continue
        t, i = heapq.heappop(heap)
        if t != wants[i]:
            continue  # stale: woken earlier since
        resume(i, t)
    return max(ends)


def _completing(inst: Instance, plan: StepPlan) -> list[int]:
    """The requests whose last prompt token the step computes (chunk order)."""
    if not inst.scheduler.chunked:
        return plan.admitted
    prefilled, tokens = inst.scheduler.prefilled, inst.table.prefill_tokens
    return [r for r, new, _ in plan.chunks if prefilled[r] + new >= tokens[r]]


def _decode_blocks(table: RequestTable, r: int) -> int:
    """Blocks a decode instance holds for ``r``: its prompt and output (the last token's KV
    is never written)."""
    return -(-(table.input_len_py[r] + table.output_len_py[r] - 1) // table.block_tokens)


def _check_pools(table: RequestTable, prefill: Instance, decode: Instance, serving) -> None:
    if not table.n:
        return
    prompt_blocks = np.diff(table.offsets)
    decode_blocks = -(-(table.input_len + table.output_len - 1) // table.block_tokens)
    if int(prompt_blocks.max()) > prefill.hier.num_blocks or int(decode_blocks.max()) > decode.hier.num_blocks:
        raise BadInputError(f"a request needs more than the {prefill.hier.num_blocks} blocks of a GPU pool "
                            f"(gpu_kv_bytes={serving.gpu_kv_bytes}); expected a larger gpu_kv_bytes")


def _fewest_queued_tokens(prefills: list, table: RequestTable):
    """The default route: the prefill instance with the fewest queued prompt tokens (lowest index on ties)."""
    inp = table.input_len_py

    def pick(r: int, t: float) -> int:
        queued = [sum(inp[q] for q in p.waiting) + sum(inp[q] for q in p.arrival_ids[p.next_arrival:])
                  for p in prefills]
        return int(np.argmin(queued))

    return pick


def _routed(router, view, prefills: list, table: RequestTable, sessions: list):
    """The cluster router's prefill instance (the view: each prefill instance's queue, whether it
    is prefilling, its pool use)."""
    feed = RowFeed(table, view.index)
    view.kv_blocks_total[:] = [inst.hier.num_blocks for inst in prefills]

    def pick(r: int, t: float) -> int:
        for p, inst in enumerate(prefills):
            inst.release_handed_off_until(t)  # KV that left by now frees its blocks, as the pool's use shows
            feed.refresh(view, p, inst, t)  # queues, their prefill, held KV, pool use
            view.running[p] = int(inst.step_end > t)  # a prefill instance: is it prefilling now
        view.now = view.scraped_at = t
        keys, _ = table.blocks(r)
        block_ids = keys[:, 0].view(np.int64)
        request = RouteRequest(index=r, arrival_s=t, block_ids=block_ids,
                               input_length=table.input_len_py[r], output_length=table.output_len_py[r],
                               session=sessions[r])
        choice = checked_route(router, request, view)
        feed.routed(view, choice, r, block_ids)
        return choice

    return pick


def _result(cfg, serving, table: RequestTable, prefills: list, decodes: list, link: Link, end: float):
    span = end - float(table.arrival.min())
    pools = [p.hier.pool.stats for p in prefills]
    pd = cfg.pd
    stats = [i.stats for i in prefills + decodes]
    return SimResult(
        label=cfg.label or f"{serving.name}/pd {pd.prefill_instances}x{pd.decode_instances} {link.spec.name}",
        policy="pd", model=serving.name, requests=table.n,
        **latency_metrics(cfg, table.arrival, table.first_token, table.finish, table.output_len, span),
        ttft_p95_high_priority=0.0, high_priority_requests=0, protected_byte_seconds=0.0,
        protected_byte_seconds_per_request=0.0, peak_protected_bytes=0, fast_tier_bytes=0, claims=0,
        ready_in_time=0, ready_late=0, claims_cancelled=0, claims_recomputed=0, slow_hit_token_share=0.0,
        gpu_hit_token_share=sum(p.stats.gpu_hit_tokens for p in prefills) / float(table.input_len.sum()),
        gpu_pool_blocks=int(prefills[0].hier.num_blocks),
        gpu_lookup_hits=sum(int(s["hits"]) for s in pools), gpu_lookup_queries=sum(int(s["queries"]) for s in pools),
        tier_block_hits=(), tier_blocks_offered=(), tier_evictions=(), steps=sum(s.steps for s in stats),
        max_waiting=max(s.max_waiting for s in stats), max_running=max(s.max_running for s in stats),
        kv_bytes_transferred=int(link.bytes_sent), instances=pd.instances,
        link_busy_share=float(link.busy_s.max()) / span if span > 0 else 0.0,
        busy_seconds=(sum(p.stats.prefill_busy_s for p in prefills), sum(d.stats.decode_busy_s for d in decodes)),
        serving=serving.describe())
