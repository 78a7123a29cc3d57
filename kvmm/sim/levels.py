"""One level of the simulated memory hierarchy, :class:`TierLevel` (a tier spec plus its eviction
and admission policies), and the resolution of policies given by name or as objects.

Plain data: :mod:`kvmm.sim.config` (the single-engine config) and :mod:`kvmm.sim.cluster_config`
(the shared levels of a cluster) both hold TierLevels, so the two configs import this module and
not each other.  A policy given by name is checked here without building it: validating a config
compiles no kernel.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kvmm.errors import BadInputError
from kvmm.policies.eviction import EVICTION_POLICIES, make_eviction_policy
from kvmm.protocols import AdmissionPolicy, EvictionPolicy, EvictionPolicyBase
from kvmm.tiers._base import resolve_spec
from kvmm.tiers.spec import TierSpec

__all__ = ["TierLevel", "as_tier_levels", "ADMISSION_NAMES", "FILL_NAMES", "check_eviction", "check_admission",
           "check_name_or_protocol", "make_eviction", "make_admission"]

#: registered admission names (kvmm.policies.admission); "refill-filter" gets the tier's capacity in blocks
ADMISSION_NAMES = ("write-all", "store-threshold", "selective", "refill-filter")
#: how a lower level is written (TierLevel.fill)
FILL_NAMES = ("write-through", "write-back")


@dataclass(frozen=True)
class TierLevel:
    """One lower tier of the hierarchy: a :class:`TierSpec` (or preset name) plus its policies.

    ``eviction``: a name in :data:`kvmm.policies.EVICTION_POLICIES` (``"lru"``, ``"fifo"``,
    ``"lfu"``, ``"arc"``, ``"clock"``, ``"s3fifo"``, ``"sieve"``, ``"2q"``, ``"lirs"``, ``"slru"``,
    ``"wtinylfu"``: docs/eviction_orders.md) or any EvictionPolicy object; not ``"belady"`` (nor a BeladyPolicy), which
    needs the tier's future reference stream (a BadInputError says so).  ``admission``: a name in
    :data:`ADMISSION_NAMES` or any AdmissionPolicy object.  ``capacity_bytes`` resizes the spec.

    ``fill``: how the level is written.  ``"write-through"`` (the default): every prefilled
    request offers its blocks, the admission policy picks which are written.  ``"write-back"``:
    nothing is written at prefill; blocks evicted from the level above (the GPU prefix cache
    for the first level, the victims of the previous level otherwise) are demoted into it (the
    admission policy picks among them), as LMCache's and SGLang HiCache's ``write_back`` do.
    ``inclusive`` (write-back only): ``False`` makes the level exclusive: a block read from it
    into the GPU leaves it (it lives in one level at a time).
    """

    spec: str | TierSpec = "nvme"
    eviction: str | EvictionPolicy = "lru"
    admission: str | AdmissionPolicy = "write-all"
    capacity_bytes: int | None = None
    fill: str = "write-through"
    inclusive: bool = True

    def __post_init__(self) -> None:
        spec = resolve_spec(self.spec, self.capacity_bytes)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "capacity_bytes", spec.capacity_bytes)
        check_eviction(self.eviction)
        check_admission(self.admission)
        if self.fill not in FILL_NAMES:
            raise BadInputError(f"unknown fill {self.fill!r}; expected one of {list(FILL_NAMES)}")
        if not isinstance(self.inclusive, bool):
            raise BadInputError(f"inclusive must be a bool, got {self.inclusive!r}")
        if not self.inclusive and self.fill != "write-back":
            raise BadInputError("an exclusive level (inclusive=False) needs fill='write-back': write-through "
                                "writes every prefilled block to the level, which keeps it inclusive")

    @property
    def write_back(self) -> bool:
        return self.fill == "write-back"

    @property
    def name(self) -> str:
        return self.spec.name



def as_tier_levels(value: Any, what: str) -> tuple:
    """A TierLevel, or a sequence of TierLevels (or specs / preset names, each made a TierLevel), as a tuple."""
    if isinstance(value, TierLevel):
        return (value,)
    try:
        return tuple(t if isinstance(t, TierLevel) else TierLevel(t) for t in value)
    except TypeError:
        raise BadInputError(f"{what} must be a sequence of TierLevel, got {type(value).__name__}") from None



# ---------------------------------------------------------------------- policy resolution
def check_eviction(policy: Any) -> None:
    """A registered eviction name (any case) or an object with the EvictionPolicy methods."""
    if (isinstance(policy, str) and policy.lower() == "belady") or (isinstance(policy, EvictionPolicyBase) and policy.offline):
        raise BadInputError("eviction policy 'belady' needs the tier's own future reference stream, which a tier "
                            "inside the simulator cannot know (it depends on the tiers above it and on admission); "
                            "replay a trace with kvmm.policies.replay('belady', keys, capacity) or "
                            "BeladyPolicy.from_trace(keys) instead")
    check_name_or_protocol(policy.lower() if isinstance(policy, str) else policy, "eviction policy", EVICTION_POLICIES,
                           ("on_insert", "on_access", "on_remove", "victims"), "EvictionPolicy")


def check_admission(policy: Any) -> None:
    """A registered admission name or an object with ``admit(request)``."""
    check_name_or_protocol(policy, "admission policy", ADMISSION_NAMES, ("admit",), "AdmissionPolicy")


def check_name_or_protocol(value: Any, kind: str, names: Any, methods: tuple[str, ...], protocol: str) -> None:
    """``value`` is one of the registered ``names`` or an object whose ``methods`` are callable
    (the ``protocol``); else a :class:`BadInputError` saying which it is not."""
    if isinstance(value, str):
        if value not in names:
            raise BadInputError(f"unknown {kind} {value!r}; expected one of {sorted(names)} or an object with "
                                f"{', '.join(methods)}")
        return
    missing = [m for m in methods if not callable(getattr(value, m, None))]
    if missing:
        raise BadInputError(f"{kind} {type(value).__name__} lacks {missing}; expected a name or an object of the "
                            f"{protocol} Protocol ({', '.join(methods)})")


def make_eviction(policy: Any) -> Any:
    """A fresh policy for one run: by name, or a deep copy of the given object."""
    if isinstance(policy, str):
        return make_eviction_policy(policy)
    return copy.deepcopy(policy)


def make_admission(policy: Any, capacity_blocks: int) -> Any:
    """A fresh admission policy for one run (``refill-filter`` sized to the tier in blocks)."""
    if not isinstance(policy, str):
        return copy.deepcopy(policy)
    # the admission policies load numba (RefillFilter's kernels): here, when a run builds its tiers,
    # so that validating a config compiles nothing (tests/sim/test_sim_compress.py checks it)
    from kvmm.policies import admission as A

    if policy == "write-all":
        return A.WriteAll()
    if policy == "store-threshold":
        return A.StoreThreshold()
    if policy == "selective":
        return A.SelectiveWriteThrough()
    return A.RefillFilter(capacity_blocks=capacity_blocks)
