"""The kvmm tiers a contract suite pairs a policy with, and helpers to look inside a tier.

:data:`TIER_KINDS` lists every kvmm tier (ArenaTier, MmapTier, SimulatedTier, RedisTier);
:data:`LOCAL_TIER_KINDS` the ones that need nothing outside the process (RedisTier needs a
running ``redis-server``: a test that builds one asks pytest for a ``redis_url`` fixture).
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm._policy_hooks import PolicyHooks
from kvmm.tiers import ArenaTier, MmapTier, RedisTier, SimulatedTier

__all__ = ["TierKind", "TIER_KINDS", "LOCAL_TIER_KINDS", "TierContext", "snapshot", "value", "sample_values", "victim_order",
           "check_managed", "run_forked"]


@dataclass(frozen=True)
class TierKind:
    """How to build one kind of tier for a test: ``make(capacity_bytes, ctx)`` -> tier."""

    name: str
    make: Callable[[int, TierContext], Any]
    holds_bytes: bool = True  # get returns the stored values (SimulatedTier returns zero placeholders)
    needs_redis: bool = False


def _arena(capacity: int, ctx: TierContext) -> Any:
    return ArenaTier(capacity)


def _mmap(capacity: int, ctx: TierContext) -> Any:
    return MmapTier(ctx.new_folder("mmap"), capacity, segment_bytes=2048)


def _simulated(capacity: int, ctx: TierContext) -> Any:
    return SimulatedTier(capacity)


def _redis(capacity: int, ctx: TierContext) -> Any:
    return RedisTier(capacity, url=ctx.redis_url, prefix=f"kvmm-test-{uuid.uuid4().hex[:12]}")


#: Every kvmm tier that runs inside the test process.
LOCAL_TIER_KINDS: tuple[TierKind, ...] = (
    TierKind("arena", _arena),
    TierKind("mmap", _mmap),
    TierKind("simulated", _simulated, holds_bytes=False),
)

#: Every kvmm tier (RedisTier needs a ``redis_url`` fixture, e.g. a loopback redis-server).
TIER_KINDS: tuple[TierKind, ...] = LOCAL_TIER_KINDS + (TierKind("redis", _redis, needs_redis=True),)


class TierContext:
    """Per-test resources the tier factories need; :meth:`close` closes every tier it built.

    ``tmp_path`` is a folder for file-backed tiers; ``request`` a pytest ``FixtureRequest``
    (its ``redis_url`` fixture is looked up only when a Redis tier is built).
    """

    def __init__(self, tmp_path: Any, request: Any = None) -> None:
        self.tmp_path = tmp_path
        self.request = request
        self.counter = 0
        self.built: list[Any] = []

    @property
    def redis_url(self) -> str:
        if self.request is None:
            raise RuntimeError("a RedisTier needs the pytest request (for its redis_url fixture)")
        return self.request.getfixturevalue("redis_url")

    def new_folder(self, stem: str) -> Any:
        self.counter += 1
        return self.tmp_path / f"{stem}{self.counter}"

    def build(self, kind: TierKind, capacity: int) -> Any:
        tier = kind.make(capacity, self)
        self.built.append(tier)
        return tier

    def close(self) -> None:
        """Close every tier built, even when closing one fails (the first error is re-raised)."""
        built, self.built = self.built, []
        errors = []
        for tier in built:
            try:
                close_tier(tier)
            except Exception as exc:  # noqa: BLE001 - keep closing the others
                errors.append(exc)
        if errors:
            raise errors[0]


def close_tier(tier: Any) -> None:
    """Release what a tier holds: a Redis pool is dropped, files and connections are closed."""
    if hasattr(tier, "drop_pool"):
        try:
            tier.drop_pool()
        finally:
            tier.close()
    elif hasattr(tier, "close"):
        tier.close()


def snapshot(tier: Any, holds_bytes: bool) -> dict:
    """Everything observable about a tier's contents (read from the backend, not through a policy)."""
    backend = getattr(tier, "backend", tier)
    keys = sorted(backend.keys(), key=repr)
    out = {"keys": keys, "used": backend.used_bytes,
           "sizes": {repr(k): backend.nbytes_of(k) for k in keys}}
    if holds_bytes:
        values = {}
        for k in keys:
            v = backend.get(k)
            values[repr(k)] = (v.dtype.str, v.shape, v.tobytes())
        out["values"] = values
    if hasattr(tier, "policy"):
        out["policy"] = victim_order(tier.policy)
    return out


def run_forked(target: Callable[..., Any], *args: Any, timeout_s: float = 30.0) -> int | None:
    """Run ``target(*args)`` in a forked child and return its exit code (crash tests: the child
    writes to a tier and dies with ``os._exit``, leaving the files as a crash would).  A child
    still running after ``timeout_s`` is killed and None is returned, so a hung child fails the
    caller's exit-code assertion instead of outliving the test.  POSIX only (``fork``).
    """
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return child.exitcode


def value(nbytes: int, seed: int = 0) -> np.ndarray:
    """A uint8 value of ``nbytes`` bytes with recognisable content."""
    return ((np.arange(nbytes, dtype=np.int64) * 7 + seed) % 251).astype(np.uint8)


def sample_values() -> dict:
    """Keys of every kind mapped to values of awkward kinds (0-d, empty, complex, non-contiguous,
    big-endian), 87 bytes in all."""
    return {
        "f16": np.arange(24, dtype=np.float16).reshape(2, 3, 4),
        ("blk", 3): np.array([[1 + 2j, 3 - 1j]], dtype=np.complex64),
        b"raw": np.array([True, False, True]),
        7: np.array(5, dtype=np.int32),  # 0-d
        8: np.zeros((0, 4), dtype=np.float32),  # empty
        9: np.arange(6, dtype=">i4").reshape(3, 2)[::2],  # non-contiguous, big-endian
    }


def victim_order(policy: Any, tracked: int | None = None) -> list:
    """The policy's whole eviction order (``victims`` of more keys than it can track)."""
    n = tracked + 1 if tracked is not None else (len(policy) + 1 if hasattr(policy, "__len__") else 1 << 20)
    return list(policy.victims(n, ()))


def check_managed(tier: Any) -> None:
    """Assert the invariants of a ``ManagedTier`` that hold for any policy speaking the Protocol.

    The backend's own ``check()`` (when it has one) and the policy's (an
    :class:`~kvmm.protocols.EvictionPolicyBase` declares one); capacity respected; the
    policy's victim order lists exactly the stored keys, each once; and, when the policy has
    ``__len__`` and ``__contains__``, the ManagedTier's full ``check()``.
    """
    policy, backend = tier.policy, tier.backend
    if hasattr(backend, "check"):
        backend.check()
    PolicyHooks(policy).check()
    # capacity is never exceeded
    assert 0 <= backend.used_bytes <= backend.capacity_bytes
    # the policy orders exactly the stored keys, each once
    order = victim_order(policy, len(tier))
    assert len(order) == len(set(order)), f"the policy's victims repeat a key: {order}"
    assert set(order) == set(backend.keys()), (
        f"the policy orders {sorted(order, key=repr)} but the tier stores {sorted(backend.keys(), key=repr)}")
    if hasattr(policy, "__len__") and hasattr(policy, "__contains__"):
        tier.check()
