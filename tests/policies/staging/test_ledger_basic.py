"""CommitmentLedger: pinned behaviour of claims, triggers, EDF grants, accounting, estimators."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.policies.staging.ledger import CLAIMED, CONSUMED, PENDING, STAGING, CommitmentLedger
from tests.policies.staging.ledger_helpers import SLOW, SLOWER


def make(capacity=100, **kw):
    kw.setdefault("margin_s", 0.0)
    kw.setdefault("initial_rate", 100.0)
    return CommitmentLedger(capacity, SLOW, **kw)


def test_worked_example_from_the_docstring():
    led = make(100)
    a = led.claim(7, None, 60, now=0.0, work_ahead=0)
    b = led.claim(8, None, 60, now=0.0, work_ahead=1e6)
    assert (a, b) == (0, 1)
    assert led.protected_bytes == 0  # claims are metadata only
    assert led.poll(0.0).tolist() == [a]
    assert led.state_of([a, b]).tolist() == [STAGING, CLAIMED]
    assert led.protected_bytes == 60
    led.mark_ready([a], now=0.5)
    led.consume([a], now=1.0)
    assert led.release([a], now=2.0).tolist() == [60 * 2.0]
    c = led.claim(9, None, 10, now=2.0)
    assert c == 1 << 32  # slot 0 reused with generation 1
    led.check()


def test_trigger_fires_when_time_until_use_reaches_time_to_ready():
    # rate 100 tokens/s: 100 tokens of work ahead = use in 1 s.  Ready time for 100 bytes from
    # SLOW (latency 0.01 s, 1000 B/s) = 0.11 s.  Trigger when 1 - 0.11 <= now + poll_gap
    # (margin 0; poll_gap = EWMA(0.2) of the time between polls, 0 before the second poll).
    led = make(1000)
    c = led.claim(0, None, 100, now=0.0, work_ahead=100.0)
    assert led.predicted_use_time([c]).tolist() == [1.0]
    assert led.predicted_ready_seconds([c]).tolist() == pytest.approx([0.11])
    assert led.poll(0.5).tolist() == []
    assert led.poll(0.8).tolist() == []  # gap 0.06: 0.89 > 0.86
    assert led.poll_gap == pytest.approx(0.06)
    assert led.poll(0.84).tolist() == [c]  # gap 0.056: 0.89 <= 0.896
    led.check()


@pytest.mark.parametrize("ledger_class", ["kvmm", "reference"])
def test_idle_time_between_polls_is_not_learned_as_a_poll_gap(ledger_class):
    # after the last claim awaiting its trigger is granted, the caller stops polling; the 19 s
    # until the next claim's first poll are idle time, not a poll gap (learned, it would make the
    # next claim trigger at once: 20.89 <= 20 + 0.8 * 0.06 + 0.2 * 19.1)
    from kvmm.testing.models.ledger import LedgerModel as NaiveLedger

    led = make(1000) if ledger_class == "kvmm" else NaiveLedger(1000, SLOW, margin_s=0.0, initial_rate=100.0)
    c = led.claim(0, None, 100, now=0.0, work_ahead=100.0)
    assert list(led.poll(0.5)) == [] and list(led.poll(0.8)) == []
    assert led.poll_gap == pytest.approx(0.06)
    assert list(led.poll(0.9)) == [c]  # 0.89 <= 0.9 + 0.068: granted, nothing left to trigger
    gap = led.poll_gap
    led.mark_ready([c], now=1.0)
    led.consume([c], now=1.0)
    led.release([c], now=1.0)
    d = led.claim(1, None, 100, now=20.0, work_ahead=100.0)  # use at 21.0, ready in 0.11 s
    assert list(led.poll(20.0)) == []  # without the idle stretch in the gap: 20.89 > 20.068
    assert led.poll_gap == gap
    assert list(led.poll(20.5)) == [] and list(led.poll(20.9)) == [d]  # polled again: learns as before
    if ledger_class == "kvmm":
        led.check()


def test_grants_are_earliest_deadline_first_and_strict_within_capacity():
    led = make(100)
    ids = led.claim_many([0, 1, 2, 3], [40, 50, 30, 10], now=0.0)
    led.request(ids, now=0.0, deadline=[3.0, 1.0, 2.0, 4.0])
    # EDF order: 1 (50 B), 2 (30 B), 0 (40 B) does not fit in the 20 B left -> blocks 3
    assert led.poll(0.0, timely=False).tolist() == [ids[1], ids[2]]
    assert led.protected_bytes == 80
    assert led.state_of(ids).tolist() == [PENDING, STAGING, STAGING, PENDING]
    led.mark_ready([ids[1]], now=0.1)
    led.consume([ids[1]], now=0.1)
    led.release([ids[1]], now=0.2)
    assert led.poll(0.2, timely=False).tolist() == [ids[0], ids[3]]
    assert led.peak_protected_bytes == 80
    led.check()


def test_fifo_grants_in_claim_order_whatever_the_deadlines():
    led = make(100)
    ids = led.claim_many([0, 1, 2, 3], [40, 50, 30, 10], now=0.0)
    led.request(ids, now=0.0, deadline=[3.0, 1.0, 2.0, 4.0])
    # claim order: 0 (40 B), 1 (50 B); 2 (30 B) does not fit in the 10 B left -> blocks 3
    assert led.poll(0.0, timely=False, fifo=True).tolist() == [ids[0], ids[1]]
    assert led.state_of(ids).tolist() == [STAGING, STAGING, PENDING, PENDING]
    # a need() does not jump the queue: 2 is still next, 3 waits behind it
    led.need([ids[3]], now=0.1)
    led.mark_ready([ids[0]], now=0.1)
    led.consume([ids[0]], now=0.1)
    led.release([ids[0]], now=0.2)
    assert led.poll(0.2, timely=False, fifo=True).tolist() == [ids[2], ids[3]]
    led.check()


def test_poll_rejects_non_boolean_flags():
    from kvmm.errors import BadInputError
    from tests.policies.staging.ledger_helpers import assert_same_snapshot, snapshot

    led = make(100)
    led.request([led.claim(0, None, 10, now=0.0)], now=0.0)
    before = snapshot(led)
    with pytest.raises(BadInputError, match="booleans"):
        led.poll(1.0, fifo="yes")
    assert_same_snapshot(before, snapshot(led))


def test_ties_in_deadline_grant_in_claim_order():
    led = make(1000)
    ids = led.claim_many([5, 4, 3], [1, 1, 1], now=0.0)
    led.request(ids[::-1], now=0.0, deadline=[1.0, 1.0, 1.0])
    assert led.poll(0.0, timely=False).tolist() == ids.tolist()


def test_need_escalates_an_unstaged_claim_ahead_of_everything():
    led = make(100)
    far = led.claim(0, None, 60, now=0.0, work_ahead=1e6)
    early = led.claim(1, None, 60, now=0.0, work_ahead=1e6)
    led.request([far], now=0.0, deadline=[5.0])
    assert led.need([early], now=1.0).tolist() == [False]
    assert led.poll(1.0).tolist() == [early]  # deadline now=1.0 beats 5.0; far no longer fits
    assert led.state_of([far, early]).tolist() == [PENDING, STAGING]


def test_in_time_and_late_are_judged_against_the_first_need():
    led = make(1000)
    a, b = led.claim_many([0, 1], [10, 10], now=0.0)
    led.request([a, b], now=0.0)
    led.poll(0.0)
    led.mark_ready([a], now=0.1)
    assert led.need([a, b], now=0.2).tolist() == [True, False]
    led.mark_ready([b], now=0.3)
    led.consume([a, b], now=0.3)
    assert led.stats["ready_in_time"] == 1 and led.stats["ready_late"] == 1
    assert led.state_of([a, b]).tolist() == [CONSUMED, CONSUMED]


def test_byte_seconds_cover_commit_to_release_only():
    led = make(1000)
    a = led.claim(0, None, 100, now=0.0, work_ahead=1e9)  # claimed, never committed
    b = led.claim(1, None, 200, now=0.0)
    led.poll(1.0)  # b committed at 1.0
    assert led.protected_byte_seconds(2.0) == pytest.approx(200.0)
    led.mark_ready([b], now=1.5)
    out = led.release([a, b], now=3.0)
    assert out.tolist() == [0.0, 400.0]
    assert led.protected_byte_seconds() == pytest.approx(400.0)
    assert led.stats["released"] == 2 and led.open_claims == 0
    assert led.byte_seconds_by_request() == {0: 0.0, 1: 400.0}
    led.check()


def test_progress_rate_adapts_and_moves_the_trigger():
    led = make(1000, rate_alpha=1.0)
    c = led.claim(0, None, 100, now=0.0, work_ahead=1000.0)
    assert led.predicted_use_time([c]).tolist() == [10.0]
    led.observe_progress(10_000.0, 1.0)  # progress is 100x faster than assumed
    assert led.rate == 10_000.0
    assert led.predicted_use_time([c]).tolist() == [0.1]
    assert led.poll(0.0).tolist() == [c]


def test_staging_ratio_learns_observed_over_predicted():
    led = make(10_000, ratio_alpha=0.5)
    c = led.claim(0, None, 1000, now=0.0)
    led.poll(0.0)
    predicted = 0.01 + 1000 / 1000.0
    led.mark_ready([c], now=2 * predicted)  # twice as slow as the bandwidth model says
    assert led.source_ratio[0] == pytest.approx(1.5)
    d = led.claim(1, None, 1000, now=3.0)
    assert led.predicted_ready_seconds([d]).tolist() == pytest.approx([1.5 * predicted])


def test_queue_bytes_delay_later_claims_per_source():
    led = CommitmentLedger(10_000, [SLOW, SLOWER], margin_s=0.0)
    a, b = led.claim_many([0, 1], [500, 500], now=0.0, source=[0, 1])
    led.request([a, b], now=0.0)
    led.poll(0.0)
    assert led.queue_bytes.tolist() == [500, 500]
    c, d = led.claim_many([2, 3], [100, 100], now=0.0, source=[0, 1])
    # queued bytes count ahead of the new claim on its own source only
    assert led.predicted_ready_seconds([c, d]).tolist() == pytest.approx([0.01 + 600 / 1000, 0.1 + 600 / 100])
    led.mark_ready([a], now=1.0)
    assert led.queue_bytes.tolist() == [0, 500]


def test_use_slack_grows_when_use_comes_sooner_than_predicted():
    led = make(1000, rate_alpha=0.5)
    c = led.claim(0, None, 10, now=0.0, work_ahead=100.0)  # predicted use at 1.0
    led.update([c], [0.0], now=0.4)  # it is used at 0.4: 0.6 s sooner, all of the 0.6 s left
    assert led.use_slack == pytest.approx(0.5 * 1.0)
    led.update([c], [50.0], now=0.5)  # moved later: slack unchanged
    assert led.use_slack == pytest.approx(0.5)


def test_use_slack_is_a_share_of_the_time_until_use_and_widens_the_trigger():
    led = make(1000, rate_alpha=0.5)
    a, b = led.claim_many([0, 1], [10, 10], now=0.0, work_ahead=[100.0, 300.0])  # uses at 1.0, 3.0
    led.update([a, b], [0.0, 250.0], now=0.5)  # a: 0.5 s sooner; b: unchanged
    # share = 0.5 s earlier / (0.5 + 2.5) s predicted until use = 1/6; EWMA weight 0.5
    assert led.use_slack == pytest.approx(1 / 12)
    # b (ready 0.01 + 10 / 1000 = 0.02 s) is due when 3.0 - 0.02 - (3.0 - now) / 12 <= now,
    # i.e. now >= 2.73 * 12 / 11 = 2.97818...; without the slack only at 2.98
    assert led.poll(2.979).tolist() == [a, b]


def test_arrays_grow_and_slots_are_reused_lifo():
    led = CommitmentLedger(10**6, SLOW, initial_slots=1)
    ids = led.claim_many(list(range(5)), [1] * 5, now=0.0)
    assert ids.tolist() == [0, 1, 2, 3, 4]
    led.release([ids[1], ids[3]], now=0.0)
    again = led.claim_many([9, 9, 9], [1, 1, 1], now=0.0)
    assert again.tolist() == [(1 << 32) | 3, (1 << 32) | 1, 5]
    led.check()


def test_keys_are_kept_and_checked_against_a_source_with_contains():
    class Tier:
        spec = SLOW

        def contains(self, key):
            return key in (1, 2, 3)

    led = CommitmentLedger(1000, Tier())
    c = led.claim(0, [1, 2], 10, now=0.0)
    assert led.keys_of(c)[:, 0].tolist() == [1, 2]
    assert led.keys_of(led.claim(1, None, 10, now=0.0)) is None


def test_ten_thousand_open_claims_poll_matches_reference():
    from kvmm.testing.models.ledger import LedgerModel as NaiveLedger

    rng = np.random.default_rng(0)
    n = 10_000
    kw = dict(margin_s=0.01, initial_rate=1000.0)
    led, ref = CommitmentLedger(50_000, SLOW, **kw), NaiveLedger(50_000, SLOW, **kw)
    nb = rng.integers(1, 100, n).tolist()
    wa = rng.uniform(0, 5000, n).round(1).tolist()
    assert led.claim_many(list(range(n)), nb, now=0.0, work_ahead=wa).tolist() == ref.claim_many(
        list(range(n)), nb, now=0.0, work_ahead=wa)
    for t in (0.0, 0.5, 1.0, 2.0, 4.0):
        assert led.poll(t).tolist() == ref.poll(t)
        assert led.protected_bytes == ref.protected_bytes
    led.check()


def test_known_delay_adds_to_time_until_use():
    led = make(1000)
    c = led.claim(0, None, 100, now=0.0, work_ahead=100.0, delay_s=0.5)  # rest of a step + 1 s of work
    assert led.predicted_use_time([c]).tolist() == [1.5]
    led.update([c], [0.0], now=0.2, delay_s=[0.3])
    assert led.predicted_use_time([c]).tolist() == [0.5]
    # moved 1.0 s earlier out of the 1.3 s it had left; EWMA weight 0.2
    assert led.use_slack == pytest.approx(0.2 * 1.0 / 1.3)
