"""CommitmentLedger events per second with 10^5 open claims, vs the plain-Python reference.

One *scheduler step* = claim 100 new hits (due now), update the work-ahead of 1,000 open
claims, one poll (grants the 100), mark them ready, consume and release them: 1,401 ledger
events, with the number of open claims held at ``OPEN`` (10^5).  The poll-only group times
the common case: a poll over ``OPEN`` open claims of which none is due.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import size, warm
from kvmm.policies.ledger import CommitmentLedger
from kvmm.tiers.spec import preset
from tests.naive.ledger import NaiveLedger

OPEN = size(100_000, 1_000)
NEW = 100
UPDATES = min(1_000, OPEN)
EVENTS = NEW + UPDATES + 1 + 3 * NEW


def _filled(cls):
    led = cls(10**15, preset("nvme"), margin_s=0.01, initial_rate=20_000.0)
    ids = led.claim_many(list(range(OPEN)), [1 << 20] * OPEN, now=0.0, work_ahead=[1e12] * OPEN)
    return led, np.asarray(ids, dtype=np.int64)


class _Stepper:
    """Runs scheduler steps on a ledger; ``as_list`` feeds the reference plain lists."""

    def __init__(self, cls, as_list: bool):
        self.led, self.ids = _filled(cls)
        self.conv = (lambda a: a.tolist()) if as_list else (lambda a: a)
        self.rng = np.random.default_rng(0)
        self.now = 0.0

    def step(self):
        led, c = self.led, self.conv
        self.now += 0.01
        new = led.claim_many(c(np.arange(NEW)), c(np.full(NEW, 1 << 20)), now=self.now, work_ahead=c(np.zeros(NEW)))
        pick = self.ids[self.rng.choice(OPEN, UPDATES, replace=False)]  # distinct: exactly UPDATES updates
        led.update(c(pick), c(np.full(pick.shape[0], 1e12)), now=self.now)
        granted = led.poll(self.now)
        led.mark_ready(granted, now=self.now)
        led.consume(granted, now=self.now)
        led.release(new, now=self.now)


def _bench_step(benchmark, cls, as_list, role, label):
    stepper = _Stepper(cls, as_list)
    warm(stepper.step)
    benchmark.extra_info.update(role=role, label=label, items=EVENTS, unit="events")
    benchmark.pedantic(stepper.step, rounds=size(20, 2), iterations=1)
    assert stepper.led.open_claims == OPEN


@pytest.mark.benchmark(group="ledger-step (10^5 open claims)")
def test_ledger_step_kvmm(benchmark):
    _bench_step(benchmark, CommitmentLedger, False, "kvmm", "CommitmentLedger (numba poll)")


@pytest.mark.benchmark(group="ledger-step (10^5 open claims)")
def test_ledger_step_reference(benchmark):
    _bench_step(benchmark, NaiveLedger, True, "baseline", "plain-Python reference")


def _bench_poll(benchmark, cls, role, label):
    led, _ = _filled(cls)
    warm(led.poll, 0.0)
    clock = [0.0]

    def poll():
        clock[0] += 0.001
        return led.poll(clock[0])

    benchmark.extra_info.update(role=role, label=label, items=OPEN, unit="claims scanned")
    out = benchmark.pedantic(poll, rounds=size(20, 2), iterations=1)
    assert len(out) == 0


@pytest.mark.benchmark(group="ledger-poll (10^5 open, none due)")
def test_ledger_poll_kvmm(benchmark):
    _bench_poll(benchmark, CommitmentLedger, "kvmm", "CommitmentLedger.poll")


@pytest.mark.benchmark(group="ledger-poll (10^5 open, none due)")
def test_ledger_poll_reference(benchmark):
    _bench_poll(benchmark, NaiveLedger, "baseline", "plain-Python reference")
