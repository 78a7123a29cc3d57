"""Bad-input fuzz of BlockAllocator and TokenTable (see tests/fuzz_harness.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator, TokenTable
from tests.fuzz_harness import FUZZ_SETTINGS, NASTY, Fuzz, arg, run_counted

SECRET = bytes(range(16))  # a fixed test secret (tests only)
CALLS_PER_EXAMPLE = 60


def held(alloc):
    return np.flatnonzero(alloc.ref_counts > 0).tolist()


def ids_of(data, alloc):
    """Block ids: held ones, any in range, repeated, out of range."""
    h = held(alloc) or [0]
    return data.draw(arg(st.lists(st.sampled_from(h), max_size=4, unique=True) | st.lists(
        st.integers(-2, alloc.num_blocks + 2), max_size=4)))


@FUZZ_SETTINGS
@given(st.data())
def fuzz_block_allocator(data):
    fz = Fuzz(BlockAllocator(32, 4, secret=SECRET))
    a = fz.obj
    tokens = st.lists(st.integers(0, 50), max_size=20)
    for _ in range(CALLS_PER_EXAMPLE):
        op = data.draw(st.sampled_from(["allocate", "allocate_many", "free", "free_requests", "touch", "hash_blocks",
                                        "cache_blocks", "lookup", "lookup_many", "evict", "reset", "admit",
                                        "admit_many", "hash_blocks_many"]))
        if op == "allocate":
            fz.call(a.allocate, data.draw(arg(st.integers(0, 6))))
        elif op == "allocate_many":
            fz.call(a.allocate_many, data.draw(arg(st.lists(st.integers(0, 4), max_size=3))))
        elif op == "free":
            fz.call(a.free, ids_of(data, a))
        elif op == "free_requests":
            fz.call(a.free_requests, data.draw(arg(st.just([0, 1]))), ids_of(data, a))
        elif op == "touch":
            fz.call(a.touch, ids_of(data, a))
        elif op == "hash_blocks":
            fz.call(a.hash_blocks, data.draw(arg(tokens)), data.draw(st.sampled_from([None] * 4 + NASTY[:12])),
                    salt=data.draw(st.sampled_from([None, None, 0, 7, -1, 2**64, 1.5])))
        elif op == "hash_blocks_many":
            toks = data.draw(tokens)  # offsets that fit the tokens, so valid calls happen too
            fz.call(a.hash_blocks_many, data.draw(arg(st.just([0, len(toks)]))), data.draw(arg(st.just(toks))))
        elif op in ("cache_blocks", "admit", "lookup", "evict"):
            keys = a.hash_blocks(data.draw(tokens))
            keys = data.draw(arg(st.just(keys)))
            if op == "cache_blocks":
                n = len(keys) if hasattr(keys, "__len__") else 1
                ids = data.draw(arg(st.lists(st.sampled_from(held(a) or [0]), min_size=n, max_size=n)))
                fz.call(a.cache_blocks, ids, keys)
            elif op == "admit":
                fz.call(a.admit, keys, data.draw(arg(st.integers(0, 2))))
            elif op == "lookup":
                fz.call(a.lookup, keys)
            else:
                fz.call(a.evict, ids_of(data, a))
        elif op in ("lookup_many", "admit_many"):
            keys = a.hash_blocks(data.draw(tokens))
            offsets = data.draw(arg(st.just([0, len(keys)])))
            fz.call(getattr(a, op), offsets, data.draw(arg(st.just(keys))))
        else:
            fz.call(a.reset_prefix_cache)


@FUZZ_SETTINGS
@given(st.data())
def fuzz_token_table(data):
    fz = Fuzz(TokenTable(BlockAllocator(48, 4, secret=SECRET), initial_sequences=2, initial_tokens=8))
    t = fz.obj
    for _ in range(CALLS_PER_EXAMPLE):
        seqs = list(t.sequences) or [0]
        seq = data.draw(arg(st.sampled_from(seqs) | st.integers(0, 5)))
        op = data.draw(st.sampled_from(["add", "free", "append", "evict", "evict_many", "plan", "commit"]))
        if op == "add":
            fz.call(t.add_sequence, seq, first_position=data.draw(arg(st.integers(0, 100))))
        elif op == "free":
            fz.call(t.free_sequence, seq)
        elif op == "append":
            fz.call(t.append, data.draw(arg(st.just([seq]))), data.draw(arg(st.lists(st.integers(0, 9), min_size=1,
                                                                                       max_size=1))))
        elif op in ("evict", "evict_many"):
            # half the time a sequence holding tokens and logical positions inside it, so that valid
            # evictions happen too (positions drawn blindly almost never are in range)
            holding = [s for s in t.sequences if len(t.positions(s))]
            if holding and data.draw(st.booleans()):
                seq = data.draw(st.sampled_from(holding))
                positions = st.lists(st.integers(0, len(t.positions(seq)) - 1), max_size=4, unique=True)
            else:
                positions = st.lists(st.integers(-1, 30), max_size=5, unique=op == "evict_many")
            pos = data.draw(arg(positions))
            if op == "evict":
                fz.call(t.evict, seq, pos)
            else:
                count = len(pos) if hasattr(pos, "__len__") else 1
                fz.call(t.evict_many, data.draw(arg(st.just([seq]))), data.draw(arg(st.just([count]))), pos)
        elif op == "plan":
            fz.call(t.plan, data.draw(arg(st.none() | st.integers(0, 10))))
        else:
            ok, plan = fz.call(t.plan)
            if ok:
                fz.call(t.commit, plan, data.draw(st.sampled_from([None, None, 5, "x"])))


def test_fuzz_block_allocator_bad_input():
    run_counted(fuzz_block_allocator, CALLS_PER_EXAMPLE)


def test_fuzz_token_table_bad_input():
    run_counted(fuzz_token_table, CALLS_PER_EXAMPLE)
