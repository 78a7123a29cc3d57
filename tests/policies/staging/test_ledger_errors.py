"""CommitmentLedger bad input: a clear KvmmError, and the ledger exactly as before (snapshot)."""

from __future__ import annotations

import pytest

from kvmm.errors import (
    BadInputError,
    CapacityExceededError,
    DoubleFreeError,
    DTypeError,
    LedgerStateError,
    UnknownKeyError,
)
from kvmm.policies.staging.ledger import CommitmentLedger
from tests.policies.staging.ledger_helpers import SLOW, raises_unchanged


@pytest.fixture
def ledger():
    """A ledger with one claim in every state."""
    led = CommitmentLedger(1000, SLOW, margin_s=0.0, initial_rate=100.0, initial_slots=4)
    ids = led.claim_many([0, 1, 2, 3, 4], [10, 20, 30, 40, 50], now=0.0, work_ahead=[1e6] * 5)
    led.request(ids[1:], now=0.1)
    led.poll(0.2, timely=False)  # ids 1..4 staging
    led.mark_ready(ids[2:], now=0.3)
    led.consume(ids[3:], now=0.4)
    led.release([ids[4]], now=0.5)
    led.request([led.claim(5, None, 5, now=0.5, work_ahead=1e6)], now=0.5)  # pending (not polled)
    led.ids = ids  # claimed, staging, ready, consumed, released
    led.check()
    return led


@pytest.mark.parametrize("kwargs, exc", [
    (dict(capacity_bytes=-1), BadInputError),
    (dict(capacity_bytes=1.5), DTypeError),
    (dict(margin_s=-0.1), BadInputError),
    (dict(initial_rate=0.0), BadInputError),
    (dict(initial_rate=float("nan")), BadInputError),
    (dict(rate_alpha=1.5), BadInputError),
    (dict(rate_alpha=0.0), BadInputError),
    (dict(ratio_alpha=float("nan")), BadInputError),
    (dict(ratio_alpha="x"), DTypeError),
    (dict(sources=[]), BadInputError),
    (dict(sources=["nvme"]), BadInputError),
])
def test_bad_construction(kwargs, exc):
    args = dict(capacity_bytes=100, sources=SLOW) | kwargs
    with pytest.raises(exc):
        CommitmentLedger(args.pop("capacity_bytes"), args.pop("sources"), **args)


def test_bad_claims(ledger):
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, -5, now=1.0)
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, 0, now=1.0)
    raises_unchanged(ledger, BadInputError, ledger.claim, -1, None, 5, now=1.0)
    raises_unchanged(ledger, DTypeError, ledger.claim, 0, None, 5.5, now=1.0)
    raises_unchanged(ledger, CapacityExceededError, ledger.claim, 0, None, 1001, now=1.0, match="capacity")
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, 5, now=1.0, work_ahead=-1.0)
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, 5, now=1.0, work_ahead=float("nan"))
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, 5, now=1.0, source=3)
    raises_unchanged(ledger, BadInputError, ledger.claim, 0, None, 5, now=0.1, match="backwards")
    raises_unchanged(ledger, BadInputError, ledger.claim_many, [0, 1], [5], now=1.0)
    raises_unchanged(ledger, DTypeError, ledger.claim_many, [0.5], [5], now=1.0)


def test_claim_on_unknown_key(ledger):
    class Tier:
        spec = SLOW

        def contains(self, key):
            return key == 1

    led = CommitmentLedger(100, Tier())
    raises_unchanged(led, UnknownKeyError, led.claim, 0, [1, 2], 5, now=0.0, match="key 2")


def test_unknown_and_released_ids(ledger):
    released = int(ledger.ids[4])
    for fn in (ledger.update, ledger.need, ledger.request, ledger.consume, ledger.mark_ready):
        kw = {"now": 1.0, "work_ahead": [0.0]} if fn.__name__ == "update" else {"now": 1.0}
        raises_unchanged(ledger, UnknownKeyError, fn, [released], match="released", **kw)
        raises_unchanged(ledger, UnknownKeyError, fn, [999], match="never issued", **kw)
        raises_unchanged(ledger, UnknownKeyError, fn, [-3], **kw)
    raises_unchanged(ledger, UnknownKeyError, ledger.state_of, [1 << 40])


def test_double_release(ledger):
    raises_unchanged(ledger, DoubleFreeError, ledger.release, [int(ledger.ids[4])], now=1.0)
    raises_unchanged(ledger, DoubleFreeError, ledger.release, [int(ledger.ids[0])] * 2, now=1.0)
    # a valid id in the same call as a released one: nothing is released
    raises_unchanged(ledger, DoubleFreeError, ledger.release, [int(ledger.ids[0]), int(ledger.ids[4])], now=1.0)
    # released ids are looked for first: one after a never-issued id is still a double release
    raises_unchanged(ledger, DoubleFreeError, ledger.release, [999, int(ledger.ids[4])], now=1.0,
                     match=f"claim {int(ledger.ids[4])} was already released;")


def test_state_machine_violations(ledger):
    claimed, staging, ready, consumed = (int(i) for i in ledger.ids[:4])
    for cid in (claimed, staging):
        raises_unchanged(ledger, LedgerStateError, ledger.consume, [cid], now=1.0, match="before consuming")
    raises_unchanged(ledger, LedgerStateError, ledger.consume, [ready, consumed], now=1.0)
    for cid in (claimed, ready, consumed):
        raises_unchanged(ledger, LedgerStateError, ledger.mark_ready, [cid], now=1.0)
    for cid in (staging, ready, consumed):
        raises_unchanged(ledger, LedgerStateError, ledger.request, [cid], now=1.0)


def test_bad_progress_and_times(ledger):
    raises_unchanged(ledger, BadInputError, ledger.observe_progress, -1.0, 1.0)
    raises_unchanged(ledger, BadInputError, ledger.observe_progress, 10.0, 0.0)
    raises_unchanged(ledger, BadInputError, ledger.observe_progress, float("inf"), 1.0)
    raises_unchanged(ledger, BadInputError, ledger.poll, float("nan"))
    raises_unchanged(ledger, BadInputError, ledger.poll, 0.0)
    raises_unchanged(ledger, BadInputError, ledger.update, [int(ledger.ids[0])], [1.0, 2.0], now=1.0)
    raises_unchanged(ledger, BadInputError, ledger.request, [int(ledger.ids[0])], now=1.0, deadline=[-1.0])


def test_over_capacity_is_impossible():
    led = CommitmentLedger(100, SLOW, margin_s=0.0)
    ids = led.claim_many([0, 1, 2], [60, 60, 60], now=0.0)
    led.request(ids, now=0.0)
    assert len(led.poll(0.0)) == 1  # only one fits; the others wait, nothing goes over
    assert led.protected_bytes == 60
    led.check()
