"""Every kvmm staging policy through kvmm.testing.StagingPolicyContract (one subclass line each),
and the orders in which the immediate and timely policies grant."""

from __future__ import annotations

import pytest

from kvmm.errors import BadInputError
from kvmm.policies.staging import (
    STAGING_POLICIES,
    ImmediateEDFStaging,
    ImmediateStaging,
    OnDemandStaging,
    TimelyStaging,
    make_staging_policy,
)
from kvmm.policies.staging.ledger import CLAIMED, PENDING, STAGING, CommitmentLedger
from kvmm.testing import StagingPolicyContract
from tests.policies.staging.ledger_helpers import SLOW


class TestOnDemand(StagingPolicyContract):
    make_policy, grants_far_claim, grants_imminent_claim = OnDemandStaging, False, False


class TestImmediate(StagingPolicyContract):
    make_policy, grants_far_claim, grants_imminent_claim = ImmediateStaging, True, True


class TestImmediateEDF(StagingPolicyContract):
    make_policy, grants_far_claim, grants_imminent_claim = ImmediateEDFStaging, True, True


class TestTimely(StagingPolicyContract):
    make_policy, grants_far_claim, grants_imminent_claim = TimelyStaging, False, True


@pytest.mark.parametrize("name", sorted(STAGING_POLICIES))
def test_registered_by_name_and_rejects_a_non_ledger(name):
    cls = STAGING_POLICIES[name]
    led = CommitmentLedger(10, SLOW)
    assert cls(led).name == name and type(make_staging_policy(name, led)) is cls
    with pytest.raises(BadInputError):
        cls(object())


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
    covered = {c.make_policy for c in StagingPolicyContract.__subclasses__() if c.__module__ == __name__}
    assert covered == set(STAGING_POLICIES.values())


def test_unknown_policy_name():
    with pytest.raises(BadInputError, match="expected one of"):
        make_staging_policy("eager", CommitmentLedger(10, SLOW))


def test_immediate_edf_grants_by_deadline_not_claim_order():
    # the same queue of three: FIFO immediate staging grants a (found first, used last) and then
    # blocks; EDF grants c (used now) and b (used in 0.5 s) first
    led, pol, ids = _queue_of_three(ImmediateEDFStaging)
    assert pol.due(0.0).tolist() == [ids[2], ids[1]]
