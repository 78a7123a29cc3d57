"""Contract suite every staging policy passes (add one subclass line for a new policy)."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.policies.ledger import CLAIMED, PENDING, STAGING, CommitmentLedger
from kvmm.policies.staging import (
    STAGING_POLICIES,
    ImmediateEDFStaging,
    ImmediateStaging,
    OnDemandStaging,
    TimelyStaging,
    make_staging_policy,
)
from kvmm.protocols import StagingPolicy
from tests.ledger_helpers import SLOW


class StagingContract:
    policy_cls: type
    grants_far_claim: bool  # a claim used far in the future is granted at once
    grants_imminent_claim: bool  # a claim used now is granted without anybody calling need()

    def make(self, capacity=1000):
        led = CommitmentLedger(capacity, SLOW, margin_s=0.0, initial_rate=100.0)
        return led, self.policy_cls(led)

    def claim(self, led, pol, nbytes=10, work_ahead=0.0, now=0.0, request=0):
        cid = led.claim(request, None, nbytes, now=now, work_ahead=work_ahead)
        pol.on_claim(cid, now)
        return cid

    def test_speaks_the_protocol(self):
        led, pol = self.make()
        assert isinstance(pol, StagingPolicy)
        assert isinstance(pol.name, str) and STAGING_POLICIES[pol.name] is self.policy_cls
        assert type(make_staging_policy(pol.name, led)) is self.policy_cls

    def test_rejects_a_non_ledger(self):
        with pytest.raises(BadInputError):
            self.policy_cls(object())

    def test_far_claim(self):
        led, pol = self.make()
        cid = self.claim(led, pol, work_ahead=1e6)
        assert (cid in pol.due(0.0).tolist()) == self.grants_far_claim

    def test_imminent_claim(self):
        led, pol = self.make()
        cid = self.claim(led, pol, work_ahead=0.0)
        assert (cid in pol.due(0.0).tolist()) == self.grants_imminent_claim

    def test_a_needed_claim_is_granted_at_the_next_due(self):
        led, pol = self.make()
        cid = self.claim(led, pol, work_ahead=1e6)
        granted = pol.due(0.0).tolist()
        led.need([cid], now=0.5)
        granted += pol.due(0.5).tolist()
        assert granted == [cid]
        assert led.state_of([cid]).tolist() == [STAGING]

    def test_never_over_capacity_and_every_claim_served(self):
        rng = np.random.default_rng(1)
        led, pol = self.make(capacity=100)
        pending = []
        now = 0.0
        served = 0
        for step in range(400):
            now += 0.05
            if step < 100:
                pending.append(self.claim(led, pol, nbytes=int(rng.integers(1, 60)), work_ahead=float(rng.uniform(0, 50)), now=now))
            for cid in pol.due(now).tolist():
                led.mark_ready([cid], now=now)
            # a scheduler looks at the oldest few requests and runs those whose data is ready
            # (it skips, not waits for, one that is still loading)
            window = pending[:4]
            if window:
                ready = led.need(window, now=now)
                for cid in [c for c, r in zip(window, ready.tolist()) if r]:
                    led.consume([cid], now=now)
                    led.release([cid], now=now)
                    pending.remove(cid)
                    served += 1
            assert led.protected_bytes <= 100
            led.check()
        assert served == 100 and not pending


class TestOnDemand(StagingContract):
    policy_cls, grants_far_claim, grants_imminent_claim = OnDemandStaging, False, False


class TestImmediate(StagingContract):
    policy_cls, grants_far_claim, grants_imminent_claim = ImmediateStaging, True, True


class TestImmediateEDF(StagingContract):
    policy_cls, grants_far_claim, grants_imminent_claim = ImmediateEDFStaging, True, True


class TestTimely(StagingContract):
    policy_cls, grants_far_claim, grants_imminent_claim = TimelyStaging, False, True


def _queue_of_three(policy_cls):
    """Capacity 100 B; claims a (60 B, used in 10 s), b (60 B, used in 0.5 s), c (30 B, used now)
    found in that order.  Returns the ledger, the ids and the first grants."""
    led = CommitmentLedger(100, SLOW, margin_s=0.0, initial_rate=100.0)
    pol = policy_cls(led)
    ids = []
    for req, wa in ((0, 1000.0), (1, 50.0), (2, 0.0)):
        cid = led.claim(req, None, {0: 60, 1: 60, 2: 30}[req], now=0.0, work_ahead=wa)
        pol.on_claim(cid, 0.0)
        ids.append(cid)
    return led, pol, ids


def test_immediate_takes_capacity_in_claim_order_fifo():
    led, pol, (a, b, c) = _queue_of_three(ImmediateStaging)
    # FIFO: a (claimed first, used last) takes 60 B; b (60 B) does not fit and blocks c
    assert pol.due(0.0).tolist() == [a]
    led.need([c], now=0.0)  # c's request is scheduled: it still waits behind b
    assert pol.due(0.0).tolist() == []
    led.mark_ready([a], now=0.1)
    led.consume([a], now=0.2)
    led.release([a], now=0.2)
    assert pol.due(0.2).tolist() == [b, c]


def test_timely_grants_earliest_deadline_first():
    led, pol, (a, b, c) = _queue_of_three(TimelyStaging)
    # at 0.0 only c (used now) is due; b (used at 0.5 s) and a (used at 10 s) stay claims
    assert pol.due(0.0).tolist() == [c]
    assert led.state_of([a, b]).tolist() == [CLAIMED, CLAIMED]
    # at 9.95 both are due; EDF grants b (deadline 0.5) first, and a (deadline 10) no longer
    # fits in the 10 B left, where FIFO would have granted a
    assert pol.due(9.95).tolist() == [b]
    assert led.state_of([a, b, c]).tolist() == [PENDING, STAGING, STAGING]


def test_every_registered_policy_has_a_contract_class():
    covered = {c.policy_cls for c in StagingContract.__subclasses__()}
    assert covered == set(STAGING_POLICIES.values())


def test_unknown_policy_name():
    with pytest.raises(BadInputError, match="expected one of"):
        make_staging_policy("eager", CommitmentLedger(10, SLOW))


def test_immediate_edf_grants_by_deadline_not_claim_order():
    # the same queue of three: FIFO immediate staging grants a (found first, used last) and then
    # blocks; EDF grants c (used now) and b (used in 0.5 s) first
    led, pol, ids = _queue_of_three(ImmediateEDFStaging)
    assert pol.due(0.0).tolist() == [ids[2], ids[1]]
