"""The contract every :class:`~kvmm.protocols.TierBackend` passes.

::

    class TestMyTier(TierBackendContract):
        def make_tier(self, capacity_bytes):
            return MyTier(capacity_bytes)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from kvmm.errors import CapacityExceededError, KvmmError, UnknownKeyError
from kvmm.policies.eviction import LRUPolicy
from kvmm.protocols import TierBackend
from kvmm.testing.strategies import tier_keys, tier_values
from kvmm.testing.tiers import check_managed, close_tier, sample_values, value
from kvmm.tiers import ManagedTier

__all__ = ["TierBackendContract", "TierMachine"]


class TierBackendContract:
    """Contract suite for a tier backend; subclass it and define ``make_tier(capacity_bytes)``.

    Set ``holds_bytes = False`` for a timing-only tier (``get`` returns a zero placeholder of
    the right dtype and shape); override ``close_tier(tier)`` if a tier holds resources
    (default: ``drop_pool()``/``close()`` when present).  It checks:

    * it is a :class:`~kvmm.protocols.TierBackend` with a ``name``, ``capacity_bytes`` as
      built and ``used_bytes == 0`` when new;
    * values of every dtype kind, 0-d, empty, non-contiguous and big-endian round-trip with
      dtype, shape and (``holds_bytes``) bytes; ``put`` copies (changing the source later
      changes nothing) and ``get`` returns a copy the caller may write;
      ``used_bytes`` is the sum of the stored values' ``nbytes``;
    * an overwrite replaces the value and adjusts ``used_bytes``, and every other key keeps its
      value (a tier that loses or mixes up a key on overwrite fails here);
    * a put that would exceed the capacity raises ``CapacityExceededError`` and stores nothing
      (the old value of an overwritten key survives); filling exactly to capacity works, and a
      zero-byte entry still fits a full tier;
    * ``get``/``delete`` of a missing key raise ``UnknownKeyError``; ``delete`` frees the bytes;
      ``contains`` agrees;
    * ``transfer_seconds`` is finite, non-negative and non-decreasing in the byte count; a tier
      with a kvmm ``spec`` gives ``latency + nbytes / bandwidth`` (read, and write with
      ``write=True``) and rejects negative sizes;
    * a Hypothesis state machine (:class:`TierMachine`, ``machine_class``) of puts, gets,
      deletes and missing-key calls against a dict model, with ``check()`` (if any) after
      every step;
    * paired with ``LRUPolicy`` through :class:`~kvmm.tiers.ManagedTier` (which needs
      ``keys()`` and ``nbytes_of()``), eviction makes room and the pair stays consistent.
    """

    holds_bytes = True
    capacity = 600
    machine_class: type = None  # type: ignore[assignment]  # set below to TierMachine
    machine_settings = settings(max_examples=25, stateful_step_count=30, deadline=None)

    def make_tier(self, capacity_bytes: int) -> Any:
        """A fresh, empty tier of ``capacity_bytes`` (override)."""
        raise NotImplementedError("subclass TierBackendContract and define make_tier(capacity_bytes)")

    def close_tier(self, tier: Any) -> None:
        """Release what ``tier`` holds (override if needed)."""
        close_tier(tier)

    @pytest.fixture
    def tier(self) -> Any:
        made = self.make_tier(self.capacity)
        yield made
        self.close_tier(made)

    def test_speaks_the_protocol(self, tier: Any) -> None:
        assert isinstance(tier, TierBackend)
        assert isinstance(tier.name, str)
        assert tier.capacity_bytes == self.capacity and tier.used_bytes == 0

    def test_values_round_trip(self, tier: Any) -> None:
        samples = sample_values()
        for key, arr in samples.items():
            tier.put(key, arr)
        for key, arr in samples.items():
            got = tier.get(key)
            assert got.shape == arr.shape and got.dtype == arr.dtype, key
            if self.holds_bytes:
                np.testing.assert_array_equal(got, arr)
                if got.size:
                    got.flat[0] = 0  # the caller owns what get returned
        if self.holds_bytes:
            np.testing.assert_array_equal(tier.get("f16"), samples["f16"])
        src = np.arange(8.0)[::2]  # non-contiguous source, changed after the put
        tier.put("copied", src)
        src[:] = -1
        if self.holds_bytes:
            np.testing.assert_array_equal(tier.get("copied"), [0.0, 2.0, 4.0, 6.0])
        tier.delete("copied")
        assert tier.used_bytes == sum(a.nbytes for a in samples.values())
        _check(tier)

    def test_overwrite_replaces_and_keeps_every_other_key(self, tier: Any) -> None:
        for i in range(5):
            tier.put(i, value(40, i))
        tier.put(2, value(90, 77))
        assert tier.used_bytes == 4 * 40 + 90
        tier.put(3, value(10, 78))
        assert tier.used_bytes == 3 * 40 + 90 + 10
        for i, (n, seed) in enumerate([(40, 0), (40, 1), (90, 77), (10, 78), (40, 4)]):
            assert tier.contains(i), f"key {i} was lost by an overwrite"
            got = tier.get(i)
            assert got.nbytes == n
            if self.holds_bytes:
                np.testing.assert_array_equal(got, value(n, seed))
        _check(tier)

    def test_capacity_is_never_exceeded_and_a_refused_put_stores_nothing(self, tier: Any) -> None:
        cap = self.capacity
        tier.put("a", value(cap // 2, 1))
        tier.put("b", value(cap - cap // 2, 2))  # exactly full
        assert tier.used_bytes == cap
        tier.put("zero", value(0))  # a zero-byte entry still fits a full tier
        with pytest.raises(CapacityExceededError):
            tier.put("c", value(1))
        assert not tier.contains("c") and tier.contains("zero")
        with pytest.raises(CapacityExceededError):
            tier.put("a", value(cap // 2 + 1, 3))  # a bigger overwrite that does not fit
        assert tier.used_bytes == cap and tier.get("a").nbytes == cap // 2
        if self.holds_bytes:
            np.testing.assert_array_equal(tier.get("a"), value(cap // 2, 1))
        with pytest.raises(CapacityExceededError):
            tier.put("huge", value(cap + 1))
        _check(tier)

    def test_missing_keys_raise_and_delete_frees(self, tier: Any) -> None:
        tier.put("k", value(100))
        with pytest.raises(UnknownKeyError):
            tier.get("missing")
        with pytest.raises(UnknownKeyError):
            tier.delete("missing")
        assert tier.contains("k") and not tier.contains("missing")
        tier.delete("k")
        assert not tier.contains("k") and tier.used_bytes == 0
        with pytest.raises(UnknownKeyError):
            tier.get("k")
        _check(tier)

    def test_transfer_seconds_grows_with_size(self, tier: Any) -> None:
        times = [tier.transfer_seconds(n) for n in (0, 1, 1 << 10, 1 << 20, 1 << 30)]
        assert all(np.isfinite(t) and t >= 0 for t in times)
        assert times == sorted(times)
        spec = getattr(tier, "spec", None)
        if spec is not None:  # a kvmm TierSpec: latency + size / bandwidth, reads and writes
            assert tier.transfer_seconds(0) == pytest.approx(spec.latency_s)
            assert tier.transfer_seconds(10**9) == pytest.approx(spec.latency_s + 1e9 / spec.read_bandwidth)
            assert tier.transfer_seconds(10**9, write=True) == pytest.approx(spec.latency_s + 1e9 / spec.write_bandwidth)
            with pytest.raises(KvmmError):
                tier.transfer_seconds(-1)

    def test_matches_a_dict_model(self) -> None:
        machine = type("Machine", (self.machine_class,), {"contract": self})
        run_state_machine_as_test(machine, settings=self.machine_settings)

    def test_pairs_with_an_eviction_policy(self, tier: Any) -> None:
        if not (hasattr(tier, "keys") and hasattr(tier, "nbytes_of")):
            pytest.skip("ManagedTier needs the backend's keys() and nbytes_of()")
        managed = ManagedTier(tier, LRUPolicy())
        for i in range(self.capacity // 100):
            assert managed.put(i, value(100, i)) == []
        managed.get(0)
        assert managed.put("new", value(100)) == [1]  # least recently used (0 was just read)
        assert not tier.contains(1) and tier.contains(0) and tier.contains("new")
        check_managed(managed)


class TierMachine(RuleBasedStateMachine):
    """A tier (``contract.make_tier``) against ``model: key -> array`` of the latest values.

    Subclass to add rules (``self.tier``, ``self.model``, ``self.contract``); e.g. kvmm's
    MmapTier machine adds restarts and compactions, which must leave the model unchanged.
    """

    contract: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.model: dict = {}
        self.capacity = self.contract.capacity
        self.tier = self.contract.make_tier(self.capacity)

    def teardown(self) -> None:
        self.contract.close_tier(self.tier)

    def used(self) -> int:
        return sum(a.nbytes for a in self.model.values())

    @rule(key=tier_keys(), arr=tier_values())
    def put(self, key: Any, arr: np.ndarray) -> None:
        old = self.model.get(key)
        if self.used() - (old.nbytes if old is not None else 0) + arr.nbytes > self.capacity:
            with pytest.raises(CapacityExceededError):
                self.tier.put(key, arr)
        else:
            self.tier.put(key, arr)
            self.model[key] = arr

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def get(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        got, want = self.tier.get(key), self.model[key]
        assert got.dtype == want.dtype and got.shape == want.shape
        if self.contract.holds_bytes:
            np.testing.assert_array_equal(got, want)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=repr)))
        self.tier.delete(key)
        del self.model[key]

    @rule(key=tier_keys())
    def missing_key_raises(self, key: Any) -> None:
        if key not in self.model:
            with pytest.raises(UnknownKeyError):
                self.tier.get(key)
            with pytest.raises(UnknownKeyError):
                self.tier.delete(key)
        assert self.tier.contains(key) == (key in self.model)

    @invariant()
    def agrees_with_model(self) -> None:
        _check(self.tier)
        assert self.tier.used_bytes == self.used()
        if hasattr(self.tier, "keys"):
            assert sorted(self.tier.keys(), key=repr) == sorted(self.model, key=repr)


TierBackendContract.machine_class = TierMachine


def _check(tier: Any) -> None:
    if hasattr(tier, "check"):
        tier.check()
    assert 0 <= tier.used_bytes <= tier.capacity_bytes
