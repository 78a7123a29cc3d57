"""The commitment ledger (TempoKV): knowing about a slow-tier hit is free, holding capacity is not.

A logical prefix hit on a slow tier (SSD, CXL-attached flash) is not yet readable by the GPU:
it must first be *staged* into a protected fast tier.  Staging on demand puts the slow tier on
the critical path; staging immediately holds protected capacity long before the data is used.
The ledger separates the two:

1. ``claim`` records a **metadata-only claim** (no capacity held);
2. two estimates run per claim: **time until use** (a known delay ``delay_s``, e.g. the rest of
   the engine step in flight, plus ``work_ahead`` tokens of runtime progress converted to
   seconds by the learned progress rate) and **time to ready** (the source tier's
   latency + bytes / bandwidth, including the bytes already queued on it, scaled by the learned
   observed/predicted staging-time ratio);
3. ``poll`` turns claims whose
   ``use_at - time_to_ready - use_slack * (use_at - now) <= now + margin + poll_gap`` into commitment
   requests and **grants** requests earliest-deadline-first (or, with ``fifo=True``, in claim
   order: immediate staging takes capacity in the order hits were found), strictly within the
   free protected capacity (the first request that does not fit blocks the later ones, so a
   large claim cannot starve).  ``poll_gap`` is the learned (EWMA) time between polls while a claim awaits its
   trigger (after a poll that leaves no claim CLAIMED the time to the next poll is idle, not
   learned): the trigger must fire at the last poll before the ideal moment, not the first one
   after it; ``use_slack`` is the learned
   (EWMA) *share* of the predicted time until use by which updates moved use times earlier (a
   relative error: a prediction 40 s ahead errs by more seconds than one 0.4 s ahead);
4. a granted claim is staged by the caller, who reports ``mark_ready``; at use the caller calls
   ``need`` (which records the moment and escalates an unstaged claim to deadline ``now``),
   ``consume`` and finally ``release``, which frees the capacity and returns the claim's
   **protected byte-seconds** (bytes x seconds from commit to release).

A periodic poller skips the polls that would change no claim with ``skip_idle_polls`` (it learns
their poll gaps exactly as the polls would, and stops at the first poll that triggers or grants).

Both estimators adapt: ``observe_progress(tokens, seconds)`` updates an EWMA of the progress
rate (tokens/s), and every ``mark_ready`` updates a per-source EWMA of observed/predicted staging
time.  Immediate and on-demand staging use the same ledger (``request`` at claim time, or at
use through ``need``) so all three policies are measured with the same accounting.

Claim life cycle (state codes in ``state``)::

    FREE -claim-> CLAIMED -poll(timely)/request/need-> PENDING -poll(grant)-> STAGING
         -mark_ready-> READY -consume-> CONSUMED -release-> FREE
    (release is allowed from every live state: it cancels or aborts the claim)

Layout: structure of arrays indexed by *slot*; a claim id packs the slot's generation and the
slot, ``claim_id = generation << 32 | slot``, so a released id is recognised (the generation
moves on at release) and reported as a double release.  Worked example, capacity 100 bytes::

    a = claim(request=7, nbytes=60, work_ahead=0)   # slot 0, id 0, CLAIMED, protected 0
    b = claim(request=8, nbytes=60, work_ahead=1e6) # slot 1, id 1, CLAIMED
    poll(now)      -> [a]      # a is due (use now); b's use is far away: stays CLAIMED
    state   = [STAGING, CLAIMED]   nbytes = [60, 60]   protected_bytes = 60
    mark_ready([a]); consume([a]); release([a]) -> [60 * (release - commit)]
    slot 0 is free again with generation 1: the next claim there gets id 1 << 32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvmm._validate import as_count, as_fraction, as_index_array, as_key_array, as_positive_float
from kvmm.errors import BadInputError, CapacityExceededError, UnknownKeyError

# the bounds and the state codes are public: re-exported here (see __all__)
from kvmm.policies.staging._ledger_checks import (
    MAX_CAPACITY_BYTES,
    MAX_SECONDS,
    MAX_WORK,
    RATE_BOUNDS,
    RATIO_BOUNDS,
    as_float_array,
    bounded_float,
    check_now,
    check_source,
    live_slots,
    spec_of,
    time_bound,
)
from kvmm.policies.staging._ledger_invariants import check_invariants
from kvmm.policies.staging._ledger_kernels import idle_polls_kernel, poll_kernel, update_kernel
from kvmm.policies.staging._ledger_state import (
    CLAIMED,
    CONSUMED,
    FREE,
    HOLDING,
    MAX_SLOTS,
    PENDING,
    READY,
    SLOT_BITS,
    SLOT_MASK,
    STAGING,
    STATE_NAMES,
    alloc_slots,
    release_slots,
    take_slots,
    write_claims,
)

__all__ = [
    "CommitmentLedger",
    "FREE",
    "CLAIMED",
    "PENDING",
    "STAGING",
    "READY",
    "CONSUMED",
    "STATE_NAMES",
    "MAX_CAPACITY_BYTES",
    "RATE_BOUNDS",
    "RATIO_BOUNDS",
    "MAX_SECONDS",
    "MAX_WORK",
]


class CommitmentLedger:
    """Metadata-only claims on slow-tier hits, committed to protected capacity just in time.

    Parameters
    ----------
    capacity_bytes:
        Protected fast-tier capacity the ledger may commit.
    sources:
        The slow tiers claims are staged from: one or a sequence of ``TierSpec`` (or objects
        with a ``spec`` TierSpec attribute, e.g. a tier backend).  A source that also has
        ``contains(key)`` is asked about every claimed key.
    margin_s:
        Slack added to the trigger: a claim is requested when
        ``use_at - time_to_ready - use_slack * (use_at - now) <= now + margin_s + poll_gap``
        (``poll_gap``: learned EWMA of the time between polls while a claim awaits its trigger, i.e.
        since a poll that left a claim CLAIMED; ``use_slack``: learned EWMA of the
        share of the predicted time until use by which
        :meth:`update` moved predicted use times earlier).
    initial_rate:
        Initial estimate of runtime progress in tokens per second.
    rate_alpha, ratio_alpha:
        EWMA weights of new observations (progress rate; observed/predicted staging time).
    initial_slots:
        Slots allocated up front; the arrays double when they run out.
    ready_lease_s:
        Lease of a READY claim (as Mooncake Store leases objects): a READY claim that is not
        consumed within ``ready_lease_s`` seconds of becoming ready (or of its latest
        :meth:`need` / :meth:`update`) is released by the next :meth:`poll` (or
        :meth:`expire`), its capacity freed and counted in ``stats["expired"]``.  ``None``
        (default): no lease, a READY claim holds its capacity until released.

    Bounds: ``capacity_bytes <= MAX_CAPACITY_BYTES`` (2**62, so int64 sums cannot overflow),
    times ``<= MAX_SECONDS``, work ``<= MAX_WORK`` tokens, progress rates within
    ``RATE_BOUNDS``; the learned staging ratio stays within ``RATIO_BOUNDS``.
    """

    def __init__(
        self,
        capacity_bytes: int,
        sources: Any,
        *,
        margin_s: float = 0.005,
        initial_rate: float = 10_000.0,
        rate_alpha: float = 0.2,
        ratio_alpha: float = 0.2,
        initial_slots: int = 1024,
        ready_lease_s: float | None = None,
    ) -> None:
        capacity_bytes = as_count(capacity_bytes, "capacity_bytes")
        if capacity_bytes > MAX_CAPACITY_BYTES:
            raise BadInputError(f"capacity_bytes must be <= 2**62 ({MAX_CAPACITY_BYTES}) so byte counts fit int64, "
                                f"got {capacity_bytes}")
        margin_s = bounded_float(margin_s, "margin_s", 0.0, MAX_SECONDS)
        initial_rate = bounded_float(initial_rate, "initial_rate", *RATE_BOUNDS)
        rate_alpha = as_fraction(rate_alpha, "rate_alpha")
        ratio_alpha = as_fraction(ratio_alpha, "ratio_alpha")
        initial_slots = as_count(initial_slots, "initial_slots", minimum=1)
        if initial_slots > MAX_SLOTS:
            raise BadInputError(f"initial_slots must be <= {MAX_SLOTS}, got {initial_slots}")
        if ready_lease_s is not None:
            ready_lease_s = bounded_float(ready_lease_s, "ready_lease_s", 0.0, MAX_SECONDS)
            if ready_lease_s == 0.0:
                raise BadInputError("ready_lease_s must be > 0 seconds (or None for no lease), got 0")
        src_list = list(sources) if isinstance(sources, (list, tuple)) else [sources]
        if not src_list:
            raise BadInputError("sources must name at least one slow tier (a TierSpec); got none")
        specs = [spec_of(s, i) for i, s in enumerate(src_list)]

        self._capacity = capacity_bytes
        self.margin_s = margin_s
        self.rate_alpha = rate_alpha
        self.ratio_alpha = ratio_alpha
        self.ready_lease_s = ready_lease_s
        self._sources = src_list
        self.source_latency = np.array([s.latency_s for s in specs], dtype=np.float64)
        self.source_bandwidth = np.array([s.read_bandwidth for s in specs], dtype=np.float64)
        # learned observed/predicted staging-time ratio, per source
        self.source_ratio = np.ones(len(specs), dtype=np.float64)
        # bytes committed but not yet ready, per source (the staging queue)
        self.queue_bytes = np.zeros(len(specs), dtype=np.int64)
        self.rate = float(initial_rate)  # learned progress rate, tokens/s
        # learned gap between polls: a claim must be triggered at the last poll *before* its
        # use time minus its ready time, so the trigger looks one expected gap ahead
        self.poll_gap = 0.0
        self.last_poll = -1.0
        # learned relative over-estimate of time until use: an update that moves predicted uses
        # earlier feeds (sum of those shifts) / (sum of the predicted times until use) into an
        # EWMA; the trigger looks that share of each claim's time until use further ahead.
        # Relative, because the error of a prediction grows with its horizon (a 5 % rate error
        # is 2 s for a claim 40 s back in the queue, 15 ms for one about to run)
        self.use_slack = 0.0
        self.clock = 0.0  # latest `now` seen; time never goes backwards
        self.protected_bytes = 0
        self.peak_protected_bytes = 0
        self.open_claims = 0
        self.next_seq = 0  # claim serial: ties in deadline are broken by claim order
        # statistics
        self.claims_total = 0
        self.commits_total = 0
        self.released_total = 0
        self.consumed_in_time = 0
        self.consumed_late = 0
        self.released_byte_seconds = 0.0
        self.expired_total = 0  # READY claims released because their lease ran out
        self.expired_ids = np.zeros(0, dtype=np.int64)  # ids the latest poll / expire released

        n = initial_slots
        alloc_slots(self, n)
        self.n_slots = 0  # high-water mark: slots [0, n_slots) have been used at least once
        self.free_top = 0  # free_stack[:free_top] are released slots (reused LIFO)
        self._keys: dict[int, np.ndarray] = {}  # slot -> claimed keys (only when given)
        self._request_byte_seconds: dict[int, float] = {}  # request -> byte-seconds of its released claims

    # ------------------------------------------------------------------ properties
    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @property
    def free_bytes(self) -> int:
        return self._capacity - self.protected_bytes

    @property
    def num_sources(self) -> int:
        return int(self.source_latency.shape[0])

    @property
    def stats(self) -> dict:
        """Counters: claims, commits, releases, ready in time / late, peak and byte-seconds."""
        return {
            "claims": self.claims_total,
            "commits": self.commits_total,
            "released": self.released_total,
            "open": self.open_claims,
            "ready_in_time": self.consumed_in_time,
            "ready_late": self.consumed_late,
            "protected_bytes": self.protected_bytes,
            "peak_protected_bytes": self.peak_protected_bytes,
            "released_byte_seconds": self.released_byte_seconds,
            "expired": self.expired_total,
        }

    def protected_byte_seconds(self, now: float | None = None) -> float:
        """Byte-seconds of protected capacity: released claims plus live holders up to ``now``.

        Runtime complexity: O(slots).
        """
        t = self.clock if now is None else check_now(self, now)
        s = self.n_slots
        holding = np.isin(self.state[:s], HOLDING)
        live = float(np.sum(self.nbytes[:s][holding] * (t - self.committed_at[:s][holding])))
        return self.released_byte_seconds + live

    # ------------------------------------------------------------------ claims
    def claim(self, request: int, keys: Any = None, nbytes: int = 0, *, now: float,
              work_ahead: float = 0.0, source: int = 0, delay_s: float = 0.0) -> int:
        """Record a metadata-only claim of ``nbytes`` on ``keys`` for ``request``; return its id.

        ``work_ahead`` is the runtime progress (tokens) expected before the request uses the
        data, after a known delay of ``delay_s`` seconds (both 0 = now).  Holds no capacity.  Runtime complexity: O(len(keys)).
        """
        request = as_count(request, "request")
        nbytes = as_count(nbytes, "nbytes", minimum=1)
        source = check_source(self, source)
        if (keys is None and isinstance(work_ahead, float) and isinstance(delay_s, float) and 0.0 <= work_ahead <= MAX_WORK
                and 0.0 <= delay_s <= MAX_SECONDS and nbytes <= self._capacity and self.open_claims < MAX_SLOTS
                and type(now) is float and self.clock <= now <= MAX_SECONDS):
            return self._claim_one(request, nbytes, now, float(work_ahead), source, float(delay_s))  # all valid
        key_arr = None if keys is None else as_key_array(keys, "keys")
        if key_arr is not None and hasattr(self._sources[source], "contains"):
            tier = self._sources[source]
            for k in key_arr:
                key = (int(k[0]), int(k[1])) if k[1] else int(k[0])
                if not tier.contains(key):
                    raise UnknownKeyError(f"key {key!r} is not in source tier {source}; a claim must name keys the tier holds")
        ids = self.claim_many([request], [nbytes], now=now, work_ahead=[work_ahead], source=[source], delay_s=[delay_s])
        if key_arr is not None:
            self._keys[int(ids[0]) & SLOT_MASK] = key_arr
        return int(ids[0])

    def _claim_one(self, request: int, nbytes: int, now: float, work_ahead: float, source: int, delay_s: float) -> int:
        """:meth:`claim_many` of one validated claim, with scalar writes (the simulator's hot path)."""
        self.clock = now
        s = int(take_slots(self, 1)[0])
        write_claims(self, s, request, nbytes, source, work_ahead, delay_s, now, self.next_seq, 1)
        return (int(self.generation[s]) << SLOT_BITS) | s

    def claim_many(self, requests: Any, nbytes: Any, *, now: float, work_ahead: Any = None,
                   source: Any = None, delay_s: Any = None) -> np.ndarray:
        """Batch :meth:`claim` without keys; returns the claim ids (int64).

        Runtime complexity: O(k) amortised (arrays double when full).
        """
        req = as_index_array(requests, "requests")
        nb = as_index_array(nbytes, "nbytes")
        k = req.shape[0]
        if nb.shape[0] != k:
            raise BadInputError(f"nbytes has {nb.shape[0]} entries; expected one per request ({k})")
        if k and int(req.min()) < 0:
            raise BadInputError(f"requests must be >= 0, got {int(req.min())}")
        if k and int(nb.min()) < 1:
            raise BadInputError(f"nbytes must be >= 1 byte per claim, got {int(nb.min())}")
        if k and int(nb.max()) > self._capacity:
            raise CapacityExceededError(
                f"a claim of {int(nb.max())} bytes can never be committed: protected capacity is {self._capacity} bytes")
        wa = np.zeros(k) if work_ahead is None else as_float_array(work_ahead, "work_ahead", k, maximum=MAX_WORK)
        dl = np.zeros(k) if delay_s is None else as_float_array(delay_s, "delay_s", k, maximum=MAX_SECONDS)
        src = np.zeros(k, dtype=np.int32) if source is None else as_index_array(source, "source", dtype=np.int32)
        if src.shape[0] != k:
            raise BadInputError(f"source has {src.shape[0]} entries; expected {k}")
        if k and (int(src.min()) < 0 or int(src.max()) >= self.num_sources):
            raise BadInputError(f"source ids must be in [0, {self.num_sources}), got {src.tolist()[:8]}")
        if self.open_claims + k > MAX_SLOTS:
            raise CapacityExceededError(f"{self.open_claims} open claims + {k} new ones exceed the ledger's "
                                        f"{MAX_SLOTS} slots; release claims first")
        now = check_now(self, now)
        # all input valid: change state
        self.clock = now
        slots = take_slots(self, k)
        write_claims(self, slots, req, nb, src, wa, dl, now, np.arange(self.next_seq, self.next_seq + k, dtype=np.int64), k)
        return (self.generation[slots].astype(np.int64) << SLOT_BITS) | slots.astype(np.int64)

    def update(self, claim_ids: Any, work_ahead: Any, *, now: float, delay_s: Any = None) -> None:
        """Report fresh runtime progress: after ``delay_s`` seconds (default 0), ``work_ahead``
        tokens remain before each claim's use.

        A PENDING claim's deadline moves with its new predicted use time (a claim pushed back
        must not keep the capacity priority of its old, early deadline), except a claim that
        was :meth:`need`-ed, whose deadline stays the moment it was needed.  A READY claim's
        lease (``ready_lease_s``) is renewed.  Each id at most once per call.
        Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True)
        k = slots.shape[0]
        wa = as_float_array(work_ahead, "work_ahead", k, maximum=MAX_WORK)
        dl = np.zeros(k) if delay_s is None else as_float_array(delay_s, "delay_s", k, maximum=MAX_SECONDS)
        now = check_now(self, now)
        self.clock = now
        if k:
            shift, ahead_s = np.empty(k), np.empty(k)
            positive = update_kernel(slots, wa, dl, now, self.rate, self.state, self.needed_at, self.updated_at,
                                     self.delay_s, self.work_ahead, self.deadline, self.lease_from, shift, ahead_s)
            if not positive:  # no use comes sooner than predicted: nothing to learn
                return
            earlier = float(np.sum(shift[shift > 0.0]))
            horizon = float(np.sum(ahead_s))
            if earlier > 0.0 and horizon > 0.0:  # uses come sooner than predicted: widen the trigger
                # a use cannot move before now, so each shift <= its horizon and the share <= 1
                share = min(earlier / horizon, 1.0)
                self.use_slack = (1.0 - self.rate_alpha) * self.use_slack + self.rate_alpha * share

    def observe_progress(self, tokens: float, seconds: float) -> None:
        """Learn the progress rate: ``tokens`` of work took ``seconds`` (EWMA of tokens/s).

        ``tokens`` in ``[0, MAX_WORK]``, ``seconds`` in ``(0, MAX_SECONDS]``; an observed rate
        above ``RATE_BOUNDS[1]`` tokens/s is refused (``BadInputError``), and the learned rate
        never falls below ``RATE_BOUNDS[0]`` (all-idle observations push use times far ahead).
        """
        tokens = bounded_float(tokens, "tokens", 0.0, MAX_WORK)
        seconds = bounded_float(seconds, "seconds", 0.0, MAX_SECONDS)
        if seconds == 0.0:
            raise BadInputError("seconds must be > 0 (the time the tokens of progress took), got 0.0")
        observed = tokens / seconds
        if observed > RATE_BOUNDS[1]:
            raise BadInputError(f"observed progress rate {tokens!r} tokens / {seconds!r} s = {observed:.3g} tokens/s "
                                f"is above the sane bound {RATE_BOUNDS[1]:.0e} tokens/s")
        rate = (1.0 - self.rate_alpha) * self.rate + self.rate_alpha * observed
        self.rate = min(max(rate, RATE_BOUNDS[0]), RATE_BOUNDS[1])

    def request(self, claim_ids: Any, *, now: float, deadline: Any = None) -> None:
        """Ask for commitments now (immediate / on-demand staging), by deadline (default: predicted use).

        Only CLAIMED or PENDING claims, each at most once per call; a PENDING claim keeps the
        earlier deadline.  Deadlines are times in ``[0, MAX_SECONDS]`` or ``inf`` (no deadline).
        Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True, allowed=(CLAIMED, PENDING), verb="request a commitment for",
                           hint="only claimed or pending claims can request a commitment")
        dl = None if deadline is None else as_float_array(deadline, "deadline", slots.shape[0], maximum=MAX_SECONDS,
                                                          allow_inf=True)
        now = check_now(self, now)
        self.clock = now
        if dl is None:
            dl = (self.updated_at[slots] + self.delay_s[slots]) + self.work_ahead[slots] / self.rate
        for s, d in zip(slots.tolist(), dl.tolist()):
            self.deadline[s] = min(self.deadline[s], d) if self.state[s] == PENDING else d
            self.state[s] = PENDING

    def poll(self, now: float, *, timely: bool = True, fifo: bool = False) -> np.ndarray:
        """Expire READY leases, trigger due claims (if ``timely``), grant pending requests within free capacity.

        Grant order: earliest deadline first (ties in claim order), or, with ``fifo``, claim
        order only (immediate staging takes capacity in the order hits were found, whatever
        their deadlines).  Either way the first request that does not fit blocks the later ones.
        Returns the claim ids granted (now STAGING, capacity held), in grant order: the caller
        starts their transfers and reports :meth:`mark_ready`.  The ids whose ready lease ran
        out (released) are in :attr:`expired_ids` until the next poll.
        Runtime complexity: O(slots + p log p) for p pending requests (one numba call).
        """
        if not isinstance(fifo, (bool, np.bool_)) or not isinstance(timely, (bool, np.bool_)):
            raise BadInputError(f"timely and fifo must be booleans, got {timely!r} and {fifo!r}")
        now = check_now(self, now)
        # all input valid; nothing below can fail
        gap = self.poll_gap
        if self.last_poll >= 0.0 and now > self.last_poll:
            gap = (1.0 - self.rate_alpha) * gap + self.rate_alpha * (now - self.last_poll)
        self.clock = now
        self.poll_gap = gap
        self.last_poll = now
        self.expire(now)
        out = self.poll_out
        ng = poll_kernel(
            self.state, self.nbytes, self.source, self.work_ahead, self.delay_s, self.updated_at, self.deadline,
            self.seq, self.committed_at, self.predicted_stage_s, self.model_stage_s, self.n_slots, now,
            self.margin_s + gap, self.use_slack, self.rate,
            self.source_latency, self.source_bandwidth, self.source_ratio, self.queue_bytes,
            self._capacity - self.protected_bytes, bool(timely), bool(fifo), out,
        )
        if not self._any_claimed():
            self.last_poll = -1.0  # no claim awaits its trigger: the time to the next poll is idle, not a poll gap
        if ng == 0:
            return np.zeros(0, dtype=np.int64)
        slots = out[:ng].copy()
        self.protected_bytes += int(self.nbytes[slots].sum())
        self.peak_protected_bytes = max(self.peak_protected_bytes, self.protected_bytes)
        self.commits_total += ng
        return (self.generation[slots].astype(np.int64) << SLOT_BITS) | slots

    def skip_idle_polls(self, first: float, interval: float, *, before: float, until: float,
                        timely: bool = True, fifo: bool = False) -> float:
        """Fast-forward a periodic poller over the polls that would change no claim.

        A caller that polls at ``first, first + interval, ...`` (each time the previous one plus
        ``interval``) while no other event happens (polls strictly ``< before`` and ``<= until``,
        both times ``>= 0`` or ``inf``)
        calls this instead: it learns the poll gap of each poll that would neither trigger nor
        grant a claim, exactly as :meth:`poll` would (``poll_gap``, ``last_poll``, ``clock``: the
        same floating-point operations in the same order), and stops at the first poll that
        would trigger or grant one, which the caller then runs with :meth:`poll`.  Between events
        the estimates are static, so the result is the same as polling at every tick.
        Returns the time of the first poll not skipped.  Runtime complexity: O(slots +
        skipped polls x claimed slots) in one numba call.
        """
        if not isinstance(fifo, (bool, np.bool_)) or not isinstance(timely, (bool, np.bool_)):
            raise BadInputError(f"timely and fifo must be booleans, got {timely!r} and {fifo!r}")
        first = check_now(self, first)
        interval = as_positive_float(interval, "interval")
        before, until = time_bound(before, "before"), time_bound(until, "until")
        if self.ready_lease_s is not None:
            return first  # a poll that expires READY leases is never idle: skip nothing
        armed = self._any_claimed()  # constant over the skipped polls: they trigger nothing
        if not armed and self.last_poll >= 0.0:
            return first  # that poll learns its gap and disarms (poll does both); then skipping is exact
        # unarmed, skipped polls learn no gap: weight 0 keeps poll_gap bit for bit (1.0 * g + 0.0 * d)
        t, gap, last, skipped = idle_polls_kernel(
            self.state, self.nbytes, self.source, self.work_ahead, self.delay_s, self.updated_at, self.deadline, self.seq,
            self.n_slots, first, interval, before, until, self.margin_s, self.poll_gap, self.last_poll,
            self.rate_alpha if armed else 0.0,
            self.use_slack, self.rate, self.source_latency, self.source_bandwidth, self.source_ratio, self.queue_bytes,
            self._capacity - self.protected_bytes, bool(timely), bool(fifo))
        if skipped:
            self.poll_gap, self.clock = gap, last
            self.last_poll = last if armed else -1.0
        return t

    def _any_claimed(self) -> bool:
        """Does some claim await its trigger (CLAIMED)?  Only then is the time between two polls
        a poll gap: the caller polls to catch the trigger; otherwise it is idle time."""
        return bool((self.state[: self.n_slots] == CLAIMED).any())

    def expire(self, now: float) -> np.ndarray:
        """Release READY claims whose lease (``ready_lease_s``) ran out by ``now``; return their ids.

        A lease runs from :meth:`mark_ready`, renewed by :meth:`need` and :meth:`update`; it
        expires when ``now >= lease start + ready_lease_s``.  Expired claims are released as by
        :meth:`release` (their byte-seconds counted) and counted in ``stats["expired"]``.  No
        lease (``ready_lease_s=None``): nothing expires.  Runtime complexity: O(slots).
        """
        now = check_now(self, now)
        self.clock = now
        self.expired_ids = np.zeros(0, dtype=np.int64)
        if self.ready_lease_s is None:
            return self.expired_ids.copy()
        n = self.n_slots
        due = np.flatnonzero((self.state[:n] == READY) & (self.lease_from[:n] + self.ready_lease_s <= now))
        if due.shape[0]:
            ids = (self.generation[due].astype(np.int64) << SLOT_BITS) | due
            release_slots(self, due, now)
            self.expired_total += int(due.shape[0])
            self.expired_ids = ids
        return self.expired_ids.copy()

    def mark_ready(self, claim_ids: Any, *, now: float) -> None:
        """Staging finished: STAGING -> READY.  Learns observed/predicted staging time per source.

        The ratio learned is observed time / *bandwidth-model* time (``latency + (queue +
        nbytes) / bandwidth``, without the correction itself), so it converges to the true
        ratio (a tier at half its nominal speed is learned as 2); each observation is clipped
        to ``RATIO_BOUNDS``.  Each id at most once per call.  Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True, allowed=(STAGING,), verb="mark ready",
                           hint="only staging claims can become ready")
        now = check_now(self, now)
        self.clock = now
        a = self.ratio_alpha
        lo, hi = RATIO_BOUNDS
        for s in slots.tolist():
            src = int(self.source[s])
            observed = now - float(self.committed_at[s])
            # the ratio corrects the bandwidth model; it compares like with like (same queue)
            sample = min(max(observed / float(self.model_stage_s[s]), lo), hi)
            self.source_ratio[src] = min(max((1.0 - a) * self.source_ratio[src] + a * sample, lo), hi)
            self.queue_bytes[src] -= self.nbytes[s]
            self.ready_at[s] = now
            self.lease_from[s] = now
            self.state[s] = READY

    def need(self, claim_ids: Any, *, now: float) -> np.ndarray:
        """The request wants the data now: record the moment, escalate unstaged claims.

        CLAIMED/PENDING claims become PENDING with deadline ``now`` (granted by the next
        :meth:`poll` ahead of everything else); a READY claim's lease is renewed.  Returns a
        bool mask: which are READY (or CONSUMED).  Each id at most once per call.
        Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True)
        now = check_now(self, now)
        self.clock = now
        for s in slots.tolist():
            if math.isnan(self.needed_at[s]):
                self.needed_at[s] = now
            if self.state[s] in (CLAIMED, PENDING):
                self.deadline[s] = min(self.deadline[s], now) if self.state[s] == PENDING else now
                self.state[s] = PENDING
            elif self.state[s] == READY:
                self.lease_from[s] = now
        st = self.state[slots]
        return (st == READY) | (st == CONSUMED)

    def consume(self, claim_ids: Any, *, now: float) -> None:
        """The request reads the staged data: READY -> CONSUMED (capacity held until release).

        A claim is *in time* when it was ready by the moment it was first needed
        (:meth:`need`, else now), *late* otherwise.  Each id at most once per call.
        Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True, allowed=(READY,), verb="consume",
                           hint="stage it (poll, mark_ready) before consuming")
        now = check_now(self, now)
        self.clock = now
        for s in slots.tolist():
            if math.isnan(self.needed_at[s]):
                self.needed_at[s] = now
            if self.ready_at[s] <= self.needed_at[s]:
                self.consumed_in_time += 1
            else:
                self.consumed_late += 1
            self.state[s] = CONSUMED

    def release(self, claim_ids: Any, *, now: float) -> np.ndarray:
        """Free claims (cancel, abort or finish); return each one's protected byte-seconds.

        Releasing an already released (or lease-expired) claim, or one claim twice in a call,
        raises :class:`DoubleFreeError`.  Runtime complexity: O(k).
        """
        slots = live_slots(self, claim_ids, unique=True, double_free=True)
        now = check_now(self, now)
        self.clock = now
        return release_slots(self, slots, now)

    # ------------------------------------------------------------------ queries
    def state_of(self, claim_ids: Any) -> np.ndarray:
        """State codes (see :data:`STATE_NAMES`) of live claims."""
        return self.state[live_slots(self, claim_ids)].copy()

    def byte_seconds_by_request(self) -> dict[int, float]:
        """Protected byte-seconds per request, summed over its released claims (a copy)."""
        return dict(self._request_byte_seconds)

    def keys_of(self, claim_id: int) -> np.ndarray | None:
        """The keys given at :meth:`claim` (``(n, 2)`` uint64), or None."""
        slot = int(live_slots(self, [claim_id])[0])
        k = self._keys.get(slot)
        return None if k is None else k.copy()

    def predicted_use_time(self, claim_ids: Any) -> np.ndarray:
        """Absolute predicted use times: ``updated_at + delay_s + work_ahead / rate``."""
        slots = live_slots(self, claim_ids)
        return (self.updated_at[slots] + self.delay_s[slots]) + self.work_ahead[slots] / self.rate

    def predicted_ready_seconds(self, claim_ids: Any) -> np.ndarray:
        """Predicted seconds to stage each claim if committed now (queue included)."""
        slots = live_slots(self, claim_ids)
        src = self.source[slots]
        return self.source_ratio[src] * (
            self.source_latency[src] + (self.queue_bytes[src] + self.nbytes[slots]) / self.source_bandwidth[src])

    def open_ids(self) -> np.ndarray:
        """Ids of every live claim, in slot order."""
        s = np.flatnonzero(self.state[: self.n_slots] != FREE)
        return (self.generation[s].astype(np.int64) << SLOT_BITS) | s

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        """Assert every invariant (expensive; used by tests).  Runtime complexity: O(slots + requests)."""
        check_invariants(self)
