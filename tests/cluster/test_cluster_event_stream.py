"""KV events with delay and loss (kvmm.cluster.event_stream, issue 31 item 3).

* ``EventStream()`` (no delay, batching, loss or speculation) gives every SimResult field of
  today's exact index, bit for bit;
* with delay, batching and loss the index equals a plain-Python replay of the delivered
  batches (a reference written from the docs: batches per instance and send time, due at send
  time + delay, lost with one seeded draw each in delivery order), on Hypothesis streams with
  check() after every step, and in a simulation (the applied log replayed into a fresh index);
* speculative indexing on a hand-worked example (llm-d: its own entry, expiring after the TTL).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvmm.cluster import BlockIndex, EventFeed, EventStream
from kvmm.errors import BadInputError
from kvmm.sim import GiB, PDConfig, SimConfig, TierLevel, simulate
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.testing.models.block_index import NaiveBlockIndex

MEDIA = ("GPU", "CPU")


def cluster(**kw):
    kw.setdefault("instances", 3)
    kw.setdefault("router", "precise-prefix")
    kw.setdefault("router_params", {"load_weight": 0.5})
    return SimConfig(workload="conversation", max_requests=500, load=0.8, gpu_kv_bytes=24 * GiB,
                     tiers=(TierLevel("dram", capacity_bytes=8 * GiB),), cluster=ClusterConfig(**kw))


@pytest.mark.parametrize("extra", [{}, {"index_max_entries": 300},
                                   {"router": "weighted", "router_params": {}, "index_max_holders": 2}])
def test_an_exact_stream_gives_todays_results_bit_for_bit(extra):
    today = simulate(cluster(**extra))
    streamed = simulate(cluster(events=EventStream(delay_s=0, drop_rate=0), **extra))
    a, b = today.as_dict(), streamed.as_dict()
    assert {k for k in a if a[k] != b[k]} == set()
    assert today == streamed and today.index_entries > 0
    assert streamed.policies["kv_events"].stats["batches"] == 0  # applied as they happened


def test_a_simulation_index_equals_a_replay_of_what_was_delivered():
    stream = EventStream(delay_s=0.4, batch_interval_s=0.05, drop_rate=0.2, seed=3, record=True)
    res = simulate(cluster(events=stream))
    feed = res.policies["kv_events"]
    feed.check()
    assert feed.stats["batches_dropped"] > 0 and feed.stats["max_lag_s"] >= 0.4
    replay = BlockIndex(3, feed.index.media)
    for instance, medium, stored, removed in feed.applied:
        if len(removed):
            replay.removed(instance, removed, medium, lenient=True)
        if len(stored):
            replay.stored(instance, stored, medium)
    assert replay.as_dict() == feed.index.as_dict() and len(replay) == res.index_entries
    exact = simulate(cluster())
    assert exact.requests_per_instance != res.requests_per_instance  # the router saw a different index


def test_speculative_entries_expire_after_the_ttl_and_events_confirm_them():
    index = BlockIndex(2, ("GPU", "speculative"))
    feed = EventFeed(index, EventStream(delay_s=0.5, speculative_ttl_s=2.0))
    feed.routed(1, np.array([5, 6]), 0.0)            # the router sent a request with blocks 5, 6 to instance 1
    assert index.prefix_hits([5, 6]).tolist() == [[0, 0], [0, 2]]
    feed.publish(1, 1.0, "GPU", [5], [])             # the engine stored block 5 at 1.0: applied at 1.5
    feed.deliver_until(1.4)
    assert index.prefix_hits([5, 6]).tolist() == [[0, 0], [0, 2]]
    feed.deliver_until(1.99)
    assert index.prefix_hits([5, 6]).tolist() == [[0, 0], [1, 2]]
    feed.deliver_until(2.0)                          # the speculative entry expires; the confirmed one stays
    assert index.prefix_hits([5, 6]).tolist() == [[0, 0], [1, 0]]
    assert feed.stats["speculative_expiries"] == 1
    feed.check()


def test_speculation_in_a_run_adds_a_medium_and_counts_inserts():
    res = simulate(cluster(events=EventStream(speculative_ttl_s=2.0)))
    feed = res.policies["kv_events"]
    assert feed.index.media[-1] == "speculative" and feed.stats["speculative_inserts"] == 500
    feed.check()


def test_bad_streams_are_refused():
    for bad in [dict(delay_s=-1), dict(drop_rate=1.0), dict(batch_interval_s=math.nan), dict(speculative_ttl_s=0)]:
        with pytest.raises(BadInputError):
            EventStream(**bad)
    with pytest.raises(BadInputError, match="EventStream"):
        ClusterConfig(events={"delay_s": 1})
    with pytest.raises(BadInputError, match="speculative"):
        EventFeed(BlockIndex(2, MEDIA), EventStream(speculative_ttl_s=1.0))
    pd = SimConfig(workload="conversation", max_requests=50, tiers=(), pd=PDConfig(2, 2),
                   cluster=ClusterConfig(instances=2, router="precise-prefix", events=EventStream(delay_s=1.0)))
    with pytest.raises(BadInputError, match="colocated"):
        simulate(pd)


# ---------------------------------------------------------------- reference model
class ReplayModel:
    """The stream as docs/cluster_index.md describes it, in plain Python, over NaiveBlockIndex."""

    def __init__(self, stream: EventStream) -> None:
        self.s = stream
        self.index = NaiveBlockIndex(4, MEDIA)
        self.batches: list = []  # [instance, sent_at, ops, delivered]
        self.rng = np.random.default_rng(stream.seed)

    def publish(self, i, t, medium, stored, removed):
        if not stored and not removed:
            return
        b = self.s.batch_interval_s
        sent = (math.floor(t / b) + 1) * b if b > 0 else t
        mine = [x for x in self.batches if x[0] == i]
        if not mine or mine[-1][3] or mine[-1][1] != sent:
            self.batches.append([i, sent, [], False])
            mine = [self.batches[-1]]
        mine[-1][2].append((medium, stored, removed))

    def deliver_until(self, t):
        due = [b for b in self.batches if not b[3] and b[1] + self.s.delay_s <= t]
        due.sort(key=lambda b: b[1] + self.s.delay_s)  # stable: ties in the order the batches were opened
        for b in due:
            b[3] = True
            if self.s.drop_rate and self.rng.random() < self.s.drop_rate:
                continue
            for medium, stored, removed in b[2]:
                self.index.removed(b[0], removed, medium, lenient=True)
                self.index.stored(b[0], stored, medium)


class StreamMachine(RuleBasedStateMachine):
    @initialize(delay=st.sampled_from([0.0, 0.3, 1.0]), interval=st.sampled_from([0.0, 0.25]),
                drop=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 3))
    def setup(self, delay, interval, drop, seed):
        stream = EventStream(delay_s=delay, batch_interval_s=interval, drop_rate=drop, seed=seed)
        self.feed = EventFeed(BlockIndex(4, MEDIA), stream)
        self.model = ReplayModel(stream)
        self.now = 0.0

    @rule(dt=st.sampled_from([0.0, 0.1, 0.25, 0.7]))
    def tick(self, dt):
        self.now += dt

    @rule(i=st.integers(0, 3), medium=st.sampled_from(MEDIA), stored=st.lists(st.integers(0, 9), max_size=4),
          removed=st.lists(st.integers(0, 9), max_size=3))
    def publish(self, i, medium, stored, removed):
        self.feed.publish(i, self.now, medium, stored, removed)
        self.model.publish(i, self.now, medium, stored, removed)

    @rule()
    def deliver(self):
        self.feed.deliver_until(self.now)
        self.model.deliver_until(self.now)
        assert self.feed.index.as_dict() == self.model.index.as_dict()

    @invariant()
    def consistent(self):
        self.feed.check()


StreamMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestStreamMachine = StreamMachine.TestCase


def test_pd_still_takes_an_exact_stream():
    pd = SimConfig(workload="conversation", max_requests=50, tiers=(), pd=PDConfig(2, 2),
                   cluster=ClusterConfig(instances=2, router="precise-prefix"))
    a = simulate(pd)
    b = simulate(pd.with_(cluster=dataclasses.replace(pd.cluster, events=EventStream())))
    assert a == b
