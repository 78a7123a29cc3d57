"""The contract every :class:`~kvmm.protocols.EvictionPolicy` passes, alone and inside a tier.

::

    class TestMyPolicy(EvictionPolicyContract):
        def make_policy(self):
            return MyPolicy()
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from kvmm._policy_hooks import PolicyHooks
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError, KvmmError, UnknownKeyError
from kvmm.protocols import EvictionPolicy, EvictionPolicyBase
from kvmm.testing.strategies import tier_values
from kvmm.testing.tiers import (
    LOCAL_TIER_KINDS,
    TierContext,
    check_managed,
    sample_values,
    snapshot,
    value,
    victim_order,
)
from kvmm.tiers import ArenaTier, ManagedTier

__all__ = ["EvictionPolicyContract", "EvictionPolicyMachine", "ManagedTierMachine"]

CAPACITY = 1000  # bytes of the tiers the pairing tests build: ten 100-byte entries


class EvictionPolicyContract:
    """Contract suite for an eviction policy; subclass it and define ``make_policy()``.

    Alone, through the four Protocol methods only:

    * it is an :class:`~kvmm.protocols.EvictionPolicy` (``isinstance``);
    * ``victims(n, protected)`` returns at most ``n`` distinct tracked keys, none protected,
      in an order that does not change when victims is called again (victims never mutates);
      protecting the first victim shifts the order by one; ``n=0`` gives ``[]``; protecting
      every key gives ``[]``; ``protected`` may be any iterable;
    * a bad call (access or remove of an untracked key, a second insert of a tracked key,
      ``victims(-1)``) raises and leaves the victim order unchanged, or is ignored (the same
      keys stay ordered); with
      ``raises_kvmm_errors = True`` it must raise kvmm's errors (``UnknownKeyError``,
      ``BadInputError``, ``DTypeError`` for ``victims(1.5)``); likewise a bad size (negative,
      fractional, boolean, a string) in ``on_insert``/``on_access``/``victims(incoming_size=)``;
    * a Hypothesis state machine (:class:`EvictionPolicyMachine`) of inserts, accesses, removes
      and evictions of the first victim: the victim order always lists exactly the tracked
      keys (less those an insert or access returned, evicted on the policy's own), and the
      policy's ``check()`` passes after every step (for an
      :class:`~kvmm.protocols.EvictionPolicyBase`, which declares it).

    Paired with each tier in ``tier_kinds`` (default: every local kvmm tier, see
    :data:`kvmm.testing.tiers.TIER_KINDS`) through :class:`~kvmm.tiers.ManagedTier` of 1000
    bytes:

    * values round-trip with dtype, shape and bytes; eviction removes exactly the policy's
      victims (skipping the incoming key) and keeps ``used_bytes <= capacity``; one large entry
      evicts the shortest prefix of the victim order that makes room;
    * an entry larger than the tier, or one that only fits by evicting protected keys, raises
      ``CapacityExceededError`` and changes nothing; protected keys are never evicted;
    * an overwrite adjusts ``used_bytes``, never evicts the key itself and stores the new value;
      ``delete`` frees the space and the policy stops ordering the key;
    * unknown keys and bad values raise kvmm errors and change nothing;
    * a backend that already holds entries is adopted (the policy learns its keys);
    * ``get_many`` returns values in order and reads nothing when one key is missing;
    * a Hypothesis state machine (:class:`ManagedTierMachine`) over an ArenaTier: contents are
      the latest values put, protected keys survive, the invariants of
      :func:`~kvmm.testing.tiers.check_managed` hold after every step.
    """

    #: kvmm tiers the pairing tests run over (add ``TIER_KINDS`` when a ``redis_url`` fixture exists).
    tier_kinds = LOCAL_TIER_KINDS
    #: require kvmm's own exception classes on bad calls (kvmm's policies do; yours need not).
    raises_kvmm_errors = False
    #: Hypothesis settings of the two state machines.
    machine_settings = settings(max_examples=30, stateful_step_count=30, deadline=None)

    def make_policy(self) -> Any:
        """A fresh policy (override)."""
        raise NotImplementedError("subclass EvictionPolicyContract and define make_policy()")

    def pytest_generate_tests(self, metafunc: Any) -> None:
        if "tier_kind" in metafunc.fixturenames:
            kinds = list(metafunc.cls.tier_kinds)
            metafunc.parametrize("tier_kind", kinds, ids=[k.name for k in kinds])

    # -- fixtures ---------------------------------------------------------------------------
    @pytest.fixture
    def tier_context(self, request: Any, tmp_path: Any) -> Any:
        ctx = TierContext(tmp_path, request)
        yield ctx
        ctx.close()

    @pytest.fixture
    def managed(self, tier_context: Any, tier_kind: Any) -> Any:
        tier = ManagedTier(tier_context.build(tier_kind, CAPACITY), self.make_policy())
        tier.holds_bytes = tier_kind.holds_bytes
        return tier

    # -- the policy alone -------------------------------------------------------------------
    def test_speaks_the_protocol(self) -> None:
        assert isinstance(self.make_policy(), EvictionPolicy)

    def test_victims_skip_protected_and_do_not_mutate(self) -> None:
        policy = self.make_policy()
        for k in range(6):
            policy.on_insert(k)
        policy.on_access(2)
        before = victim_order(policy, 6)
        first = policy.victims(3)
        assert policy.victims(3) == first and victim_order(policy, 6) == before
        assert len(first) == 3 and len(set(first)) == 3 and first == before[:3]
        skipping = policy.victims(3, protected={first[0]})
        assert first[0] not in skipping and skipping[:2] == first[1:3]
        assert policy.victims(0) == []
        assert sorted(policy.victims(100)) == list(range(6))
        assert policy.victims(10, protected=range(6)) == []
        assert policy.victims(2, protected=iter([first[0]])) == skipping[:2]  # any iterable

    def test_bad_calls_raise_and_change_nothing(self) -> None:
        policy = self.make_policy()
        for k in ("a", "b", "c"):
            policy.on_insert(k)
        before = victim_order(policy, 3)
        strict = self.raises_kvmm_errors
        keys = set(before)
        calls = [(lambda: policy.on_access("zzz"), UnknownKeyError), (lambda: policy.on_remove("zzz"), UnknownKeyError),
                 (lambda: policy.on_insert("a"), BadInputError), (lambda: policy.victims(-1), BadInputError),
                 (lambda: policy.victims(1.5), DTypeError)]
        for call, error in calls:
            if strict:
                with pytest.raises(error):
                    call()
                assert victim_order(policy, 3) == before
                continue
            try:
                call()
            except Exception:  # noqa: BLE001 - any error is allowed: then nothing may have changed
                assert victim_order(policy, 3) == before
            else:  # ignored (a second insert may count as an access): the same keys are ordered
                assert sorted(victim_order(policy, 3)) == sorted(keys)
        PolicyHooks(policy).check()

    def test_bad_sizes_raise_and_change_nothing(self) -> None:
        policy = self.make_policy()
        policy.on_insert("a", 5)
        policy.on_insert("b")
        before = victim_order(policy, 2)
        sized_victims = isinstance(policy, EvictionPolicyBase)  # its victims take incoming_size
        for bad, error in ((-1, BadInputError), (2.5, DTypeError), (True, DTypeError), ("3", DTypeError)):
            calls = [lambda: policy.on_insert("c", bad), lambda: policy.on_access("a", bad)]  # noqa: B023 (called at once, inside the loop)
            if sized_victims:
                calls.append(lambda: policy.victims(1, incoming="c", incoming_size=bad))  # noqa: B023 (called at once, inside the loop)
            for call in calls:
                if self.raises_kvmm_errors:
                    with pytest.raises(error, match="size"):
                        call()
                    assert victim_order(policy, 2) == before
                    continue
                try:
                    call()
                except Exception:  # noqa: BLE001 - refusing is fine: then nothing may have changed
                    assert victim_order(policy, 2) == before
                else:  # accepted: undo an insert, and start the next call from the new order
                    if "c" in victim_order(policy, 3):
                        policy.on_remove("c")
                    before = victim_order(policy, 2)
                    assert sorted(before) == ["a", "b"]

    def test_policy_state_machine(self) -> None:
        machine = type("Machine", (EvictionPolicyMachine,), {"contract": self})
        run_state_machine_as_test(machine, settings=self.machine_settings)

    # -- paired with a tier through ManagedTier ---------------------------------------------
    def test_roundtrip_keeps_dtype_shape_and_bytes(self, managed: Any) -> None:
        samples = sample_values()
        for key, arr in samples.items():
            managed.put(key, arr)
            check_managed(managed)
        for key, arr in samples.items():
            got = managed.get(key)
            assert got.shape == arr.shape and got.dtype == arr.dtype
            if managed.holds_bytes:
                np.testing.assert_array_equal(got, arr)
            else:
                assert not got.any()  # SimulatedTier: zero placeholder
        assert managed.used_bytes == sum(a.nbytes for a in samples.values())
        assert sorted(managed.keys(), key=repr) == sorted(samples, key=repr)

    def test_eviction_follows_the_policy_and_respects_capacity(self, managed: Any) -> None:
        _fill(managed, 10)
        assert managed.used_bytes == CAPACITY
        managed.get(3)
        managed.get(0)
        for i in range(10, 25):
            expected = _victims(managed.policy, 1, {i}, i, 100)
            evicted = managed.put(i, value(100, i))
            assert evicted == expected and len(evicted) == 1
            assert not managed.contains(evicted[0]) and managed.contains(i)
            assert managed.used_bytes == CAPACITY
            check_managed(managed)
        assert managed.evictions == 15 and len(managed) == 10

    def test_a_large_entry_evicts_several_in_policy_order(self, managed: Any) -> None:
        _fill(managed, 10)
        expected = _victims(managed.policy, 3, {"big"}, "big", 250)
        evicted = managed.put("big", value(250))
        assert evicted == expected
        assert managed.used_bytes == 950 and len(managed) == 8
        check_managed(managed)

    def test_put_larger_than_capacity_raises_and_evicts_nothing(self, managed: Any) -> None:
        _fill(managed, 6)
        before = snapshot(managed, managed.holds_bytes)
        with pytest.raises(CapacityExceededError, match="never fit"):
            managed.put("huge", value(CAPACITY + 1))
        assert snapshot(managed, managed.holds_bytes) == before
        check_managed(managed)

    def test_protected_keys_are_never_evicted(self, managed: Any) -> None:
        _fill(managed, 10)
        evicted = managed.put("new", value(100), protected=set(range(9)))
        assert evicted == [9]
        before = snapshot(managed, managed.holds_bytes)
        with pytest.raises(CapacityExceededError, match="unprotected"):
            managed.put("other", value(200), protected=set(managed.keys()))
        assert snapshot(managed, managed.holds_bytes) == before
        check_managed(managed)

    def test_overwrite_adjusts_usage_and_counts_as_access(self, managed: Any) -> None:
        _fill(managed, 10)
        evicted = managed.put(4, value(150, 99))  # grows by 50 bytes: one eviction, never key 4
        assert 4 not in evicted and len(evicted) == 1
        assert managed.nbytes_of(4) == 150 and managed.used_bytes == 950
        if managed.holds_bytes:
            np.testing.assert_array_equal(managed.get(4), value(150, 99))
        managed.put(4, value(10))
        assert managed.used_bytes == 810
        check_managed(managed)

    def test_delete_frees_space_and_forgets_the_key(self, managed: Any) -> None:
        _fill(managed, 10)
        managed.delete(5)
        assert not managed.contains(5) and 5 not in victim_order(managed.policy, 10)
        assert managed.used_bytes == 900
        assert managed.put("x", value(100)) == []
        check_managed(managed)

    def test_unknown_keys_and_bad_values_change_nothing(self, managed: Any) -> None:
        _fill(managed, 5)
        before = snapshot(managed, managed.holds_bytes)
        with pytest.raises(UnknownKeyError, match="no entry"):
            managed.get("missing")
        with pytest.raises(UnknownKeyError):
            managed.delete(("missing", 1))
        with pytest.raises(DTypeError, match="numeric"):
            managed.put("obj", np.array([object()]))
        with pytest.raises(DTypeError, match="keys"):
            managed.put(1.5, value(10))
        with pytest.raises(DTypeError):
            managed.put(True, value(10))
        with pytest.raises(KvmmError):
            managed.put([1, 2], value(10))
        assert snapshot(managed, managed.holds_bytes) == before
        check_managed(managed)

    def test_backend_with_entries_is_adopted_by_a_new_managed_tier(self, tier_context: Any, tier_kind: Any) -> None:
        backend = tier_context.build(tier_kind, CAPACITY)
        for i in range(4):
            backend.put(i, value(100, i))
        managed = ManagedTier(backend, self.make_policy())
        assert len(managed) == 4 and sorted(victim_order(managed.policy, 4)) == [0, 1, 2, 3]
        check_managed(managed)
        for i in range(4, 12):
            managed.put(i, value(100, i))
        assert managed.used_bytes == CAPACITY and len(managed) == 10
        check_managed(managed)

    def test_get_many_returns_values_in_order_and_is_all_or_nothing(self, managed: Any) -> None:
        _fill(managed, 5)
        got = managed.get_many([3, 0, 3])
        assert [g.nbytes for g in got] == [100, 100, 100]
        if managed.holds_bytes:
            np.testing.assert_array_equal(got[0], value(100, 3))
            np.testing.assert_array_equal(got[1], value(100, 0))
        assert managed.get_many([]) == []
        before = snapshot(managed, managed.holds_bytes)
        reads = managed.backend.stats["gets"]
        with pytest.raises(UnknownKeyError):
            managed.get_many([1, "missing", 2])
        assert managed.backend.stats["gets"] == reads  # nothing was counted as read
        assert snapshot(managed, managed.holds_bytes) == before
        check_managed(managed)

    def test_managed_tier_state_machine(self) -> None:
        machine = type("Machine", (ManagedTierMachine,), {"contract": self})
        run_state_machine_as_test(machine, settings=self.machine_settings)


class EvictionPolicyMachine(RuleBasedStateMachine):
    """A policy (``contract.make_policy()``) against the set of keys it tracks.

    After every step: the victim order is exactly the tracked keys, each once, and the
    policy's ``check()`` passes.  The keys an insert or access returns (evicted on the policy's
    own: tracked keys, the event's own key included for SLRU) are no longer tracked.  Subclass
    to add rules;
    ``self.policy`` and ``self.tracked`` are the real policy and the model, ``self.hooks`` how
    an owner calls the policy (:class:`~kvmm._policy_hooks.PolicyHooks`).
    """

    contract: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.policy = self.contract.make_policy()
        self.hooks = PolicyHooks(self.policy)
        self.tracked: set = set()

    def _forget(self, evicted: Any, key: int) -> None:
        evicted = set(evicted)
        assert evicted <= self.tracked, f"{key}'s event evicted {evicted}, which it did not track"
        self.tracked -= evicted

    @rule(key=st.integers(0, 12))
    def insert(self, key: int) -> None:
        if key in self.tracked and self.contract.raises_kvmm_errors:
            with pytest.raises(BadInputError):
                self.policy.on_insert(key)
        elif key not in self.tracked:
            evicted = self.hooks.insert(key)
            self.tracked.add(key)
            self._forget(evicted, key)

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def access(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.tracked)))
        self._forget(self.hooks.access(key), key)

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def evict_first_victim(self, data: Any) -> None:
        protected = set(data.draw(st.lists(st.sampled_from(sorted(self.tracked)), max_size=3)))
        victims = self.policy.victims(2, protected)
        assert set(victims) <= self.tracked - protected, f"victims {victims} include protected or untracked keys"
        assert len(victims) == len(set(victims)) == min(2, len(self.tracked - protected))
        if victims:
            self.policy.on_remove(victims[0])
            self.tracked.remove(victims[0])

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def remove(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.tracked)))
        self.policy.on_remove(key)
        self.tracked.remove(key)

    @invariant()
    def orders_exactly_the_tracked_keys(self) -> None:
        self.hooks.check()
        order = victim_order(self.policy, len(self.tracked))
        assert len(order) == len(set(order)) and set(order) == self.tracked, (order, self.tracked)
        if hasattr(self.policy, "__len__"):
            assert len(self.policy) == len(self.tracked)
        if hasattr(self.policy, "__contains__"):
            assert all(k in self.policy for k in self.tracked) and -1 not in self.policy


class ManagedTierMachine(RuleBasedStateMachine):
    """``ManagedTier(ArenaTier(600), contract.make_policy())`` against the latest value of each key.

    Contents are always a subset of what was put, with the latest values, within capacity;
    protected keys and the key being written are never evicted; a put that cannot fit raises.
    """

    contract: Any = None
    capacity = 600

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict = {}
        self.tier = ManagedTier(ArenaTier(self.capacity), self.contract.make_policy())

    @rule(key=st.one_of(st.integers(0, 9), st.sampled_from(["a", "b", ("t", 1), b"k"])), arr=tier_values(),
          protect=st.booleans())
    def put(self, key: Any, arr: np.ndarray, protect: bool) -> None:
        keys = self.tier.keys()
        protected = {keys[0]} if protect and keys else set()
        protected.discard(key)
        old = self.tier.nbytes_of(key) if self.tier.contains(key) else 0
        need = self.tier.used_bytes - old + arr.nbytes - self.capacity
        evictable = sum(self.tier.nbytes_of(k) for k in keys if k not in protected and k != key)
        if arr.nbytes > self.capacity or need > evictable:
            with pytest.raises(CapacityExceededError):
                self.tier.put(key, arr, protected=protected)
            return
        evicted = self.tier.put(key, arr, protected=protected)
        assert key not in evicted and not (protected & set(evicted)), f"evicted {evicted}, protected {protected}"
        self.latest[key] = arr

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def get(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.tier.keys(), key=repr)))
        np.testing.assert_array_equal(self.tier.get(key), self.latest[key])

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        self.tier.delete(data.draw(st.sampled_from(sorted(self.tier.keys(), key=repr))))

    @invariant()
    def consistent(self) -> None:
        check_managed(self.tier)
        assert set(self.tier.keys()) <= set(self.latest)


def _fill(tier: Any, n: int, nbytes: int = 100) -> None:
    for i in range(n):
        tier.put(i, value(nbytes, i))
        check_managed(tier)


def _victims(policy: Any, n: int, protected: set, incoming: Any, nbytes: int) -> list:
    """``policy.victims`` called the way ManagedTier calls it (with the incoming entry for an
    EvictionPolicyBase)."""
    return list(PolicyHooks(policy).victims(n, protected, incoming=incoming, incoming_size=nbytes))
