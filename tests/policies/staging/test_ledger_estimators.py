"""CommitmentLedger estimators (issue 11 item 4): the staging ratio converges to the true ratio,
corrections are bounded, ``update`` refreshes a pending claim's deadline, READY leases expire."""

from __future__ import annotations

import math

import pytest

from kvmm.policies.staging.ledger import PENDING, RATIO_BOUNDS, READY, STAGING, CommitmentLedger
from tests.policies.staging.ledger_helpers import SLOW


def stage_one(led, t, nbytes, speed):
    """Claim, grant and finish one staging at ``speed`` x the nominal speed of SLOW; return the end time."""
    c = led.claim(0, None, nbytes, now=t)
    led.request([c], now=t)
    assert led.poll(t, timely=False).tolist() == [c]
    model = SLOW.latency_s + nbytes / SLOW.read_bandwidth
    done = t + model / speed
    led.mark_ready([c], now=done)
    led.release([c], now=done)
    return done


@pytest.mark.parametrize("speed, truth", [(0.5, 2.0), (2.0, 0.5), (0.1, 10.0), (1.0, 1.0)])
def test_staging_ratio_learns_the_true_ratio_over_many_updates(speed, truth):
    led = CommitmentLedger(10_000, SLOW, ratio_alpha=0.2)
    t = 0.0
    for i in range(120):
        t = stage_one(led, t, 100 + 37 * (i % 5), speed)
    # EWMA from 1.0: error (1 - 0.2)**120 of the initial gap (~2.5e-12); the old code learned sqrt(truth)
    assert led.source_ratio[0] == pytest.approx(truth, rel=1e-9)
    c = led.claim(0, None, 500, now=t)
    assert led.predicted_ready_seconds([c])[0] == pytest.approx(truth * (0.01 + 0.5), rel=1e-9)
    led.check()


def test_staging_ratio_is_bounded():
    led = CommitmentLedger(10_000, SLOW, ratio_alpha=1.0)
    stage_one(led, 0.0, 1000, 1e-6)  # a million times slower than nominal
    assert led.source_ratio[0] == RATIO_BOUNDS[1]
    stage_one(led, 1e7, 1000, 1e9)  # a billion times faster
    assert led.source_ratio[0] == RATIO_BOUNDS[0]
    led.check()


def test_update_moves_a_pending_claims_deadline_later():
    led = CommitmentLedger(100, SLOW, margin_s=0.0, initial_rate=100.0)
    early = led.claim(0, None, 60, now=0.0, work_ahead=10.0)  # use at 0.1
    pushed = led.claim(1, None, 60, now=0.0, work_ahead=1.0)  # use at 0.01
    led.request([pushed], now=0.0)  # pending, deadline 0.01
    led.update([pushed], [100_000.0], now=0.0)  # pushed 1,000 s back
    assert led.deadline[pushed] == pytest.approx(1000.0)
    led.request([early], now=0.0)  # deadline 0.1
    # only one fits: the claim needed in 0.1 s gets the capacity, not the one pushed back
    assert led.poll(0.0, timely=False).tolist() == [early]
    assert led.state_of([pushed]).tolist() == [PENDING]


def test_update_keeps_a_needed_claims_deadline():
    led = CommitmentLedger(100, SLOW, margin_s=0.0, initial_rate=100.0)
    c = led.claim(0, None, 60, now=0.0, work_ahead=1e6)
    led.need([c], now=1.0)
    led.update([c], [1e6], now=1.5)
    assert led.deadline[c] == 1.0  # the scheduler already wanted it at 1.0


def test_ready_lease_releases_unconsumed_claims_and_counts_them():
    led = CommitmentLedger(100, SLOW, margin_s=0.0, ready_lease_s=5.0)
    a, b = led.claim_many([0, 1], [40, 50], now=0.0)
    led.request([a, b], now=0.0)
    led.poll(0.0)
    led.mark_ready([a, b], now=1.0)
    led.need([b], now=4.0)  # renews b's lease: expires at 9.0
    assert led.poll(5.99).tolist() == [] and led.expired_ids.tolist() == []
    assert led.poll(6.0).tolist() == [] and led.expired_ids.tolist() == [a]
    assert led.protected_bytes == 50 and led.stats["expired"] == 1 and led.stats["released"] == 1
    assert led.byte_seconds_by_request() == {0: 40 * 6.0}
    assert led.expire(9.0).tolist() == [b]
    assert led.protected_bytes == 0 and led.stats["expired"] == 2
    assert math.isclose(led.released_byte_seconds, 40 * 6.0 + 50 * 9.0)
    led.check()


def test_consumed_and_staging_claims_never_expire():
    led = CommitmentLedger(100, SLOW, margin_s=0.0, ready_lease_s=1.0)
    a, b = led.claim_many([0, 1], [40, 50], now=0.0)
    led.request([a, b], now=0.0)
    led.poll(0.0)
    led.mark_ready([a], now=0.5)
    led.consume([a], now=0.6)
    assert led.expire(100.0).tolist() == []
    assert led.state_of([a, b]).tolist() == [5, STAGING]


def test_without_a_lease_ready_claims_are_kept():
    led = CommitmentLedger(100, SLOW, margin_s=0.0)
    c = led.claim(0, None, 40, now=0.0)
    led.request([c], now=0.0)
    led.poll(0.0)
    led.mark_ready([c], now=1.0)
    assert led.expire(1e9).tolist() == [] and led.state_of([c]).tolist() == [READY]
