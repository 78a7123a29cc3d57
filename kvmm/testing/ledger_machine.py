"""A Hypothesis state machine that checks a commitment ledger against its documented model.

:class:`~kvmm.testing.models.ledger.LedgerModel` is written from docs/tempokv.md ("Semantics")
alone.  ``CommitmentLedgerMachine`` drives a model and a real
:class:`~kvmm.policies.staging.ledger.CommitmentLedger` with the same calls (valid ones, and repeated,
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

from kvmm.errors import KvmmError
from kvmm.policies.staging.ledger import CommitmentLedger
from kvmm.testing.models.ledger import CLAIMED, CONSUMED, PENDING, READY, STAGING, LedgerModel
from kvmm.tiers.spec import TierSpec

__all__ = ["LedgerModel", "CommitmentLedgerMachine", "ledger_snapshot", "same_snapshot"]

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
OPEN = (CLAIMED, PENDING, STAGING, READY, CONSUMED)  # every state of an open claim
_FOREIGN = (999, -1, 1 << 40, (7 << 32) | 3)  # never issued here (another ledger's, or nonsense)


def _spec(name, bandwidth, latency):
    return TierSpec(name, 10**9, read_bandwidth=bandwidth, write_bandwidth=bandwidth, latency_s=latency)


class CommitmentLedgerMachine(RuleBasedStateMachine):
    """Drive :class:`~kvmm.policies.staging.ledger.CommitmentLedger` and :class:`LedgerModel` with the same calls.

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
        ids = self.draw_ids(data, OPEN)
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
        a, b = self.both("need", self.draw_ids(data, OPEN), now=self.now)
        assert a == (None if b is None else b.tolist())

    @precondition(lambda self: self.ids_in((READY,)))
    @rule(data=st.data())
    def consume(self, data):
        self.both("consume", self.draw_ids(data, (READY,)), now=self.now)

    @precondition(lambda self: self.model.claims)
    @rule(data=st.data())
    def release(self, data):
        ids = self.draw_ids(data, OPEN)
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
