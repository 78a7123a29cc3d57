"""Shared fixtures for the ledger tests: small tiers, snapshots of every piece of state."""

from __future__ import annotations

import pytest

from kvmm.errors import KvmmError
from kvmm.testing.ledger_machine import ledger_snapshot as snapshot
from kvmm.testing.ledger_machine import same_snapshot as assert_same_snapshot
from kvmm.tiers.spec import TierSpec

__all__ = ["SLOW", "SLOWER", "snapshot", "assert_same_snapshot", "raises_unchanged"]

# two slow tiers with round numbers so expected times are easy to write down
SLOW = TierSpec("slow", 10**9, read_bandwidth=1000.0, write_bandwidth=1000.0, latency_s=0.01)
SLOWER = TierSpec("slower", 10**9, read_bandwidth=100.0, write_bandwidth=100.0, latency_s=0.1)


def raises_unchanged(led, exc, fn, *args, match=None, **kw):
    """``fn(*args, **kw)`` raises ``exc`` (a KvmmError) and leaves ``led`` exactly as it was."""
    before = snapshot(led)
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kw)
    assert isinstance(info.value, KvmmError)
    assert_same_snapshot(before, snapshot(led))
    led.check()
