"""Plain-Python model of ``kvmm.policies.CommitmentLedger``, written from docs/tempokv.md ("Semantics") alone.

One dict per open claim, lists per source: slow and obviously correct.  The model of
:class:`kvmm.testing.CommitmentLedgerMachine`, the reference of the ledger tests
and the same-run baseline of the ledger benchmarks.  It raises the
documented :class:`~kvmm.errors.KvmmError` subclasses before changing anything.
"""

from __future__ import annotations

import math

import numpy as np

from kvmm.errors import (
    BadInputError,
    CapacityExceededError,
    DoubleFreeError,
    DTypeError,
    LedgerStateError,
    UnknownKeyError,
)

__all__ = ["LedgerModel"]

FREE, CLAIMED, PENDING, STAGING, READY, CONSUMED = 0, 1, 2, 3, 4, 5
HOLDING = (STAGING, READY, CONSUMED)
MAX_CAPACITY = 2**62
MAX_SECONDS = 1e12
MAX_WORK = 1e15
RATE_LO, RATE_HI = 1e-6, 1e12
RATIO_LO, RATIO_HI = 1e-3, 1e3


def _clip(x, lo, hi):
    return min(max(x, lo), hi)


class LedgerModel:
    """The ledger as docs/tempokv.md describes it: a dict per open claim, lists per source."""

    def __init__(self, capacity_bytes, sources, *, margin_s=0.005, initial_rate=10_000.0, rate_alpha=0.2,
                 ratio_alpha=0.2, initial_slots=1024, ready_lease_s=None):
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool):
            raise DTypeError("capacity_bytes must be an integer")
        if not 0 <= capacity_bytes <= MAX_CAPACITY:
            raise BadInputError("capacity_bytes out of [0, 2**62]")
        if not RATE_LO <= initial_rate <= RATE_HI:
            raise BadInputError("initial_rate out of bounds")
        srcs = list(sources) if isinstance(sources, (list, tuple)) else [sources]
        specs = [getattr(s, "spec", s) for s in srcs]
        self.capacity_bytes = capacity_bytes
        self.margin_s = margin_s
        self.rate_alpha, self.ratio_alpha = rate_alpha, ratio_alpha
        self.ready_lease_s = ready_lease_s
        self.latency = [s.latency_s for s in specs]
        self.bandwidth = [s.read_bandwidth for s in specs]
        self.ratio = [1.0] * len(specs)
        self.rate = float(initial_rate)
        self.poll_gap, self.last_poll, self.use_slack = 0.0, None, 0.0
        self.clock = 0.0
        self.claims: dict[int, dict] = {}  # slot -> the open claim in it
        self.generation: dict[int, int] = {}  # slot -> generation (incremented at release)
        self.released_slots: list[int] = []  # most recently released last
        self.order = 0  # claim order counter
        self.protected_bytes = self.peak_protected_bytes = 0
        self.in_time = self.late = self.commits = self.released = self.expired = 0
        self.released_byte_seconds = 0.0
        self.by_request: dict[int, float] = {}
        self.expired_ids: list[int] = []

    # -- the documented rules
    def queue(self, src):
        return sum(c["nbytes"] for c in self.claims.values() if c["state"] == STAGING and c["source"] == src)

    def use_at(self, c):
        return c["updated_at"] + c["delay_s"] + c["work_ahead"] / self.rate

    def model_time(self, c, queued):
        return self.latency[c["source"]] + (queued + c["nbytes"]) / self.bandwidth[c["source"]]

    def ids(self, slot):
        return self.generation[slot] << 32 | slot

    def _advance(self, now):
        """Check ``now`` (a number, not before the clock) and move the clock to it; every call
        checks its other arguments first, so a refused call changes nothing."""
        if isinstance(now, (bool, str)) or now is None:
            raise DTypeError("now must be a number")
        if not (self.clock <= now <= MAX_SECONDS):
            raise BadInputError("now out of bounds or backwards")
        self.clock = float(now)
        return self.clock

    def _open(self, ids, allowed=None, *, unique=True, releasing=False):
        ids = [int(i) for i in ids]
        slots = []
        for cid in ids:
            slot, gen = cid & 0xFFFFFFFF, cid >> 32
            if cid >= 0 and slot in self.generation and gen < self.generation[slot] and releasing:
                raise DoubleFreeError(f"claim {cid} was already released")
        for cid in ids:
            slot, gen = cid & 0xFFFFFFFF, cid >> 32
            if cid < 0 or slot not in self.claims or self.generation[slot] != gen:
                raise UnknownKeyError(f"claim {cid} is not open")
            slots.append(slot)
        if unique and len(set(ids)) != len(ids):
            raise (DoubleFreeError if releasing else BadInputError)("a claim named twice")
        if allowed is not None and any(self.claims[s]["state"] not in allowed for s in slots):
            raise LedgerStateError("claim in the wrong state")
        return slots

    def _floats(self, xs, k, hi, allow_inf=False):
        xs = [xs] * k if np.ndim(xs) == 0 else list(xs)
        if len(xs) != k:
            raise BadInputError("wrong number of values")
        for x in xs:
            if isinstance(x, (bool, str)) or x is None:
                raise DTypeError("not a number")
            if math.isnan(x) or x < 0 or (x > hi and not (allow_inf and x == math.inf)):
                raise BadInputError("value out of bounds")
        return [float(x) for x in xs]

    # -- API
    def claim_many(self, requests, nbytes, *, now, work_ahead=None, source=None, delay_s=None):
        k = len(requests)
        if len(nbytes) != k:
            raise BadInputError("one nbytes per request")
        if any(r < 0 for r in requests) or any(n < 1 for n in nbytes):
            raise BadInputError("requests >= 0, nbytes >= 1")
        if any(n > self.capacity_bytes for n in nbytes):
            raise CapacityExceededError("claim larger than the capacity")
        wa = [0.0] * k if work_ahead is None else self._floats(work_ahead, k, MAX_WORK)
        dl = [0.0] * k if delay_s is None else self._floats(delay_s, k, MAX_SECONDS)
        src = [0] * k if source is None else list(source)
        if len(src) != k or any(not 0 <= s < len(self.latency) for s in src):
            raise BadInputError("bad source")
        now = self._advance(now)
        out = []
        for i in range(k):
            if self.released_slots:
                slot = self.released_slots.pop()
            else:
                slot = len(self.generation)
                self.generation[slot] = 0
            self.claims[slot] = dict(state=CLAIMED, request=int(requests[i]), nbytes=int(nbytes[i]), source=src[i],
                                     work_ahead=wa[i], delay_s=dl[i], updated_at=now, order=self.order,
                                     deadline=math.inf, needed_at=None, committed_at=None, ready_at=None,
                                     model_at_grant=None, lease_from=None)
            self.order += 1
            out.append(self.ids(slot))
        return out

    def claim(self, request, keys, nbytes, *, now, work_ahead=0.0, source=0, delay_s=0.0):
        return self.claim_many([request], [nbytes], now=now, work_ahead=[work_ahead], source=[source],
                               delay_s=[delay_s])[0]

    def update(self, ids, work_ahead, *, now, delay_s=None):
        slots = self._open(ids)
        wa = self._floats(work_ahead, len(slots), MAX_WORK)
        dl = [0.0] * len(slots) if delay_s is None else self._floats(delay_s, len(slots), MAX_SECONDS)
        now = self._advance(now)
        olds = [self.use_at(self.claims[s]) for s in slots]
        news = [now + d + w / self.rate for w, d in zip(wa, dl)]
        earlier = sum(o - n for o, n in zip(olds, news) if o - n > 0)
        horizon = sum(max(o - now, 0.0) for o in olds)
        if earlier > 0 and horizon > 0:
            self.use_slack = (1 - self.rate_alpha) * self.use_slack + self.rate_alpha * min(earlier / horizon, 1.0)
        for s, w, d, new in zip(slots, wa, dl, news):
            c = self.claims[s]
            if c["state"] == PENDING and c["needed_at"] is None:
                c["deadline"] = new
            if c["state"] == READY:
                c["lease_from"] = now
            c.update(work_ahead=w, delay_s=d, updated_at=now)

    def observe_progress(self, tokens, seconds):
        if not (0 <= tokens <= MAX_WORK) or not (0 < seconds <= MAX_SECONDS) or tokens / seconds > RATE_HI:
            raise BadInputError("progress observation out of bounds")
        self.rate = _clip((1 - self.rate_alpha) * self.rate + self.rate_alpha * (tokens / seconds), RATE_LO, RATE_HI)

    def request(self, ids, *, now, deadline=None):
        slots = self._open(ids, (CLAIMED, PENDING))
        dls = None if deadline is None else self._floats(deadline, len(slots), MAX_SECONDS, allow_inf=True)
        now = self._advance(now)
        for i, s in enumerate(slots):
            c = self.claims[s]
            d = self.use_at(c) if dls is None else dls[i]
            c["deadline"] = min(c["deadline"], d) if c["state"] == PENDING else d
            c["state"] = PENDING

    def expire(self, now):
        now = self._advance(now)
        self.expired_ids = []
        if self.ready_lease_s is not None:
            for s in sorted(self.claims):
                c = self.claims[s]
                if c["state"] == READY and c["lease_from"] + self.ready_lease_s <= now:
                    self.expired_ids.append(self.ids(s))
            for cid in self.expired_ids:
                self._free(cid & 0xFFFFFFFF, now)
            self.expired += len(self.expired_ids)
        return list(self.expired_ids)

    def poll(self, now, *, timely=True, fifo=False):
        if not isinstance(timely, bool) or not isinstance(fifo, bool):
            raise BadInputError("timely and fifo are booleans")
        now = self._advance(now)
        if self.last_poll is not None and now > self.last_poll:
            self.poll_gap = (1 - self.rate_alpha) * self.poll_gap + self.rate_alpha * (now - self.last_poll)
        self.last_poll = now
        self.expire(now)
        if timely:
            queued = {src: self.queue(src) for src in range(len(self.latency))}
            for c in self.claims.values():
                if c["state"] == CLAIMED:
                    use = self.use_at(c)
                    ready_s = self.ratio[c["source"]] * self.model_time(c, queued[c["source"]])
                    if use - ready_s - self.use_slack * max(use - now, 0.0) <= now + (self.margin_s + self.poll_gap):
                        c["state"], c["deadline"] = PENDING, use
        pending = [s for s, c in self.claims.items() if c["state"] == PENDING]
        key = (lambda s: self.claims[s]["order"]) if fifo else (lambda s: (self.claims[s]["deadline"], self.claims[s]["order"]))
        granted = []
        for s in sorted(pending, key=key):
            c = self.claims[s]
            if c["nbytes"] > self.capacity_bytes - self.protected_bytes:
                break
            c["model_at_grant"] = self.model_time(c, self.queue(c["source"]))
            c["state"], c["committed_at"] = STAGING, now
            self.protected_bytes += c["nbytes"]
            self.commits += 1
            granted.append(self.ids(s))
        self.peak_protected_bytes = max(self.peak_protected_bytes, self.protected_bytes)
        if not any(c["state"] == CLAIMED for c in self.claims.values()):
            self.last_poll = None  # no claim awaits its trigger: the time to the next poll is idle, not a poll gap
        return granted

    def mark_ready(self, ids, *, now):
        slots = self._open(ids, (STAGING,))
        now = self._advance(now)
        for s in slots:
            c = self.claims[s]
            sample = _clip((now - c["committed_at"]) / c["model_at_grant"], RATIO_LO, RATIO_HI)
            r = (1 - self.ratio_alpha) * self.ratio[c["source"]] + self.ratio_alpha * sample
            self.ratio[c["source"]] = _clip(r, RATIO_LO, RATIO_HI)
            c.update(state=READY, ready_at=now, lease_from=now)

    def need(self, ids, *, now):
        slots = self._open(ids)
        now = self._advance(now)
        for s in slots:
            c = self.claims[s]
            if c["needed_at"] is None:
                c["needed_at"] = now
            if c["state"] in (CLAIMED, PENDING):
                c["deadline"] = min(c["deadline"], now) if c["state"] == PENDING else now
                c["state"] = PENDING
            elif c["state"] == READY:
                c["lease_from"] = now
        return [self.claims[s]["state"] in (READY, CONSUMED) for s in slots]

    def consume(self, ids, *, now):
        slots = self._open(ids, (READY,))
        now = self._advance(now)
        for s in slots:
            c = self.claims[s]
            first_need = now if c["needed_at"] is None else c["needed_at"]
            if c["ready_at"] <= first_need:
                self.in_time += 1
            else:
                self.late += 1
            c["needed_at"], c["state"] = first_need, CONSUMED

    def release(self, ids, *, now):
        slots = self._open(ids, releasing=True)
        now = self._advance(now)
        return [self._free(s, now) for s in slots]

    def _free(self, slot, now):
        c = self.claims.pop(slot)
        held = c["nbytes"] * (now - c["committed_at"]) if c["state"] in HOLDING else 0.0
        if c["state"] in HOLDING:
            self.protected_bytes -= c["nbytes"]
        self.by_request[c["request"]] = self.by_request.get(c["request"], 0.0) + held
        self.released_byte_seconds += held
        self.generation[slot] += 1
        self.released_slots.append(slot)
        self.released += 1
        return held

    # -- queries
    @property
    def free_bytes(self):
        return self.capacity_bytes - self.protected_bytes

    @property
    def open_claims(self):
        return len(self.claims)

    @property
    def stats(self):
        return {"claims": self.order, "commits": self.commits, "released": self.released, "open": len(self.claims),
                "ready_in_time": self.in_time, "ready_late": self.late, "protected_bytes": self.protected_bytes,
                "peak_protected_bytes": self.peak_protected_bytes,
                "released_byte_seconds": self.released_byte_seconds, "expired": self.expired}

    def predicted_use_time(self, ids):
        return np.array([self.use_at(self.claims[s]) for s in self._open(ids, unique=False)])

    def predicted_ready_seconds(self, ids):
        return np.array([self.ratio[c["source"]] * self.model_time(c, self.queue(c["source"]))
                         for c in (self.claims[s] for s in self._open(ids, unique=False))])

    def byte_seconds_by_request(self):
        return dict(self.by_request)

    def open_ids(self):
        return [self.ids(s) for s in sorted(self.claims)]

    def state_of(self, ids):
        return [self.claims[s]["state"] for s in self._open(ids, unique=False)]

    def queues(self):
        return [self.queue(src) for src in range(len(self.latency))]
