"""The ledger's small kernels against plain-Python references written from their docstrings:
check_claims_kernel (one-pass claim-id validation: first unknown id, then smallest repeated id,
then first slot in a state not allowed) and update_kernel (a progress report)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.policies.staging._ledger_kernels import check_claims_kernel, update_kernel


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


def update_reference(slots, wa, dl, now, rate, state, needed_at, updated_at, delay_s, work_ahead, deadline, lease_from):
    shift, horizon = [], []
    for i, s in enumerate(slots):
        old_use = (updated_at[s] + delay_s[s]) + work_ahead[s] / rate
        new_use = (now + dl[i]) + wa[i] / rate
        shift.append(old_use - new_use)
        horizon.append(max(old_use - now, 0.0))
        if state[s] == 2 and math.isnan(needed_at[s]):
            deadline[s] = new_use
        elif state[s] == 4:
            lease_from[s] = now
        work_ahead[s], delay_s[s], updated_at[s] = wa[i], dl[i], now
    return shift, horizon


@settings(max_examples=200, deadline=None)
@given(data=st.data(), rate=st.floats(1.0, 1e5))
def test_update_kernel_matches_reference(data, rate):
    n = 8
    floats = st.floats(0.0, 1e3)
    state = np.array(data.draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)), dtype=np.int8)
    needed_at = np.array(data.draw(st.lists(st.sampled_from([np.nan, 1.0]), min_size=n, max_size=n)))
    cols = [np.array(data.draw(st.lists(floats, min_size=n, max_size=n))) for _ in range(5)]
    slots = np.array(data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n)), dtype=np.int64)
    k = slots.shape[0]
    wa, dl = (np.array(data.draw(st.lists(floats, min_size=k, max_size=k))) for _ in range(2))
    now = data.draw(floats)
    ref_cols = [c.copy() for c in cols]
    shift, horizon = np.empty(k), np.empty(k)
    positive = update_kernel(slots, wa, dl, now, rate, state, needed_at, *cols, shift, horizon)
    ref_shift, ref_horizon = update_reference(slots.tolist(), wa.tolist(), dl.tolist(), now, rate, state, needed_at, *ref_cols)
    assert shift.tolist() == ref_shift and horizon.tolist() == ref_horizon
    assert positive == sum(s > 0.0 for s in ref_shift)
    for got, want in zip(cols, ref_cols):
        np.testing.assert_array_equal(got, want)
