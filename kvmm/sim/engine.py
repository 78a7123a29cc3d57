"""The colocated serving engine: continuous batching over a :class:`~kvmm.sim.hierarchy.Hierarchy`.

What it models (one instance, FCFS or two-class priority admission):

* **Arrival**: the prompt's 512-token blocks are looked up: the longest prefix held by the GPU
  prefix cache (the pool's ``lookup``) or, block by block after it, by some lower tier.  The part
  only in lower tiers must be **staged** into the protected fast tier before the prefill reads
  it: one :class:`CommitmentLedger` claim per request (source: the slowest tier involved); the
  :class:`StagingPolicy` decides when it takes capacity.  Granted copies share that tier's read
  channel FIFO at ``stage_efficiency`` x each involved tier's nominal bandwidth.
* **Advance notice** (``notice_s > 0``, one engine only): a request is *announced* ``notice_s``
  before it arrives (an agent's next step while its tool call of known duration runs): the
  lookup and the claim happen then, its use predicted at its arrival (the prediction is refreshed
  with the queue it finds when it arrives); it joins the queue at arrival.  Announced without a
  lower-tier hit (its context still on the GPU, or not written yet) it is looked up again at
  arrival; GPU blocks found at the announcement and lost by scheduling are recomputed.
* **Scheduling** (a step): queued requests are admitted in queue order while the batch has room
  (``max_batch``), the step's prefill budget (``max_prefill_tokens``) lasts and the GPU pool can
  hold their blocks (prompt + output, reserved at admission; ``admit`` touches the GPU hits and
  keys the new blocks).  A request whose staged data is not ready keeps its place and a batch
  slot but takes no prefill budget; with ``recompute_fallback`` it recomputes its hit when that
  is faster.  The prefix is looked up again at scheduling: if the GPU now holds the whole hit,
  the claim is released unused (``claims_cancelled``); GPU blocks lost since arrival are
  recomputed.  A step takes the time to read staged KV from the fast tier + prefill time + one
  decode step of the running batch.  The **staging wait** of a claimed request runs from its
  first ``need`` (the scheduler would have run it: in the window, with batch room) to its copy
  completing (``need_at``, ``kv_ready_at``; its claim dropped ends it too); meanwhile the engine
  runs the other requests it can (or, with nothing else, waits for the next event).  TTFT ends with the prefill step; the request then decodes
  ``output_length - 1`` tokens, one per step, and frees its blocks into the prefix cache.
* **Write-down**: after its prefill a request offers its blocks to every lower tier (the tier's
  admission policy picks what is written; held blocks are accessed, in prefix order).
* Decode-only stretches with an empty queue are advanced in one jump to the next event (an
  arrival, a transfer, a finish): the same steps, without a Python iteration per token.

The protected capacity of a claim is held from commit until the step that uses it has read the
data.  ``write-through-lru`` is the no-staging-control baseline: the fast tier is an LRU cache
(:mod:`kvmm.sim.write_through`: ``ManagedTier`` + ``LRUPolicy``) written through with every
prefilled block, lower-tier hits are read on the critical path and inserted there, and its
protected byte-time is its occupancy x time.
Everything is deterministic.
"""

from __future__ import annotations

import heapq
import math
import warnings

import numpy as np

from kvmm.policies.ledger import CONSUMED, READY, STAGING
from kvmm.policies.staging import make_staging_policy
from kvmm.sim._engine_kernels import _claims_work_ahead, _first_tick_not_before
from kvmm.sim.config import SimConfig
from kvmm.sim.hierarchy import Hierarchy, pool_keys
from kvmm.sim.models import ModelSpec
from kvmm.sim.write_through import WriteThroughLRU
from kvmm.traces.mooncake import MooncakeTrace

__all__ = ["Engine", "QueueGrowthWarning"]



class QueueGrowthWarning(UserWarning):
    """The waiting queue grew without bound: the offered load exceeds the engine's capacity."""


class Engine:
    """The event loop.  Per-request state is structure-of-arrays indexed by request."""

    skip_idle_ticks = True  # class default; False replays every controller tick (tests compare)

    def __init__(self, cfg: SimConfig, model: ModelSpec, trace: MooncakeTrace, arrival: np.ndarray,
                 ledger_factory, progress, *, record_ops: bool = False, assigned: list[int] | None = None,
                 shared: tuple = (), tier_events=None,
                 key_space: np.ndarray | None = None) -> None:
        self.cfg, self.model, self.trace, self.progress = cfg, model, trace, progress
        n = trace.num_requests
        self.n = n
        self.arrival = arrival
        self.arrival_at = arrival.tolist()  # Python floats: the event loop compares them one at a time
        # the requests this engine serves, in arrival order, and their arrival times: all of the
        # trace when it runs alone; in a cluster the router appends to both as it routes (assign)
        self.arrival_ids: list[int] = list(range(n)) if assigned is None else list(assigned)
        self.arrival_times: list[float] = (self.arrival_at if assigned is None
                                           else [self.arrival_at[r] for r in self.arrival_ids])
        # every arrival before this time has been routed (inf: all known, the engine runs alone);
        # the cluster driver moves it and the event loop yields before passing it
        self.horizon = math.inf
        self.waiting: list[int] = []
        self.running: list[int] = []
        self.input_len = np.maximum(trace.input_length, 1)
        self.output_len = np.maximum(trace.output_length, 1)
        self.offsets = trace.block_offsets
        self.ids = trace.block_ids.astype(np.int64)
        self.keys = pool_keys(self.ids)
        self.bt = bt = int(trace.block_tokens)  # tokens per block of the trace's format
        # the lower levels as this instance sees them (a shared level's spec includes its fabric)
        self.levels = tuple(cfg.tiers) + tuple(s.level for s in shared)
        if key_space is None and (any(lv.write_back for lv in self.levels) or tier_events is not None):
            key_space = np.unique(self.ids)  # the GPU key mirror's dense ids
        total_blocks = -(-(self.input_len + self.output_len - 1) // bt)  # the last token's KV is never written
        self.extra_blocks = np.maximum(total_blocks - np.diff(self.offsets), 0)
        kvb = model.kv_bytes_per_token
        self.kvb = kvb
        self.block_bytes = bt * kvb
        self.compressor = None
        self.hier = Hierarchy(cfg, self.block_bytes, block_tokens=bt, record_ops=record_ops,
                              prefix_cache=False if cfg.token_budget is not None else None, shared=shared,
                              events=tier_events, key_space=key_space)
        self.fabric_queue = None  # a cluster's shared fabric (kvmm.cluster.sim.FabricQueue)
        if cfg.token_budget is not None:
            from kvmm.sim.compression import Compressor

            self.compressor = Compressor(self.hier.pool, cfg.scorer, cfg.token_budget, cfg.repack_interval,
                                         seed=cfg.priority_seed)
        biggest = int((np.diff(self.offsets) + self.extra_blocks).max()) if n else 0
        if self.compressor is not None and n:
            biggest = max(self.compressor.peak_blocks(int(i), int(o)) for i, o in zip(self.input_len, self.output_len))
        if biggest > self.hier.num_blocks:
            from kvmm.errors import BadInputError

            raise BadInputError(f"a request needs {biggest} blocks of {self.block_bytes} bytes but the GPU pool holds "
                                f"{self.hier.num_blocks} (gpu_kv_bytes={cfg.gpu_kv_bytes}); expected a larger gpu_kv_bytes")
        self.prefill_tokens = np.zeros(n, dtype=np.int64)
        self.gpu_at_arrival = np.zeros(n, dtype=np.int64)  # GPU prefix blocks found at arrival
        self.gpu_at_take = np.zeros(n, dtype=np.int64)  # GPU prefix blocks the request took (its GPU hits)
        self.staged_blocks = np.zeros(n, dtype=np.int64)  # lower-tier blocks claimed (after the GPU prefix)
        self.staged_bytes = np.zeros(n, dtype=np.int64)
        self.stage_seconds = np.zeros(n)  # copy time of the claim (per-tier bandwidths)
        self.fabric_bytes = np.zeros(n, dtype=np.int64)  # bytes of the claim read over a cluster's fabric
        self.claim_source = np.zeros(n, dtype=np.int64)
        self.claim_id = np.full(n, -1, dtype=np.int64)
        self.claim_owner: dict[int, int] = {}
        self.first_token = np.full(n, np.nan)
        # staging wait: first asked for (``need``: the scheduler would have run it now) -> its KV ready
        self.need_at = np.full(n, np.nan)
        self.kv_ready_at = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.remaining = np.zeros(n, dtype=np.int64)
        self.held: dict[int, np.ndarray] = {}  # request -> its GPU block ids
        draw = np.random.default_rng(cfg.priority_seed).random(n)
        self.priority_class = np.where(draw < cfg.high_priority_share, 0, 1).astype(np.int8)
        self._copy_read_only_columns()
        self.gpu_hit_tokens = 0
        self.slow_hit_tokens = 0
        self.max_waiting = 0

        self.write_through = cfg.policy == "write-through-lru"
        self.ledger = ledger_factory(
            cfg.fast_tier.capacity_bytes, [lv.spec for lv in self.levels] or [cfg.fast_tier], margin_s=cfg.margin_s,
            initial_rate=cfg.initial_rate or model.prefill_tokens_per_s)
        # fast-forward controller ticks that change nothing (needs CommitmentLedger.skip_idle_polls;
        # the plain-Python reference ledger runs every tick; tests switch it off to compare)
        self.skip_idle_ticks = Engine.skip_idle_ticks and hasattr(self.ledger, "skip_idle_polls")
        self.policy = None if self.write_through else make_staging_policy(cfg.policy, self.ledger)
        self.grant_on_claim = cfg.policy in ("immediate", "immediate-edf")
        self.timely = cfg.policy == "timely"
        self.freed_since_poll = False
        self.fast_lru = WriteThroughLRU(cfg, self.block_bytes) if self.write_through else None
        self.channel_free_at = np.zeros(max(len(self.levels), 1))
        self.transfers: list[tuple[float, int, int]] = []  # heap of (done time, seq, claim id)
        self.cancelled: set[int] = set()
        # what the engine told the ledger about each open claim (so the scheduler does not ask it
        # every step): granted by a poll, marked ready, needed once (a repeated ``need`` changes nothing)
        self.granted: set[int] = set()
        self.ready: set[int] = set()
        self.needed: set[int] = set()
        self.transfer_done: dict[int, float] = {}
        self.claims_made = self.claims_cancelled = self.claims_recomputed = self.transfer_seq = 0
        self.step_end = 0.0
        self.batch_in_flight = 0
        self.ungranted = 0
        self.next_poll = 0.0
        self.steps = 0
        self.prefill_busy_s = 0.0  # GPU-busy seconds of prefill steps (staged reads included)
        self.decode_busy_s = 0.0  # ... and of decode (the cost account splits the bill by them)
        self.next_arrival = 0
        self.max_running = 0
        # advance notice (SimConfig.notice_s): requests are looked up and claimed this long before
        # they arrive; 0: at arrival, in _arrive (the event stream below is then not used)
        self.notice = float(cfg.notice_s)
        self.next_announce = 0

    # ------------------------------------------------------------------ main loop
    def run(self) -> float:
        """Replay every request; returns the end time."""
        steps = self.steps_until_done()
        try:
            while True:
                next(steps)  # alone (horizon inf) the loop never pauses
        except StopIteration as stop:
            return stop.value

    def steps_until_done(self):
        """The event loop as a generator: it yields a time ``t`` when it must process events up
        to ``t`` but arrivals before ``t`` may not all be routed yet (``t >= horizon``; ``inf``:
        idle until something is routed to it); the cluster driver resumes it once they are.
        Returns the end time.  Alone, with ``horizon`` inf, it never yields."""
        m, ledger = self.model, self.ledger
        self._copy_read_only_columns()  # a caller may have set them after construction
        waiting = self.waiting
        running = self.running
        self.next_arrival = self.next_announce = 0
        now = 0.0
        done = 0
        while done < len(self.arrival_ids) or self.horizon != math.inf:
            if now >= self.horizon:
                yield now
            self._events_until(now, waiting)
            if self.ungranted:
                self._poll(now)
            admitted = self._admit(waiting, len(running), now)
            if not admitted and not running:
                nxt = self._next_event_time()
                if nxt is None:
                    if self.horizon == math.inf:
                        if done >= len(self.arrival_ids):
                            break
                        raise RuntimeError("simulator stalled: requests wait but no event is pending")  # pragma: no cover
                    yield math.inf  # idle until a request is routed here
                    continue
                now = max(now, nxt)
                continue
            if not admitted and not waiting:
                # decode-only: jump over the steps before the next event or finish
                run = np.asarray(running, dtype=np.int64)
                k, step_s = self._stretch_steps(run, now)
                if now + k * step_s >= self.horizon:
                    yield now + k * step_s
                now, done = self._decode_stretch(running, waiting, run, k, step_s, now, done)
                continue
            prefill = int(self.prefill_tokens[admitted].sum()) if admitted else 0
            load_bytes = int(self.staged_bytes[admitted].sum()) if admitted else 0
            load_s = 0.0
            if self.write_through:
                load_s = self._write_through_load(admitted, now)
            elif load_bytes:
                load_s = load_bytes / self.cfg.fast_tier.read_bandwidth + self.cfg.fast_tier.latency_s
            dt = load_s + prefill / m.prefill_tokens_per_s
            self.prefill_busy_s += dt
            if running:
                decode_s = m.decode_step_seconds(len(running))
                dt += decode_s
                self.decode_busy_s += decode_s
            self.step_end = now + dt
            self.batch_in_flight = len(running) + len(admitted)
            if waiting and self.ungranted + len(self.claim_owner):
                self._update_work_ahead(waiting, len(running) + len(admitted), now, dt)
            claims_done = [int(self.claim_id[r]) for r in admitted if self.claim_id[r] >= 0]
            if claims_done:
                if now + load_s >= self.horizon:
                    yield now + load_s
                self._events_until(now + load_s, waiting)
                ledger.release(claims_done, now=now + load_s)
                self.freed_since_poll = True
                for cid in claims_done:
                    self.claim_owner.pop(cid, None)
                    self._forget(cid)
            if now + dt >= self.horizon:
                yield now + dt
            self._events_until(now + dt, waiting)
            now += dt
            self.steps += 1
            if prefill:
                ledger.observe_progress(prefill, dt)
            finished = self._decode(running, 1, now) if running else 0
            for r in admitted:
                self.first_token[r] = now
                self.remaining[r] = self.output_len_py[r] - 1
                o0, o1 = self.offsets_py[r], self.offsets_py[r + 1]
                self.hier.offer(self.ids[o0:o1], int(self.gpu_at_take[r]))
                if self.compressor is not None:
                    self.compressor.after_prefill(r)  # prefill-time compression to the budget
                if self.write_through:
                    self.fast_lru.write(self.ids[o0:o1], now)
                if self.remaining[r] <= 0:
                    finished += self._finish([r], now)
                else:
                    running.append(r)
            self.max_running = max(self.max_running, len(running))
            done += finished
            if self.progress is not None and finished:
                self.progress(finished)
        if self.write_through:
            self.fast_lru.tick(now)
        return now

    def _copy_read_only_columns(self) -> None:
        """Python-int copies of the per-request columns the event loop only reads: it reads them
        one request at a time, and a list item is several times cheaper than a numpy scalar."""
        self.offsets_py = self.offsets.tolist()
        self.input_len_py = self.input_len.tolist()
        self.output_len_py = self.output_len.tolist()
        self.extra_blocks_py = self.extra_blocks.tolist()
        self.priority_py = self.priority_class.tolist()

    def _stretch_steps(self, run: np.ndarray, now: float) -> tuple[int, float]:
        """Decode steps of a decode-only stretch: up to the first finish, the next event or
        the routing horizon (a request may be routed here then), at least one."""
        step_s = self.model.decode_step_seconds(run.shape[0])
        k = int(self.remaining[run].min())
        if self.compressor is not None:
            k = min(k, self.cfg.repack_interval)
        nxt = self._next_event_time()
        if self.horizon != math.inf:
            nxt = self.horizon if nxt is None else min(nxt, self.horizon)
        if nxt is not None:
            k = max(1, min(k, math.ceil((nxt - now) / step_s - 1e-12)))
        return k, step_s

    def _decode_stretch(self, running: list[int], waiting: list[int], run: np.ndarray, k: int, step_s: float,
                        now: float, done: int) -> tuple[float, int]:
        self.step_end = now + k * step_s
        self.decode_busy_s += k * step_s
        self.batch_in_flight = len(running)
        self._events_until(now + k * step_s, waiting)
        now += k * step_s
        self.steps += k
        finished = self._decode(running, k, now, run)
        if finished:
            done += finished
            if self.progress is not None:
                self.progress(finished)
        return now, done

    def _decode(self, running: list[int], k: int, now: float, run: np.ndarray | None = None) -> int:
        """``k`` decode tokens for each running request (``run``: the same ids as an array); those
        that finish leave ``running`` (in place) and free their blocks.  Returns how many finished."""
        if run is None:
            run = np.asarray(running, dtype=np.int64)
        if self.compressor is not None:
            self.compressor.grow(running, k)
        self.remaining[run] -= k
        fin = self.remaining[run] <= 0
        if not fin.any():
            return 0
        running[:] = run[~fin].tolist()
        return self._finish(run[fin].tolist(), now)

    def _finish(self, rs: list[int], now: float) -> int:
        for r in rs:
            self.finish[r] = now
            if self.compressor is not None:
                self.compressor.finish(r)
            else:
                self.hier.release(self.held.pop(r))
        return len(rs)

    # ------------------------------------------------------------------ events
    def _events_until(self, t: float, waiting: list[int]) -> None:
        """Process staging completions, arrivals and controller polls with time <= t, in time order."""
        transfers = self.transfers
        arrival = self.arrival_times
        while True:
            na = self.next_arrival
            ta = arrival[na] if na < len(arrival) else np.inf
            tt = transfers[0][0] if transfers else np.inf
            tp = self.next_poll if self.ungranted > 0 else np.inf
            nn = self.next_announce
            tn = max(arrival[nn] - self.notice, 0.0) if self.notice and nn < len(arrival) else np.inf
            if tn <= t and tn <= ta and tn <= tt and tn <= tp:  # known before what happens then
                self._announce(self.arrival_ids[nn], waiting, tn)
                self.next_announce = nn + 1
                continue
            if ta > t and tt > t and tp > t:
                return
            if tt <= ta and tt <= tp:
                done_at, _, cid = heapq.heappop(transfers)
                self.transfer_done.pop(cid, None)
                if cid in self.cancelled:
                    self.cancelled.discard(cid)
                else:
                    self.ledger.mark_ready([cid], now=done_at)
                    self.ready.add(cid)
                    self.kv_ready_at[self.claim_owner[cid]] = done_at
            elif ta <= tp:
                self._arrive(self.arrival_ids[na], waiting)
                self.next_arrival = na + 1
            else:
                self._tick(tp, min(ta, tt, tn), t)

    def _tick(self, tp: float, before: float, until: float) -> None:
        """The controller's clock at ``tp`` (the next other event at ``before``).

        Only timely staging triggers on time alone; the others grant pending claims as capacity
        frees, so a tick with no release since the last poll grants nothing: it and the ticks
        after it up to the next event are skipped (same result, less work).  Timely ticks that
        would neither trigger nor grant are fast-forwarded by the ledger
        (``skip_idle_polls``: it learns their poll gaps as the polls would), so only the ticks
        that change a claim run a poll.
        """
        interval = self.cfg.poll_interval_s
        if self.timely:
            if self.skip_idle_ticks:
                nxt = self.ledger.skip_idle_polls(tp, interval, before=before, until=until)
                if nxt != tp:
                    self.freed_since_poll = False
                    self.next_poll = nxt
                    return
            self._poll(tp)
        elif self.freed_since_poll:
            self._poll(tp)
        elif self.skip_idle_ticks:
            self.next_poll = _first_tick_not_before(tp, interval, before, until)
            return
        self.next_poll = tp + interval

    def _next_event_time(self) -> float | None:
        na = self.next_arrival
        arrival = self.arrival_times
        t = min(arrival[na] if na < len(arrival) else np.inf, self.transfers[0][0] if self.transfers else np.inf)
        if self.notice and self.next_announce < len(arrival):
            t = min(t, max(arrival[self.next_announce] - self.notice, 0.0))
        return None if t == np.inf else float(t)

    def _arrive(self, r: int, waiting: list[int]) -> None:
        t = self.arrival_at[r]
        if self.notice and self.claim_id[r] >= 0:  # claimed at its announcement: it only joins the queue now
            pos = self._queue_position(r, waiting)
            waiting.insert(pos, r)
            self.max_waiting = max(self.max_waiting, len(waiting))
            # its own claim's prediction (made for an empty queue) and those of the requests it passed
            self._update_work_ahead(waiting, self.batch_in_flight, t, max(self.step_end - t, 0.0))
            return
        self._look_up_and_claim(r, waiting, t, None)

    def _announce(self, r: int, waiting: list[int], t: float) -> None:
        """``r`` is known at ``t`` (``notice_s`` before it arrives): look up its prefix and claim
        its lower-tier hit now, with its use predicted at its arrival (the queue it will find is
        not known yet; :meth:`_arrive` refreshes the prediction).  Without a lower-tier hit now
        (its context still on the GPU, or not written yet) it is looked up again at arrival."""
        if not self.write_through:  # nothing to stage early: its lower-tier hits are read in the step
            self._look_up_and_claim(r, waiting, t, self.arrival_at[r] - t)

    def _queue_position(self, r: int, waiting: list[int]) -> int:
        """Where ``r`` joins the queue: behind every request of its class or a higher one."""
        pos = len(waiting)
        priority = self.priority_py
        cls = priority[r]
        while pos > 0 and priority[waiting[pos - 1]] > cls:
            pos -= 1
        return pos

    def _look_up_and_claim(self, r: int, waiting: list[int], t: float, until_arrival: float | None) -> None:
        """Find ``r``'s prefix hits and claim its lower-tier part.  At its arrival
        (``until_arrival`` None) it also joins the queue; announced ahead, it does not (yet)."""
        o0, o1 = self.offsets_py[r], self.offsets_py[r + 1]
        gpu, src = self.hier.lookup(self.keys[o0:o1], self.ids[o0:o1])
        self.gpu_at_arrival[r] = gpu
        inp = self.input_len_py[r]
        bt = self.bt
        gpu_tokens = min(gpu * bt, inp - 1)  # the last prompt token is always computed
        hit_tokens = min((gpu + src.shape[0]) * bt, inp - 1)
        slow_tokens = hit_tokens - gpu_tokens
        self.prefill_tokens[r] = inp - hit_tokens
        pos = self._queue_position(r, waiting)
        if until_arrival is None:
            waiting.insert(pos, r)
            self.max_waiting = max(self.max_waiting, len(waiting))
            if pos < len(waiting) - 1 and (self.claim_id[waiting[pos + 1:]] >= 0).any():
                self._update_work_ahead(waiting, self.batch_in_flight, t, max(self.step_end - t, 0.0))
        if slow_tokens <= 0:
            return
        if self.write_through:
            self.staged_blocks[r] = src.shape[0]  # read from the lower tiers at scheduling, no claim
            return
        nbytes = min(slow_tokens * self.kvb, self.ledger.capacity_bytes)  # a hit larger than the tier: in part
        blocks = -(-(nbytes // self.kvb) // self.bt)
        if nbytes <= 0:
            self.prefill_tokens[r] += slow_tokens
            return
        self.staged_blocks[r] = blocks
        self.staged_bytes[r] = nbytes
        used = src[:blocks]
        source = int(used.max())
        per_tier = np.bincount(used, minlength=len(self.levels)) * (nbytes / blocks)
        eff = self.cfg.stage_efficiency
        self.stage_seconds[r] = self.levels[source].spec.latency_s + sum(
            b / min(lv.spec.read_bandwidth * eff, self.cfg.fast_tier.write_bandwidth)
            for b, lv in zip(per_tier.tolist(), self.levels) if b)
        if self.fabric_queue is not None:
            self.fabric_bytes[r] = int(per_tier[self.hier.private:].sum())
        self.claim_source[r] = source
        queued = float(self.prefill_tokens[waiting[:pos]].sum()) if pos > 0 else 0.0
        budget = self.model.max_prefill_tokens
        ahead = (queued // budget) * budget
        delay = max(self.step_end - t, 0.0)
        if until_arrival is not None:
            ahead, delay = 0.0, float(until_arrival)
        cid = self.ledger.claim(r, None, nbytes, now=t, work_ahead=ahead, delay_s=delay, source=source)
        self.claim_id[r] = cid
        self.claim_owner[cid] = r
        self.claims_made += 1
        if self.ungranted == 0 or self.next_poll < t:
            self.next_poll = t + self.cfg.poll_interval_s
        self.ungranted += 1
        self.policy.on_claim(cid, t)
        if self.grant_on_claim:
            self._poll(t)
        if nbytes < slow_tokens * self.kvb:
            self.prefill_tokens[r] += slow_tokens - nbytes // self.kvb

    def _poll(self, now: float) -> None:
        self.freed_since_poll = False
        self._start_transfers(self.policy.due(now), now)

    def _start_transfers(self, granted, now: float) -> None:
        for cid in np.asarray(granted, dtype=np.int64).tolist():
            r = self.claim_owner[cid]
            s = int(self.claim_source[r])
            done_at = max(now, self.channel_free_at[s]) + self.stage_seconds[r]
            if self.fabric_queue is not None and self.fabric_bytes[r]:  # the shared fabric's aggregate
                done_at = self.fabric_queue.transfer(max(now, self.channel_free_at[s]), done_at, int(self.fabric_bytes[r]))
            self.channel_free_at[s] = done_at
            heapq.heappush(self.transfers, (done_at, self.transfer_seq, cid))
            self.transfer_done[cid] = done_at
            self.granted.add(cid)
            self.transfer_seq += 1
            self.ungranted -= 1

    # ------------------------------------------------------------------ scheduling
    def _update_work_ahead(self, waiting: list[int], n_running: int, now: float, step_s: float) -> None:
        """Time until each queued claim's use = ``step_s`` (the step starting now, known) +
        prefill tokens of the *later steps* before its own (at the ledger's learned rate).

        The queue drains a step at a time (up to ``max_prefill_tokens`` and the free batch
        room), so requests packed into the next step wait only for the current one.
        """
        cids, ahead = _claims_work_ahead(np.asarray(waiting, dtype=np.int64), self.prefill_tokens, self.claim_id,
                                         self.model.max_prefill_tokens, self.model.max_batch - n_running,
                                         self.model.max_batch)
        if cids.shape[0]:
            self.ledger.update(cids, ahead, now=now, delay_s=float(step_s))  # one delay for all

    def _admit(self, waiting: list[int], n_running: int, now: float) -> list[int]:
        """Pick this step's prefills: in queue order within the batch room, the prefill budget
        and the GPU pool.

        Claims are asked for (``need``, which escalates them) only within the first step's window
        of the queue (the requests whose prefills would fill one step's budget): the look-ahead
        of on-demand staging.  Beyond it a claim runs only if already ready.
        """
        m = self.model
        admitted: list[int] = []
        budget = window = m.max_prefill_tokens
        room = m.max_batch - n_running
        if room <= 0 or not waiting:
            return admitted
        led = self.ledger
        kept: list[int] = []
        for i, r in enumerate(waiting):
            if room <= 0:
                kept.extend(waiting[i:])
                break
            in_window = window == m.max_prefill_tokens or self.prefill_tokens[r] <= window
            window = window - int(self.prefill_tokens[r]) if in_window else -1
            cid = int(self.claim_id[r])
            if cid >= 0 and self._gpu_holds_hit(r):
                self._drop_claim(r, cid, now)  # an earlier request put the context on the GPU meanwhile
                self.claims_cancelled += 1
                cid = -1
            if cid >= 0 and not in_window and cid not in self.ready:
                room -= 1
                kept.append(r)
                continue
            if cid >= 0 and not self._need(cid, now):
                if cid not in self.granted:  # not staging: escalated, poll now
                    self._poll(now)
                if not (self.cfg.recompute_fallback and self._recompute_is_faster(r, cid, now)):
                    room -= 1
                    kept.append(r)  # waits for its KV: a batch slot, no prefill budget
                    continue
                self._drop_claim(r, cid, now)
                self.claims_recomputed += 1
                cid = -1
            if admitted and self.prefill_tokens[r] > budget:
                kept.extend(waiting[i:])
                break
            if not self._take(r):
                kept.extend(waiting[i:])  # the GPU pool is full: wait for running requests to finish
                break
            if cid >= 0:
                led.consume([cid], now=now)
            room -= 1
            budget -= int(self.prefill_tokens[r])
            admitted.append(r)
        waiting[:] = kept
        if not admitted and n_running == 0 and not self.transfers:
            # nothing runs and nothing is in flight: stay work-conserving, run the first ready one
            for i, r in enumerate(waiting):
                cid = int(self.claim_id[r])
                if (cid < 0 or self._need(cid, now)) and self._take(r):
                    if cid >= 0:
                        led.consume([cid], now=now)
                    admitted.append(waiting.pop(i))
                    break
        return admitted

    def _take(self, r: int) -> bool:
        """Give ``r`` its GPU blocks and fix its prefill from the GPU hits found now."""
        o0, o1 = self.offsets_py[r], self.offsets_py[r + 1]
        if self.compressor is not None:  # the request's KV lives in the token table (no prefix cache)
            if not self.compressor.start(r, self.input_len_py[r], self.output_len_py[r]):
                return False
            h = 0
        else:
            got = self.hier.take(self.keys[o0:o1], self.extra_blocks_py[r])
            if got is None:
                return False
            self.held[r] = got[0]
            h = got[1]
        self.gpu_at_take[r] = h
        g0, sb = int(self.gpu_at_arrival[r]), int(self.staged_blocks[r])
        covered = h + max(0, g0 + sb - max(h, g0)) if sb else h  # GPU blocks + staged ones beyond them
        inp = self.input_len_py[r]
        gpu_tokens = min(h * self.bt, inp - 1)
        hit_tokens = min(covered * self.bt, inp - 1)
        self.prefill_tokens[r] = inp - hit_tokens
        self.gpu_hit_tokens += gpu_tokens
        self.slow_hit_tokens += hit_tokens - gpu_tokens
        return True

    def _gpu_holds_hit(self, r: int) -> bool:
        """Is the whole prefix hit found at arrival now in the GPU prefix cache?"""
        o0 = self.offsets_py[r]
        end = int(self.gpu_at_arrival[r] + self.staged_blocks[r])
        return self.hier.gpu_prefix(self.keys[o0:o0 + end]) >= end if self.hier.prefix_cache else False

    def _recompute_is_faster(self, r: int, cid: int, now: float) -> bool:
        """Would recomputing the claim's tokens finish before its copy is ready?  (Holders free
        their capacity at their predicted use times, in that order.)"""
        recompute_s = (int(self.staged_bytes[r]) // self.kvb) / self.model.prefill_tokens_per_s
        done_at = self.transfer_done.get(cid)
        if done_at is not None:
            return bool(done_at - now > recompute_s)
        led = self.ledger
        stage_s = float(np.asarray(led.predicted_ready_seconds([cid]))[0])
        missing = int(self.staged_bytes[r]) - int(led.free_bytes)
        wait = 0.0
        if missing > 0:
            ids = np.asarray(led.open_ids(), dtype=np.int64)
            states = np.asarray(led.state_of(ids))
            holding = (states == STAGING) | (states == READY) | (states == CONSUMED)
            holders = ids[holding]
            frees_at = np.maximum(np.asarray(led.predicted_use_time(holders), dtype=np.float64), now)
            frees_at[states[holding] == CONSUMED] = now
            held = self.staged_bytes[[self.claim_owner[h] for h in holders.tolist()]]
            order = np.argsort(frees_at, kind="stable")
            enough = np.flatnonzero(np.cumsum(held[order]) >= missing)
            wait = float(frees_at[order[enough[0]]]) - now if enough.size else np.inf
        return bool(wait + stage_s > recompute_s)

    def _need(self, cid: int, now: float) -> bool:
        """``ledger.need`` the first time (it records the moment and escalates an unstaged claim);
        after that the claim is PENDING, STAGING or READY and a repeated ``need`` would change
        nothing, so the engine's own record answers: is it ready?"""
        if cid in self.needed:
            return cid in self.ready
        self.needed.add(cid)
        self.need_at[self.claim_owner[cid]] = now
        return bool(self.ledger.need([cid], now=now)[0])

    def _forget(self, cid: int) -> None:
        self.granted.discard(cid)
        self.ready.discard(cid)
        self.needed.discard(cid)

    def _drop_claim(self, r: int, cid: int, now: float) -> None:
        """Release a claim that will not be used (its blocks are then GPU hits or recomputed)."""
        if cid not in self.granted:  # CLAIMED or PENDING
            self.ungranted -= 1
        elif cid not in self.ready:  # STAGING
            self.cancelled.add(cid)  # its copy is in flight: drop it when it completes
        if cid in self.needed and cid not in self.ready:
            self.kv_ready_at[r] = now  # its wait for staging ends here (GPU hit or recomputed)
        self._forget(cid)
        self.ledger.release([cid], now=now)
        self.freed_since_poll = True
        self.claim_owner.pop(cid, None)
        self.staged_bytes[r] = 0
        self.staged_blocks[r] = 0
        self.claim_id[r] = -1

    # ------------------------------------------------------------------ write-through LRU baseline
    def _write_through_load(self, admitted: list[int], now: float) -> float:
        """Seconds to bring the admitted requests' lower-tier hits to the GPU (write-through-lru)."""
        hits = []
        for r in admitted:
            sb = int(self.staged_blocks[r])
            if sb:
                o0 = int(self.offsets[r] + self.gpu_at_arrival[r])
                hits.append(self.ids[o0:o0 + sb])
        return self.fast_lru.load_seconds(hits, now)

    def warn_if_unbounded(self) -> None:
        """One line when the queue grew without bound (a tenth of the requests waiting at once)."""
        n = len(self.arrival_ids)
        if n >= 200 and self.max_waiting > max(50, n // 10):
            warnings.warn(f"kvmm.sim: the queue reached {self.max_waiting} waiting requests of {n}: the offered "
                          "load exceeds capacity, TTFT measures the backlog (lower load=)", QueueGrowthWarning, stacklevel=3)
