"""The engine's queue walk (``_queue_work_ahead``) against a plain-Python reference: the queue
drains in order, a step at a time (up to the prefill budget and the batch room, at least one
request per step); each request waits for the prefill tokens of the steps before its own."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.sim.engine import _queue_work_ahead


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


@settings(max_examples=300, deadline=None)
@given(prefill=st.lists(st.integers(0, 5000), max_size=30), budget=st.integers(1, 8192),
       room=st.integers(-2, 8), max_batch=st.integers(1, 8))
def test_queue_work_ahead_matches_reference(prefill, budget, room, max_batch):
    got = _queue_work_ahead(np.array(prefill, dtype=np.int64), budget, room, max_batch)
    assert got.tolist() == reference(prefill, budget, room, max_batch)


def test_queue_work_ahead_pinned():
    # budget 100: [60, 30] fill step 1, 50 starts step 2 (90 + 50 > 100), 70 step 3
    assert _queue_work_ahead(np.array([60, 30, 50, 70]), 100, 8, 8).tolist() == [0.0, 0.0, 90.0, 140.0]
    # batch room 1 now: each request its own step at first, then 2 per step
    assert _queue_work_ahead(np.array([10, 10, 10, 10]), 100, 1, 2).tolist() == [0.0, 10.0, 10.0, 30.0]
