"""An event-driven serving simulator: trace in, throughput / TTFT / protected byte-time out.

What it models (one serving instance, continuous batching, FCFS or two-class priority admission):

* **Requests** arrive at their trace timestamps (optionally stretched by ``time_scale``) and
  wait in a FCFS queue (with ``high_priority_share``, a seeded share of them is high priority
  and goes ahead of every waiting normal request).  A scheduler step admits queued requests
  while the batch has room (``max_batch``) and the step's prefill budget
  (``max_prefill_tokens``) lasts; a request whose staged data is not ready is *skipped* (it
  keeps a batch slot but takes no prefill budget, as vLLM does for asynchronously loaded KV),
  or, with ``recompute_fallback``, recomputes its hit when that is faster than waiting.  A step takes prefill time + the time to read staged KV from the
  fast tier into the GPU + one decode step of the running batch.  A request's first token
  comes at the end of its prefill step (TTFT); it then decodes ``output_length - 1`` tokens.
* **Tiers**: the prompt's 512-token blocks are looked up at arrival.  The longest prefix found
  in the GPU prefix cache or the slow tier is a hit; the part only in the slow tier (SSD /
  CXL-attached flash) must be **staged** into the protected fast tier before the prefill can
  read it.  Both caches are LRU over blocks with capacities from their :class:`TierSpec`; a
  request's blocks enter both after its prefill (write-through, off the critical path).  The
  scheduler looks the prefix up again when it schedules the request (as vLLM checks its GPU
  prefix cache then): if an earlier request with the same context has put it on the GPU in
  the meantime, the claim is released unused (``claims_cancelled``; a copy already in flight
  still occupies the slow tier's channel, capacity already held counts in the byte-time).
* **Staging**: every slow-tier hit becomes a :class:`CommitmentLedger` claim; the chosen
  :class:`StagingPolicy` decides when it asks for capacity: on-demand when the request is
  scheduled, immediate at arrival (granted FIFO), timely when its estimates say so (EDF).
  Granted transfers share the slow tier's read channel FIFO at ``stage_efficiency`` x its
  nominal bandwidth (the ledger only knows the nominal figure and learns the difference).
  Protected capacity is held from commit until the step that uses it has read the data into
  the GPU (the step starts with that read).
* The ledger learns the progress rate from prefill tokens per second of prefill steps.  A
  queued request's time until use is the rest of the step in flight (known exactly) plus the
  prefill tokens of the later steps that come before its own (converted at the learned rate).

Everything is deterministic: same config -> same result, whichever process runs it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from kvmm._validate import as_count, as_fraction, as_positive_float
from kvmm.errors import BadInputError
from kvmm.policies.ledger import CLAIMED, CONSUMED, PENDING, READY, STAGING, CommitmentLedger
from kvmm.policies.staging import STAGING_POLICIES, make_staging_policy
from kvmm.sim.models import ModelSpec, model as resolve_model
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import TierSpec, preset
from kvmm.traces.mooncake import MOONCAKE_BLOCK_TOKENS, MooncakeTrace, load_mooncake

__all__ = ["SimConfig", "SimResult", "simulate", "GiB"]

GiB = 1 << 30


@dataclass(frozen=True)
class SimConfig:
    """One simulation: workload, model, tiers, staging policy.  Picklable (for sweeps).

    ``workload`` is a bundled trace name (``"conversation"``, ``"synthetic"``), a path to a
    Mooncake JSONL file, a :class:`Workload` (seeded generator) or a :class:`MooncakeTrace`.
    """

    workload: Any = "conversation"
    max_requests: int | None = None  # replay only the first N requests
    time_scale: float = 1.0  # multiply inter-arrival times (> 1 lightens the load)
    model: Any = "llama3-8b"  # name in MODELS or a ModelSpec
    policy: str = "timely"  # on-demand | immediate | timely
    fast_tier: TierSpec = field(default_factory=lambda: preset("cxl", 100 * GiB))  # protected staging tier
    slow_tier: TierSpec = field(default_factory=lambda: preset("nvme"))  # where reusable KV lives
    gpu_cache_bytes: int = 8 * GiB  # GPU prefix cache (beyond running requests' KV)
    stage_efficiency: float = 0.85  # achieved / nominal slow-tier bandwidth when staging
    margin_s: float = 0.01  # ledger trigger slack
    poll_interval_s: float = 0.005  # the staging controller's clock (it also polls every step)
    initial_rate: float | None = None  # ledger's first progress-rate guess (default: model prefill rate)
    recompute_fallback: bool = True  # recompute a hit whose staging would finish later than recomputing it
    high_priority_share: float = 0.0  # share of requests in the high-priority class (they jump the queue)
    priority_seed: int = 0  # seeds the draw of each request's class
    label: str = ""

    def __post_init__(self) -> None:
        if self.max_requests is not None:
            as_count(self.max_requests, "max_requests", minimum=1)
        as_positive_float(self.time_scale, "time_scale")
        if self.policy not in STAGING_POLICIES:
            raise BadInputError(f"unknown staging policy {self.policy!r}; expected one of {sorted(STAGING_POLICIES)}")
        resolve_model(self.model)
        for name in ("fast_tier", "slow_tier"):
            if not isinstance(getattr(self, name), TierSpec):
                raise BadInputError(f"{name} must be a TierSpec (kvmm.tiers.preset(...)), got {type(getattr(self, name)).__name__}")
        as_count(self.gpu_cache_bytes, "gpu_cache_bytes")
        as_positive_float(self.stage_efficiency, "stage_efficiency")
        as_positive_float(self.margin_s, "margin_s", allow_zero=True)
        as_positive_float(self.poll_interval_s, "poll_interval_s")
        if self.initial_rate is not None:
            as_positive_float(self.initial_rate, "initial_rate")
        as_fraction(self.high_priority_share, "high_priority_share", include_zero=True)
        as_count(self.priority_seed, "priority_seed")
        if not isinstance(self.recompute_fallback, bool):
            raise BadInputError(f"recompute_fallback must be a bool, got {self.recompute_fallback!r}")
        if not isinstance(self.workload, (str, Workload, MooncakeTrace)) and not hasattr(self.workload, "__fspath__"):
            raise BadInputError(f"workload must be a trace name, a path, a Workload or a MooncakeTrace, got {type(self.workload).__name__}")


@dataclass(frozen=True)
class SimResult:
    """Metrics of one run (times in seconds, sizes in bytes)."""

    label: str
    policy: str
    model: str
    requests: int
    duration_s: float
    output_tokens_per_s: float
    ttft_p50: float
    ttft_p95: float
    ttft_p99: float
    ttft_mean: float
    ttft_p95_high_priority: float  # p95 TTFT of the high-priority class (0.0 when it is empty)
    high_priority_requests: int
    protected_byte_seconds: float
    protected_byte_seconds_per_request: float
    peak_protected_bytes: int
    fast_tier_bytes: int
    claims: int
    ready_in_time: int
    ready_late: int
    claims_cancelled: int  # claims released unused: the prefix was in the GPU cache by scheduling time
    claims_recomputed: int  # claims released unused: recomputing the hit was faster than waiting for it
    slow_hit_token_share: float  # share of prompt tokens staged from the slow tier
    gpu_hit_token_share: float
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def simulate(config: SimConfig, *, progress: Callable[[int], None] | None = None,
             ledger_factory: Callable[..., Any] | None = None) -> SimResult:
    """Run one simulation; ``progress(n)`` is called with the number of newly finished requests.

    ``ledger_factory(capacity_bytes, sources, **kw)`` replaces :class:`CommitmentLedger`
    (e.g. the plain-Python reference, for benchmarks); its ledger must speak the same API,
    ``stats["ready_in_time"]`` and ``stats["ready_late"]`` included.
    Runtime complexity: O(steps x (queue + open claims) + blocks).
    """
    if not isinstance(config, SimConfig):
        raise BadInputError(f"simulate expects a SimConfig, got {type(config).__name__}")
    trace = _resolve_trace(config.workload, config.max_requests)
    return _Engine(config, trace, ledger_factory or CommitmentLedger, progress).run()


class _Engine:
    """The event loop.  Per-request state is structure-of-arrays indexed by request."""

    def __init__(self, cfg: SimConfig, trace: MooncakeTrace, ledger_factory, progress) -> None:
        self.cfg = cfg
        self.model: ModelSpec = resolve_model(cfg.model)
        self.progress = progress
        n = trace.num_requests
        self.n = n
        self.trace = trace
        self.arrival = trace.timestamp_ms.astype(np.float64) / 1000.0 * cfg.time_scale
        self.arrival -= self.arrival[0] if n else 0.0
        self.input_len = np.maximum(trace.input_length, 1)
        self.output_len = np.maximum(trace.output_length, 1)
        self.prefill_tokens = np.zeros(n, dtype=np.int64)
        self.staged_bytes = np.zeros(n, dtype=np.int64)
        self.claim_id = np.full(n, -1, dtype=np.int64)
        self.claim_owner: dict[int, int] = {}  # claim id -> request (inverse of claim_id)
        self.hit_blocks = np.zeros(n, dtype=np.int64)  # blocks of the prefix hit found at arrival
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.remaining = np.zeros(n, dtype=np.int64)
        # 0 = high priority, 1 = normal: the queue is ordered by (class, arrival)
        draw = np.random.default_rng(cfg.priority_seed).random(n)
        self.priority_class = np.where(draw < cfg.high_priority_share, 0, 1).astype(np.int8)
        self.gpu_hit_tokens = 0
        self.slow_hit_tokens = 0

        kvb = self.model.kv_bytes_per_token
        self.block_bytes = MOONCAKE_BLOCK_TOKENS * kvb
        self.gpu_cache: OrderedDict = OrderedDict()
        self.gpu_cache_blocks = cfg.gpu_cache_bytes // self.block_bytes
        self.slow_cache: OrderedDict = OrderedDict()
        self.slow_cache_blocks = cfg.slow_tier.capacity_bytes // self.block_bytes

        self.ledger = ledger_factory(
            cfg.fast_tier.capacity_bytes, [cfg.slow_tier], margin_s=cfg.margin_s,
            initial_rate=cfg.initial_rate or self.model.prefill_tokens_per_s)
        self.policy = make_staging_policy(cfg.policy, self.ledger)
        self.grant_on_claim = cfg.policy == "immediate"
        self.stage_bw = min(cfg.slow_tier.read_bandwidth * cfg.stage_efficiency, cfg.fast_tier.write_bandwidth)
        self.channel_free_at = 0.0
        self.transfers: list[tuple[float, int, int]] = []  # heap of (done time, seq, claim id)
        self.cancelled: set[int] = set()  # claims released while their transfer was in flight
        self.claims_cancelled = 0
        self.claims_recomputed = 0
        self.transfer_done: dict[int, float] = {}  # claim id -> when its copy completes (STAGING claims)
        self.claims_made = 0
        self.transfer_seq = 0
        self.step_end = 0.0  # end of the engine step in flight (a known delay for queued claims)
        self.batch_in_flight = 0  # sequences in the step in flight (decoding + prefilling)
        self.ungranted = 0  # claims not yet committed: the controller's timer runs while any exist
        self.next_poll = 0.0

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        cfg, m, ledger = self.cfg, self.model, self.ledger
        waiting: list[int] = []  # FCFS queue of request indices
        running: list[int] = []  # requests past prefill, decoding
        next_arrival = 0
        now = 0.0
        steps = 0
        done = 0
        while done < self.n:
            # 1. events up to now, in time order, each at its own time
            next_arrival = self._events_until(now, next_arrival, waiting)
            # 2. scheduler step at `now`: due commitments, admission
            self._start_transfers(self.policy.due(now), now)
            admitted = self._admit(waiting, len(running), now)
            if not admitted and not running:
                nxt = self._next_event_time(next_arrival)
                if nxt is None:
                    raise RuntimeError("simulator stalled: requests wait but no event is pending")  # pragma: no cover
                now = max(now, nxt)
                continue
            # 3. one engine step
            prefill = int(self.prefill_tokens[admitted].sum()) if admitted else 0
            load_bytes = int(self.staged_bytes[admitted].sum()) if admitted else 0
            # the step first reads the staged KV from the fast tier into the GPU, then computes
            load_s = load_bytes / cfg.fast_tier.read_bandwidth + (cfg.fast_tier.latency_s if load_bytes else 0.0)
            dt = load_s + prefill / m.prefill_tokens_per_s
            if running:
                dt += m.decode_step_seconds(len(running))
            self.step_end = now + dt
            self.batch_in_flight = len(running) + len(admitted)
            if waiting:
                # progress estimates: the queue waits for this step (known length), then drains
                # step by step at the learned rate
                self._update_work_ahead(waiting, len(running) + len(admitted), now, dt)
            claims_done = [int(self.claim_id[r]) for r in admitted if self.claim_id[r] >= 0]
            if claims_done:
                # the data is in GPU memory once loaded: its protected capacity is released then
                next_arrival = self._events_until(now + load_s, next_arrival, waiting)
                ledger.release(claims_done, now=now + load_s)
            # events during the step (staging completions, arrivals, polls) happen at their own times
            next_arrival = self._events_until(now + dt, next_arrival, waiting)
            now += dt
            steps += 1
            if prefill:
                ledger.observe_progress(prefill, dt)
            finished_now = 0
            # decode: every running request gains a token
            still = []
            for r in running:
                self.remaining[r] -= 1
                if self.remaining[r] <= 0:
                    self.finish[r] = now
                    finished_now += 1
                else:
                    still.append(r)
            running = still
            # prefill done: first token, blocks cached
            for r in admitted:
                self.first_token[r] = now
                self.remaining[r] = self.output_len[r] - 1
                self._cache_blocks(r)
                if self.remaining[r] <= 0:
                    self.finish[r] = now
                    finished_now += 1
                else:
                    running.append(r)
            done += finished_now
            if self.progress is not None and finished_now:
                self.progress(finished_now)
        return self._result(now, steps)

    # ------------------------------------------------------------------ pieces
    def _events_until(self, t: float, next_arrival: int, waiting: list[int]) -> int:
        """Process staging completions, arrivals and controller polls with time <= t, in time order."""
        transfers = self.transfers
        while True:
            ta = self.arrival[next_arrival] if next_arrival < self.n else np.inf
            tt = transfers[0][0] if transfers else np.inf
            tp = self.next_poll if self.ungranted > 0 else np.inf
            if min(ta, tt, tp) > t:
                return next_arrival
            if tt <= ta and tt <= tp:
                done_at, _, cid = heapq.heappop(transfers)
                self.transfer_done.pop(cid, None)
                if cid in self.cancelled:  # the copy ran (the channel was busy) but nobody waits for it
                    self.cancelled.discard(cid)
                else:
                    self.ledger.mark_ready([cid], now=done_at)
            elif ta <= tp:
                self._arrive(next_arrival, waiting)
                next_arrival += 1
            else:
                self._start_transfers(self.policy.due(tp), tp)
                self.next_poll = tp + self.cfg.poll_interval_s

    def _next_event_time(self, next_arrival: int) -> float | None:
        ta = self.arrival[next_arrival] if next_arrival < self.n else np.inf
        tt = self.transfers[0][0] if self.transfers else np.inf
        t = min(ta, tt)
        return None if t == np.inf else float(t)

    def _arrive(self, r: int, waiting: list[int]) -> None:
        t = float(self.arrival[r])
        blocks = self.trace.blocks_of(r)
        bt = MOONCAKE_BLOCK_TOKENS
        gpu_hit = 0  # blocks of the hit prefix found in the GPU cache
        slow_hit = 0  # blocks of the hit prefix found only in the slow tier
        for b in blocks.tolist():
            if b in self.gpu_cache:
                gpu_hit += 1
            elif b in self.slow_cache:
                slow_hit += 1
            else:
                break
        hit_blocks = gpu_hit + slow_hit
        self.hit_blocks[r] = hit_blocks
        inp = int(self.input_len[r])
        hit_tokens = min(hit_blocks * bt, inp - 1)  # the last prompt token is always computed
        slow_tokens = hit_tokens - min(gpu_hit * bt, hit_tokens)
        self.gpu_hit_tokens += hit_tokens - slow_tokens
        self.slow_hit_tokens += slow_tokens
        self.prefill_tokens[r] = inp - hit_tokens
        # priority scheduling (vLLM's --scheduling-policy priority, without preemption of running
        # requests): a request goes behind every waiting request of its class or a higher one
        pos = len(waiting)
        cls = self.priority_class[r]
        while pos > 0 and self.priority_class[waiting[pos - 1]] > cls:
            pos -= 1
        waiting.insert(pos, r)
        if pos < len(waiting) - 1 and (self.claim_id[waiting[pos + 1:]] >= 0).any():
            # it jumped the queue: the claims behind it will be used later than predicted
            self._update_work_ahead(waiting, self.batch_in_flight, t, max(self.step_end - t, 0.0))
        if slow_tokens > 0:
            nbytes = slow_tokens * self.model.kv_bytes_per_token
            nbytes = min(nbytes, self.ledger.capacity_bytes)  # a hit larger than the tier is staged in part
            if nbytes > 0:
                self.staged_bytes[r] = nbytes
                queued = float(self.prefill_tokens[waiting[:pos]].sum()) if pos > 0 else 0.0
                budget = self.model.max_prefill_tokens
                ahead = (queued // budget) * budget  # refined at the next step (_update_work_ahead)
                delay = max(self.step_end - t, 0.0)  # the rest of the step in flight comes first
                cid = self.ledger.claim(r, None, nbytes, now=t, work_ahead=ahead, delay_s=delay)
                self.claim_id[r] = cid
                self.claim_owner[cid] = r
                self.claims_made += 1
                if self.ungranted == 0 or self.next_poll < t:
                    self.next_poll = t + self.cfg.poll_interval_s
                self.ungranted += 1
                self.policy.on_claim(cid, t)
                if self.grant_on_claim:
                    # immediate staging starts the copy when the hit is found, not at the next step
                    self._start_transfers(self.policy.due(t), t)
            if nbytes < slow_tokens * self.model.kv_bytes_per_token:
                # the part that does not fit is recomputed
                extra = slow_tokens - nbytes // self.model.kv_bytes_per_token
                self.prefill_tokens[r] += extra
                self.slow_hit_tokens -= extra

    def _update_work_ahead(self, waiting: list[int], n_running: int, now: float, step_s: float) -> None:
        """Time until each queued claim's use = ``step_s`` (the step starting now, known) +
        prefill tokens of the *later steps* before its own (at the ledger's learned rate).

        The queue drains a step at a time (up to ``max_prefill_tokens`` and the free batch
        room), so requests packed into the next step wait only for the current one even if
        other requests precede them in the queue.
        """
        w = np.asarray(waiting, dtype=np.int64)
        cids = self.claim_id[w]
        if not (cids >= 0).any():
            return
        budget = self.model.max_prefill_tokens
        room = self.model.max_batch - n_running
        before = 0  # tokens of the steps before the current packing step
        step_tokens = 0
        step_count = 0
        ahead = np.empty(w.shape[0], dtype=np.float64)
        for i, p in enumerate(self.prefill_tokens[w].tolist()):
            if step_count and (step_tokens + p > budget or step_count >= room):
                before += step_tokens
                step_tokens = 0
                step_count = 0
                room = self.model.max_batch
            ahead[i] = before
            step_tokens += p
            step_count += 1
        has = cids >= 0
        self.ledger.update(cids[has], ahead[has], now=now, delay_s=np.full(int(has.sum()), step_s))

    def _start_transfers(self, granted, now: float) -> None:
        for cid in np.asarray(granted, dtype=np.int64).tolist():
            r = self.claim_owner[cid]
            start = max(now, self.channel_free_at)
            done_at = start + self.cfg.slow_tier.latency_s + self.staged_bytes[r] / self.stage_bw
            self.channel_free_at = done_at
            heapq.heappush(self.transfers, (done_at, self.transfer_seq, cid))
            self.transfer_done[cid] = done_at
            self.transfer_seq += 1
            self.ungranted -= 1

    def _admit(self, waiting: list[int], n_running: int, now: float) -> list[int]:
        """Pick this step's prefills: in queue order within the batch room and the prefill budget.

        A request whose staged data is not ready keeps its place in the queue and a batch slot
        (its KV blocks are allocated, as vLLM does for asynchronously loaded KV) but takes no
        prefill budget: ready requests behind it go ahead.  Claims are asked for (``need``,
        which escalates them) only within the first step's window of the queue (the requests
        whose prefills would fill one step's budget, waiting ones included): that is the
        look-ahead of on-demand staging.  Beyond it a claim runs only if already ready.  With
        ``recompute_fallback``, a request in the window whose data would be ready later than
        recomputing it takes releases the claim and recomputes those tokens
        (``claims_recomputed``).
        """
        m = self.model
        admitted: list[int] = []
        budget = m.max_prefill_tokens  # left for the prefills of this step
        window = m.max_prefill_tokens  # left of the look-ahead window
        room = m.max_batch - n_running
        if room <= 0 or not waiting:
            return admitted
        kept: list[int] = []
        for i, r in enumerate(waiting):
            if room <= 0:
                kept.extend(waiting[i:])
                break
            in_window = window == m.max_prefill_tokens or self.prefill_tokens[r] <= window
            window = window - int(self.prefill_tokens[r]) if in_window else -1
            cid = int(self.claim_id[r])
            if cid >= 0 and self._in_gpu_cache(r):
                # the scheduler looks the prefix up again (vLLM checks its GPU prefix cache at
                # scheduling): an earlier request with the same context has put it on the GPU
                # since the claim, so the staged copy is not needed
                self.gpu_hit_tokens += self._drop_claim(r, cid, now)
                self.claims_cancelled += 1
                cid = -1
            if cid >= 0 and not in_window and int(self.ledger.state_of([cid])[0]) != READY:
                room -= 1
                kept.append(r)  # beyond the look-ahead: waits, not escalated
                continue
            if cid >= 0 and not bool(self.ledger.need([cid], now=now)[0]):
                # the claim was escalated to deadline `now`: grant what fits right away
                if int(self.ledger.state_of([cid])[0]) != STAGING:
                    self._start_transfers(self.policy.due(now), now)
                if not (self.cfg.recompute_fallback and self._recompute_is_faster(r, cid, now)):
                    room -= 1
                    kept.append(r)  # waits for its KV: a batch slot, no prefill budget
                    continue
                self.prefill_tokens[r] += self._drop_claim(r, cid, now)
                self.claims_recomputed += 1
                cid = -1
            if admitted and self.prefill_tokens[r] > budget:
                kept.extend(waiting[i:])  # does not fit this step: the queue resumes here next step
                break
            if cid >= 0:
                self.ledger.consume([cid], now=now)
            room -= 1
            budget -= int(self.prefill_tokens[r])
            admitted.append(r)
        waiting[:] = kept
        if not admitted and n_running == 0 and not self.transfers:
            # nothing runs and nothing is in flight: the window waits for capacity that ready
            # requests further back hold.  Stay work-conserving: run the first ready one.
            for i, r in enumerate(waiting):
                cid = int(self.claim_id[r])
                if cid < 0 or bool(self.ledger.need([cid], now=now)[0]):
                    if cid >= 0:
                        self.ledger.consume([cid], now=now)
                    admitted.append(waiting.pop(i))
                    break
        return admitted

    def _recompute_is_faster(self, r: int, cid: int, now: float) -> bool:
        """Would recomputing the claim's tokens finish before its copy is ready?

        A granted claim is ready when its copy completes.  A claim still not granted after
        escalation waits for capacity: the holders free theirs at their predicted use times
        (the ledger's estimates; claims consumed this step at once), in that order; it is
        ready once enough is free plus its predicted staging time.
        """
        recompute_s = (int(self.staged_bytes[r]) // self.model.kv_bytes_per_token) / self.model.prefill_tokens_per_s
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

    def _in_gpu_cache(self, r: int) -> bool:
        """Is the whole prefix hit found at arrival now in the GPU prefix cache?"""
        if self.gpu_cache_blocks <= 0:
            return False
        gpu = self.gpu_cache
        return all(b in gpu for b in self.trace.blocks_of(r)[: self.hit_blocks[r]].tolist())

    def _drop_claim(self, r: int, cid: int, now: float) -> int:
        """Release a claim that will not be used; return its tokens (no longer a slow-tier hit).

        The caller counts it (GPU hit -> cancelled, recomputed -> recomputed).
        """
        state = int(self.ledger.state_of([cid])[0])
        if state in (CLAIMED, PENDING):
            self.ungranted -= 1  # never granted: the controller's timer no longer waits for it
        elif state == STAGING:
            self.cancelled.add(cid)  # its transfer is in flight: drop it when it completes
        self.ledger.release([cid], now=now)  # byte-seconds held so far are counted
        tokens = int(self.staged_bytes[r]) // self.model.kv_bytes_per_token
        self.slow_hit_tokens -= tokens
        self.staged_bytes[r] = 0
        self.claim_id[r] = -1
        return tokens

    def _cache_blocks(self, r: int) -> None:
        for cache, cap in ((self.gpu_cache, self.gpu_cache_blocks), (self.slow_cache, self.slow_cache_blocks)):
            if cap <= 0:
                continue
            for b in self.trace.blocks_of(r).tolist():
                if b in cache:
                    cache.move_to_end(b)
                else:
                    cache[b] = None
                    if len(cache) > cap:
                        cache.popitem(last=False)

    def _result(self, end: float, steps: int) -> SimResult:
        ttft = self.first_token - self.arrival
        high = self.priority_class == 0
        led = self.ledger
        bs = float(led.released_byte_seconds)
        stats = led.stats
        prompt = float(self.input_len.sum())
        span = end - float(self.arrival[0]) if self.n else 0.0
        return SimResult(
            label=self.cfg.label or f"{self.model.name}/{self.cfg.policy}",
            policy=self.cfg.policy,
            model=self.model.name,
            requests=self.n,
            duration_s=span,
            output_tokens_per_s=float(self.output_len.sum()) / span if span > 0 else 0.0,
            ttft_p50=float(np.percentile(ttft, 50)),
            ttft_p95=float(np.percentile(ttft, 95)),
            ttft_p99=float(np.percentile(ttft, 99)),
            ttft_mean=float(ttft.mean()),
            ttft_p95_high_priority=float(np.percentile(ttft[high], 95)) if high.any() else 0.0,
            high_priority_requests=int(high.sum()),
            protected_byte_seconds=bs,
            protected_byte_seconds_per_request=bs / self.n,
            peak_protected_bytes=int(led.peak_protected_bytes),
            fast_tier_bytes=int(self.cfg.fast_tier.capacity_bytes),
            claims=self.claims_made,
            ready_in_time=int(stats["ready_in_time"]),
            ready_late=int(stats["ready_late"]),
            claims_cancelled=self.claims_cancelled,
            claims_recomputed=self.claims_recomputed,
            slow_hit_token_share=self.slow_hit_tokens / prompt,
            gpu_hit_token_share=self.gpu_hit_tokens / prompt,
            steps=steps,
        )


def _resolve_trace(workload: Any, max_requests: int | None) -> MooncakeTrace:
    if isinstance(workload, Workload):
        trace = workload.trace()
    elif isinstance(workload, MooncakeTrace):
        trace = workload
    else:  # a bundled name or a file; load_mooncake says clearly when it is neither
        trace = load_mooncake(workload)
    if trace.num_requests == 0:
        raise BadInputError("the workload has no requests; expected at least one")
    if max_requests is not None and max_requests < trace.num_requests:
        k = max_requests
        end = int(trace.block_offsets[k])
        trace = MooncakeTrace(
            name=f"{trace.name}[:{k}]", timestamp_ms=trace.timestamp_ms[:k], input_length=trace.input_length[:k],
            output_length=trace.output_length[:k], block_offsets=trace.block_offsets[: k + 1],
            block_ids=trace.block_ids[:end], bad_lines=trace.bad_lines)
    return trace
