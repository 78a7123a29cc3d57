"""The one rule by which the engine adapters that store KV bytes (LMCache's storage plugin,
SGLang's HiCache storage) build a kvmm tier from their configuration settings.
Engine-independent: imports no engine.

Settings (strings or JSON values, as the engines pass them): ``tier`` (``mmap``, ``redis`` or
``arena``), ``capacity_bytes``, ``path`` and ``sync`` (mmap), ``url`` and ``prefix`` (redis),
``eviction`` (any online order of :data:`kvmm.policies.EVICTION_POLICIES`, or ``none``: the
bare tier, which refuses a write when full).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvmm.errors import BadInputError
from kvmm.policies.eviction import EVICTION_POLICIES, make_eviction_policy
from kvmm.tiers import ArenaTier, ManagedTier, MmapTier, RedisTier

#: tier kinds the adapters build
TIER_KINDS = ("mmap", "redis", "arena")


def build_tier(settings: dict[str, Any], *, what: str, redis_prefix: str) -> Any:
    """A kvmm tier (a :class:`~kvmm.tiers.ManagedTier` unless ``eviction`` is ``none``) from
    ``settings``; ``what`` names the settings in errors (``"kvmm plugin setting"``), and
    ``redis_prefix`` is the default key prefix of a Redis tier."""
    kind = choice(settings.get("tier"), TIER_KINDS, f"{what} tier")
    eviction = choice(settings.get("eviction", "lru"), online_orders() + ("none",), f"{what} eviction")
    capacity = settings.get("capacity_bytes")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, str))
                                 or not str(capacity).isdigit()):
        raise BadInputError(f"{what} capacity_bytes={capacity!r}; expected a whole number of bytes")
    capacity = None if capacity is None else int(capacity)
    if kind == "mmap":
        if not settings.get("path"):
            raise BadInputError(f"{what} tier=mmap needs path (the tier's folder)")
        sync = settings.get("sync", False)
        if not isinstance(sync, bool):
            raise BadInputError(f"{what} sync={sync!r}; expected true or false")
        tier = MmapTier(settings["path"], capacity, sync=sync)
    elif kind == "redis":
        tier = RedisTier(capacity, url=settings.get("url", "redis://127.0.0.1:6379/0"),
                         prefix=settings.get("prefix", redis_prefix))
    else:
        if capacity is None:
            raise BadInputError(f"{what} tier=arena needs capacity_bytes")
        tier = ArenaTier(capacity)
    return tier if eviction == "none" else ManagedTier(tier, make_eviction_policy(eviction))


def online_orders() -> tuple[str, ...]:
    """The registered eviction orders a tier can run (Belady, which needs the future, is not one)."""
    return tuple(name for name, cls in EVICTION_POLICIES.items() if not cls.offline)  # every order declares it


def choice(value: Any, allowed: Iterable[str], what: str) -> str:
    """``value`` lower-cased when it is one of ``allowed``, else a :class:`BadInputError`
    naming ``what`` and the choices."""
    allowed = tuple(allowed)
    if not isinstance(value, str) or value.lower() not in allowed:
        raise BadInputError(f"{what}={value!r}; expected one of {list(allowed)}")
    return value.lower()
