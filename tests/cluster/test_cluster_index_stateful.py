"""BlockIndex against its plain-Python model (kvmm.testing.models.block_index) on Hypothesis event
streams: stored / removed (strict and lenient) / cleared, batch forms, budget evictions, the
per-key holder cap (max_holders) and prefix_hits, with check() after every step and snapshot() unchanged by every failing call."""

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvmm.cluster import BlockIndex
from kvmm.errors import UnknownKeyError
from kvmm.testing.allocator_machine import assert_same_snapshot
from kvmm.testing.models.block_index import NaiveBlockIndex

MEDIA = ("GPU", "CPU")
KEYS = list(range(8)) + [-1, 2**62]  # a small universe so keys repeat and prefixes share
key_lists = st.lists(st.sampled_from(KEYS), max_size=6)
groups = st.lists(st.tuples(st.integers(0, 69), key_lists, st.sampled_from(MEDIA)), max_size=4)


class BlockIndexMachine(RuleBasedStateMachine):
    @initialize(num_instances=st.sampled_from([1, 3, 70]), budget=st.none() | st.integers(1, 6),
                holders=st.none() | st.integers(1, 3))
    def setup(self, num_instances, budget, holders):
        self.n = num_instances
        self.real = BlockIndex(num_instances, MEDIA, budget, max_holders=holders)
        self.model = NaiveBlockIndex(num_instances, MEDIA, budget, max_holders=holders)

    def inst(self, i):
        return i % self.n

    @rule(i=st.integers(0, 69), keys=key_lists, medium=st.sampled_from(MEDIA))
    def stored(self, i, keys, medium):
        self.real.stored(self.inst(i), np.array(keys, dtype=np.int64), medium)
        self.model.stored(self.inst(i), keys, medium)

    @rule(batch=groups)
    def stored_many(self, batch):
        batch = [(self.inst(i), keys, m) for i, keys, m in batch]
        offsets = np.cumsum([0] + [len(g[1]) for g in batch])
        self.real.stored_many([g[0] for g in batch], offsets, [k for g in batch for k in g[1]], [g[2] for g in batch])
        for g in batch:
            self.model.stored(*g)

    @rule(i=st.integers(0, 69), medium=st.sampled_from(MEDIA), data=st.data(), lenient=st.booleans())
    def removed(self, i, medium, data, lenient):
        held = [k for k, h in self.model.holders.items() if (self.inst(i), medium) in h]
        # mostly keys it holds, sometimes one it does not (an error unless lenient)
        keys = data.draw(st.lists(st.sampled_from(held) if held and data.draw(st.booleans()) else st.sampled_from(KEYS),
                                  max_size=4))
        self._remove([(self.inst(i), keys, medium)], lenient, single=True)

    @rule(batch=groups, lenient=st.booleans())
    def removed_many(self, batch, lenient):
        self._remove([(self.inst(i), keys, m) for i, keys, m in batch], lenient, single=False)

    def _remove(self, batch, lenient, single):
        def call():
            if single:
                inst, keys, medium = batch[0]
                self.real.removed(inst, keys, medium, lenient=lenient)
            else:
                offsets = np.cumsum([0] + [len(g[1]) for g in batch])
                self.real.removed_many([g[0] for g in batch], offsets, [k for g in batch for k in g[1]],
                                       [g[2] for g in batch], lenient=lenient)

        if not lenient and not self._all_held(batch):
            before = self.real.snapshot()
            with pytest.raises(UnknownKeyError, match="does not hold key"):
                call()
            assert_same_snapshot(before, self.real.snapshot())
            return
        call()
        for inst, keys, medium in batch:
            self.model.removed(inst, keys, medium, lenient=True)

    def _all_held(self, batch):
        """Whether a strict batch succeeds: each removal finds its holder (repeats included)."""
        holders = {k: set(h) for k, h in self.model.holders.items()}
        for inst, keys, medium in batch:
            for k in keys:
                if (inst, medium) not in holders.get(k, ()):
                    return False
                holders[k].discard((inst, medium))
        return True

    @rule(i=st.integers(0, 69), medium=st.none() | st.sampled_from(MEDIA))
    def cleared(self, i, medium):
        self.real.cleared(self.inst(i), medium)
        self.model.cleared(self.inst(i), medium)

    @rule(keys=key_lists)
    def prefix_hits(self, keys):
        got = self.real.prefix_hits(keys)
        assert got.shape == (self.n, len(MEDIA)) and got.dtype == np.int64
        assert got.tolist() == self.model.prefix_hits(keys)

    @rule(reqs=st.lists(key_lists, max_size=3))
    def prefix_hits_many(self, reqs):
        got = self.real.prefix_hits_many(np.cumsum([0] + [len(r) for r in reqs]), [k for r in reqs for k in r])
        assert got.shape == (len(reqs), self.n, len(MEDIA))
        assert [g.tolist() for g in got] == [self.model.prefix_hits(r) for r in reqs]

    @invariant()
    def structure_is_consistent(self):
        self.real.check()

    @invariant()
    def same_as_model(self):
        assert self.real.as_dict() == self.model.as_dict()
        assert self.real.stats == {**self.model.stats, "entries": len(self.model)}
        if self.model.max_entries is not None:  # without a budget the LRU order is not kept
            assert self.real.lru_order() == self.model.lru_order()
        if self.model.max_holders is not None:  # each key's holders, oldest first
            for key, held in self.model.holders.items():
                row = int(self.real._rows(self.real._keys([key], "key"))[0])
                codes = [int(c) for c in self.real.order[row] if c >= 0]
                assert [(c // len(MEDIA), MEDIA[c % len(MEDIA)]) for c in codes] == list(held)


BlockIndexMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBlockIndexMachine = BlockIndexMachine.TestCase
