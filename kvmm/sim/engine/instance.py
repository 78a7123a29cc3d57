"""One serving instance: the event loop, over a request table, a scheduler, a staging
controller, a step clock and a :class:`~kvmm.sim.hierarchy.Hierarchy`.

What it models (FCFS or two-class priority admission):

* **Arrival**: the prompt's blocks are looked up: the longest prefix held by the GPU prefix
  cache (the pool's ``lookup``) or, block by block after it, by some lower tier.  The part only
  in lower tiers goes to the staging controller (:mod:`kvmm.sim.engine.staging`): a claim, or a
  read in the admitting step for ``write-through-lru``.
* **Advance notice** (``notice_s > 0``, one instance only): a request is *announced*
  ``notice_s`` before it arrives (an agent's next step while its tool call of known duration
  runs): the lookup and the claim happen then, its use predicted at its arrival (refreshed with
  the queue it finds when it arrives); it joins the queue at arrival.  Announced without a
  lower-tier hit it is looked up again at arrival.
* **Steps**: the scheduler (:mod:`kvmm.sim.engine.scheduler`) picks the decodes and prefill
  chunks; the step takes the time to read newly admitted requests' staged KV from the fast tier
  plus the clock's step time (:mod:`kvmm.sim.engine.clock`: the run's latency model on the
  step's tokens and the KV each reads).  The prefix is looked up again at scheduling: GPU blocks
  lost since arrival are recomputed.  After its last prompt token a request offers its blocks to
  every lower tier (the tier's admission policy picks what is written), then decodes
  ``output_length - 1`` tokens, one per step, and frees its blocks into the prefix cache.
* Decode-only stretches with an empty queue are advanced in one jump to the next event (an
  arrival, a transfer, a finish): the same steps, without a Python iteration per token (the
  clock sums their times in closed form as the contexts grow).

Roles (PD disaggregation, :mod:`kvmm.sim.engine.pd`): a ``prefill`` instance hands each
request to a decode instance after its prefill instead of decoding it; a ``decode`` instance
receives requests whose KV has arrived and only decodes them.  Everything is deterministic.
"""

from __future__ import annotations

import heapq
import math
import warnings
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.sim.compression import Compressor
from kvmm.sim.engine.clock import make_clock
from kvmm.sim.engine.requests import HeldBlocks, RequestTable
from kvmm.sim.engine.scheduler import Scheduler
from kvmm.sim.engine.staging import make_staging
from kvmm.sim.engine.stats import InstanceStats
from kvmm.sim.hierarchy import Hierarchy

__all__ = ["Instance", "QueueGrowthWarning", "Colocated", "COLOCATED"]


class QueueGrowthWarning(UserWarning):
    """The waiting queue grew without bound: the offered load exceeds the engine's capacity."""


class Instance:
    """The event loop of one instance.  ``assigned``: the requests it serves (all of the table's
    when None); a cluster's router appends to ``arrival_ids`` / ``arrival_times`` as it routes.
    """

    # class default; False advances a decode-only stretch one step per loop iteration (the
    # every-step loop the benchmarks time as the baseline; same results to float rounding)
    jump_decode_stretches = True

    def __init__(self, cfg, serving, table: RequestTable, ledger_factory, progress, *, record_ops: bool = False,
                 assigned: list[int] | None = None, shared: tuple = (), tier_events=None,
                 key_space: np.ndarray | None = None, index: int = 0, role: Any = None,
                 with_tiers: bool = True, prefix_cache: bool | None = None) -> None:
        self.cfg, self.serving, self.table, self.progress = cfg, serving, table, progress
        self.index = index
        self.role = role if role is not None else COLOCATED
        # lockstep: yield before every step and idle wake-up, so a driver can run many instances in
        # strict time order (PD: a prefill instance's hand-off reads the decode instances' loads)
        self.lockstep = False
        self.idle = False  # paused between steps with nothing to do (a driver may wake it earlier)
        self.handed_off = 0  # requests passed to another instance after their prefill (PD)
        self.arrival_ids: list[int] = list(range(table.n)) if assigned is None else list(assigned)
        self.arrival_times: list[float] = (table.arrival_py if assigned is None
                                           else [table.arrival_py[r] for r in self.arrival_ids])
        # every arrival before this time has been routed (inf: all known, the instance runs alone);
        # the driver moves it and the event loop yields before passing it
        self.horizon = math.inf
        self.waiting: list[int] = []
        self.prefilling: list[int] = []  # admitted, prompt not done yet (chunked prefill)
        self.running: list[int] = []  # decoding
        self.bt = bt = table.block_tokens
        # the lower levels as this instance sees them (a shared level's spec includes its fabric)
        self.levels = (tuple(cfg.tiers) if with_tiers else ()) + tuple(s.level for s in shared)
        if key_space is None and (any(lv.write_back for lv in self.levels) or tier_events is not None):
            key_space = np.unique(table.ids)  # the GPU key mirror's dense ids
        self.kvb = kvb = serving.kv_bytes_per_token
        self.block_bytes = bt * kvb
        self.compressor = None
        if prefix_cache is None and cfg.token_budget is not None:
            prefix_cache = False  # compressed KV is no longer a prefix: nothing to cache
        self.hier = Hierarchy(cfg, self.block_bytes, gpu_kv_bytes=serving.gpu_kv_bytes, block_tokens=bt,
                              with_tiers=with_tiers, record_ops=record_ops, prefix_cache=prefix_cache, shared=shared,
                              events=tier_events, key_space=key_space)
        if cfg.token_budget is not None and with_tiers:
            self.compressor = Compressor(self.hier.pool, cfg.scorer, cfg.token_budget, cfg.repack_interval,
                                         seed=cfg.priority_seed)
        self.role.check_pool_fits(self)
        self.clock = make_clock(serving.latency)
        self.staging = make_staging(cfg, table, self.levels, self.block_bytes, kvb, ledger_factory,
                                    self.clock.prefill_rate_guess(serving.max_num_batched_tokens),
                                    self.clock.prefill_seconds)
        if hasattr(self.staging, "private_levels"):
            # the levels after these are read over a cluster's fabric (a pooled store's own segment is not)
            self.staging.private_levels = len(self.levels) - sum(getattr(s, "over_fabric", True) for s in shared)
        self.scheduler = Scheduler(table, self.staging, budget=serving.max_num_batched_tokens,
                                   max_seqs=serving.max_num_seqs, chunked=serving.chunked_prefill,
                                   threshold=serving.long_prefill_token_threshold, take=lambda r: self.role.take(self, r),
                                   gpu_holds_hit=self._gpu_holds_hit,
                                   transfers_in_flight=lambda: self.staging.next_transfer_time() != math.inf)
        self.stats = InstanceStats()
        self.held = HeldBlocks()  # request -> its GPU block ids (and their total, which a router's view reads)
        self.releases: list[tuple[float, int, int]] = []  # heap: (time, seq, request) whose held blocks go then
        self.decode_context = 0  # KV tokens the running decodes read in their next step (sum)
        self.decode_steps = 0  # decode steps this instance has run (a stretch of k counts k)
        self.finishing: list[tuple[int, int]] = []  # heap of (finish step, request) of the running decodes
        self.step_end = 0.0
        self.events_checked = -math.inf  # events up to this time have been processed
        self.now = 0.0  # the loop's clock where the hierarchy moves blocks (a delayed KV-event stream stamps them)
        self.batch_in_flight = 0
        # prompt tokens the whole-prefill scheduler computes in the step in flight (a router's view counts
        # them as still to do until the step ends; chunked prefills are counted from the scheduler's progress)
        self.prefill_in_flight = 0
        self.next_arrival = 0
        # advance notice (SimConfig.notice_s): requests are looked up and claimed this long before
        # they arrive; 0: at arrival (the announcement stream below is then not used)
        self.notice = float(cfg.notice_s)
        self.next_announce = 0

    # the pieces tests and the results read (kept under their old names)
    @property
    def ledger(self) -> Any:
        return self.staging.ledger

    @property
    def fabric_queue(self) -> Any:
        return getattr(self.staging, "fabric_queue", None)

    @fabric_queue.setter
    def fabric_queue(self, queue: Any) -> None:
        if hasattr(self.staging, "fabric_queue"):
            self.staging.fabric_queue = queue

    def check_pool_fits(self) -> None:
        """Every request's blocks (prompt and output) fit the GPU pool alone."""
        table, n = self.table, self.table.n
        if not n:
            return
        biggest = int((np.diff(table.offsets) + table.extra_blocks).max())
        if self.compressor is not None:
            biggest = max([self.compressor.peak_blocks(table.input_len_py[r], table.output_len_py[r])
                           for r in range(n)] or [0])
        if biggest > self.hier.num_blocks:
            raise BadInputError(f"a request needs {biggest} blocks of {self.block_bytes} bytes but the GPU pool holds "
                                f"{self.hier.num_blocks} (gpu_kv_bytes={self.serving.gpu_kv_bytes}); expected a "
                                "larger gpu_kv_bytes")

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
        idle until something is routed to it); the driver resumes it once they are.
        Returns the end time.  Alone, with ``horizon`` inf, it never yields."""
        self.table.copy_read_only_columns()  # a caller may have set them after construction
        waiting, prefilling, running = self.waiting, self.prefilling, self.running
        staging, clock, stats, scheduler = self.staging, self.clock, self.stats, self.scheduler
        self.next_arrival = self.next_announce = 0
        now = 0.0
        done = 0
        role = self.role
        hooks = role is not COLOCATED  # a PD role watches steps start; a colocated instance needs no call
        if hooks:
            schedule = lambda: role.schedule(self, now)  # noqa: E731 (reads the loop's now)
        else:
            def schedule():
                return scheduler.schedule(waiting, prefilling, len(running), now)
        needs_arrays = clock.needs_arrays
        step = None if needs_arrays else clock.step
        woken = False  # a lockstep driver just resumed it at ``now``: it acts without pausing again
        while done + self.handed_off < len(self.arrival_ids) or self.horizon != math.inf:
            if (now >= self.horizon or self.lockstep) and not woken:
                self.idle = True  # between steps: a driver may hand it work at this time
                yield now
                self.idle = False
                self.events_checked = -math.inf  # a driver may have routed requests here meanwhile
            woken = False
            if now > self.events_checked:  # the step that ended at now has processed its events
                self._events_until(now)
            if staging.ungranted:
                staging.poll(now)
            self.now = now
            plan = schedule()
            if not plan.chunks and not running:
                nxt = self._next_event_time()
                if nxt is None and self.horizon == math.inf:
                    if done + self.handed_off >= len(self.arrival_ids):
                        break
                    raise RuntimeError("simulator stalled: requests wait but no event is pending")  # pragma: no cover
                if nxt is None or self.lockstep:
                    self.idle = True  # idle until a request is routed here (or the driver's time)
                    woke = yield (math.inf if nxt is None else nxt)
                    self.idle = False
                    self.events_checked = -math.inf
                    if woke is not None:
                        now = max(now, woke)
                        woken = self.lockstep
                    continue
                now = max(now, nxt)
                continue
            if not plan.chunks and not prefilling and (not waiting or self._waiting_on_events_only()):
                # decode-only: jump over the steps before the next event or finish
                run = np.asarray(running, dtype=np.int64)
                k, seconds = self._stretch_steps(run, now)
                if hooks:
                    role.stretch_started(self, run, k)
                if now + seconds >= self.horizon or self.lockstep:
                    yield now + seconds
                now, done = self._decode_stretch(running, waiting, run, k, seconds, now, done)
                continue
            admitted = plan.admitted
            load_s = staging.load_seconds(admitted, now) if admitted else 0.0
            if self.compressor is not None and running:
                self.compressor.compress_due(running, 1)
                self.decode_context = self.compressor.live_total(running)
            if needs_arrays:
                prefill_s, decode_s = clock.step_arrays([c[1] for c in plan.chunks], [c[2] for c in plan.chunks],
                                                        self._decode_contexts(running))
            else:
                prefill_s, decode_s = step(plan.prefill_tokens, plan.pairs, plan.prefill_context, len(running),
                                           self.decode_context, len(plan.chunks) + len(running))
            dt = load_s + prefill_s
            stats.prefill_busy_s += dt
            if running:
                dt += decode_s
                stats.decode_busy_s += decode_s
            self.step_end = now + dt
            self.batch_in_flight = n_batch = len(running) + len(prefilling) + (0 if scheduler.chunked else len(admitted))
            self.prefill_in_flight = 0 if scheduler.chunked else plan.prefill_tokens
            if waiting and staging.open_claims:
                staging.update_work_ahead(waiting, scheduler.budget, scheduler.max_seqs - n_batch, scheduler.max_seqs,
                                          now, dt)
            if hooks:
                role.step_started(self, plan, now, now + dt)
            claims_done = staging.release_read(admitted, now) if admitted else None
            if claims_done:
                if now + load_s >= self.horizon:
                    yield now + load_s
                self._events_until(now + load_s)
                staging.release(claims_done, now + load_s)
            if now + dt >= self.horizon or self.lockstep:
                yield now + dt
            self._events_until(now + dt)
            now += dt
            self.now = now
            stats.steps += 1
            if plan.prefill_tokens:
                staging.observe_progress(plan.prefill_tokens, dt)
            finished = self._decode(running, 1, now) if running else 0
            for r in scheduler.advance(plan, prefilling):
                finished += role.prefill_done(self, r, now) if hooks else self.prefill_done(r, now)
            stats.max_running = max(stats.max_running, len(running))
            done += finished
            if self.progress is not None and finished:
                self.progress(finished)
        staging.close(now)
        return now

    def prefill_done(self, r: int, now: float) -> int:
        """``r``'s last prompt token was computed by the step ending ``now``: its first token;
        its blocks are offered to the lower tiers; it decodes next (or is done).  Returns 1 when
        it finished."""
        table = self.table
        table.first_token[r] = now
        table.remaining[r] = table.output_len_py[r] - 1
        keys, ids = table.blocks(r)
        self.hier.offer(ids, int(table.gpu_at_take[r]))
        if self.compressor is not None:
            self.compressor.after_prefill(r)  # prefill-time compression to the budget
        self.staging.after_prefill(r, ids, now)
        if table.remaining[r] <= 0:
            return self.finish_requests([r], now)
        self.join_decode(r)
        return 0

    def join_decode(self, r: int) -> None:
        """``r`` decodes from the next step: its ``remaining`` tokens, reading its prompt's KV
        first (one more token each step)."""
        table = self.table
        finish_step = self.decode_steps + int(table.remaining[r])
        table.finish_step[r] = finish_step
        heapq.heappush(self.finishing, (finish_step, r))
        self.running.append(r)
        self.decode_context += table.input_len_py[r]

    def _waiting_on_events_only(self) -> bool:
        """Can the queue's requests wait out a decode-only stretch?  With chunked prefill, a queue
        that admitted nothing this step admits nothing before a finish (room, GPU blocks) or an
        event (an arrival, a copy completing) when no claim awaits a grant (a controller tick
        could grant it) and no recompute fallback is weighed (it changes with time): the
        stretch stops at both, so jumping it schedules exactly what single steps would.  The
        whole-prefill scheduler keeps single steps here (its results are pinned)."""
        if not self.scheduler.chunked or self.staging.ungranted:
            return False
        return not (self.cfg.recompute_fallback and self.staging.open_claims)

    def _stretch_steps(self, run: np.ndarray, now: float) -> tuple[int, float]:
        """Decode steps of a decode-only stretch: up to the first finish, the next event or
        the routing horizon (a request may be routed here then), at least one."""
        k = self.finishing[0][0] - self.decode_steps if Instance.jump_decode_stretches else 1
        if self.compressor is not None:
            k = min(k, self.cfg.repack_interval)
        nxt = self._next_event_time()
        if self.horizon != math.inf and not self.lockstep:  # a request may be routed here at the horizon
            nxt = self.horizon if nxt is None else min(nxt, self.horizon)
        until = math.inf if nxt is None else nxt - now
        clock, running = self.clock, self.running
        if self.compressor is None:
            if clock.needs_arrays:
                return clock.stretch_arrays(self._decode_contexts(running), k, until)
            return clock.stretch(run.shape[0], self.decode_context, k, until)
        # compressed: the stretch's length comes first (from the contexts before this stretch's
        # compressions), then the requests its k tokens would take past budget + interval are
        # compressed (as the decode itself would do), and the k steps are timed on what is left
        if clock.needs_arrays:
            k, _ = clock.stretch_arrays(self._decode_contexts(running), k, until)
            self.compressor.compress_due(running, k)
            return clock.stretch_arrays(self._decode_contexts(running), k, math.inf)
        k, _ = clock.stretch(run.shape[0], self.compressor.live_total(running), k, until)
        self.compressor.compress_due(running, k)
        self.decode_context = self.compressor.live_total(running)
        return clock.stretch(run.shape[0], self.decode_context, k, math.inf)

    def _decode_contexts(self, running: list[int]) -> np.ndarray:
        """Each running decode's KV tokens read by its next step (live tokens when compressed)."""
        if self.compressor is not None:
            return self.compressor.live_counts(running)
        table = self.table
        run = np.asarray(running, dtype=np.int64)
        return table.input_len[run] + table.output_len[run] - (table.finish_step[run] - self.decode_steps) - 1

    def _decode_stretch(self, running: list[int], waiting: list[int], run: np.ndarray, k: int, seconds: float,
                        now: float, done: int) -> tuple[float, int]:
        self.step_end = now + seconds
        self.stats.decode_busy_s += seconds
        self.batch_in_flight = len(running)
        self.prefill_in_flight = 0
        self._events_until(now + seconds)
        now += seconds
        self.stats.steps += k
        finished = self._decode(running, k, now)
        if finished:
            done += finished
            if self.progress is not None:
                self.progress(finished)
        return now, done

    def _decode(self, running: list[int], k: int, now: float) -> int:
        """``k`` decode tokens for each running request; those that finish leave ``running``
        (in place, the others keep their order) and free their blocks, in running order.
        Returns how many finished.  Runtime complexity: O(1) when none finishes, else O(batch +
        finished x log batch)."""
        if self.compressor is not None:
            self.compressor.grow(running, k)
        self.decode_steps += k
        self.decode_context += k * len(running)
        finishing = self.finishing
        if finishing[0][0] > self.decode_steps:
            return 0
        done = set()
        while finishing and finishing[0][0] <= self.decode_steps:
            done.add(heapq.heappop(finishing)[1])
        gone = [r for r in running if r in done]
        running[:] = [r for r in running if r not in done]
        table = self.table
        self.decode_context -= sum(table.input_len_py[r] + table.output_len_py[r] - 1 for r in gone)
        return self.finish_requests(gone, now)

    def finish_requests(self, rs: list[int], now: float) -> int:
        """``rs`` are done at ``now``: their blocks go back to the pool (into the prefix cache)."""
        for r in rs:
            self.table.finish[r] = now
            if self.compressor is not None:
                self.compressor.finish(r)
            else:
                self.hier.release(self.held.pop(r))
        return len(rs)

    def hold_until(self, r: int, t: float) -> None:
        """``r``'s blocks stay held (its KV is being sent to another instance) until ``t``."""
        heapq.heappush(self.releases, (t, r, r))  # a request is held once: its id breaks ties

    def _release_handed_off(self) -> None:
        _, _, r = heapq.heappop(self.releases)
        self.hier.release(self.held.pop(r))

    def release_handed_off_until(self, t: float) -> None:
        """Free the blocks of every request whose KV has left by ``t`` (a driver reading the pool's
        use while this instance is mid-step)."""
        while self.releases and self.releases[0][0] <= t:
            self._release_handed_off()

    # ------------------------------------------------------------------ events
    def _events_until(self, t: float) -> None:
        """Process staging completions, arrivals and controller polls with time <= t, in time order.
        (Nothing a step's end does adds an event at or before its end, so the loop skips a second
        call for the same time: ``events_checked``.)"""
        self.events_checked = t
        staging = self.staging
        arrival = self.arrival_times
        while True:
            na = self.next_arrival
            ta = arrival[na] if na < len(arrival) else math.inf
            tt = staging.next_transfer_time()
            tp = staging.next_tick_time()
            nn = self.next_announce
            tn = max(arrival[nn] - self.notice, 0.0) if self.notice and nn < len(arrival) else math.inf
            if self.releases and self.releases[0][0] <= t and self.releases[0][0] <= min(ta, tt, tp, tn):
                self._release_handed_off()
                continue
            if tn <= t and tn <= ta and tn <= tt and tn <= tp:  # known before what happens then
                self._announce(self.arrival_ids[nn], tn)
                self.next_announce = nn + 1
                continue
            if ta > t and tt > t and tp > t:
                return
            if tt <= ta and tt <= tp:
                staging.complete_next_transfer()
            elif ta <= tp:
                self.role.arrive(self, self.arrival_ids[na])
                self.next_arrival = na + 1
            else:
                staging.tick(tp, min(ta, tt, tn), t)

    def _next_event_time(self) -> float | None:
        na = self.next_arrival
        arrival = self.arrival_times
        t = min(arrival[na] if na < len(arrival) else math.inf, self.staging.next_transfer_time(),
                self.releases[0][0] if self.releases else math.inf)
        if self.notice and self.next_announce < len(arrival):
            t = min(t, max(arrival[self.next_announce] - self.notice, 0.0))
        return None if t == math.inf else float(t)

    def arrive(self, r: int) -> None:
        table, waiting = self.table, self.waiting
        t = table.arrival_py[r]
        if self.notice and table.claim_id[r] >= 0:  # claimed at its announcement: it only joins the queue now
            pos = self._queue_position(r)
            waiting.insert(pos, r)
            self.stats.max_waiting = max(self.stats.max_waiting, len(waiting))
            # its own claim's prediction (made for an empty queue) and those of the requests it passed
            self._update_work_ahead(t)
            return
        self._look_up_and_claim(r, t, None)

    def _announce(self, r: int, t: float) -> None:
        """``r`` is known at ``t`` (``notice_s`` before it arrives): look up its prefix and claim
        its lower-tier hit now, with its use predicted at its arrival (the queue it will find is
        not known yet; :meth:`arrive` refreshes the prediction).  Without a lower-tier hit now
        (its context still on the GPU, or not written yet) it is looked up again at arrival."""
        if self.staging.has_claims:  # nothing to stage early: write-through reads its hits in the step
            self._look_up_and_claim(r, t, self.table.arrival_py[r] - t)

    def _queue_position(self, r: int) -> int:
        """Where ``r`` joins the queue: behind every request of its class or a higher one."""
        waiting = self.waiting
        pos = len(waiting)
        priority = self.table.priority_py
        cls = priority[r]
        while pos > 0 and priority[waiting[pos - 1]] > cls:
            pos -= 1
        return pos

    def _update_work_ahead(self, t: float) -> None:
        scheduler = self.scheduler
        self.staging.update_work_ahead(self.waiting, scheduler.budget, scheduler.max_seqs - self.batch_in_flight,
                                       scheduler.max_seqs, t, max(self.step_end - t, 0.0))

    def _look_up_and_claim(self, r: int, t: float, until_arrival: float | None) -> None:
        """Find ``r``'s prefix hits and claim its lower-tier part.  At its arrival
        (``until_arrival`` None) it also joins the queue; announced ahead, it does not (yet)."""
        table, waiting = self.table, self.waiting
        keys, ids = table.blocks(r)
        gpu, src = self.hier.lookup(keys, ids)
        table.gpu_at_arrival[r] = gpu
        inp = table.input_len_py[r]
        bt = self.bt
        gpu_tokens = min(gpu * bt, inp - 1)  # the last prompt token is always computed
        hit_tokens = min((gpu + src.shape[0]) * bt, inp - 1)
        slow_tokens = hit_tokens - gpu_tokens
        table.prefill_tokens[r] = inp - hit_tokens
        pos = self._queue_position(r)
        if until_arrival is None:
            waiting.insert(pos, r)
            self.stats.max_waiting = max(self.stats.max_waiting, len(waiting))
            if pos < len(waiting) - 1 and (table.claim_id[waiting[pos + 1:]] >= 0).any():
                self._update_work_ahead(t)
        if slow_tokens <= 0:
            return
        queued = float(table.prefill_tokens[waiting[:pos]].sum()) if pos > 0 else 0.0
        budget = self.scheduler.budget
        ahead = (queued // budget) * budget
        delay = max(self.step_end - t, 0.0)
        if until_arrival is not None:
            ahead, delay = 0.0, float(until_arrival)
        self.staging.claim(r, src, slow_tokens, t, ahead, delay)

    # ------------------------------------------------------------------ GPU blocks
    def take(self, r: int) -> bool:
        """Give ``r`` its GPU blocks and fix its prefill from the GPU hits found now."""
        table = self.table
        if self.compressor is not None:  # the request's KV lives in the token table (no prefix cache)
            if not self.compressor.start(r, table.input_len_py[r], table.output_len_py[r]):
                return False
            h = 0
        else:
            keys, _ = table.blocks(r)
            got = self.hier.take(keys, table.extra_blocks_py[r])
            if got is None:
                return False
            self.held[r] = got[0]
            h = got[1]
        table.gpu_at_take[r] = h
        g0, sb = int(table.gpu_at_arrival[r]), int(table.staged_blocks[r])
        covered = h + max(0, g0 + sb - max(h, g0)) if sb else h  # GPU blocks + staged ones beyond them
        inp = table.input_len_py[r]
        gpu_tokens = min(h * self.bt, inp - 1)
        hit_tokens = min(covered * self.bt, inp - 1)
        table.prefill_tokens[r] = inp - hit_tokens
        self.stats.gpu_hit_tokens += gpu_tokens
        self.stats.slow_hit_tokens += hit_tokens - gpu_tokens
        return True

    def _gpu_holds_hit(self, r: int) -> bool:
        """Is the whole prefix hit found at arrival now in the GPU prefix cache?"""
        table = self.table
        o0 = table.offsets_py[r]
        end = int(table.gpu_at_arrival[r] + table.staged_blocks[r])
        return self.hier.gpu_prefix(table.keys[o0:o0 + end]) >= end if self.hier.prefix_cache else False

    def warn_if_unbounded(self) -> None:
        """One line when the queue grew without bound (a tenth of the requests waiting at once)."""
        n = len(self.arrival_ids)
        if n >= 200 and self.stats.max_waiting > max(50, n // 10):
            warnings.warn(f"kvmm.sim: the queue reached {self.stats.max_waiting} waiting requests of {n}: the offered "
                          "load exceeds capacity, TTFT measures the backlog (lower load=)", QueueGrowthWarning, stacklevel=3)


class Colocated:
    """The role of an instance that prefills and decodes its requests (the default).  A role is
    the seam where PD disaggregation (:mod:`kvmm.sim.engine.pd`) changes what an instance does
    with a request: how it arrives, takes its blocks, is scheduled, and ends its prefill."""

    def arrive(self, inst: Instance, r: int) -> None:
        inst.arrive(r)

    def take(self, inst: Instance, r: int) -> bool:
        return inst.take(r)

    def schedule(self, inst: Instance, now: float):
        return inst.scheduler.schedule(inst.waiting, inst.prefilling, len(inst.running), now)

    def prefill_done(self, inst: Instance, r: int, now: float) -> int:
        return inst.prefill_done(r, now)

    def step_started(self, inst: Instance, plan, now: float, end: float) -> None:
        return None

    def stretch_started(self, inst: Instance, run: np.ndarray, k: int) -> None:
        return None

    def check_pool_fits(self, inst: Instance) -> None:
        inst.check_pool_fits()


COLOCATED = Colocated()
