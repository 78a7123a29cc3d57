"""Deliberately broken implementations, one per contract suite (not collected on its own:
tests/testing/test_contract_suites_fail_on_broken.py runs each class and asserts which tests fail).

Each is a kvmm implementation with one plausible bug, so every other test of its suite still
passes and the failures point at exactly that bug.
"""

import numpy as np
from hypothesis import Phase, settings

from kvmm.compress import H2OScorer
from kvmm.policies import WriteAll
from kvmm.policies.eviction import LRUPolicy
from kvmm.policies.staging import TimelyStaging
from kvmm.testing import (
    LOCAL_TIER_KINDS,
    AdmissionPolicyContract,
    EvictionPolicyContract,
    StagingPolicyContract,
    TierBackendContract,
    TokenScorerContract,
)
from kvmm.tiers import ArenaTier


class VictimsIgnoreProtection(LRUPolicy):
    """Returns protected keys as victims (forgets to skip them)."""

    def victims(self, n, protected=(), **kwargs):
        return super().victims(n, (), **kwargs)


class LosesKeyOnOverwrite(ArenaTier):
    """An overwrite deletes the old entry and then stores nothing."""

    def put(self, key, data):
        if self.contains(key):
            self.delete(key)
            return
        super().put(key, data)


class MisalignedAfterEviction(H2OScorer):
    """``on_evict`` drops the newest tokens instead of the evicted ones (counts stay right)."""

    def on_evict(self, seq_id, live_indices):
        n = self.scores(seq_id).shape[0]
        super().on_evict(seq_id, np.arange(n - len(live_indices), n))


class RewritesCachedBlocks(WriteAll):
    """Writes every block again, including those the tier already holds."""

    def admit(self, request):
        return np.ones(np.asarray(request.keys).shape[0], dtype=np.bool_) | super().admit(request)


class StagesBeforeItsClaimIsGranted(TimelyStaging):
    """Reports every claim as due at once, without the ledger granting a commitment."""

    def on_claim(self, claim_id, now):
        self.told = getattr(self, "told", []) + [claim_id]

    def due(self, now):
        told, self.told = getattr(self, "told", []), []
        return np.array(told, dtype=np.int64)


# The state machines find these bugs at once; no shrinking (slow on a failure), fixed seed.
FIND_ONLY = settings(max_examples=20, stateful_step_count=20, deadline=None, derandomize=True, database=None,
                     phases=[Phase.explicit, Phase.generate])


class StagesBeforeItsClaim(TimelyStaging):
    """Also stages the claim it expects next, before that claim exists (a prefetching guess)."""

    def on_claim(self, claim_id, now):
        self.last = claim_id

    def due(self, now):
        guess = [self.last + 1] if hasattr(self, "last") else []
        return np.concatenate([super().due(now), np.array(guess, dtype=np.int64)])


class TestBrokenPolicy(EvictionPolicyContract):
    tier_kinds = LOCAL_TIER_KINDS[:1]
    machine_settings = FIND_ONLY
    make_policy = staticmethod(VictimsIgnoreProtection)


class TestBrokenTier(TierBackendContract):
    machine_settings = FIND_ONLY
    make_tier = staticmethod(LosesKeyOnOverwrite)


class TestBrokenScorer(TokenScorerContract):
    make_scorer = staticmethod(lambda: MisalignedAfterEviction(recent_window=2))


class TestBrokenAdmission(AdmissionPolicyContract):
    make_policy = staticmethod(RewritesCachedBlocks)


class TestBrokenStaging(StagingPolicyContract):
    make_policy = StagesBeforeItsClaimIsGranted


class TestBrokenStagingAhead(StagingPolicyContract):
    make_policy = StagesBeforeItsClaim
