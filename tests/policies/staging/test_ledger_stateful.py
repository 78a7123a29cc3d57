"""Hypothesis stateful test: CommitmentLedger vs the documented model (kvmm.testing.ledger_machine),
with repeated, released, foreign and wrong-state ids; check() after every step."""

from __future__ import annotations

from hypothesis import settings

from kvmm.testing.ledger_machine import CommitmentLedgerMachine

TestCommitmentLedger = CommitmentLedgerMachine.TestCase
TestCommitmentLedger.settings = settings(max_examples=80, stateful_step_count=50, deadline=None, derandomize=True)
