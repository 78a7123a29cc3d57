"""Test and benchmark your own KV-cache component with kvmm's own suites.

Everything kvmm uses to test itself, installed with the package (see docs/testing.md):

* **Contract suites** (cachetools ``CacheTestMixin`` style): subclass one in a test file and say
  how to build your object; you get the whole suite kvmm runs on its own implementations::

      from kvmm.testing import EvictionPolicyContract

      class TestMyPolicy(EvictionPolicyContract):
          def make_policy(self):
              return MyPolicy()

  :class:`EvictionPolicyContract` (alone and paired with every kvmm tier through
  ``ManagedTier``), :class:`TierBackendContract`, :class:`TokenScorerContract`,
  :class:`AdmissionPolicyContract`, :class:`StagingPolicyContract`, :class:`RouterContract`.
* **Hypothesis strategies**: :mod:`kvmm.testing.strategies`.
* **Stateful machines** (``RuleBasedStateMachine``) against documented models, subclassable to
  add rules: :class:`BlockAllocatorMachine`, :class:`TokenTableMachine`,
  :class:`CommitmentLedgerMachine`, :class:`TierMachine`, :class:`EvictionPolicyMachine`.
* **A pytest plugin** (:mod:`kvmm.testing.plugin`, registered through the ``pytest11`` entry
  point): bundled-trace fixtures, ``kvmm_policy_benchmark`` and ``--kvmm-bench-scale``.

pytest and hypothesis are imported only when one of these names is first used, so
``import kvmm`` and ``import kvmm.testing`` never need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

#: public name -> submodule of kvmm.testing that defines it (loaded on first use).
_EXPORTS = {
    "EvictionPolicyContract": "eviction_contract",
    "EvictionPolicyMachine": "eviction_contract",
    "ManagedTierMachine": "eviction_contract",
    "TierBackendContract": "tier_contract",
    "TierMachine": "tier_contract",
    "TierKind": "tiers",
    "TIER_KINDS": "tiers",
    "LOCAL_TIER_KINDS": "tiers",
    "TokenScorerContract": "scorer_contract",
    "AdmissionPolicyContract": "admission_contract",
    "StagingPolicyContract": "staging_contract",
    "RouterContract": "router_contract",
    "BlockAllocatorMachine": "allocator_machine",
    "TokenTableMachine": "token_table_machine",
    "CommitmentLedgerMachine": "ledger_machine",
    "PolicyBenchmarkResult": "benchmarks",
    "replay_policy": "benchmarks",
}
_SUBMODULES = {"strategies", "plugin", "benchmarks", "models", "tiers", "eviction_contract", "tier_contract",
               "scorer_contract", "admission_contract", "staging_contract", "router_contract", "allocator_machine",
               "token_table_machine", "ledger_machine"}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.testing import (
        admission_contract,
        allocator_machine,
        benchmarks,
        eviction_contract,
        ledger_machine,
        models,
        plugin,
        router_contract,
        scorer_contract,
        staging_contract,
        strategies,
        tier_contract,
        tiers,
        token_table_machine,
    )
    from kvmm.testing.admission_contract import AdmissionPolicyContract
    from kvmm.testing.allocator_machine import BlockAllocatorMachine
    from kvmm.testing.benchmarks import PolicyBenchmarkResult, replay_policy
    from kvmm.testing.eviction_contract import EvictionPolicyContract, EvictionPolicyMachine, ManagedTierMachine
    from kvmm.testing.ledger_machine import CommitmentLedgerMachine
    from kvmm.testing.router_contract import RouterContract
    from kvmm.testing.scorer_contract import TokenScorerContract
    from kvmm.testing.staging_contract import StagingPolicyContract
    from kvmm.testing.tier_contract import TierBackendContract, TierMachine
    from kvmm.testing.tiers import LOCAL_TIER_KINDS, TIER_KINDS, TierKind
    from kvmm.testing.token_table_machine import TokenTableMachine

__getattr__, __dir__ = lazy_exports(__name__, {name: f"kvmm.testing.{module}" for name, module in _EXPORTS.items()},
                                    globals(), frozenset(_SUBMODULES))
