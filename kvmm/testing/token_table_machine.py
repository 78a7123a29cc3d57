"""Hypothesis state machine: TokenTable against its documented plain-Python model.

::

    from kvmm.testing import TokenTableMachine

    TestTokenTable = TokenTableMachine.TestCase
"""

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.errors import OutOfBlocksError, StalePlanError
from kvmm.testing.allocator_machine import assert_same_snapshot
from kvmm.testing.models.token_table import NaiveTokenTable

__all__ = ["TokenTableMachine"]


def token_id(seq, logical):
    return seq * 100_000 + logical + 1


class TokenTableMachine(RuleBasedStateMachine):
    """A :class:`~kvmm.allocators.TokenTable` against :class:`~kvmm.testing.models.NaiveTokenTable`.

    Every step compares block tables, slot mappings, positions, plans (move by move) and commit
    outcomes with the model; ``check()`` runs after every step.  A small slot store rides
    along: each token's identity is written at append, copied by commit, and every live
    logical token must read back exactly its own identity.

    Subclass to test a wrapper or extension: override :meth:`make_table` and add rules
    (``self.real``, ``self.model``, ``self.store``).
    """

    def make_table(self, num_blocks, block_size):
        """The structure under test (override to wrap or extend TokenTable)."""
        return TokenTable(BlockAllocator(num_blocks, block_size), initial_sequences=1, initial_tokens=4)

    @initialize(num_blocks=st.integers(4, 24), block_size=st.sampled_from([1, 2, 4]))
    def setup(self, num_blocks, block_size):
        self.real = self.make_table(num_blocks, block_size)
        self.model = NaiveTokenTable(BlockAllocator(num_blocks, block_size))
        self.store = np.zeros(num_blocks * block_size, dtype=np.int64)  # slot -> token identity
        self.next_seq = 0
        self.plans = []  # (real plan, model plan) not yet committed

    # -- sequences
    @rule(first=st.integers(0, 5), share=st.integers(0, 2), data=st.data())
    def add_sequence(self, first, share, data):
        shared = []
        if share and self.model.seqs:
            donor = data.draw(st.sampled_from(sorted(self.model.seqs)))
            full = [b for b in self.model.seqs[donor]["blocks"]
                    if (self.model.owner.get(b) is not None and self.model.live[b] == self.model.bs)
                    or b in self.model.shared]
            shared = full[:share]
        seq = self.next_seq
        self.next_seq += 1
        self.real.add_sequence(seq, shared_blocks=shared, first_position=first)
        self.model.add_sequence(seq, shared, first)
        # a shared block's slots keep the donor's data; the new sequence reads the same bytes
        s = self.model.seqs[seq]
        self.store_alias = getattr(self, "store_alias", {})
        for logical, slot in enumerate(s["tok"]):
            self.store_alias[(seq, logical)] = int(self.store[slot])

    @precondition(lambda self: self.model.seqs)
    @rule(data=st.data())
    def free_sequence(self, data):
        seq = data.draw(st.sampled_from(sorted(self.model.seqs)))
        self.real.free_sequence(seq)
        self.model.free_sequence(seq)

    @precondition(lambda self: self.model.seqs)
    @rule(data=st.data())
    def append(self, data):
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.model.seqs)), min_size=1, max_size=3, unique=True))
        counts = data.draw(st.lists(st.integers(0, 7), min_size=len(seqs), max_size=len(seqs)))
        bs = self.model.bs
        need = 0
        for seq, c in zip(seqs, counts):
            s = self.model.seqs[seq]
            tail = s["blocks"][-1] if s["blocks"] else None
            room = bs - self.model.fill[tail] if tail is not None and self.model.owner.get(tail) == s["row"] else 0
            need += -(-max(c - room, 0) // bs)
        if need > self.model.alloc.num_free:
            before = self.real.snapshot()
            with pytest.raises(OutOfBlocksError):
                self.real.append(seqs, counts)
            assert_same_snapshot(before, self.real.snapshot())
            return
        lengths = [len(self.model.seqs[s]["tok"]) for s in seqs]
        got = self.real.append(seqs, counts)
        want = self.model.append(seqs, counts)
        assert got.dtype == np.int64 and got.tolist() == want
        k = 0
        for seq, c, n0 in zip(seqs, counts, lengths):
            for logical in range(n0, n0 + c):
                self.store[got[k]] = token_id(seq, logical)
                k += 1

    @precondition(lambda self: any(any(x >= 0 for x in s["tok"]) for s in self.model.seqs.values()))
    @rule(data=st.data())
    def evict(self, data):
        seq = data.draw(st.sampled_from(sorted(q for q, s in self.model.seqs.items() if any(x >= 0 for x in s["tok"]))))
        live = [i for i, x in enumerate(self.model.seqs[seq]["tok"]) if x >= 0]
        drop = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=len(live), unique=True))
        self.real.evict(seq, drop)
        self.model.evict(seq, drop)

    # -- repacking
    @rule(budget=st.one_of(st.none(), st.integers(0, 6)))
    def plan(self, budget):
        real = self.real.plan(budget)
        model = self.model.plan(budget)
        assert real.src.tolist() == model["src"]
        assert real.dst.tolist() == model["dst"]
        assert real.move_logical.tolist() == model["logical"]
        assert real.free_blocks.tolist() == [b for b, _ in model["free"]]
        assert real.tail_blocks.tolist() == [b for b, _ in model["tails"]]
        assert real.min_moves == model["min_moves"]
        if budget is not None:
            assert real.num_moves <= budget
        self.plans.append((real, model))

    @precondition(lambda self: self.plans)
    @rule(data=st.data(), copy=st.booleans())
    def commit(self, data, copy):
        i = data.draw(st.integers(0, len(self.plans) - 1))
        real, model = self.plans.pop(i)
        result = self.real.commit(real, copy_slots=self.copy if copy else None)
        valid, freed = self.model.commit(model)
        assert result.applied == sum(valid)
        assert result.dropped.tolist() == [k for k, ok in enumerate(valid) if not ok]
        assert result.freed_blocks.tolist() == freed
        if not copy:  # the caller copies the applying moves itself (nothing else ran in between here)
            ok = np.array(valid, dtype=bool)
            self.copy(real.src[ok], real.dst[ok])
        with pytest.raises(StalePlanError):
            self.real.commit(real)

    def copy(self, src, dst):
        self.store[dst] = self.store[src]

    @rule()
    def full_repack_is_dense(self):
        plan = self.real.plan()
        self.real.commit(plan, copy_slots=self.copy)
        self.model.commit(self.model.plan())
        for seq, s in self.model.seqs.items():
            pinned = [b for b in s["blocks"] if self.model.owner.get(b) != s["row"] or self.model._refs(b) > 1]
            live_in_pinned = sum(1 for x in s["tok"] if x >= 0 and x // self.model.bs in pinned)
            if live_in_pinned == len(pinned) * self.model.bs:  # no hole the repacker may not fill
                assert self.real.is_dense(seq)
                table = self.real.block_table(seq)
                live = self.real.num_live(seq)
                paged = (table.astype(np.int64)[:, None] * self.model.bs + np.arange(self.model.bs)).ravel()[:live]
                assert sorted(paged.tolist()) == sorted(self.real.slot_mapping(seq).tolist())

    @rule(data=st.data())
    def context_lengths(self, data):
        # a batched lookup: merges the lazily kept sequence index after any adds/frees since the last one
        seqs = data.draw(st.permutations(sorted(self.model.seqs)))
        got = self.real.context_lengths(seqs)
        assert got.dtype == np.int64 and got.tolist() == [self.model.context_length(q) for q in seqs]
        for seq, n in zip(seqs, got.tolist()):
            assert n >= self.real.num_live(seq)
            if self.real.is_dense(seq):
                assert n == self.real.num_live(seq)

    # -- invariants
    @invariant()
    def consistent(self):
        if not hasattr(self, "real"):
            return
        self.real.check()
        assert sorted(self.real.sequences) == sorted(self.model.seqs)
        assert self.real.total_live == sum(sum(x >= 0 for x in s["tok"]) for s in self.model.seqs.values())
        for seq in self.model.seqs:
            assert self.real.block_table(seq).tolist() == self.model.block_table(seq)
            assert self.real.slot_mapping(seq).tolist() == self.model.slot_mapping(seq)
            assert self.real.positions(seq).tolist() == self.model.positions(seq)
        assert np.array_equal(self.real.allocator.ref_counts, self.model.alloc.ref_counts)

    @invariant()
    def every_live_token_reads_its_own_data(self):
        if not hasattr(self, "real"):
            return
        alias = getattr(self, "store_alias", {})
        for seq, s in self.model.seqs.items():
            for logical, slot in enumerate(s["tok"]):
                if slot >= 0:
                    want = alias.get((seq, logical), token_id(seq, logical))
                    assert self.store[slot] == want, (seq, logical, slot)
