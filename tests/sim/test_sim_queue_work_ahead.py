"""The engine's queue walk (``_claims_work_ahead``) against a plain-Python reference: the queue
drains in order, a step at a time (up to the prefill budget and the batch room, at least one
request per step); each request waits for the prefill tokens of the steps before its own, and
the walk reports the requests that hold a claim."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.sim.engine._kernels import _claims_work_ahead, _first_tick_not_before


def reference(prefill, budget, room, max_batch):
    steps: list[list[int]] = []
    for p in prefill:
        limit = room if len(steps) <= 1 else max_batch
        if steps and (sum(steps[-1]) + p <= budget and len(steps[-1]) < limit):
            steps[-1].append(p)
        else:
            steps.append([p])
    out, before = [], 0
    for step in steps:
        out.extend([float(before)] * len(step))
        before += sum(step)
    return out


def walk(prefill, budget, room, max_batch, claims=None):
    """The kernel over the queue 0..n-1 (request r's claim id: ``claims[r]``, -1 for none;
    default: every request holds claim ``100 + r``)."""
    n = len(prefill)
    claim_id = np.array([100 + r for r in range(n)] if claims is None else claims, dtype=np.int64)
    cids, ahead = _claims_work_ahead(np.arange(n, dtype=np.int64), np.array(prefill, dtype=np.int64), claim_id,
                                     budget, room, max_batch)
    return cids.tolist(), ahead.tolist()


@settings(max_examples=300, deadline=None)
@given(prefill=st.lists(st.integers(0, 5000), max_size=30), budget=st.integers(1, 8192),
       room=st.integers(-2, 8), max_batch=st.integers(1, 8), data=st.data())
def test_claims_work_ahead_matches_reference(prefill, budget, room, max_batch, data):
    claims = data.draw(st.lists(st.sampled_from([-1, 7, 9]), min_size=len(prefill), max_size=len(prefill)))
    expected = reference(prefill, budget, room, max_batch)
    cids, ahead = walk(prefill, budget, room, max_batch, claims)
    assert cids == [c for c in claims if c >= 0]
    assert ahead == [a for a, c in zip(expected, claims) if c >= 0]


def test_claims_work_ahead_pinned():
    # budget 100: [60, 30] fill step 1, 50 starts step 2 (90 + 50 > 100), 70 step 3
    assert walk([60, 30, 50, 70], 100, 8, 8) == ([100, 101, 102, 103], [0.0, 0.0, 90.0, 140.0])
    # batch room 1 now: each request its own step at first, then 2 per step
    assert walk([10, 10, 10, 10], 100, 1, 2)[1] == [0.0, 10.0, 10.0, 30.0]
    # only the requests that hold a claim are reported, in queue order (a request in a shuffled
    # queue is read at its own index)
    cids, ahead = _claims_work_ahead(np.array([2, 0, 1]), np.array([10, 20, 30]), np.array([5, -1, 6]), 25, 8, 8)
    assert (cids.tolist(), ahead.tolist()) == ([6, 5], [0.0, 30.0])


def first_tick_reference(tp, interval, before, until):
    """The ticks tp, tp + interval, ... (each the previous plus interval): the first that is
    >= before or > until."""
    while not (tp >= before or tp > until):
        tp = tp + interval
    return tp


@settings(max_examples=300, deadline=None)
@given(tp=st.floats(0.0, 100.0), interval=st.floats(1e-3, 5.0), before=st.floats(0.0, 120.0),
       until=st.floats(0.0, 120.0))
def test_first_tick_not_before_matches_reference(tp, interval, before, until):
    assert _first_tick_not_before(tp, interval, before, until) == first_tick_reference(tp, interval, before, until)


def test_first_tick_not_before_pinned():
    assert _first_tick_not_before(0.0, 0.005, 0.012, 1.0) == 0.005 + 0.005 + 0.005  # the 4th tick, summed as the loop sums
    assert _first_tick_not_before(0.0, 0.005, 1.0, 0.012) == 0.005 + 0.005 + 0.005  # stops past until
    assert _first_tick_not_before(2.0, 0.005, 1.0, 3.0) == 2.0  # already at or after before
