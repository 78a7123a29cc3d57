"""kvmm.policies split by idea (eviction/, staging/, mrc/, admission.py): every name exported
before the split still imports from ``kvmm.policies``, the old module paths still import (the same
module objects) with a DeprecationWarning naming the new path, and the one ORDERS table is what
EVICTION_POLICIES, REPLAY_ORDERS and make_eviction_policy read."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

import kvmm.policies
from kvmm.policies import (  # noqa: F401 - every name of kvmm.policies.__all__ before the split, literally
    EVICTION_POLICIES,
    REPLAY_ORDERS,
    STAGING_POLICIES,
    AdmissionRequest,
    ARCPolicy,
    BeladyPolicy,
    ClockPolicy,
    CommitmentLedger,
    DistanceHistogram,
    FIFOPolicy,
    ImmediateEDFStaging,
    ImmediateStaging,
    LFUPolicy,
    LIRSPolicy,
    LRUPolicy,
    OnDemandStaging,
    RefillFilter,
    S3FIFOPolicy,
    SelectiveWriteThrough,
    ShardsTracker,
    SIEVEPolicy,
    SLRUPolicy,
    StackDistanceTracker,
    StagingPolicy,
    StoreThreshold,
    TimelyStaging,
    TwoQPolicy,
    WriteAll,
    WTinyLFUPolicy,
    admission_mask,
    distributed_mrc,
    make_eviction_policy,
    make_staging_policy,
    replay,
)
from kvmm.policies.eviction.orders import ORDERS, Order

BEFORE_THE_SPLIT = [
    "ARCPolicy", "AdmissionRequest", "BeladyPolicy", "ClockPolicy", "CommitmentLedger", "DistanceHistogram",
    "EVICTION_POLICIES", "FIFOPolicy", "ImmediateEDFStaging", "ImmediateStaging", "LFUPolicy", "LIRSPolicy",
    "LRUPolicy", "OnDemandStaging", "REPLAY_ORDERS", "RefillFilter", "S3FIFOPolicy", "SIEVEPolicy", "SLRUPolicy",
    "STAGING_POLICIES", "SelectiveWriteThrough", "ShardsTracker", "StackDistanceTracker", "StagingPolicy",
    "StoreThreshold", "TimelyStaging", "TwoQPolicy", "WTinyLFUPolicy", "WriteAll", "admission_mask", "distributed_mrc",
    "make_eviction_policy", "make_staging_policy", "replay"]

# old module path -> the module that replaced it
MOVED = {
    "kvmm.policies.belady": "kvmm.policies.eviction.belady",
    "kvmm.policies.clock": "kvmm.policies.eviction.clock",
    "kvmm.policies.lirs": "kvmm.policies.eviction.lirs",
    "kvmm.policies.s3fifo": "kvmm.policies.eviction.s3fifo",
    "kvmm.policies.sieve": "kvmm.policies.eviction.sieve",
    "kvmm.policies.slru": "kvmm.policies.eviction.slru",
    "kvmm.policies.twoq": "kvmm.policies.eviction.twoq",
    "kvmm.policies.wtinylfu": "kvmm.policies.eviction.wtinylfu",
    "kvmm.policies._policy_checks": "kvmm.policies.eviction._checks",
    "kvmm.policies._replay": "kvmm.policies.eviction._replay",
    "kvmm.policies._replay_arc": "kvmm.policies.eviction._kernels.arc",
    "kvmm.policies._replay_belady": "kvmm.policies.eviction._kernels.belady",
    "kvmm.policies._replay_classic": "kvmm.policies.eviction._kernels.classic",
    "kvmm.policies._replay_clock": "kvmm.policies.eviction._kernels.clock",
    "kvmm.policies._replay_lfu": "kvmm.policies.eviction._kernels.lfu",
    "kvmm.policies._replay_lirs": "kvmm.policies.eviction._kernels.lirs",
    "kvmm.policies._replay_s3fifo": "kvmm.policies.eviction._kernels.s3fifo",
    "kvmm.policies._replay_sieve": "kvmm.policies.eviction._kernels.sieve",
    "kvmm.policies._replay_slru": "kvmm.policies.eviction._kernels.slru",
    "kvmm.policies._replay_twoq": "kvmm.policies.eviction._kernels.twoq",
    "kvmm.policies._replay_wtinylfu": "kvmm.policies.eviction._kernels.wtinylfu",
    "kvmm.policies.ledger": "kvmm.policies.staging.ledger",
    "kvmm.policies._ledger_checks": "kvmm.policies.staging._ledger_checks",
    "kvmm.policies._ledger_invariants": "kvmm.policies.staging._ledger_invariants",
    "kvmm.policies._ledger_kernels": "kvmm.policies.staging._ledger_kernels",
    "kvmm.policies._ledger_state": "kvmm.policies.staging._ledger_state",
    "kvmm.policies.stack_distance": "kvmm.policies.mrc.stack_distance",
    "kvmm.policies._stack_kernels": "kvmm.policies.mrc._stack_kernels",
    "kvmm.policies.shards": "kvmm.policies.mrc.shards",
    "kvmm.policies._shards_kernels": "kvmm.policies.mrc._shards_kernels",
    "kvmm.policies.distributed": "kvmm.policies.mrc.distributed",
}


def test_every_name_exported_before_the_split_is_exported_and_resolves():
    assert sorted(BEFORE_THE_SPLIT) == sorted(kvmm.policies.__all__)
    imported = dict(globals())
    for name in BEFORE_THE_SPLIT:
        assert getattr(kvmm.policies, name) is imported[name], name


def test_the_old_module_paths_that_became_packages_export_their_old_names_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning: these paths are the new packages
        from kvmm.policies.eviction import EVICTION_POLICIES as Registry
        from kvmm.policies.eviction import ARCPolicy as Arc
        from kvmm.policies.eviction import BeladyPolicy as Belady
        from kvmm.policies.eviction import FIFOPolicy as Fifo
        from kvmm.policies.eviction import LFUPolicy as Lfu
        from kvmm.policies.eviction import LRUPolicy as Lru
        from kvmm.policies.eviction import make_eviction_policy as make
        from kvmm.policies.staging import STAGING_POLICIES as Strategies
        from kvmm.policies.staging import ImmediateEDFStaging as Edf
        from kvmm.policies.staging import OnDemandStaging as OnDemand
        from kvmm.policies.staging import TimelyStaging as Timely
    assert (Arc, Belady, Registry, Fifo, Lfu, Lru, make) == (ARCPolicy, BeladyPolicy, EVICTION_POLICIES, FIFOPolicy,
                                                             LFUPolicy, LRUPolicy, make_eviction_policy)
    assert (Strategies, Edf, OnDemand, Timely) == (STAGING_POLICIES, ImmediateEDFStaging, OnDemandStaging,
                                                   TimelyStaging)
    assert importlib.import_module("kvmm.policies.staging").__path__  # the package, not a module


def _forget(old: str) -> None:
    """Make the next import of ``old`` run the finder again (imports are cached)."""
    sys.modules.pop(old, None)
    name = old.rsplit(".", 1)[1]
    if name in vars(kvmm.policies):
        delattr(kvmm.policies, name)


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_module_path_warns_and_is_the_new_module(old, new):
    _forget(old)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new) and sys.modules[old] is module
    assert module.__name__ == new and module.__spec__.name == new  # the new module is left as it was
    _forget(old)
    with pytest.warns(DeprecationWarning, match=new):  # an attribute of the package, without an import
        assert getattr(kvmm.policies, old.rsplit(".", 1)[1]) is module


def test_from_an_old_path_import_gives_the_same_objects():
    _forget("kvmm.policies.ledger")
    _forget("kvmm.policies.stack_distance")
    with pytest.warns(DeprecationWarning):
        from kvmm.policies.ledger import CLAIMED
        from kvmm.policies.ledger import CommitmentLedger as Ledger
        from kvmm.policies.stack_distance import StackDistanceTracker as Tracker
    from kvmm.policies.staging.ledger import CLAIMED as claimed
    assert Ledger is CommitmentLedger and Tracker is StackDistanceTracker and CLAIMED == claimed


def test_an_unknown_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        kvmm.policies.no_such_module  # noqa: B018


def test_one_orders_table_feeds_the_registry_the_replay_orders_and_the_factory(monkeypatch):
    assert list(EVICTION_POLICIES) == list(ORDERS) and REPLAY_ORDERS == tuple(ORDERS)
    assert all(EVICTION_POLICIES[name] is order.policy for name, order in ORDERS.items())
    # a row added to ORDERS is an order the factory and replay know
    monkeypatch.setitem(ORDERS, "lru-again", Order(LRUPolicy, ORDERS["lru"].kernel))
    assert type(make_eviction_policy("LRU-again")) is LRUPolicy
    keys = np.array([1, 2, 3, 1, 4, 1, 2], dtype=np.int64)
    assert replay("lru-again", keys, 2).tolist() == replay("lru", keys, 2).tolist()
