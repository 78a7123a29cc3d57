"""The staging controllers: how a request's lower-tier hit reaches the GPU.

Both speak one interface to the event loop and the scheduler (no ``if write_through`` in
either):

* :class:`LedgerStaging` (``on-demand``, ``immediate``, ``immediate-edf``, ``timely``): a hit
  found in a lower tier is a :class:`~kvmm.policies.CommitmentLedger` claim (metadata only);
  the :class:`~kvmm.protocols.StagingPolicy` decides when it takes protected fast-tier
  capacity; a granted claim is copied through its source tier's read channel (FIFO, at
  ``stage_efficiency`` x each involved tier's bandwidth, and a cluster's shared fabric); the
  prefill reads the staged bytes from the fast tier; the capacity is held from commit until
  the step that reads it.
* :class:`WriteThroughStaging` (``write-through-lru``, the no-staging-control baseline): the
  fast tier is an LRU cache written through with every prefilled block; lower-tier hits are
  read on the critical path in the admitting step and inserted there.

Interface (what the loop calls): ``claim`` at lookup, ``next_transfer_time`` /
``complete_next_transfer`` and ``next_tick_time`` / ``tick`` as events, ``poll`` when claims
wait for capacity, ``admission_check`` / ``consume`` / ``release_read`` at scheduling,
``load_seconds`` for a step's staged reads, ``after_prefill`` and ``close`` at the end, and
``protected_byte_seconds`` / ``peak_protected_bytes`` for the results.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from kvmm.policies.ledger import CONSUMED, READY, STAGING
from kvmm.policies.staging import make_staging_policy
from kvmm.sim.engine._kernels import _claims_work_ahead, _first_tick_not_before
from kvmm.sim.engine.requests import RequestTable
from kvmm.sim.write_through import WriteThroughLRU

__all__ = ["StagingController", "LedgerStaging", "WriteThroughStaging", "make_staging", "WAIT", "GO", "DROPPED"]

#: admission_check answers: the request waits for its KV (keeps a batch slot, no prefill);
#: it may run now; its claim was dropped (it recomputes or the GPU holds the hit) and it may run
WAIT, GO, DROPPED = 0, 1, 2

INF = math.inf


def make_staging(cfg, table: RequestTable, levels: tuple, block_bytes: int, kv_bytes_per_token: int,
                 ledger_factory, initial_rate: float, prefill_seconds) -> Any:
    """The controller ``cfg.policy`` names.  ``prefill_seconds(tokens)``: the instance clock's
    time to recompute that many prompt tokens (recompute fallback)."""
    if cfg.policy == "write-through-lru":
        return WriteThroughStaging(cfg, table, block_bytes, ledger_factory, levels, initial_rate)
    return LedgerStaging(cfg, table, levels, kv_bytes_per_token, ledger_factory, initial_rate, prefill_seconds)


class StagingController:
    """What every controller shares: the ledger's progress-rate learning and its statistics,
    and the answers of a controller without claims (nothing to poll, nothing in flight, every
    request may run)."""

    has_claims = False
    open_claims = 0
    ungranted = 0
    ledger: Any = None

    def poll(self, now: float) -> None:
        return None

    def next_transfer_time(self) -> float:
        return INF

    def next_tick_time(self) -> float:
        return INF

    def update_work_ahead(self, *args) -> None:
        return None

    def admission_check(self, r: int, in_window: bool, now: float, gpu_holds_hit) -> int:
        return GO

    def ready_now(self, r: int, now: float) -> bool:
        return True

    def consume(self, r: int, now: float) -> None:
        return None

    def release_read(self, admitted: list[int], now: float) -> list[int]:
        return []

    def after_prefill(self, r: int, ids: np.ndarray, now: float) -> None:
        """``r``'s prefill is done (its blocks were offered to the lower tiers)."""

    def close(self, now: float) -> None:
        """The run ended at ``now``."""

    def observe_progress(self, tokens: int, seconds: float) -> None:
        if tokens:
            self.ledger.observe_progress(tokens, seconds)

    @property
    def ready_in_time(self) -> int:
        return int(self.ledger.stats["ready_in_time"])

    @property
    def ready_late(self) -> int:
        return int(self.ledger.stats["ready_late"])


class LedgerStaging(StagingController):
    """Claims, the ledger, the staging policy and the copies in flight of one instance."""

    skip_idle_ticks = True  # class default; False replays every controller tick (tests compare)
    has_claims = True

    def __init__(self, cfg, table: RequestTable, levels: tuple, kv_bytes_per_token: int, ledger_factory,
                 initial_rate: float, prefill_seconds) -> None:
        self.cfg, self.table, self.levels = cfg, table, levels
        self.kvb = kv_bytes_per_token
        self.prefill_seconds = prefill_seconds
        self.ledger = ledger = ledger_factory(
            cfg.fast_tier.capacity_bytes, [lv.spec for lv in levels] or [cfg.fast_tier], margin_s=cfg.margin_s,
            initial_rate=cfg.initial_rate or initial_rate)
        # fast-forward controller ticks that change nothing (needs CommitmentLedger.skip_idle_polls;
        # the plain-Python reference ledger runs every tick; tests switch it off to compare)
        self.skip_idle = LedgerStaging.skip_idle_ticks and hasattr(ledger, "skip_idle_polls")
        self.policy = make_staging_policy(cfg.policy, ledger)
        self.grant_on_claim = cfg.policy in ("immediate", "immediate-edf")
        self.timely = cfg.policy == "timely"
        self.poll_interval = cfg.poll_interval_s
        self.freed_since_poll = False
        self.channel_free_at = np.zeros(max(len(levels), 1))
        self.fabric_queue = None  # a cluster's shared fabric (kvmm.sim.engine.cluster.FabricQueue)
        self.private_levels = len(levels)  # set by the instance: levels after these are shared
        self.transfers: list[tuple[float, int, int]] = []  # heap of (done time, seq, claim id)
        self.transfer_seq = 0
        self.transfer_done: dict[int, float] = {}
        self.cancelled: set[int] = set()
        self.owner: dict[int, int] = {}  # open claim -> its request
        # what the loop told the ledger about each open claim (so the scheduler does not ask it
        # every step): granted by a poll, marked ready, needed once (a repeated ``need`` changes nothing)
        self.granted: set[int] = set()
        self.ready: set[int] = set()
        self.needed: set[int] = set()
        self.ungranted = 0
        self.next_poll = 0.0
        self.claims_made = self.claims_cancelled = self.claims_recomputed = 0
        self.read_blocks = [0] * len(levels)  # blocks read from each level by consumed claims
        self.claim_blocks: dict[int, np.ndarray] = {}  # open claim -> its blocks per level

    # ------------------------------------------------------------------ claims
    @property
    def open_claims(self) -> int:
        return self.ungranted + len(self.owner)

    def claim(self, r: int, src: np.ndarray, slow_tokens: int, t: float, ahead: float, delay: float) -> None:
        """Claim ``r``'s lower-tier hit of ``slow_tokens`` tokens (``src``: source level of each
        hit block), its use predicted ``delay`` seconds plus ``ahead`` prefill tokens from ``t``."""
        table = self.table
        nbytes = min(slow_tokens * self.kvb, self.ledger.capacity_bytes)  # a hit larger than the tier: in part
        blocks = -(-(nbytes // self.kvb) // table.block_tokens)
        if nbytes <= 0:
            table.prefill_tokens[r] += slow_tokens
            return
        table.staged_blocks[r] = blocks
        table.staged_bytes[r] = nbytes
        used = src[:blocks]
        source = int(used.max())
        blocks_per_tier = np.bincount(used, minlength=len(self.levels))
        per_tier = blocks_per_tier * (nbytes / blocks)
        eff = self.cfg.stage_efficiency
        table.stage_seconds[r] = self.levels[source].spec.latency_s + sum(
            b / min(lv.spec.read_bandwidth * eff, self.cfg.fast_tier.write_bandwidth)
            for b, lv in zip(per_tier.tolist(), self.levels) if b)
        if self.fabric_queue is not None:
            table.fabric_bytes[r] = int(per_tier[self.private_levels:].sum())
        table.claim_source[r] = source
        cid = self.ledger.claim(r, None, nbytes, now=t, work_ahead=ahead, delay_s=delay, source=source)
        table.claim_id[r] = cid
        self.owner[cid] = r
        self.claim_blocks[cid] = blocks_per_tier
        self.claims_made += 1
        if self.ungranted == 0 or self.next_poll < t:
            self.next_poll = t + self.poll_interval
        self.ungranted += 1
        self.policy.on_claim(cid, t)
        if self.grant_on_claim:
            self.poll(t)
        if nbytes < slow_tokens * self.kvb:
            table.prefill_tokens[r] += slow_tokens - nbytes // self.kvb

    def poll(self, now: float) -> None:
        """Ask the staging policy which claims to grant now, and start their copies."""
        self.freed_since_poll = False
        self.start_transfers(self.policy.due(now), now)

    def start_transfers(self, granted, now: float) -> None:
        table = self.table
        for cid in np.asarray(granted, dtype=np.int64).tolist():
            r = self.owner[cid]
            s = int(table.claim_source[r])
            done_at = max(now, self.channel_free_at[s]) + table.stage_seconds[r]
            if self.fabric_queue is not None and table.fabric_bytes[r]:  # the shared fabric's aggregate
                done_at = self.fabric_queue.transfer(max(now, self.channel_free_at[s]), done_at, int(table.fabric_bytes[r]))
            self.channel_free_at[s] = done_at
            heapq.heappush(self.transfers, (done_at, self.transfer_seq, cid))
            self.transfer_done[cid] = done_at
            self.granted.add(cid)
            self.transfer_seq += 1
            self.ungranted -= 1

    def update_work_ahead(self, waiting: list[int], budget: int, room: int, max_batch: int, now: float,
                          step_s: float) -> None:
        """Time until each queued claim's use = ``step_s`` (the step starting now, known) +
        prefill tokens of the *later steps* before its own (at the ledger's learned rate).

        The queue drains a step at a time (up to ``budget`` prefill tokens and the free batch
        room), so requests packed into the next step wait only for the current one.
        """
        cids, ahead = _claims_work_ahead(np.asarray(waiting, dtype=np.int64), self.table.prefill_tokens,
                                         self.table.claim_id, budget, room, max_batch)
        if cids.shape[0]:
            self.ledger.update(cids, ahead, now=now, delay_s=float(step_s))  # one delay for all

    # ------------------------------------------------------------------ events
    def next_transfer_time(self) -> float:
        return self.transfers[0][0] if self.transfers else INF

    def next_tick_time(self) -> float:
        return self.next_poll if self.ungranted > 0 else INF

    def complete_next_transfer(self) -> None:
        """The earliest copy in flight completes: its claim is READY (or dropped, if cancelled)."""
        done_at, _, cid = heapq.heappop(self.transfers)
        self.transfer_done.pop(cid, None)
        if cid in self.cancelled:
            self.cancelled.discard(cid)
            return
        self.ledger.mark_ready([cid], now=done_at)
        self.ready.add(cid)
        self.table.kv_ready_at[self.owner[cid]] = done_at

    def tick(self, tp: float, before: float, until: float) -> None:
        """The controller's clock at ``tp`` (the next other event at ``before``).

        Only timely staging triggers on time alone; the others grant pending claims as capacity
        frees, so a tick with no release since the last poll grants nothing: it and the ticks
        after it up to the next event are skipped (same result, less work).  Timely ticks that
        would neither trigger nor grant are fast-forwarded by the ledger
        (``skip_idle_polls``: it learns their poll gaps as the polls would), so only the ticks
        that change a claim run a poll.
        """
        interval = self.poll_interval
        if self.timely:
            if self.skip_idle:
                nxt = self.ledger.skip_idle_polls(tp, interval, before=before, until=until)
                if nxt != tp:
                    self.freed_since_poll = False
                    self.next_poll = nxt
                    return
            self.poll(tp)
        elif self.freed_since_poll:
            self.poll(tp)
        elif self.skip_idle:
            self.next_poll = _first_tick_not_before(tp, interval, before, until)
            return
        self.next_poll = tp + interval

    # ------------------------------------------------------------------ scheduling
    def admission_check(self, r: int, in_window: bool, now: float, gpu_holds_hit) -> int:
        """May ``r`` (queued, holding a claim or not) run in the step starting ``now``?

        A claim whose hit the GPU now holds (an earlier request put it there) is released unused
        (``claims_cancelled``).  Claims are asked for (``need``, which escalates them) only
        within the first step's window of the queue; beyond it a claim runs only if already
        ready.  A claim that is not ready waits, unless recomputing it is faster
        (``recompute_fallback``).  Returns WAIT, GO or DROPPED.
        """
        cid = int(self.table.claim_id[r])
        if cid < 0:
            return GO
        if gpu_holds_hit(r):
            self.drop(r, cid, now)  # an earlier request put the context on the GPU meanwhile
            self.claims_cancelled += 1
            return DROPPED
        if not in_window and cid not in self.ready:
            return WAIT
        if self.need(cid, now):
            return GO
        if cid not in self.granted:  # not staging: escalated, poll now
            self.poll(now)
        if not (self.cfg.recompute_fallback and self.recompute_is_faster(r, cid, now)):
            return WAIT  # waits for its KV: a batch slot, no prefill budget
        self.drop(r, cid, now)
        self.claims_recomputed += 1
        return DROPPED

    def ready_now(self, r: int, now: float) -> bool:
        """Is ``r``'s KV ready (or has it no claim)?  (The loop's work-conserving fallback.)"""
        cid = int(self.table.claim_id[r])
        return cid < 0 or self.need(cid, now)

    def consume(self, r: int, now: float) -> None:
        """``r`` is scheduled: its claim (if any) is used by this step."""
        cid = int(self.table.claim_id[r])
        if cid >= 0:
            self.ledger.consume([cid], now=now)
            for level, n in enumerate(self.claim_blocks.pop(cid).tolist()):
                self.read_blocks[level] += n

    def release_read(self, admitted: list[int], now: float) -> list[int]:
        """The claims of ``admitted`` whose staged bytes the step has read by ``now``; returns
        them (the caller releases them with :meth:`release` at that time)."""
        claim_id = self.table.claim_id
        return [int(claim_id[r]) for r in admitted if claim_id[r] >= 0]

    def release(self, cids: list[int], now: float) -> None:
        self.ledger.release(cids, now=now)
        self.freed_since_poll = True
        for cid in cids:
            self.owner.pop(cid, None)
            self.forget(cid)

    def load_seconds(self, admitted: list[int], now: float) -> float:
        """Seconds the step spends reading the admitted requests' staged KV from the fast tier."""
        load_bytes = int(self.table.staged_bytes[admitted].sum()) if admitted else 0
        if not load_bytes:
            return 0.0
        fast = self.cfg.fast_tier
        return load_bytes / fast.read_bandwidth + fast.latency_s

    def recompute_is_faster(self, r: int, cid: int, now: float) -> bool:
        """Would recomputing the claim's tokens finish before its copy is ready?  (Holders free
        their capacity at their predicted use times, in that order.)"""
        table = self.table
        recompute_s = self.prefill_seconds(int(table.staged_bytes[r]) // self.kvb)
        done_at = self.transfer_done.get(cid)
        if done_at is not None:
            return bool(done_at - now > recompute_s)
        led = self.ledger
        stage_s = float(np.asarray(led.predicted_ready_seconds([cid]))[0])
        missing = int(table.staged_bytes[r]) - int(led.free_bytes)
        wait = 0.0
        if missing > 0:
            ids = np.asarray(led.open_ids(), dtype=np.int64)
            states = np.asarray(led.state_of(ids))
            holding = (states == STAGING) | (states == READY) | (states == CONSUMED)
            holders = ids[holding]
            frees_at = np.maximum(np.asarray(led.predicted_use_time(holders), dtype=np.float64), now)
            frees_at[states[holding] == CONSUMED] = now
            held = table.staged_bytes[[self.owner[h] for h in holders.tolist()]]
            order = np.argsort(frees_at, kind="stable")
            enough = np.flatnonzero(np.cumsum(held[order]) >= missing)
            wait = float(frees_at[order[enough[0]]]) - now if enough.size else np.inf
        return bool(wait + stage_s > recompute_s)

    def need(self, cid: int, now: float) -> bool:
        """``ledger.need`` the first time (it records the moment and escalates an unstaged claim);
        after that the claim is PENDING, STAGING or READY and a repeated ``need`` would change
        nothing, so the controller's own record answers: is it ready?"""
        if cid in self.needed:
            return cid in self.ready
        self.needed.add(cid)
        self.table.need_at[self.owner[cid]] = now
        return bool(self.ledger.need([cid], now=now)[0])

    def forget(self, cid: int) -> None:
        self.granted.discard(cid)
        self.ready.discard(cid)
        self.needed.discard(cid)

    def drop(self, r: int, cid: int, now: float) -> None:
        """Release a claim that will not be used (its blocks are then GPU hits or recomputed)."""
        table = self.table
        if cid not in self.granted:  # CLAIMED or PENDING
            self.ungranted -= 1
        elif cid not in self.ready:  # STAGING
            self.cancelled.add(cid)  # its copy is in flight: drop it when it completes
        if cid in self.needed and cid not in self.ready:
            table.kv_ready_at[r] = now  # its wait for staging ends here (GPU hit or recomputed)
        self.forget(cid)
        self.ledger.release([cid], now=now)
        self.freed_since_poll = True
        self.owner.pop(cid, None)
        self.claim_blocks.pop(cid, None)
        table.staged_bytes[r] = 0
        table.staged_blocks[r] = 0
        table.claim_id[r] = -1

    # ------------------------------------------------------------------ results
    @property
    def protected_byte_seconds(self) -> float:
        return float(self.ledger.released_byte_seconds)

    @property
    def peak_protected_bytes(self) -> int:
        return int(self.ledger.peak_protected_bytes)


class WriteThroughStaging(StagingController):
    """The ``write-through-lru`` baseline: no claims; lower-tier hits are read in the step."""

    def __init__(self, cfg, table: RequestTable, block_bytes: int, ledger_factory, levels: tuple,
                 initial_rate: float) -> None:
        self.cfg, self.table = cfg, table
        self.fast_lru = WriteThroughLRU(cfg, block_bytes)
        # the ledger is kept (empty) so every run reports the same ledger statistics
        self.ledger = ledger_factory(cfg.fast_tier.capacity_bytes, [lv.spec for lv in levels] or [cfg.fast_tier],
                                     margin_s=cfg.margin_s, initial_rate=cfg.initial_rate or initial_rate)
        self.owner: dict[int, int] = {}
        self.claims_made = self.claims_cancelled = self.claims_recomputed = 0
        self.levels = levels
        self.read_blocks = [0] * len(levels)  # lower-tier hits read per level (by the source found at lookup)
        self.hit_sources: dict[int, np.ndarray] = {}

    def claim(self, r: int, src: np.ndarray, slow_tokens: int, t: float, ahead: float, delay: float) -> None:
        self.table.staged_blocks[r] = src.shape[0]  # read from the lower tiers at scheduling, no claim
        self.hit_sources[r] = src

    def load_seconds(self, admitted: list[int], now: float) -> float:
        """Seconds to bring the admitted requests' lower-tier hits to the GPU."""
        table = self.table
        hits = []
        for r in admitted:
            sb = int(table.staged_blocks[r])
            if sb:
                o0 = int(table.offsets[r] + table.gpu_at_arrival[r])
                hits.append(table.ids[o0:o0 + sb])
                for level, n in enumerate(np.bincount(self.hit_sources.pop(r), minlength=len(self.levels)).tolist()):
                    self.read_blocks[level] += n
        return self.fast_lru.load_seconds(hits, now)

    def after_prefill(self, r: int, ids: np.ndarray, now: float) -> None:
        self.fast_lru.write(ids, now)

    def close(self, now: float) -> None:
        self.fast_lru.tick(now)

    @property
    def protected_byte_seconds(self) -> float:
        return self.fast_lru.byte_seconds

    @property
    def peak_protected_bytes(self) -> int:
        return int(self.fast_lru.peak)
