"""Plain-Python reference of :class:`kvmm.policies.CommitmentLedger`, written from docs/tempokv.md.

The reference is :class:`kvmm.testing.models.ledger.LedgerModel` (one dict per claim, every
rule transcribed from the "Semantics" section of the docs, not from the code); it lives in the
installable package so that the Hypothesis state machine shipped there
(``CommitmentLedgerMachine``) can drive it.  Tests, benchmarks and the simulator's plain-Python
run use it under this name.
"""

from kvmm.testing.models.ledger import LedgerModel as NaiveLedger

__all__ = ["NaiveLedger"]
