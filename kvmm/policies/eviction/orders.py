"""The one table of eviction orders: :data:`ORDERS` maps each order's name to its policy class and
its numba replay kernel.  :data:`EVICTION_POLICIES`, :func:`make_eviction_policy` and
:func:`~kvmm.policies.replay` (:data:`~kvmm.policies.REPLAY_ORDERS`) all read it, so a new order
is one more row here (libCacheSim's function table, one entry per algorithm).

Importing this module imports every policy class (plain Python), never a kernel: a kernel's
module is named as a string and loaded on first use, so nothing compiles until a replay runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any, NamedTuple

from kvmm.errors import BadInputError
from kvmm.policies.eviction.arc import ARCPolicy
from kvmm.policies.eviction.belady import BeladyPolicy
from kvmm.policies.eviction.clock import ClockPolicy
from kvmm.policies.eviction.fifo import FIFOPolicy
from kvmm.policies.eviction.lfu import LFUPolicy
from kvmm.policies.eviction.lirs import LIRSPolicy
from kvmm.policies.eviction.lru import LRUPolicy
from kvmm.policies.eviction.s3fifo import S3FIFOPolicy
from kvmm.policies.eviction.sieve import SIEVEPolicy
from kvmm.policies.eviction.slru import SLRUPolicy
from kvmm.policies.eviction.twoq import TwoQPolicy
from kvmm.policies.eviction.wtinylfu import WTinyLFUPolicy

__all__ = ["Order", "ORDERS", "EVICTION_POLICIES", "make_eviction_policy"]

_KERNELS = "kvmm.policies.eviction._kernels"


class Order(NamedTuple):
    """One eviction order: ``policy`` its :class:`~kvmm.protocols.EvictionPolicy` class (the
    constructor's fields are its options); ``kernel`` ``"module:function"`` of its replay kernel,
    whose module also holds ``PARAMS_<NAME>``, the (option, default) pairs ``replay`` takes."""

    policy: type
    kernel: str


#: order name -> :class:`Order`; names are lower case (``make_eviction_policy`` and ``replay``
#: accept any case).  Belady is offline: the simulator refuses it by name.
ORDERS: dict[str, Order] = {
    "lru": Order(LRUPolicy, f"{_KERNELS}.classic:replay_lru"),
    "fifo": Order(FIFOPolicy, f"{_KERNELS}.classic:replay_fifo"),
    "lfu": Order(LFUPolicy, f"{_KERNELS}.lfu:replay_lfu"),
    "arc": Order(ARCPolicy, f"{_KERNELS}.arc:replay_arc"),
    "clock": Order(ClockPolicy, f"{_KERNELS}.clock:replay_clock"),
    "s3fifo": Order(S3FIFOPolicy, f"{_KERNELS}.s3fifo:replay_s3fifo"),
    "sieve": Order(SIEVEPolicy, f"{_KERNELS}.sieve:replay_sieve"),
    "2q": Order(TwoQPolicy, f"{_KERNELS}.twoq:replay_twoq"),
    "lirs": Order(LIRSPolicy, f"{_KERNELS}.lirs:replay_lirs"),
    "slru": Order(SLRUPolicy, f"{_KERNELS}.slru:replay_slru"),
    "wtinylfu": Order(WTinyLFUPolicy, f"{_KERNELS}.wtinylfu:replay_wtinylfu"),
    "belady": Order(BeladyPolicy, f"{_KERNELS}.belady:replay_belady"),
}

#: Policy name -> factory (used by the CLI and the simulator): the policy column of :data:`ORDERS`.
EVICTION_POLICIES: dict[str, Callable[..., Any]] = {name: order.policy for name, order in ORDERS.items()}


def make_eviction_policy(name: str, **kwargs: Any):
    """A fresh policy by any name of :data:`ORDERS` (``lru``, ``fifo``, ``lfu``, ``arc``,
    ``clock``, ``s3fifo``, ``sieve``, ``2q``, ``lirs``, ``slru``, ``wtinylfu``, ``belady``; any case);
    ``kwargs`` go to its constructor.

    Options are the policy's constructor fields, libCacheSim's names and defaults where
    libCacheSim has the order: ARC ``capacity``, ``ghost_limit``; CLOCK ``init_freq``,
    ``n_bit_counter``; S3-FIFO ``capacity``, ``small_size_ratio``, ``ghost_size_ratio``,
    ``move_to_main_threshold``; 2Q ``a_in_size_ratio``, ``a_out_size_ratio``, ``capacity``;
    LIRS ``hirs_ratio``, ``capacity``; SLRU ``capacity``, ``n_seg``, ``seg_size``; W-TinyLFU
    ``capacity``, ``main_cache``, ``window_size``; Belady ``trace`` (its future references);
    LRU, FIFO, LFU and SIEVE none.  An option the policy does not take is a
    :class:`BadInputError` naming the ones it does.
    """
    try:
        factory = ORDERS[name.lower()].policy
    except (KeyError, AttributeError):
        raise BadInputError(f"unknown eviction policy {name!r}; expected one of {sorted(ORDERS)}") from None
    accepted = sorted(f.name for f in fields(factory) if f.init) if is_dataclass(factory) else None
    unknown = sorted(set(kwargs) - set(accepted)) if accepted is not None else []
    if unknown:
        raise BadInputError(f"eviction policy {name!r} takes no option {unknown[0]!r}; "
                            f"it takes {accepted or 'no options'}")
    return factory(**kwargs)
