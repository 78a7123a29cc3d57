"""Shared fixtures for the ledger tests: small tiers, snapshots of every piece of state."""

from __future__ import annotations

import numpy as np

from kvmm.tiers.spec import TierSpec

# two slow tiers with round numbers so expected times are easy to write down
SLOW = TierSpec("slow", 10**9, read_bandwidth=1000.0, write_bandwidth=1000.0, latency_s=0.01)
SLOWER = TierSpec("slower", 10**9, read_bandwidth=100.0, write_bandwidth=100.0, latency_s=0.1)


def snapshot(obj) -> dict:
    """Deep copy of every attribute (arrays copied, dicts of arrays copied)."""
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, np.ndarray):
            out[k] = v.copy()
        elif isinstance(v, dict):
            out[k] = {kk: (vv.copy() if isinstance(vv, np.ndarray) else vv) for kk, vv in v.items()}
        elif isinstance(v, list):
            out[k] = list(v)
        else:
            out[k] = v
    return out


def assert_same_snapshot(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), k
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), k
            for kk in x:
                assert np.array_equal(np.asarray(x[kk]), np.asarray(y[kk])), (k, kk)
        elif isinstance(x, float) and x != x:
            assert y != y, k
        else:
            assert x == y, k
