"""kvmm.integrations._policy_factory: the adapters' shared rule for what counts as a policy."""

import pytest

from kvmm.errors import BadInputError
from kvmm.integrations._policy_factory import policy_factory
from kvmm.policies import ARCPolicy, LRUPolicy


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
