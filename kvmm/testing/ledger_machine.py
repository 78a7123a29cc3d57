"""A documented model of the commitment ledger and a Hypothesis state machine that checks a ledger against it.

``LedgerModel`` is written from docs/tempokv.md ("Semantics") alone: one dict per claim, plain
Python, slow and obviously correct.  ``CommitmentLedgerMachine`` drives a model and a real
:class:`~kvmm.policies.ledger.CommitmentLedger` with the same calls (valid ones, and repeated,
released, foreign and wrong-state ids, bad times and values); after a call that raises, the
ledger must be exactly as before (every attribute compared) and have raised the same error class
as the model; ``check()`` of the ledger is an invariant after every step.  Use it in a test
module as::

    from kvmm.testing.ledger_machine import CommitmentLedgerMachine
    TestCommitmentLedger = CommitmentLedgerMachine.TestCase

Imports Hypothesis: import this module from tests only.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvmm.errors import (
    BadInputError,
    CapacityExceededError,
    DoubleFreeError,
    DTypeError,
    KvmmError,
    LedgerStateError,
    UnknownKeyError,
)

__all__ = ["LedgerModel", "CommitmentLedgerMachine", "ledger_snapshot", "same_snapshot"]

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

    def _time(self, now):
        if isinstance(now, (bool, str)) or now is None:
            raise DTypeError("now must be a number")
        if not (self.clock <= now <= MAX_SECONDS):
            raise BadInputError("now out of bounds or backwards")
        return float(now)

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
        now = self._time(now)
        self.clock = now
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
        now = self._time(now)
        self.clock = now
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
        now = self._time(now)
        self.clock = now
        for i, s in enumerate(slots):
            c = self.claims[s]
            d = self.use_at(c) if dls is None else dls[i]
            c["deadline"] = min(c["deadline"], d) if c["state"] == PENDING else d
            c["state"] = PENDING

    def expire(self, now):
        now = self._time(now)
        self.clock = now
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
        now = self._time(now)
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
        return granted

    def mark_ready(self, ids, *, now):
        slots = self._open(ids, (STAGING,))
        now = self._time(now)
        self.clock = now
        for s in slots:
            c = self.claims[s]
            sample = _clip((now - c["committed_at"]) / c["model_at_grant"], RATIO_LO, RATIO_HI)
            r = (1 - self.ratio_alpha) * self.ratio[c["source"]] + self.ratio_alpha * sample
            self.ratio[c["source"]] = _clip(r, RATIO_LO, RATIO_HI)
            c.update(state=READY, ready_at=now, lease_from=now)

    def need(self, ids, *, now):
        slots = self._open(ids)
        now = self._time(now)
        self.clock = now
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
        now = self._time(now)
        self.clock = now
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
        now = self._time(now)
        self.clock = now
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


# ---------------------------------------------------------------------- snapshots
def ledger_snapshot(obj) -> dict:
    """Deep copy of every attribute of ``obj`` (arrays, dicts of arrays and lists copied)."""
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, np.ndarray):
            out[k] = v.copy()
        elif isinstance(v, dict):
            out[k] = {kk: (vv.copy() if isinstance(vv, np.ndarray) else vv) for kk, vv in v.items()}
        elif isinstance(v, list):
            out[k] = list(v)
        else:
            out[k] = v
    return out


def same_snapshot(a: dict, b: dict) -> None:
    """Assert two :func:`ledger_snapshot` results are equal (NaN equals NaN)."""
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), k
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), k
            for kk in x:
                assert np.array_equal(np.asarray(x[kk]), np.asarray(y[kk])), (k, kk)
        elif isinstance(x, float) and x != x:
            assert y != y, k
        else:
            assert x == y, k


# ---------------------------------------------------------------------- the machine
CAPACITY = 1000
_times = st.sampled_from([0.0, 0.001, 0.005, 0.02, 0.1, 0.5, 2.0])
_work = st.sampled_from([0.0, 5.0, 50.0, 200.0, 1000.0, 1e5])
_BAD_NUMBERS = [-1.0, float("nan"), float("inf"), 1e300, "1", None, True]
_maybe_bad = st.sampled_from([None] * 12 + _BAD_NUMBERS)  # None: no fault
_FOREIGN = (999, -1, 1 << 40, (7 << 32) | 3)  # never issued here (another ledger's, or nonsense)


def _spec(name, bandwidth, latency):
    from kvmm.tiers.spec import TierSpec

    return TierSpec(name, 10**9, read_bandwidth=bandwidth, write_bandwidth=bandwidth, latency_s=latency)


class CommitmentLedgerMachine(RuleBasedStateMachine):
    """Drive :class:`~kvmm.policies.ledger.CommitmentLedger` and :class:`LedgerModel` with the same calls.

    Ids are drawn from the open claims in the states a call allows, then sometimes spoiled: a
    repeated id, a released id, a foreign id or an id in the wrong state.  Every call goes to
    both; when the model raises, the ledger must raise the same error class and stay exactly
    as it was; otherwise their results must agree.  Override :meth:`make_ledger` to test a
    subclass or another implementation of the same API.
    """

    def __init__(self):
        super().__init__()
        self.ledger = self.model = None
        self.now = 0.0
        self.released: list[int] = []
        self.spoiled: str | None = None  # how the latest draw_ids spoiled its ids, if it did

    def make_ledger(self, capacity, sources, **kw):
        from kvmm.policies.ledger import CommitmentLedger

        return CommitmentLedger(capacity, sources, **kw)

    @initialize(lease=st.sampled_from([None, 0.3, 2.0]), alpha=st.sampled_from([0.5, 1.0]))
    def setup(self, lease, alpha):
        sources = [_spec("slow", 1000.0, 0.01), _spec("slower", 100.0, 0.1)]
        kw = dict(margin_s=0.01, initial_rate=100.0, rate_alpha=alpha, ratio_alpha=alpha, initial_slots=2,
                  ready_lease_s=lease)
        self.ledger = self.make_ledger(CAPACITY, sources, **kw)
        self.model = LedgerModel(CAPACITY, sources, **kw)

    # -- helpers
    def both(self, name, *args, **kw):
        """Call ``name`` on the model and the ledger; return both results (None, None after an error)."""
        try:
            expected = getattr(self.model, name)(*args, **kw)
        except KvmmError as err:
            before = ledger_snapshot(self.ledger)
            try:
                getattr(self.ledger, name)(*args, **kw)
            except KvmmError as got:
                assert isinstance(got, type(err)), f"{name}: ledger raised {got!r}, model {err!r}"
            else:
                raise AssertionError(f"{name}{args} {kw}: model raised {err!r}, the ledger did not")
            same_snapshot(before, ledger_snapshot(self.ledger))
            return None, None
        return expected, getattr(self.ledger, name)(*args, **kw)

    def ids_in(self, states):
        ids = self.model.open_ids()
        return [c for c, s in zip(ids, self.model.state_of(ids)) if s in states]

    def draw_ids(self, data, states):
        """Ids of open claims in ``states``, sometimes spoiled (which way: :attr:`spoiled`)."""
        ids = data.draw(st.lists(st.sampled_from(self.ids_in(states)), min_size=1, max_size=3, unique=True)) \
            if self.ids_in(states) else []
        spoil = data.draw(st.sampled_from(["none"] * 10 + ["repeat", "released", "foreign", "wrong"]))
        if spoil == "repeat" and ids:
            ids.append(ids[0])
        elif spoil == "released" and self.released and len(ids) < 3:
            ids.append(data.draw(st.sampled_from(self.released)))
        elif spoil == "foreign":
            ids.append(data.draw(st.sampled_from(_FOREIGN)))
        elif spoil == "wrong":
            other = [c for c in self.model.open_ids() if c not in self.ids_in(states)]
            if other:
                ids.append(data.draw(st.sampled_from(other)))
        else:
            spoil = "none"
        if not ids:
            ids, spoil = [data.draw(st.sampled_from(_FOREIGN))], "foreign"
        self.spoiled = None if spoil == "none" else spoil
        return ids

    # -- rules
    @rule(dt=_times)
    def advance(self, dt):
        self.now += dt

    @rule(request=st.integers(0, 5), nbytes=st.integers(1, 400), wa=_work, source=st.integers(0, 1), delay=_times,
          fault=st.sampled_from([None, None, None, ("nbytes", 0), ("nbytes", -3), ("nbytes", CAPACITY + 1),
                                 ("source", 2), ("request", -1), ("delay", float("nan"))]))
    def claim(self, request, nbytes, wa, source, delay, fault):
        # at most one fault per call: the docs do not order the checks of several
        args = dict(request=request, nbytes=nbytes, source=source, delay=delay) | dict([fault] if fault else [])
        a, b = self.both("claim", args["request"], None, args["nbytes"], now=self.now, work_ahead=wa,
                         source=args["source"], delay_s=args["delay"])
        assert a == b

    @rule(k=st.integers(1, 4), nbytes=st.integers(1, 300), bad=_maybe_bad)
    def claim_many(self, k, nbytes, bad):
        wa = None if bad is None else [bad] * k
        a, b = self.both("claim_many", list(range(k)), [nbytes + i for i in range(k)], now=self.now, work_ahead=wa)
        assert a == (None if b is None else b.tolist())

    @precondition(lambda self: self.model.claims)
    @rule(data=st.data(), wa=_work, delay=st.none() | _times, bad=_maybe_bad)
    def update(self, data, wa, delay, bad):
        ids = self.draw_ids(data, (CLAIMED, PENDING, STAGING, READY, CONSUMED))
        vals = [wa * (i + 1) for i in range(len(ids))]
        if bad is not None and self.spoiled is None:
            vals[-1] = bad
        self.both("update", ids, vals, now=self.now, delay_s=None if delay is None else [delay] * len(ids))

    @rule(tokens=st.sampled_from([0.0, 10.0, 100.0, 1000.0, 1e308, -1.0]),
          seconds=st.sampled_from([0.01, 0.1, 1.0, 1e-308, 0.0]))
    def observe(self, tokens, seconds):
        self.both("observe_progress", tokens, seconds)

    @precondition(lambda self: self.ids_in((CLAIMED, PENDING)))
    @rule(data=st.data(), explicit=st.booleans())
    def request(self, data, explicit):
        ids = self.draw_ids(data, (CLAIMED, PENDING))
        dl = [self.now + 0.1 * i for i in range(len(ids))] if explicit else None
        self.both("request", ids, now=self.now, deadline=dl)

    @rule(timely=st.booleans(), fifo=st.booleans())
    def poll(self, timely, fifo):
        a, b = self.both("poll", self.now, timely=timely, fifo=fifo)
        assert a == b.tolist()
        assert self.model.expired_ids == self.ledger.expired_ids.tolist()
        self.released.extend(a + self.model.expired_ids)

    @rule()
    def expire(self):
        a, b = self.both("expire", self.now)
        assert a == b.tolist()
        self.released.extend(a)

    @precondition(lambda self: self.ids_in((STAGING,)))
    @rule(data=st.data())
    def mark_ready(self, data):
        self.both("mark_ready", self.draw_ids(data, (STAGING,)), now=self.now)

    @precondition(lambda self: self.model.claims)
    @rule(data=st.data())
    def need(self, data):
        a, b = self.both("need", self.draw_ids(data, (CLAIMED, PENDING, STAGING, READY, CONSUMED)), now=self.now)
        assert a == (None if b is None else b.tolist())

    @precondition(lambda self: self.ids_in((READY,)))
    @rule(data=st.data())
    def consume(self, data):
        self.both("consume", self.draw_ids(data, (READY,)), now=self.now)

    @precondition(lambda self: self.model.claims)
    @rule(data=st.data())
    def release(self, data):
        ids = self.draw_ids(data, (CLAIMED, PENDING, STAGING, READY, CONSUMED))
        a, b = self.both("release", ids, now=self.now)
        if a is not None:
            assert np.allclose(a, b, rtol=1e-9, atol=1e-9)
            self.released.extend(ids)

    @rule(data=st.data())
    def foreign_ids(self, data):
        """Ids that name no open claim, in any call: UnknownKeyError (DoubleFreeError for released ones)."""
        ids = [data.draw(st.sampled_from(list(_FOREIGN) + self.released))]
        name = data.draw(st.sampled_from(["request", "mark_ready", "need", "consume", "release"]))
        self.both(name, ids, now=self.now)

    @rule(bad=st.sampled_from(["nan", "negative", "backwards", "inf", "huge"]))
    def bad_time(self, bad):
        clock = self.model.clock
        t = {"nan": float("nan"), "negative": -1.0, "inf": float("inf"), "backwards": clock - 1e-3,
             "huge": 1e300}[bad]
        self.both("poll", t)
        self.both("claim", 0, None, 1, now=t)

    # -- invariants
    @precondition(lambda self: self.ledger is not None)
    @invariant()
    def agree(self):
        led, ref = self.ledger, self.model
        led.check()
        ids = ref.open_ids()
        assert led.open_ids().tolist() == ids
        assert led.state_of(ids).tolist() == ref.state_of(ids)
        for cid in self.ids_in((PENDING,)):
            assert math.isclose(led.deadline[cid & 0xFFFFFFFF], ref.claims[cid & 0xFFFFFFFF]["deadline"],
                                rel_tol=1e-12, abs_tol=1e-12), "pending deadline"
        assert led.protected_bytes == ref.protected_bytes
        assert led.peak_protected_bytes == ref.peak_protected_bytes
        assert led.queue_bytes.tolist() == ref.queues()
        for x, y in [(led.rate, ref.rate), (led.poll_gap, ref.poll_gap), (led.use_slack, ref.use_slack),
                     (led.released_byte_seconds, ref.released_byte_seconds)] + list(zip(led.source_ratio, ref.ratio)):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        s = led.stats
        assert (s["ready_in_time"], s["ready_late"], s["commits"], s["released"], s["expired"]) == (
            ref.in_time, ref.late, ref.commits, ref.released, ref.expired)
        got = led.byte_seconds_by_request()
        assert got.keys() == ref.by_request.keys()
        assert all(math.isclose(got[r], ref.by_request[r], rel_tol=1e-9, abs_tol=1e-9) for r in got)
