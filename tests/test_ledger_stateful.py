"""Hypothesis stateful test: CommitmentLedger vs the plain-Python reference, check() after every step."""

from __future__ import annotations

import pytest
from hypothesis import event, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import CapacityExceededError, DoubleFreeError, KvmmError, LedgerStateError, UnknownKeyError
from kvmm.policies.ledger import CLAIMED, PENDING, READY, STAGING, CommitmentLedger
from tests.ledger_helpers import SLOW, SLOWER, assert_same_snapshot, snapshot
from tests.naive.ledger import NaiveLedger

CAPACITY = 1000
times = st.sampled_from([0.0, 0.001, 0.005, 0.02, 0.1, 0.5, 2.0])
work = st.sampled_from([0.0, 5.0, 50.0, 200.0, 1000.0, 1e5])


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        kw = dict(margin_s=0.01, initial_rate=100.0, rate_alpha=0.5, ratio_alpha=0.5, initial_slots=2)
        self.led = CommitmentLedger(CAPACITY, [SLOW, SLOWER], **kw)
        self.ref = NaiveLedger(CAPACITY, [SLOW, SLOWER], **kw)
        self.now = 0.0
        self.released: list[int] = []

    # -- helpers
    def ids_in(self, states):
        ids = self.ref.open_ids()
        return [c for c, s in zip(ids, self.ref.state_of(ids)) if s in states]

    # -- rules
    @rule(dt=times)
    def advance(self, dt):
        self.now += dt

    @rule(request=st.integers(0, 5), nbytes=st.integers(1, 400), wa=work, source=st.integers(0, 1), delay=times)
    def claim(self, request, nbytes, wa, source, delay):
        a = self.led.claim(request, None, nbytes, now=self.now, work_ahead=wa, source=source, delay_s=delay)
        b = self.ref.claim(request, None, nbytes, now=self.now, work_ahead=wa, source=source, delay_s=delay)
        assert a == b

    @rule(k=st.integers(1, 4), nbytes=st.integers(1, 300))
    def claim_many(self, k, nbytes):
        a = self.led.claim_many(list(range(k)), [nbytes + i for i in range(k)], now=self.now)
        b = self.ref.claim_many(list(range(k)), [nbytes + i for i in range(k)], now=self.now)
        assert a.tolist() == b

    @rule(extra=st.integers(1, 100))
    def claim_too_big(self, extra):
        before = snapshot(self.led)
        with pytest.raises(CapacityExceededError):
            self.led.claim(0, None, CAPACITY + extra, now=self.now)
        assert_same_snapshot(before, snapshot(self.led))

    @precondition(lambda self: self.ref.open_claims > 0)
    @rule(data=st.data(), wa=work, delay=st.one_of(st.none(), times))
    def update(self, data, wa, delay):
        ids = data.draw(st.lists(st.sampled_from(self.ref.open_ids()), min_size=1, max_size=4, unique=True))
        vals = [wa * (i + 1) for i in range(len(ids))]
        delays = None if delay is None else [delay] * len(ids)
        self.led.update(ids, vals, now=self.now, delay_s=delays)
        self.ref.update(ids, vals, now=self.now, delay_s=delays)

    @rule(tokens=st.sampled_from([0.0, 10.0, 100.0, 1000.0]), seconds=st.sampled_from([0.01, 0.1, 1.0]))
    def observe(self, tokens, seconds):
        self.led.observe_progress(tokens, seconds)
        self.ref.observe_progress(tokens, seconds)

    @precondition(lambda self: self.ids_in((CLAIMED, PENDING)))
    @rule(data=st.data(), explicit=st.booleans())
    def request(self, data, explicit):
        ids = data.draw(st.lists(st.sampled_from(self.ids_in((CLAIMED, PENDING))), min_size=1, max_size=3, unique=True))
        dl = [self.now + 0.1 * i for i in range(len(ids))] if explicit else None
        self.led.request(ids, now=self.now, deadline=dl)
        self.ref.request(ids, now=self.now, deadline=dl)

    @rule(timely=st.booleans(), fifo=st.booleans())
    def poll(self, timely, fifo):
        a = self.led.poll(self.now, timely=timely, fifo=fifo)
        b = self.ref.poll(self.now, timely=timely, fifo=fifo)
        assert a.tolist() == b
        event(f"poll granted {min(len(b), 3)}+")

    @precondition(lambda self: self.ids_in((STAGING,)))
    @rule(data=st.data())
    def mark_ready(self, data):
        ids = data.draw(st.lists(st.sampled_from(self.ids_in((STAGING,))), min_size=1, max_size=3, unique=True))
        self.led.mark_ready(ids, now=self.now)
        self.ref.mark_ready(ids, now=self.now)

    @precondition(lambda self: self.ref.open_claims > 0)
    @rule(data=st.data())
    def need(self, data):
        ids = data.draw(st.lists(st.sampled_from(self.ref.open_ids()), min_size=1, max_size=3, unique=True))
        assert self.led.need(ids, now=self.now).tolist() == self.ref.need(ids, now=self.now)

    @precondition(lambda self: self.ids_in((READY,)))
    @rule(data=st.data())
    def consume(self, data):
        ids = data.draw(st.lists(st.sampled_from(self.ids_in((READY,))), min_size=1, max_size=3, unique=True))
        self.led.consume(ids, now=self.now)
        self.ref.consume(ids, now=self.now)
        event("consumed")

    @precondition(lambda self: self.ids_in((CLAIMED, PENDING, STAGING)))
    @rule(data=st.data())
    def consume_before_ready(self, data):
        cid = data.draw(st.sampled_from(self.ids_in((CLAIMED, PENDING, STAGING))))
        before = snapshot(self.led)
        with pytest.raises(LedgerStateError):
            self.led.consume([cid], now=self.now)
        assert_same_snapshot(before, snapshot(self.led))

    @precondition(lambda self: self.ref.open_claims > 0)
    @rule(data=st.data())
    def release(self, data):
        ids = data.draw(st.lists(st.sampled_from(self.ref.open_ids()), min_size=1, max_size=3, unique=True))
        a = self.led.release(ids, now=self.now)
        b = self.ref.release(ids, now=self.now)
        assert a.tolist() == pytest.approx(b)
        self.released.extend(ids)

    @precondition(lambda self: self.released)
    @rule(data=st.data())
    def double_release(self, data):
        cid = data.draw(st.sampled_from(self.released))
        before = snapshot(self.led)
        with pytest.raises(DoubleFreeError):
            self.led.release([cid], now=self.now)
        with pytest.raises(DoubleFreeError):
            self.ref.release([cid], now=self.now)
        with pytest.raises(UnknownKeyError):
            self.led.update([cid], [0.0], now=self.now)
        assert_same_snapshot(before, snapshot(self.led))

    @rule(bad=st.sampled_from(["nan", "negative", "backwards", "inf"]))
    def bad_time(self, bad):
        clock = self.led.clock
        t = {"nan": float("nan"), "negative": -1.0, "inf": float("inf"), "backwards": clock - 1e-3}[bad]
        before = snapshot(self.led)
        with pytest.raises(KvmmError):
            self.led.poll(t)
        with pytest.raises(KvmmError):
            self.led.claim(0, None, 1, now=t)
        assert_same_snapshot(before, snapshot(self.led))

    # -- invariants
    @invariant()
    def agree(self):
        self.led.check()
        self.ref.check()
        ids = self.ref.open_ids()
        assert self.led.open_ids().tolist() == ids
        assert self.led.state_of(ids).tolist() == self.ref.state_of(ids)
        assert self.led.protected_bytes == self.ref.protected_bytes
        assert self.led.peak_protected_bytes == self.ref.peak_protected_bytes
        assert self.led.rate == self.ref.rate
        assert self.led.poll_gap == self.ref.poll_gap
        assert self.led.use_slack == self.ref.use_slack
        assert self.led.source_ratio.tolist() == self.ref.ratio
        assert self.led.queue_bytes.tolist() == self.ref.queue
        assert self.led.stats["ready_in_time"] == self.ref.in_time
        assert self.led.stats["ready_late"] == self.ref.late
        assert self.led.released_byte_seconds == pytest.approx(self.ref.released_byte_seconds)


TestLedgerStateful = LedgerMachine.TestCase
