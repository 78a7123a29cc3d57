"""CommitmentLedger.skip_idle_polls against its plain-Python reference: calling ``poll`` at every
tick and stopping at the first poll that changes a claim."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kvmm.errors import BadInputError, DTypeError
from kvmm.policies.staging.ledger import CommitmentLedger
from tests.policies.staging.ledger_helpers import SLOW, SLOWER, assert_same_snapshot, raises_unchanged, snapshot


def reference_skip(led, first, interval, before, until, timely, fifo):
    """Poll a copy at each tick; keep the copy's state while the poll changes no claim."""
    t = first
    while t < before and t <= until:
        trial = copy.deepcopy(led)
        granted = trial.poll(t, timely=timely, fifo=fifo)
        if granted.size or not np.array_equal(trial.state, led.state):
            return t, led
        led = trial
        t = t + interval
    return t, led


def random_ledger(rng):
    led = CommitmentLedger(int(rng.integers(50, 400)), [SLOW, SLOWER], margin_s=float(rng.choice([0.0, 0.005])),
                           initial_rate=100.0)
    now = 0.0
    ids = []
    for _ in range(int(rng.integers(1, 12))):
        now += float(rng.random()) * 0.2
        op = rng.integers(0, 5)
        if op <= 1 or not ids:
            ids.append(led.claim(int(rng.integers(0, 100)), None, int(rng.integers(1, 50)), now=now,
                                 work_ahead=float(rng.random()) * 300, source=int(rng.integers(0, 2)),
                                 delay_s=float(rng.random()) * 0.1))
        elif op == 2:
            led.poll(now, timely=bool(rng.integers(0, 2)))
        elif op == 3:
            cid = ids[int(rng.integers(0, len(ids)))]
            if led.state_of([cid])[0] in (1, 2):
                led.request([cid], now=now, deadline=[now + float(rng.random())])
        else:
            live = [c for c in ids if led.state_of([c])[0] in (1, 2)]
            if live:
                led.update(live, rng.random(len(live)) * 200, now=now)
    return led, now


def check_case(seed):
    """One random ledger and tick window; returns (stopped at the first tick, stopped before the window ended)."""
    rng = np.random.default_rng(seed)
    led, now = random_ledger(rng)
    first = now + float(rng.random()) * 0.01
    interval = float(rng.choice([0.005, 0.02, 0.1]))
    before = first + float(rng.random()) * 3.0
    until = float(rng.choice([before, first + float(rng.random()) * 3.0, np.inf]))
    timely, fifo = bool(rng.integers(0, 4)), bool(rng.integers(0, 2))
    ref_t, ref = reference_skip(copy.deepcopy(led), first, interval, before, until, timely, fifo)
    t = led.skip_idle_polls(first, interval, before=before, until=until, timely=timely, fifo=fifo)
    assert t == ref_t  # the same tick, to the bit (same additions)
    assert_same_snapshot(snapshot(led), snapshot(ref))  # poll_gap / last_poll / clock learned identically
    led.check()
    return t == first, t < before and t <= until


@pytest.mark.parametrize("seed", range(60))
def test_skip_matches_polling_every_tick(seed):
    check_case(seed)


def test_random_cases_cover_every_outcome():
    # no skip (a claim changes at the first tick), skips then a change, skips to the window's end
    outcomes = {check_case(seed) for seed in range(60)}
    assert outcomes == {(True, True), (False, True), (False, False)}


def test_pinned_trigger_tick():
    # use at 1.0 s (100 tokens at 100 tokens/s), ready in 0.11 s, margin 0; polls every 0.1 s
    # from 0.5 learn the gap 0, 0.02, 0.036, 0.0488 (EWMA 0.2 of 0.1): 0.89 <= t + gap first
    # holds at t = 0.9 (gap 0.059): polls 0.5 .. 0.8 are skipped.
    led = CommitmentLedger(1000, SLOW, margin_s=0.0, initial_rate=100.0)
    c = led.claim(0, None, 100, now=0.0, work_ahead=100.0)
    t = led.skip_idle_polls(0.5, 0.1, before=np.inf, until=10.0)
    assert t == pytest.approx(0.9)
    assert led.last_poll == pytest.approx(0.8) and led.poll_gap == pytest.approx(0.0488)
    assert led.poll(t).tolist() == [c]


def test_grantable_pending_claim_stops_at_the_first_tick():
    led = CommitmentLedger(100, SLOW, margin_s=0.0, initial_rate=100.0)
    c = led.claim(0, None, 60, now=0.0, work_ahead=1e6)
    led.request([c], now=0.0)
    before = snapshot(led)
    assert led.skip_idle_polls(0.1, 0.1, before=5.0, until=5.0) == 0.1
    assert_same_snapshot(before, snapshot(led))


def test_bad_arguments_raise_and_change_nothing():
    led = CommitmentLedger(100, SLOW, initial_rate=100.0)
    led.claim(0, None, 10, now=1.0)
    before = snapshot(led)
    with pytest.raises(BadInputError):
        led.skip_idle_polls(0.5, 0.1, before=2.0, until=2.0)  # earlier than the clock
    with pytest.raises(BadInputError):
        led.skip_idle_polls(1.5, 0.0, before=2.0, until=2.0)  # no interval
    with pytest.raises(BadInputError):
        led.skip_idle_polls(1.5, 0.1, before=2.0, until=2.0, timely=1)
    assert_same_snapshot(before, snapshot(led))


@pytest.mark.parametrize("bound, exc", [("2.0", DTypeError), (None, DTypeError), (True, DTypeError),
                                        (float("nan"), BadInputError), (-1.0, BadInputError)])
@pytest.mark.parametrize("which", ["before", "until"])
def test_bad_window_bounds_are_clear_errors_and_change_nothing(which, bound, exc):
    # they were passed to float(): text raised ValueError, None TypeError, NaN skipped nothing silently
    led = CommitmentLedger(100, SLOW, initial_rate=100.0)
    led.claim(0, None, 10, now=1.0, work_ahead=1e6)
    window = {"before": 5.0, "until": 5.0} | {which: bound}
    raises_unchanged(led, exc, led.skip_idle_polls, 1.5, 0.1, match=which, **window)
    assert led.skip_idle_polls(1.5, 0.1, **{"before": 5.0, "until": 5.0} | {which: np.inf}) > 1.5  # inf: no bound
