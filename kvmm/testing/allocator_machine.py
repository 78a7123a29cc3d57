"""Hypothesis state machine: BlockAllocator against its documented plain-Python model.

::

    from kvmm.testing import BlockAllocatorMachine

    TestAllocator = BlockAllocatorMachine.TestCase
"""

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvmm.allocators import BlockAllocator
from kvmm.errors import BadInputError, DoubleFreeError, OutOfBlocksError
from kvmm.testing.models.block_allocator import NaiveBlockAllocator

__all__ = ["BlockAllocatorMachine"]

SECRET = bytes(range(16))
# A small key universe so keys repeat (shared prefixes, the same key in several blocks).
KEYS = [(k, 0) for k in range(6)] + [(7, 2**63 + 5)]
key_lists = st.lists(st.sampled_from(KEYS), max_size=6)


def as_keys(keys):
    return np.array(keys, dtype=np.uint64).reshape(-1, 2)


class BlockAllocatorMachine(RuleBasedStateMachine):
    """A :class:`~kvmm.allocators.BlockAllocator` against
    :class:`~kvmm.testing.models.NaiveBlockAllocator`, rule by rule.

    Rules: allocate (and batch allocate_many), free (and free_requests, last-first per
    request), double frees (must raise and change nothing), touch, cache_blocks, lookup (and
    lookup_many), admit (and admit_many, with and without per-request extra blocks), evict,
    reset_prefix_cache.  After every step ``check()`` runs and the free queue, ref counts,
    prefix cache, stats, free count and usage equal the model's; a call that raises leaves
    ``snapshot()`` unchanged.

    Subclass to test a wrapper or extension: override :meth:`make_allocator` and add rules
    (``self.real``, ``self.model``, ``self.held``: one entry per reference held).
    """

    def make_allocator(self, num_blocks, block_size):
        """The structure under test (override to wrap or extend BlockAllocator)."""
        return BlockAllocator(num_blocks, block_size, secret=SECRET)

    @initialize(num_blocks=st.integers(1, 12))
    def setup(self, num_blocks):
        self.real = self.make_allocator(num_blocks, 2)
        self.model = NaiveBlockAllocator(num_blocks, 2, secret=SECRET)
        self.held: list[int] = []  # one entry per reference we hold (to free later)

    # -- rules
    @rule(n=st.integers(0, 5))
    def allocate(self, n):
        if n > self.model.num_free:
            before = self.real.snapshot()
            with pytest.raises(OutOfBlocksError):
                self.real.allocate(n)
            assert_same_snapshot(before, self.real.snapshot())
            return
        got = self.real.allocate(n)
        assert got.dtype == np.int32
        assert got.tolist() == self.model.allocate(n)
        self.held += got.tolist()

    @rule(counts=st.lists(st.integers(0, 3), max_size=4))
    def allocate_many(self, counts):
        if sum(counts) > self.model.num_free:
            before = self.real.snapshot()
            with pytest.raises(OutOfBlocksError):
                self.real.allocate_many(counts)
            assert_same_snapshot(before, self.real.snapshot())
            return
        offsets, ids = self.real.allocate_many(counts)
        want = self.model.allocate_many(counts)
        assert offsets.tolist() == np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
        assert [ids[offsets[r]:offsets[r + 1]].tolist() for r in range(len(counts))] == want
        self.held += ids.tolist()

    def take_held(self, data):
        """Draw some of the references held and stop holding them (the caller frees them)."""
        picks = data.draw(st.lists(st.integers(0, len(self.held) - 1), unique=True, max_size=len(self.held)))
        ids = [self.held[i] for i in picks]
        for i in sorted(picks, reverse=True):
            del self.held[i]
        return ids

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free(self, data):
        ids = self.take_held(data)
        self.real.free(np.array(ids, dtype=np.int32))
        self.model.free(ids)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free_requests(self, data):
        ids = self.take_held(data)
        cut = data.draw(st.integers(0, len(ids)))
        self.real.free_requests([0, cut, len(ids)], ids)
        self.model.free(ids[:cut][::-1] + ids[cut:][::-1])

    @rule(data=st.data())
    def double_free_changes_nothing(self, data):
        b = data.draw(st.integers(0, self.real.num_blocks - 1))
        extra = self.model.ref[b] + 1  # one more than it holds
        ids = [b] * extra
        before = self.real.snapshot()
        with pytest.raises(DoubleFreeError):
            self.real.free(ids)
        assert_same_snapshot(before, self.real.snapshot())

    @rule(data=st.data())
    def touch(self, data):
        ids = data.draw(st.lists(st.integers(0, self.real.num_blocks - 1), max_size=4))
        self.real.touch(ids)
        self.model.touch(ids)
        self.held += ids

    @rule(data=st.data())
    def cache_blocks(self, data):
        cand = sorted(set(self.held))
        ids = data.draw(st.lists(st.sampled_from(cand), unique=True, max_size=3)) if cand else []
        # a block that holds a key is offered it again (a no-op) as often as any other key (an error)
        keys = [data.draw(st.sampled_from(KEYS if b not in self.model.block_key else
                                          [self.model.block_key[b]] * len(KEYS) + KEYS)) for b in ids]
        try:
            self.model.cache_blocks(ids, keys)
        except ValueError:
            before = self.real.snapshot()
            with pytest.raises(BadInputError, match="another cached key"):
                self.real.cache_blocks(np.array(ids, dtype=np.int32), as_keys(keys))
            assert_same_snapshot(before, self.real.snapshot())
            return
        self.real.cache_blocks(np.array(ids, dtype=np.int32), as_keys(keys))

    @rule(keys=key_lists)
    def lookup(self, keys):
        assert self.real.lookup(as_keys(keys)).tolist() == self.model.lookup(keys)

    @rule(reqs=st.lists(key_lists, max_size=3))
    def lookup_many(self, reqs):
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in reqs])]).astype(np.int64)
        flat = [k for r in reqs for k in r]
        hit_offsets, hit_ids = self.real.lookup_many(offsets, as_keys(flat))
        got = [hit_ids[hit_offsets[i]:hit_offsets[i + 1]].tolist() for i in range(len(reqs))]
        assert got == self.model.lookup_many(reqs)

    @rule(keys=key_lists, extra=st.integers(0, 2))
    def admit(self, keys, extra):
        try:
            want = self.model.admit(keys, extra)
        except ValueError:
            before = self.real.snapshot()
            with pytest.raises(OutOfBlocksError):
                self.real.admit(as_keys(keys), extra)
            assert_same_snapshot(before, self.real.snapshot())
            return
        ids, h = self.real.admit(as_keys(keys), extra)
        assert (ids.tolist(), h) == want
        self.held += ids.tolist()

    @rule(reqs=st.lists(key_lists, max_size=3), data=st.data())
    def admit_many(self, reqs, data):
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in reqs])]).astype(np.int64)
        flat = [k for r in reqs for k in r]
        extra = data.draw(st.none() | st.lists(st.integers(0, 3), min_size=len(reqs), max_size=len(reqs)))
        n, block_offsets, block_ids, hits = self.real.admit_many(offsets, as_keys(flat), extra)
        want = self.model.admit_many(reqs, extra)
        assert n == len(want)
        got = [(block_ids[block_offsets[i]:block_offsets[i + 1]].tolist(), int(hits[i])) for i in range(n)]
        assert got == want
        self.held += block_ids.tolist()

    @rule(data=st.data())
    def evict(self, data):
        ids = data.draw(st.lists(st.integers(0, self.real.num_blocks - 1), max_size=3))
        assert self.real.evict(ids) == self.model.evict(ids)

    @rule()
    def reset_prefix_cache(self):
        assert self.real.reset_prefix_cache() == self.model.reset_prefix_cache()

    # -- invariants after every step
    @invariant()
    def structure_is_consistent(self):
        self.real.check()

    @invariant()
    def same_as_model(self):
        assert self.real.free_queue().tolist() == self.model.free_queue()
        assert self.real.ref_counts.tolist() == self.model.ref
        assert self.real.cached_map() == self.model.cached_map()
        assert self.real.stats == self.model.stats
        assert self.real.num_free == self.model.num_free
        assert self.real.usage == self.model.usage


def assert_same_snapshot(before, after):
    assert before.keys() == after.keys()
    for name in before:
        assert np.array_equal(before[name], after[name]), f"{name} changed by a failing call"
