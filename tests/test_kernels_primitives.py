"""kvmm._kernels, the numba primitives the allocator, the cluster index and the policies share,
each against a plain-Python reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from kvmm import _kernels as K

M64 = (1 << 64) - 1


def splitmix_finaliser(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


@njit
def _mix64_many(keys, out):
    for i in range(keys.shape[0]):
        out[i] = K.mix64(keys[i])


@njit
def _mix128_many(k0, k1, seed, out):
    for i in range(k0.shape[0]):
        out[i] = K.mix128(k0[i], k1[i], seed)


def test_mixing_is_splitmix64_of_one_word_and_of_two_words_and_a_seed():
    rng = np.random.default_rng(0)
    k0 = rng.integers(0, 2**63, 200, dtype=np.int64).view(np.uint64) * np.uint64(2) + np.uint64(1)
    k1 = rng.integers(0, 2**63, 200, dtype=np.int64).view(np.uint64)
    one, two = np.empty(200, np.uint64), np.empty(200, np.uint64)
    _mix64_many(k0, one)
    _mix128_many(k0, k1, np.uint64(12345), two)
    for a, b, x, y in zip(k0.tolist(), k1.tolist(), one.tolist(), two.tolist()):
        assert x == splitmix_finaliser((a + 0x9E3779B97F4A7C15) & M64)
        assert y == splitmix_finaliser(a ^ ((b * 0x9E3779B97F4A7C15) & M64) ^ 12345)
    assert len(set(one.tolist())) == 200  # a bijection: distinct keys, distinct hashes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_the_table_gives_ids_in_order_of_first_sight_and_survives_a_rehash(keys, probes):
    keys_arr = np.array(keys, dtype=np.uint64)
    slots = np.zeros(2 * 1024, np.uint64)  # 1024 slots: the load stays <= 1/2
    id_keys = np.zeros(512, np.uint64)
    state = np.zeros(1, np.int64)
    ids = np.empty(len(keys), np.int64)
    K.get_or_insert_ids(keys_arr, slots, id_keys, state, ids)
    first_seen = {}
    for k in keys:
        first_seen.setdefault(k, len(first_seen))
    assert ids.tolist() == [first_seen[k] for k in keys] and state[0] == len(first_seen)
    assert id_keys[:state[0]].tolist() == list(first_seen)
    grown = np.zeros(2 * 2048, np.uint64)
    K.rehash(slots, grown)
    found = np.empty(len(probes), np.int64)
    K.lookup_ids(np.array(probes, dtype=np.uint64), grown, found)
    assert found.tolist() == [first_seen.get(k, -1) for k in probes]


@njit
def _moves(ideal, hole, j):
    return K.moves_into_hole(ideal, hole, j)


def test_backward_shift_moves_an_entry_unless_its_ideal_slot_lies_cyclically_in_hole_to_j():
    for n in (4, 8):
        for hole in range(n):
            for j in range(n):
                for ideal in range(n):
                    between = (ideal - hole) % n <= (j - hole) % n and ideal != hole  # cyclically in (hole, j]
                    expected = j != hole and not between
                    assert _moves(ideal, hole, j) == expected, (n, ideal, hole, j)


@njit
def _apply(ops, n):
    prev = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    head, tail = -1, -1
    for i in range(ops.shape[0]):
        kind, b, after = ops[i, 0], ops[i, 1], ops[i, 2]
        if kind == 0:
            head, tail = K.list_unlink(prev, nxt, head, tail, b)
        elif kind == 1:
            head, tail = K.list_link_after(prev, nxt, head, tail, after, b)
        else:
            head, tail = K.list_push_tail(prev, nxt, head, tail, b)
    out = np.empty(n, np.int64)
    m = 0
    b = head
    while b != -1:
        out[m] = b
        m += 1
        b = nxt[b]
    back = np.empty(n, np.int64)
    k = 0
    b = tail
    while b != -1:
        back[k] = b
        k += 1
        b = prev[b]
    return out[:m], back[:k]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9), st.integers(0, 10)), max_size=60))
def test_list_primitives_equal_a_python_list(steps):
    model: list[int] = []
    ops = []
    for kind, b, pick in steps:
        if b in model:
            if kind == 0:
                model.remove(b)
                ops.append((0, b, -1))
            continue
        if kind == 2:
            model.append(b)
            ops.append((2, b, -1))
        else:  # link after a member (or at the head: -1)
            after = model[pick % len(model)] if model and pick < 10 else -1
            model.insert(model.index(after) + 1 if after != -1 else 0, b)
            ops.append((1, b, after))
    forward, backward = _apply(np.array(ops, dtype=np.int64).reshape(-1, 3), 10)
    assert forward.tolist() == model and backward.tolist() == model[::-1]
