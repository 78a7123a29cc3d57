"""check_claims_kernel (the ledger's one-pass claim-id validation) against a plain-Python reference
written from its docstring: first unknown id, then smallest repeated id, then first slot in a
state not allowed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.policies._ledger_kernels import check_claims_kernel


def reference(ids, state, generation, n_slots, unique, allowed_mask):
    ids = [int(i) for i in ids]
    for cid in ids:
        s = cid & 0xFFFFFFFF
        if cid < 0 or s >= n_slots or state[s] == 0 or generation[s] != cid >> 32:
            return 1, cid
    if unique:
        repeated = [cid for cid in set(ids) if ids.count(cid) > 1]
        if repeated:
            return 2, min(repeated)
    for cid in ids:
        s = cid & 0xFFFFFFFF
        if not (allowed_mask >> int(state[s])) & 1:
            return 3, s
    return 0, 0


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n_slots=st.integers(0, 6), unique=st.booleans(), allowed_mask=st.integers(0, 255))
def test_check_claims_kernel_matches_reference(data, n_slots, unique, allowed_mask):
    cap = 8
    state = np.array(data.draw(st.lists(st.integers(0, 5), min_size=cap, max_size=cap)), dtype=np.int8)
    generation = np.array(data.draw(st.lists(st.integers(0, 2), min_size=cap, max_size=cap)), dtype=np.int64)
    raw = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, cap - 1)), max_size=6))
    ids = [(g << 32) | s for g, s in raw] + data.draw(st.lists(st.integers(-3, -1), max_size=1))
    ids = np.array(ids, dtype=np.int64)
    code, value, slots = check_claims_kernel(ids, state, generation, n_slots, unique, allowed_mask)
    assert (code, int(value)) == reference(ids, state, generation, n_slots, unique, allowed_mask)
    if code == 0:
        assert slots.tolist() == [int(i) & 0xFFFFFFFF for i in ids]
