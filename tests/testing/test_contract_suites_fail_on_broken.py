"""Each kvmm.testing contract suite fails on a deliberately broken implementation
(tests/testing/contract_breakers.py), in exactly the tests that check what is broken."""

from pathlib import Path

import pytest

import tests.testing.contract_breakers  # noqa: F401  (imported once here: the inner runs must not re-import numpy)

BREAKERS = Path(__file__).with_name("contract_breakers.py")

# class -> tests (name without parameters) that must fail; every other test of the class passes.
MUST_FAIL = {
    "TestBrokenPolicy": {"test_victims_skip_protected_and_do_not_mutate", "test_policy_state_machine",
                         "test_protected_keys_are_never_evicted", "test_managed_tier_state_machine"},
    "TestBrokenTier": {"test_overwrite_replaces_and_keeps_every_other_key", "test_matches_a_dict_model",
                       "test_capacity_is_never_exceeded_and_a_refused_put_stores_nothing"},
    "TestBrokenScorer": {"test_on_evict_keeps_the_remaining_scores_aligned",
                         "test_decode_with_budget_through_the_token_table"},
    "TestBrokenAdmission": {"test_returns_a_mask_that_never_rewrites_cached_blocks",
                            "test_accepts_uint64_keys_and_plain_objects"},
    "TestBrokenStaging": {"test_far_claim", "test_imminent_claim", "test_a_needed_claim_is_granted_at_the_next_due",
                          "test_never_over_capacity_and_every_claim_served"},
    "TestBrokenStagingAhead": {"test_far_claim", "test_imminent_claim",
                               "test_a_needed_claim_is_granted_at_the_next_due",
                               "test_never_over_capacity_and_every_claim_served"},
}


@pytest.fixture(scope="module", autouse=True)
def numba_registries_loaded_out_here():
    """numba imports some of its own modules (numba.np.polynomial, ...) at the first compile or
    cache load of a process; pytester's inline runs drop every module they imported, and numba
    cannot register those twice (KeyError: duplicate registration), so the kvmm tests run after
    this file failed when it was the first to call a kernel.  Call one here, outside the runs."""
    from kvmm.allocators import BlockAllocator

    BlockAllocator(4, 2)


@pytest.mark.parametrize("cls", sorted(MUST_FAIL))
def test_suite_fails_exactly_on_the_broken_behaviour(pytester, cls):
    reprec = pytester.inline_run(f"{BREAKERS}::{cls}", "-p", "no:cacheprovider", "-p", "no:randomly")
    passed, skipped, failed = reprec.listoutcomes()
    names = {r.nodeid.split("::")[-1].split("[")[0] for r in failed}
    assert names == MUST_FAIL[cls] and not skipped
    assert passed, "the rest of the suite passes on the broken implementation"
