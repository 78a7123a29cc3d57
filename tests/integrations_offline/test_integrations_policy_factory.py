"""kvmm.integrations._policy_factory: the adapters' shared rules for what counts as a policy; and
the hooks an engine adapter calls on one (kvmm._policy_hooks.PolicyHooks), for the orders that
evict other than on request."""

import pytest

from kvmm._policy_hooks import PolicyHooks
from kvmm.errors import BadInputError
from kvmm.integrations._policy_factory import policy_factory
from kvmm.policies import ARCPolicy, LRUPolicy, TwoQPolicy


def test_a_class_a_factory_and_an_object_each_give_fresh_policies():
    for given in (LRUPolicy, lambda: ARCPolicy(ghost_limit=4)):
        factory, probe = policy_factory(given)
        assert factory() is not factory() and type(factory()) is type(probe)
    template = LRUPolicy()
    template.on_insert("a")
    factory, probe = policy_factory(template)
    first = factory()
    first.on_insert("b")  # copies are independent of each other and of the template
    assert factory().keys() == ["a"] and template.keys() == ["a"] and first.keys() == ["a", "b"]


def test_what_is_not_a_policy_is_refused_by_name():
    with pytest.raises(BadInputError, match="got object"):
        policy_factory(object())
    with pytest.raises(BadInputError, match="returned int, which lacks the EvictionPolicy methods"):
        policy_factory(lambda: 3)


def test_need_contains_refuses_a_policy_without_membership():
    class NoContains:
        def on_insert(self, key, size=1): ...
        def on_access(self, key, size=None): ...
        def on_remove(self, key): ...
        def victims(self, n, protected=()): return []

    assert policy_factory(NoContains)[1].__class__ is NoContains
    with pytest.raises(BadInputError, match="key in policy"):
        policy_factory(NoContains, need_contains=True)


def test_an_eviction_hook_and_the_self_evictions_an_engine_adapter_applies():
    twoq, lru = TwoQPolicy(capacity=100), LRUPolicy()  # 2Q: Kin 25, Kout 50, Am 75
    hooks = PolicyHooks(twoq)
    assert hooks.evict == twoq.on_evict and PolicyHooks(lru).evict == lru.on_evict  # LRU's: on_remove
    for key in "abcd":
        assert hooks.insert(key, 25) == []
    for key in "abc":  # each leaves A1in as an eviction (a ghost; Kout holds two) and comes back into Am
        hooks.evict(key)
        hooks.insert(key, 25)
    hooks.evict("d")
    assert twoq.queues() == {"A1in": [], "A1out": ["d"], "Am": ["a", "b", "c"]}  # Am at its quota, 75
    assert hooks.insert("d", 25, {"a"}) == ["b"] and "b" not in twoq  # d's ghost enters the full Am; a protected
    assert hooks.insert("e", 25) == []  # a new key goes to A1in: nothing more
    assert twoq.queues()["Am"] == ["a", "c", "d"]
    twoq.check()
    lru.on_insert("x")
    PolicyHooks(lru).evict("x")  # EvictionPolicyBase's on_evict: on_remove
    assert "x" not in lru
