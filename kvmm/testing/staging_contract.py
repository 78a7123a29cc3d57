"""The contract every :class:`~kvmm.protocols.StagingPolicy` passes, driven through a
:class:`~kvmm.policies.CommitmentLedger`.

::

    class TestMyStaging(StagingPolicyContract):
        def make_policy(self, ledger):
            return MyStaging(ledger)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm.policies.staging.ledger import STAGING, CommitmentLedger
from kvmm.protocols import StagingPolicy
from kvmm.tiers.spec import TierSpec

__all__ = ["StagingPolicyContract"]


class StagingPolicyContract:
    """Contract suite for a staging policy; subclass it and define ``make_policy(ledger)``.

    Each test builds a :class:`~kvmm.policies.CommitmentLedger` (``make_ledger``: a slow tier
    of 1000 B/s and 10 ms latency, no margin) and drives the policy as a scheduler does: each
    claim is followed by ``on_claim``; ``due(now)`` says what to stage; the scheduler marks
    staged data ready, asks for claims (``need``), consumes and releases them.  Every
    ``due`` result is checked: each id is a claim the ledger issued and the policy was told of,
    returned once, now holding a granted commitment (ledger state STAGING), and protected
    bytes never exceed the capacity (a policy that stages before its claim is granted fails).
    It checks:

    * it is a :class:`~kvmm.protocols.StagingPolicy` with a ``name``;
    * ``grants_far_claim`` / ``grants_imminent_claim`` (class attributes; ``None``: either is
      fine): whether a claim used in 10^6 tokens / right now is granted at the first ``due``
      without anybody calling ``need``;
    * a claim the scheduler needs (``ledger.need``) is granted at the next ``due``, once;
    * 100 claims of 1-59 B against 100 B of protected capacity, used in a random order of
      urgency by a scheduler that runs whatever is ready among the four oldest requests: the
      capacity is never exceeded, the ledger's ``check()`` passes every step, and every claim
      is served within 400 steps (no claim starves, nothing deadlocks).
    """

    grants_far_claim: bool | None = None
    grants_imminent_claim: bool | None = None

    def make_policy(self, ledger: Any) -> Any:
        """A fresh policy driving ``ledger`` (override)."""
        raise NotImplementedError("subclass StagingPolicyContract and define make_policy(ledger)")

    def make_ledger(self, capacity: int = 1000) -> Any:
        slow = TierSpec("slow", 10**9, read_bandwidth=1000.0, write_bandwidth=1000.0, latency_s=0.01)
        return CommitmentLedger(capacity, slow, margin_s=0.0, initial_rate=100.0)

    # -- the driver -------------------------------------------------------------------------
    def setup_policy(self, capacity: int = 1000) -> tuple[Any, Any]:
        ledger = self.make_ledger(capacity)
        policy = self.make_policy(ledger)
        self._told: set = set()
        self._granted: set = set()
        return ledger, policy

    def claim(self, ledger: Any, policy: Any, nbytes: int = 10, work_ahead: float = 0.0, now: float = 0.0,
              request: int = 0) -> int:
        cid = ledger.claim(request, None, nbytes, now=now, work_ahead=work_ahead)
        policy.on_claim(cid, now)
        self._told.add(cid)
        return cid

    def due(self, ledger: Any, policy: Any, now: float) -> list[int]:
        """``policy.due(now)``, checked against the ledger (see the class docstring)."""
        ids = [int(c) for c in np.asarray(policy.due(now)).tolist()]
        for cid in ids:
            assert cid in self._told, f"due returned {cid}, a claim the policy was never told of"
            assert cid not in self._granted, f"due returned claim {cid} a second time"
            self._granted.add(cid)
        if ids:
            states = ledger.state_of(ids).tolist()
            assert states == [STAGING] * len(ids), (
                f"due returned claims {ids} in ledger states {states}: staged before the commitment was granted")
        assert ledger.protected_bytes <= ledger.capacity_bytes
        return ids

    # -- tests ------------------------------------------------------------------------------
    def test_speaks_the_protocol(self) -> None:
        _, pol = self.setup_policy()
        assert isinstance(pol, StagingPolicy) and isinstance(pol.name, str)

    def test_far_claim(self) -> None:
        self._check_first_due(work_ahead=1e6, expected=self.grants_far_claim)

    def test_imminent_claim(self) -> None:
        self._check_first_due(work_ahead=0.0, expected=self.grants_imminent_claim)

    def _check_first_due(self, work_ahead: float, expected: bool | None) -> None:
        """One claim, one ``due`` at time 0: ``self.due`` checks every grant against the ledger;
        whether this claim is granted is pinned when the subclass declares it."""
        led, pol = self.setup_policy()
        cid = self.claim(led, pol, work_ahead=work_ahead)
        granted = cid in self.due(led, pol, 0.0)
        if expected is not None:
            assert granted == expected

    def test_a_needed_claim_is_granted_at_the_next_due(self) -> None:
        led, pol = self.setup_policy()
        cid = self.claim(led, pol, work_ahead=1e6)
        granted = self.due(led, pol, 0.0)
        led.need([cid], now=0.5)
        granted += self.due(led, pol, 0.5)
        assert granted == [cid]

    def test_never_over_capacity_and_every_claim_served(self) -> None:
        rng = np.random.default_rng(1)
        led, pol = self.setup_policy(capacity=100)
        pending: list[int] = []
        now, served = 0.0, 0
        for step in range(400):
            now += 0.05
            if step < 100:
                pending.append(self.claim(led, pol, nbytes=int(rng.integers(1, 60)),
                                          work_ahead=float(rng.uniform(0, 50)), now=now))
            for cid in self.due(led, pol, now):
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
        assert served == 100 and not pending, f"{len(pending)} claims never served"
