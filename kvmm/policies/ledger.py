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
   large claim cannot starve).  ``poll_gap`` is the learned (EWMA) time between polls: the trigger must fire at the
   last poll before the ideal moment, not the first one after it; ``use_slack`` is the learned
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
from kvmm._validate import as_array, as_count, as_fraction, as_index_array, as_key_array, as_positive_float
from kvmm.errors import (
    BadInputError,
    CapacityExceededError,
    DoubleFreeError,
    DTypeError,
    LedgerStateError,
    ShapeError,
    UnknownKeyError,
)
from kvmm.policies._ledger_kernels import check_claims_kernel, idle_polls_kernel, poll_kernel, update_kernel

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

FREE, CLAIMED, PENDING, STAGING, READY, CONSUMED = 0, 1, 2, 3, 4, 5
STATE_NAMES = ("free", "claimed", "pending", "staging", "ready", "consumed")
_HOLDING = (STAGING, READY, CONSUMED)  # states that hold protected capacity
_ALL_STATES = (1 << 8) - 1  # check_claims_kernel's state mask that lets every state through
_SLOT_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1
_MAX_SLOTS = 1 << 28  # a slot index must fit the id's 32 low bits; 2**28 open claims is plenty

# Sane bounds: every int64 sum of byte counts (protected bytes, a source's queue + one claim)
# stays below 2**63, and every time computed from the inputs stays finite.
MAX_CAPACITY_BYTES = 1 << 62
RATE_BOUNDS = (1e-6, 1e12)  # learned progress rate, tokens/s (an observation above the top is refused)
RATIO_BOUNDS = (1e-3, 1e3)  # learned observed/predicted staging-time ratio (each observation clipped)
MAX_SECONDS = 1e12  # now, delays, deadlines, leases (about 31,700 years)
MAX_WORK = 1e15  # tokens of work ahead of a claim, or per progress observation


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
        (``poll_gap``: learned EWMA of the time between polls; ``use_slack``: learned EWMA of the
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
        margin_s = _bounded_float(margin_s, "margin_s", 0.0, MAX_SECONDS)
        initial_rate = _bounded_float(initial_rate, "initial_rate", *RATE_BOUNDS)
        rate_alpha = as_fraction(rate_alpha, "rate_alpha")
        ratio_alpha = as_fraction(ratio_alpha, "ratio_alpha")
        initial_slots = as_count(initial_slots, "initial_slots", minimum=1)
        if initial_slots > _MAX_SLOTS:
            raise BadInputError(f"initial_slots must be <= {_MAX_SLOTS}, got {initial_slots}")
        if ready_lease_s is not None:
            ready_lease_s = _bounded_float(ready_lease_s, "ready_lease_s", 0.0, MAX_SECONDS)
            if ready_lease_s == 0.0:
                raise BadInputError("ready_lease_s must be > 0 seconds (or None for no lease), got 0")
        src_list = list(sources) if isinstance(sources, (list, tuple)) else [sources]
        if not src_list:
            raise BadInputError("sources must name at least one slow tier (a TierSpec); got none")
        specs = [_spec_of(s, i) for i, s in enumerate(src_list)]

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
        self._alloc_slots(n)
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
        t = self.clock if now is None else self._check_now(now)
        s = self.n_slots
        holding = np.isin(self.state[:s], _HOLDING)
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
        source = self._check_source(source)
        if (keys is None and isinstance(work_ahead, float) and isinstance(delay_s, float) and 0.0 <= work_ahead <= MAX_WORK
                and 0.0 <= delay_s <= MAX_SECONDS and nbytes <= self._capacity and self.open_claims < _MAX_SLOTS
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
            self._keys[int(ids[0]) & _SLOT_MASK] = key_arr
        return int(ids[0])

    def _claim_one(self, request: int, nbytes: int, now: float, work_ahead: float, source: int, delay_s: float) -> int:
        """:meth:`claim_many` of one validated claim, with scalar writes (the simulator's hot path)."""
        self.clock = now
        s = int(self._take_slots(1)[0])
        self._write_claims(s, request, nbytes, source, work_ahead, delay_s, now, self.next_seq, 1)
        return (int(self.generation[s]) << _SLOT_BITS) | s

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
        wa = np.zeros(k) if work_ahead is None else _as_float_array(work_ahead, "work_ahead", k, maximum=MAX_WORK)
        dl = np.zeros(k) if delay_s is None else _as_float_array(delay_s, "delay_s", k, maximum=MAX_SECONDS)
        src = np.zeros(k, dtype=np.int32) if source is None else as_index_array(source, "source", dtype=np.int32)
        if src.shape[0] != k:
            raise BadInputError(f"source has {src.shape[0]} entries; expected {k}")
        if k and (int(src.min()) < 0 or int(src.max()) >= self.num_sources):
            raise BadInputError(f"source ids must be in [0, {self.num_sources}), got {src.tolist()[:8]}")
        if self.open_claims + k > _MAX_SLOTS:
            raise CapacityExceededError(f"{self.open_claims} open claims + {k} new ones exceed the ledger's "
                                        f"{_MAX_SLOTS} slots; release claims first")
        now = self._check_now(now)
        # all input valid: change state
        self.clock = now
        slots = self._take_slots(k)
        self._write_claims(slots, req, nb, src, wa, dl, now, np.arange(self.next_seq, self.next_seq + k, dtype=np.int64), k)
        return (self.generation[slots].astype(np.int64) << _SLOT_BITS) | slots.astype(np.int64)

    def _write_claims(self, slots: Any, request: Any, nbytes: Any, source: Any, work_ahead: Any, delay_s: Any,
                      now: float, seq: Any, k: int) -> None:
        """New CLAIMED records in ``slots`` (one slot and scalars, or ``k`` slots and arrays)."""
        self.state[slots] = CLAIMED
        self.claim_request[slots] = request
        self.nbytes[slots] = nbytes
        self.source[slots] = source
        self.work_ahead[slots] = work_ahead
        self.delay_s[slots] = delay_s
        self.updated_at[slots] = now
        self.deadline[slots] = np.inf
        self.claimed_at[slots] = now
        for name in ("committed_at", "predicted_stage_s", "model_stage_s", "ready_at", "lease_from", "needed_at"):
            getattr(self, name)[slots] = np.nan
        self.seq[slots] = seq
        self.next_seq += k
        self.open_claims += k
        self.claims_total += k

    def update(self, claim_ids: Any, work_ahead: Any, *, now: float, delay_s: Any = None) -> None:
        """Report fresh runtime progress: after ``delay_s`` seconds (default 0), ``work_ahead``
        tokens remain before each claim's use.

        A PENDING claim's deadline moves with its new predicted use time (a claim pushed back
        must not keep the capacity priority of its old, early deadline), except a claim that
        was :meth:`need`-ed, whose deadline stays the moment it was needed.  A READY claim's
        lease (``ready_lease_s``) is renewed.  Each id at most once per call.
        Runtime complexity: O(k).
        """
        slots = self._live_slots(claim_ids, unique=True)
        k = slots.shape[0]
        wa = _as_float_array(work_ahead, "work_ahead", k, maximum=MAX_WORK)
        dl = np.zeros(k) if delay_s is None else _as_float_array(delay_s, "delay_s", k, maximum=MAX_SECONDS)
        now = self._check_now(now)
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
        tokens = _bounded_float(tokens, "tokens", 0.0, MAX_WORK)
        seconds = _bounded_float(seconds, "seconds", 0.0, MAX_SECONDS)
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
        slots = self._live_slots(claim_ids, unique=True, allowed=(CLAIMED, PENDING), verb="request a commitment for",
                                 hint="only claimed or pending claims can request a commitment")
        dl = None if deadline is None else _as_float_array(deadline, "deadline", slots.shape[0], maximum=MAX_SECONDS,
                                                           allow_inf=True)
        now = self._check_now(now)
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
        now = self._check_now(now)
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
        if ng == 0:
            return np.zeros(0, dtype=np.int64)
        slots = out[:ng].copy()
        self.protected_bytes += int(self.nbytes[slots].sum())
        self.peak_protected_bytes = max(self.peak_protected_bytes, self.protected_bytes)
        self.commits_total += ng
        return (self.generation[slots].astype(np.int64) << _SLOT_BITS) | slots

    def skip_idle_polls(self, first: float, interval: float, *, before: float, until: float,
                        timely: bool = True, fifo: bool = False) -> float:
        """Fast-forward a periodic poller over the polls that would change no claim.

        A caller that polls at ``first, first + interval, ...`` (each time the previous one plus
        ``interval``) while no other event happens (polls strictly ``< before`` and ``<= until``)
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
        first = self._check_now(first)
        interval = as_positive_float(interval, "interval")
        before, until = float(before), float(until)
        if self.ready_lease_s is not None:
            return first  # a poll that expires READY leases is never idle: skip nothing
        t, gap, last, skipped = idle_polls_kernel(
            self.state, self.nbytes, self.source, self.work_ahead, self.delay_s, self.updated_at, self.deadline, self.seq,
            self.n_slots, first, interval, before, until, self.margin_s, self.poll_gap, self.last_poll, self.rate_alpha,
            self.use_slack, self.rate, self.source_latency, self.source_bandwidth, self.source_ratio, self.queue_bytes,
            self._capacity - self.protected_bytes, bool(timely), bool(fifo))
        if skipped:
            self.poll_gap, self.last_poll, self.clock = gap, last, last
        return t

    def expire(self, now: float) -> np.ndarray:
        """Release READY claims whose lease (``ready_lease_s``) ran out by ``now``; return their ids.

        A lease runs from :meth:`mark_ready`, renewed by :meth:`need` and :meth:`update`; it
        expires when ``now >= lease start + ready_lease_s``.  Expired claims are released as by
        :meth:`release` (their byte-seconds counted) and counted in ``stats["expired"]``.  No
        lease (``ready_lease_s=None``): nothing expires.  Runtime complexity: O(slots).
        """
        now = self._check_now(now)
        self.clock = now
        self.expired_ids = np.zeros(0, dtype=np.int64)
        if self.ready_lease_s is None:
            return self.expired_ids.copy()
        n = self.n_slots
        due = np.flatnonzero((self.state[:n] == READY) & (self.lease_from[:n] + self.ready_lease_s <= now))
        if due.shape[0]:
            ids = (self.generation[due].astype(np.int64) << _SLOT_BITS) | due
            self._release_slots(due, now)
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
        slots = self._live_slots(claim_ids, unique=True, allowed=(STAGING,), verb="mark ready",
                                 hint="only staging claims can become ready")
        now = self._check_now(now)
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
        slots = self._live_slots(claim_ids, unique=True)
        now = self._check_now(now)
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
        slots = self._live_slots(claim_ids, unique=True, allowed=(READY,), verb="consume",
                                 hint="stage it (poll, mark_ready) before consuming")
        now = self._check_now(now)
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
        ids = as_index_array(claim_ids, "claim_ids")
        for cid in ids.tolist():
            if self._is_released(cid):
                what = "was already released (or its ready lease expired)" if self.ready_lease_s else "was already released"
                raise DoubleFreeError(f"claim {cid} {what}; release each claim once")
        slots = self._live_slots(ids, unique=True, repeat_is_double_free=True)
        now = self._check_now(now)
        self.clock = now
        return self._release_slots(slots, now)

    def _release_slots(self, slots: np.ndarray, now: float) -> np.ndarray:
        """Free validated, distinct live ``slots`` at ``now``; return their byte-seconds."""
        out = np.zeros(slots.shape[0], dtype=np.float64)
        for i, s in enumerate(slots.tolist()):
            st = self.state[s]
            if st in _HOLDING:
                out[i] = float(self.nbytes[s]) * (now - float(self.committed_at[s]))
                self.protected_bytes -= int(self.nbytes[s])
                if st == STAGING:
                    self.queue_bytes[self.source[s]] -= self.nbytes[s]
            req = int(self.claim_request[s])
            self._request_byte_seconds[req] = self._request_byte_seconds.get(req, 0.0) + float(out[i])
            self.state[s] = FREE
            self.generation[s] += 1
            self.free_stack[self.free_top] = s
            self.free_top += 1
            self._keys.pop(s, None)
        self.open_claims -= slots.shape[0]
        self.released_total += slots.shape[0]
        self.released_byte_seconds += float(out.sum())
        return out

    # ------------------------------------------------------------------ queries
    def state_of(self, claim_ids: Any) -> np.ndarray:
        """State codes (see :data:`STATE_NAMES`) of live claims."""
        return self.state[self._live_slots(claim_ids)].copy()

    def byte_seconds_by_request(self) -> dict[int, float]:
        """Protected byte-seconds per request, summed over its released claims (a copy)."""
        return dict(self._request_byte_seconds)

    def keys_of(self, claim_id: int) -> np.ndarray | None:
        """The keys given at :meth:`claim` (``(n, 2)`` uint64), or None."""
        slot = int(self._live_slots([claim_id])[0])
        k = self._keys.get(slot)
        return None if k is None else k.copy()

    def predicted_use_time(self, claim_ids: Any) -> np.ndarray:
        """Absolute predicted use times: ``updated_at + delay_s + work_ahead / rate``."""
        slots = self._live_slots(claim_ids)
        return (self.updated_at[slots] + self.delay_s[slots]) + self.work_ahead[slots] / self.rate

    def predicted_ready_seconds(self, claim_ids: Any) -> np.ndarray:
        """Predicted seconds to stage each claim if committed now (queue included)."""
        slots = self._live_slots(claim_ids)
        src = self.source[slots]
        return self.source_ratio[src] * (
            self.source_latency[src] + (self.queue_bytes[src] + self.nbytes[slots]) / self.source_bandwidth[src])

    def open_ids(self) -> np.ndarray:
        """Ids of every live claim, in slot order."""
        s = np.flatnonzero(self.state[: self.n_slots] != FREE)
        return (self.generation[s].astype(np.int64) << _SLOT_BITS) | s

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        """Assert every invariant (expensive; used by tests).  Runtime complexity: O(slots + requests)."""
        s = self.n_slots
        st = self.state[:s]
        # states are valid codes; slots past the high-water mark were never used
        assert np.all((st >= FREE) & (st <= CONSUMED)), "invalid state code"
        assert np.all(self.state[s:] == FREE), "slot beyond high-water mark in use"
        holding = np.isin(st, _HOLDING)
        # every protected byte belongs to exactly one committed claim
        assert int(self.nbytes[:s][holding].sum()) == self.protected_bytes, "protected bytes not accounted for"
        # protected capacity is never exceeded
        assert 0 <= self.protected_bytes <= self._capacity <= MAX_CAPACITY_BYTES, "protected bytes over capacity"
        assert self.peak_protected_bytes >= self.protected_bytes, "peak below current"
        assert self.peak_protected_bytes <= self._capacity, "peak over capacity"
        # the staging queue of each source is exactly its STAGING claims' bytes
        staging = st == STAGING
        q = np.zeros_like(self.queue_bytes)
        np.add.at(q, self.source[:s][staging], self.nbytes[:s][staging])
        assert np.array_equal(q, self.queue_bytes), "staging queue bytes mismatch"
        # live claims are counted; the free stack holds exactly the released (free) used slots
        live = int(np.count_nonzero(st != FREE))
        assert live == self.open_claims, "open claim count mismatch"
        free_slots = self.free_stack[: self.free_top]
        assert free_slots.shape[0] == s - live, "free stack size mismatch"
        assert np.unique(free_slots).shape[0] == free_slots.shape[0], "slot twice on the free stack"
        assert np.all(st[free_slots] == FREE), "free stack holds a live slot"
        # every claim ever made is open or released; every consumed claim was judged once
        assert self.claims_total == self.open_claims + self.released_total, "claims not accounted for"
        assert self.consumed_in_time + self.consumed_late <= self.commits_total, "more consumptions than commits"
        # live claims carry sane sizes, sources and timestamps
        lv = st != FREE
        assert np.all(self.work_ahead[:s][lv] >= 0) and np.all(self.delay_s[:s][lv] >= 0), "negative time until use"
        assert np.all(self.nbytes[:s][lv] >= 1) and np.all(self.nbytes[:s][lv] <= self._capacity), "bad claim size"
        assert np.all((self.source[:s][lv] >= 0) & (self.source[:s][lv] < self.num_sources)), "bad source"
        assert np.all(self.claimed_at[:s][lv] <= self.clock), "claim from the future"
        assert np.all(self.committed_at[:s][holding] >= self.claimed_at[:s][holding]), "commit before claim"
        rd = np.isin(st, (READY, CONSUMED))
        assert np.all(self.ready_at[:s][rd] >= self.committed_at[:s][rd]), "ready before commit"
        assert np.all(np.isnan(self.committed_at[:s][np.isin(st, (CLAIMED, PENDING))])), "uncommitted claim with a commit time"
        # keys are stored only for live slots
        assert all(self.state[k] != FREE for k in self._keys), "keys kept for a released claim"
        # estimators stay positive and finite
        assert RATE_BOUNDS[0] <= self.rate <= RATE_BOUNDS[1], "progress rate outside its bounds"
        assert self.poll_gap >= 0.0 and math.isfinite(self.poll_gap), "bad poll gap"
        assert 0.0 <= self.use_slack <= 1.0, "use slack is a share of the time until use"
        lo, hi = RATIO_BOUNDS
        assert np.all((self.source_ratio >= lo) & (self.source_ratio <= hi)), "staging ratio outside its bounds"
        # times stay within their bounds (finite arithmetic)
        assert 0.0 <= self.clock <= MAX_SECONDS, "clock out of bounds"
        assert np.all(self.work_ahead[:s][lv] <= MAX_WORK) and np.all(self.delay_s[:s][lv] <= MAX_SECONDS), "time until use out of bounds"
        # committed claims know their bandwidth-model staging time; READY claims their lease start
        assert np.all(self.model_stage_s[:s][holding] > 0.0), "committed claim without a model staging time"
        assert np.all(self.lease_from[:s][st == READY] >= self.ready_at[:s][st == READY]), "lease before ready"
        # expired claims were released
        assert 0 <= self.expired_total <= self.released_total, "more expired than released claims"
        assert self.released_byte_seconds >= 0.0, "negative byte-seconds"
        # per-request byte-seconds add up to the released total
        assert math.isclose(sum(self._request_byte_seconds.values()), self.released_byte_seconds,
                            rel_tol=1e-9, abs_tol=1e-6), "per-request byte-seconds do not add up"

    # ------------------------------------------------------------------ helpers
    def _alloc_slots(self, n: int) -> None:
        self.state = np.zeros(n, dtype=np.int8)
        self.generation = np.zeros(n, dtype=np.int64)
        self.claim_request = np.zeros(n, dtype=np.int64)
        self.nbytes = np.zeros(n, dtype=np.int64)
        self.source = np.zeros(n, dtype=np.int32)
        self.seq = np.zeros(n, dtype=np.int64)
        self.work_ahead = np.zeros(n, dtype=np.float64)
        self.delay_s = np.zeros(n, dtype=np.float64)
        self.updated_at = np.zeros(n, dtype=np.float64)
        self.deadline = np.full(n, np.inf, dtype=np.float64)
        self.claimed_at = np.full(n, np.nan, dtype=np.float64)
        self.committed_at = np.full(n, np.nan, dtype=np.float64)
        self.predicted_stage_s = np.full(n, np.nan, dtype=np.float64)
        self.model_stage_s = np.full(n, np.nan, dtype=np.float64)  # bandwidth-model staging time, no ratio
        self.lease_from = np.full(n, np.nan, dtype=np.float64)  # READY: when the lease (re)started
        self.ready_at = np.full(n, np.nan, dtype=np.float64)
        self.needed_at = np.full(n, np.nan, dtype=np.float64)
        self.free_stack = np.zeros(n, dtype=np.int64)
        self.poll_out = np.zeros(n, dtype=np.int64)  # scratch: slots granted by one poll

    _SLOT_ARRAYS = ("state", "generation", "claim_request", "nbytes", "source", "seq", "work_ahead", "delay_s", "updated_at",
                    "deadline", "claimed_at", "committed_at", "predicted_stage_s", "model_stage_s", "lease_from", "ready_at", "needed_at",
                    "free_stack", "poll_out")

    def _take_slots(self, k: int) -> np.ndarray:
        """Pop ``k`` slots: released ones first (LIFO), then never-used ones in order."""
        reuse = min(k, self.free_top)
        out = np.empty(k, dtype=np.int64)
        out[:reuse] = self.free_stack[self.free_top - reuse : self.free_top][::-1]
        self.free_top -= reuse
        fresh = k - reuse
        if self.n_slots + fresh > self.state.shape[0]:
            self._grow(self.n_slots + fresh)
        out[reuse:] = np.arange(self.n_slots, self.n_slots + fresh)
        self.n_slots += fresh
        return out

    def _grow(self, need: int) -> None:
        n = self.state.shape[0]
        while n < need:
            n *= 2
        for name in self._SLOT_ARRAYS:
            old = getattr(self, name)
            new = np.empty(n, dtype=old.dtype)
            new[: old.shape[0]] = old
            fill = {"state": 0, "generation": 0, "claim_request": 0, "nbytes": 0, "source": 0, "seq": 0,
                    "work_ahead": 0.0, "delay_s": 0.0, "updated_at": 0.0, "deadline": np.inf, "free_stack": 0, "poll_out": 0}.get(name, np.nan)
            new[old.shape[0]:] = fill
            setattr(self, name, new)

    def _live_slots(self, claim_ids: Any, *, unique: bool = False, allowed: tuple = (), verb: str = "",
                    hint: str = "", repeat_is_double_free: bool = False) -> np.ndarray:
        """Slots of the open claims ``claim_ids`` (``unique``: each id at most once, else
        :class:`BadInputError`, or :class:`DoubleFreeError` if ``repeat_is_double_free``;
        ``allowed``: states the claims must be in, else :class:`LedgerStateError`).

        One numba pass (``check_claims_kernel``) checks everything; the error is raised here.
        """
        ids = as_index_array(claim_ids, "claim_ids")
        mask = _ALL_STATES if not allowed else sum(1 << a for a in allowed)
        code, value, slots = check_claims_kernel(ids, self.state, self.generation, self.n_slots, unique, mask)
        if code == 1:
            cid = int(value)
            what = "was released" if self._is_released(cid) else "was never issued"
            raise UnknownKeyError(f"claim {cid} {what}; expected the id of an open claim")
        if code == 2 and repeat_is_double_free:
            raise DoubleFreeError(f"claim_ids {ids.tolist()[:8]} name a claim twice; release each claim once")
        if code == 2:
            raise BadInputError(f"claim_ids name claim {int(value)} more than once; "
                                "expected each claim at most once per call")
        if code == 3:
            s = int(value)
            raise LedgerStateError(f"cannot {verb} the claim in slot {s}: it is {STATE_NAMES[self.state[s]]}; {hint}")
        return slots

    def _is_released(self, cid: int) -> bool:
        if cid < 0:
            return False
        slot, gen = cid & _SLOT_MASK, cid >> _SLOT_BITS
        if slot >= self.n_slots:
            return False
        return gen < int(self.generation[slot])

    def _check_source(self, source: Any) -> int:
        source = as_count(source, "source")
        if source >= self.num_sources:
            raise BadInputError(f"source must be in [0, {self.num_sources}), got {source}")
        return source

    def _check_now(self, now: Any) -> float:
        if type(now) is float and self.clock <= now <= MAX_SECONDS:  # fast path (hot in simulations)
            return now
        t = _bounded_float(now, "now", 0.0, MAX_SECONDS)
        if t < self.clock:
            raise BadInputError(f"now={t} is earlier than the ledger clock {self.clock}; time must not go backwards")
        return t


# ---------------------------------------------------------------------- helpers
def _spec_of(source: Any, i: int):
    spec = getattr(source, "spec", source)
    for attr in ("read_bandwidth", "latency_s"):
        if not hasattr(spec, attr):
            raise BadInputError(f"sources[{i}] must be a TierSpec (or have a .spec TierSpec), got {type(source).__name__}")
    as_positive_float(spec.read_bandwidth, f"sources[{i}].read_bandwidth")
    as_positive_float(spec.latency_s, f"sources[{i}].latency_s", allow_zero=True)
    return spec


def _as_float_array(x: Any, name: str, k: int, *, maximum: float, allow_inf: bool = False) -> np.ndarray:
    """``x`` (a number or ``k`` numbers) as a new float64 array of values in ``[0, maximum]`` (or inf)."""
    if type(x) is float and 0.0 <= x <= maximum:  # fast paths (hot in simulations)
        return np.full(k, x)
    if type(x) is np.ndarray and x.dtype == np.float64 and x.shape == (k,) and k:
        lo, hi = x.min(), x.max()  # NaN fails both comparisons and takes the general path
        if lo >= 0.0 and hi <= maximum:
            return x.copy()
    arr = as_array(x, name)
    if arr.ndim == 0:
        arr = np.full(k, arr)
    if arr.dtype.kind not in "iuf":
        raise DTypeError(f"{name} must be numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=True)
    if arr.shape != (k,):
        raise ShapeError(f"{name} has shape {arr.shape}; expected ({k},)")
    bad = np.isnan(arr) | (arr < 0) | ((arr > maximum) & ~(np.isinf(arr) & allow_inf))
    if bad.any():
        what = f"numbers in [0, {maximum:.0e}]" + (" or inf" if allow_inf else "")
        raise BadInputError(f"{name} must be {what}, got {arr[bad][0]!r}")
    return arr


def _bounded_float(x: Any, name: str, lo: float, hi: float) -> float:
    """``x`` as a float in ``[lo, hi]``; rejects bools, NaN, inf and non-numbers."""
    if isinstance(x, (bool, np.bool_)):
        raise DTypeError(f"{name} must be a number, got {x!r}")
    v = as_positive_float(x, name, allow_zero=True)
    if not lo <= v <= hi:
        raise BadInputError(f"{name} must be in [{lo:g}, {hi:g}], got {x!r}")
    return v
