"""CommitmentLedger regression tests of issue 12: repeated ids, overflow bounds, huge rates.

Each bad call raises a clear KvmmError and leaves the ledger exactly as before (snapshot).
"""

from __future__ import annotations

import pytest

from kvmm.errors import BadInputError, DoubleFreeError, KvmmError, ShapeError
from kvmm.policies.staging.ledger import MAX_CAPACITY_BYTES, RATE_BOUNDS, CommitmentLedger
from kvmm.tiers import preset
from tests.policies.staging.ledger_helpers import SLOW, raises_unchanged


def staging_claim():
    """The issue's example: one claim of 10 bytes, STAGING on the NVMe preset."""
    led = CommitmentLedger(1000, preset("nvme"))
    c = led.claim(1, nbytes=10, now=0.0)
    led.request([c], now=0.0)
    assert led.poll(0.0).tolist() == [c]
    return led, c


def test_repeated_id_in_mark_ready_is_refused_and_queue_bytes_stay_right():
    led, c = staging_claim()
    raises_unchanged(led, BadInputError, led.mark_ready, [c, c], now=0.1, match="more than once")
    assert led.queue_bytes.tolist() == [10]
    led.mark_ready([c], now=0.1)
    assert led.queue_bytes.tolist() == [0]
    led.check()


def test_repeated_id_in_consume_counts_nothing():
    led, c = staging_claim()
    led.mark_ready([c], now=0.1)
    raises_unchanged(led, BadInputError, led.consume, [c, c], now=0.2, match="more than once")
    led.consume([c], now=0.2)
    assert led.stats["ready_in_time"] == 1 and led.stats["ready_late"] == 0


@pytest.mark.parametrize("method", ["update", "request", "need"])
def test_repeated_ids_are_refused_by_every_batch_method(method):
    led = CommitmentLedger(1000, SLOW)
    a, b = led.claim_many([0, 1], [10, 10], now=0.0)
    kw = {"work_ahead": [1.0, 2.0, 3.0]} if method == "update" else {}
    raises_unchanged(led, BadInputError, getattr(led, method), [a, b, a], now=0.5, **kw)
    raises_unchanged(led, DoubleFreeError, led.release, [b, b], now=0.5)


def test_capacity_beyond_int64_safe_bound_is_refused():
    with pytest.raises(BadInputError, match="2\\*\\*62"):
        CommitmentLedger(2**64, preset("nvme"))
    with pytest.raises(BadInputError):
        CommitmentLedger(MAX_CAPACITY_BYTES + 1, preset("nvme"))
    led = CommitmentLedger(MAX_CAPACITY_BYTES, preset("nvme"))
    ids = led.claim_many([0, 1], [MAX_CAPACITY_BYTES // 2, MAX_CAPACITY_BYTES // 2], now=0.0)
    led.request(ids, now=0.0)
    assert led.poll(1.0).tolist() == ids.tolist()  # poll works at the bound
    assert led.protected_bytes == MAX_CAPACITY_BYTES and led.clock == 1.0
    led.check()


def test_huge_progress_observation_is_refused():
    led = CommitmentLedger(1000, SLOW)
    raises_unchanged(led, BadInputError, led.observe_progress, 1e308, 1e-308)
    raises_unchanged(led, BadInputError, led.observe_progress, 1e13, 1.0, match="sane bound")
    raises_unchanged(led, BadInputError, led.observe_progress, 10.0, 1e-300)
    for _ in range(200):  # idle observations: the rate decays to its floor, never to 0
        led.observe_progress(0.0, 1.0)
    assert led.rate == RATE_BOUNDS[0]
    led.check()


@pytest.mark.parametrize("bad", [float("inf"), 1e300, -1.0, float("nan"), "1.0", None, True])
def test_times_and_work_are_bounded(bad):
    led = CommitmentLedger(1000, SLOW)
    c = led.claim(0, None, 10, now=0.0)
    raises_unchanged(led, KvmmError, led.claim, 0, None, 10, now=bad)
    raises_unchanged(led, KvmmError, led.claim, 0, None, 10, now=0.0, work_ahead=bad)
    raises_unchanged(led, KvmmError, led.claim, 0, None, 10, now=0.0, delay_s=bad)
    raises_unchanged(led, KvmmError, led.update, [c], bad, now=0.0)
    raises_unchanged(led, KvmmError, led.poll, bad)


def test_ragged_and_nested_inputs_are_shape_errors():
    led = CommitmentLedger(1000, SLOW)
    c = led.claim(0, None, 10, now=0.0)
    raises_unchanged(led, ShapeError, led.update, [c], [[1.0], [2.0, 3.0]], now=0.0)
    raises_unchanged(led, KvmmError, led.claim_many, [[0], [1, 2]], [1, 2], now=0.0)


@pytest.mark.parametrize("kwargs", [dict(initial_rate=1e300), dict(initial_slots=2**40), dict(margin_s=1e300),
                                    dict(ready_lease_s=0.0), dict(ready_lease_s=float("nan")),
                                    dict(ready_lease_s="5")])
def test_constructor_bounds(kwargs):
    with pytest.raises(KvmmError):
        CommitmentLedger(100, SLOW, **kwargs)
