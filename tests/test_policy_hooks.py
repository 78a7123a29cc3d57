"""kvmm._policy_hooks.PolicyHooks: how every owner (ManagedTier, the vLLM and LMCache adapters)
calls an eviction policy, and the one return value that carries the keys a policy evicted on its
own.  A policy derived from EvictionPolicyBase is called through its own methods, with every
optional capability; any other object through its four Protocol methods only."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from kvmm._policy_hooks import PolicyHooks
from kvmm.policies import ARCPolicy, LIRSPolicy, LRUPolicy, SLRUPolicy, TwoQPolicy, WTinyLFUPolicy
from kvmm.policies.eviction import EVICTION_POLICIES
from kvmm.protocols import EvictionPolicyBase, FastHooks
from kvmm.testing import EvictionPolicyContract
from kvmm.tiers import ManagedTier, SimulatedTier


class KeyOnly:
    """The protocol before sizes: events take the key only, return nothing."""

    def __init__(self):
        self.order, self.calls = OrderedDict(), []

    def on_insert(self, key):
        self.calls.append(("insert", key))
        self.order[key] = None

    def on_access(self, key):
        self.calls.append(("access", key))
        self.order.move_to_end(key)

    def on_remove(self, key):
        del self.order[key]

    def victims(self, n, protected=()):
        return [k for k in self.order if k not in protected][:n]


class EvictsOnItsOwn:
    """Not an EvictionPolicyBase: keeps at most two keys, and says which one it dropped."""

    def __init__(self):
        self.order = OrderedDict()

    def on_insert(self, key, size=1):
        self.order[key] = size
        return [self.order.popitem(last=False)[0]] if len(self.order) > 2 else None

    def on_access(self, key, size=None):
        self.order.move_to_end(key)

    def on_remove(self, key):
        del self.order[key]

    def victims(self, n, protected=()):
        return [k for k in self.order if k not in protected][:n]

    def __len__(self):
        return len(self.order)

    def __contains__(self, key):
        return key in self.order


def test_a_base_policy_is_called_through_its_own_methods():
    arc = ARCPolicy()
    hooks = PolicyHooks(arc)
    assert (hooks.insert, hooks.access, hooks.remove, hooks.evict) == (arc.on_insert, arc.on_access, arc.on_remove,
                                                                         arc.on_evict)
    assert (hooks.victims, hooks.touch, hooks.adapt, hooks.keys) == (arc.victims, arc.touch, arc.adapt, arc.keys)
    assert hooks.adapts and not hooks.self_evicting and not hooks.offline
    assert isinstance(hooks.fast_hooks(), FastHooks) and hooks.insert("a", 3) == () and hooks.resident_size() == 3


def test_the_base_defaults_change_nothing_and_on_evict_is_a_remove():
    lru = LRUPolicy()
    hooks = PolicyHooks(lru)
    assert not hooks.adapts and not hooks.self_evicting
    lru.on_insert("a")
    lru.on_insert("b")
    assert hooks.adapt("a") is False and hooks.touch("a") is None and lru.keys() == ["a", "b"]
    assert hooks.resident_size() is None and hooks.attach(10) is None
    hooks.evict("a")
    assert lru.keys() == ["b"]
    assert EvictionPolicyBase().fast_hooks() is None


def test_every_self_evicting_order_says_so_and_no_other_does():
    assert [cls.__name__ for cls in (TwoQPolicy, LIRSPolicy, SLRUPolicy, WTinyLFUPolicy) if cls.self_evicting] == \
        ["TwoQPolicy", "LIRSPolicy", "SLRUPolicy", "WTinyLFUPolicy"]
    assert not LRUPolicy.self_evicting and not ARCPolicy.self_evicting
    # every registered order, not only the ones named above ...
    assert {name for name, cls in EVICTION_POLICIES.items() if cls.self_evicting} == {"2q", "lirs", "slru", "wtinylfu"}
    # ... and what each order returns from its events in a sized replay through a ManagedTier (a
    # subclass records it) matches what it says: keys from 2Q, LIRS and SLRU, none from the others
    rng = np.random.default_rng(0)
    keys = (rng.zipf(1.3, 2000) % 80).tolist()
    size_of = {k: int(rng.integers(1, 9)) for k in range(80)}
    returned = {}
    for name, cls in EVICTION_POLICIES.items():
        if cls.offline:
            continue
        tier = ManagedTier(SimulatedTier(64), _recording(cls, returned.setdefault(name, [])))
        for key in keys:
            if key in tier:
                tier.get(key)
            else:
                tier.put_size(key, size_of[key])
        tier.check()
    assert {name for name, out in returned.items() if out} == {"2q", "lirs", "slru"}


def _recording(cls, returned):
    """A ``cls`` whose events record the keys they return (evicted on the policy's own)."""

    class Recording(cls):
        def on_insert(self, key, size=1, protected=()):
            out = super().on_insert(key, size, protected)
            returned.extend(out or ())
            return out

        def on_access(self, key, size=None, protected=()):
            out = super().on_access(key, size, protected)
            returned.extend(out or ())
            return out

    return Recording()


def test_a_key_only_policy_gets_keys_only_and_its_nothing_is_an_empty_tuple():
    policy = KeyOnly()
    hooks = PolicyHooks(policy)
    assert hooks.insert("a", 5, {"z"}) == () and hooks.insert("b") == () and hooks.access("a", 7) == ()
    assert policy.calls == [("insert", "a"), ("insert", "b"), ("access", "a")]
    assert hooks.victims(5, (), incoming="c", incoming_size=3) == ["b", "a"]  # incoming not passed on
    # every optional capability is absent: nothing happens, nothing is returned
    assert (hooks.fast_hooks(), hooks.resident_size(), hooks.keys, hooks.adapt("a"), hooks.touch("a")) == \
        (None, None, None, None, None)
    assert hooks.self_evicting and not hooks.adapts and not hooks.offline
    hooks.evict("a")  # on_remove
    assert list(policy.order) == ["b"]


def test_a_policy_that_is_no_base_may_still_evict_on_its_own_and_a_managed_tier_deletes_it():
    tier = ManagedTier(SimulatedTier(1000), EvictsOnItsOwn())
    assert tier.put_size("a", 10) == [] and tier.put_size("b", 10) == []
    assert tier.put_size("c", 10) == ["a"] and sorted(tier.keys()) == ["b", "c"] and tier.evictions == 1
    hits = tier.access_or_put_size_many(np.array([4, 5, 6]), 10, np.ones(3, bool))
    assert not hits.any() and sorted(tier.keys()) == [5, 6] and tier.evictions == 4
    tier.check()


class MinimalLRU:
    """A user's policy with the four Protocol methods and nothing else (no kvmm base class)."""

    def __init__(self):
        self.order = OrderedDict()

    def on_insert(self, key, size=1):
        self.order[key] = None

    def on_access(self, key, size=None):
        self.order.move_to_end(key)

    def on_remove(self, key):
        del self.order[key]

    def victims(self, n, protected=()):
        protected = set(protected)
        return [k for k in self.order if k not in protected][:n]


class TestAMinimalUserPolicyKeepsPassingTheContract(EvictionPolicyContract):
    make_policy = staticmethod(MinimalLRU)
