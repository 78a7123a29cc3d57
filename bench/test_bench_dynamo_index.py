"""BlockIndex against NVIDIA Dynamo's Rust RadixTree (``ai-dynamo-runtime``, pinned in the dynamo
venv of .ci/run, which runs this at smoke size; the main run's bench smoke skips it), fed the same
16-worker stream of prefix-tree events (kvmm.testing.prefix_tree_events; the parity test,
tests/integrations/test_dynamo_index.py, asserts both give the same prefix lengths).

Groups, each with kvmm and Dynamo side by side:

* ``per event call``: the whole stream, one call per event: ``stored`` / ``removed`` /
  ``cleared`` against ``apply_event(worker, json_bytes)`` (Dynamo's JSON is encoded before the
  timing; kvmm's keys are numpy arrays);
* ``per query call``: every query, one call each: ``prefix_hits`` against ``find_matches``;
* ``batched queries``: all queries in one ``prefix_hits_many`` call against the same
  ``find_matches`` loop (Dynamo has no batch lookup).

Issue 31 measured, on a lightly loaded machine: 1.5x per event call, 2.0x per query call, 30x
with ``prefix_hits_many``.
"""

from __future__ import annotations

import numpy as np
import pytest

dynamo_core = pytest.importorskip("dynamo._core", reason="runs in the dynamo venv (.ci/run), where ai-dynamo-runtime "
                                                         "is installed")

from bench.conftest import info, size  # noqa: E402
from kvmm.cluster import BlockIndex  # noqa: E402
from kvmm.testing.prefix_tree_events import PrefixTreeStream, dynamo_event_json  # noqa: E402

WORKERS = 16
STREAM = PrefixTreeStream(7, workers=WORKERS, events=size(60_000, 300), queries=size(2400, 20), clear_rate=0.0005)
EVENTS_JSON = [(ev[1], dynamo_event_json(STREAM, ev, k)) for k, ev in enumerate(STREAM.events, start=1)]
# kvmm's calls with their arguments ready (as Dynamo's JSON is ready): the method, the worker, the keys
CALLS = [(ev[0], ev[1], STREAM.seq[ev[3]] if ev[0] == "stored" else STREAM.seq[ev[2]] if ev[0] == "removed" else None)
         for ev in STREAM.events]
QUERY_SEQ = [STREAM.seq[q] for q in STREAM.queries]
QUERY_LOCAL = [STREAM.local[q].tolist() for q in STREAM.queries]


def kvmm_replay():
    index = BlockIndex(WORKERS, ("GPU",))
    stored, removed, cleared = index.stored, index.removed, index.cleared
    for kind, w, keys in CALLS:
        if kind == "stored":
            stored(w, keys, "GPU")
        elif kind == "removed":
            removed(w, keys, "GPU")
        else:
            cleared(w)
    return index


def dynamo_replay():
    tree = dynamo_core.RadixTree()
    apply = tree.apply_event
    for w, payload in EVENTS_JSON:
        apply(w, payload)
    return tree


@pytest.mark.parametrize("impl", ["kvmm", "dynamo"])
def test_per_event_call(benchmark, impl):
    benchmark.group = f"dynamo index: replay {len(CALLS)} prefix-tree events, one call each, {WORKERS} workers"
    if impl == "kvmm":
        kvmm_replay()  # compiles the kernels
        info(benchmark, "kvmm", "BlockIndex.stored / removed / cleared", len(CALLS), "events")
        index = benchmark.pedantic(kvmm_replay, rounds=size(5, 1), iterations=1)
        assert len(index) > 0
    else:
        info(benchmark, "baseline", "Dynamo RadixTree.apply_event (JSON)", len(CALLS), "events")
        tree = benchmark.pedantic(dynamo_replay, rounds=size(5, 1), iterations=1)
        assert tree.find_matches(QUERY_LOCAL[0]).scores is not None


@pytest.fixture(scope="module")
def populated():
    return kvmm_replay(), dynamo_replay()


@pytest.mark.parametrize("impl", ["kvmm", "dynamo"])
def test_per_query_call(benchmark, impl, populated):
    benchmark.group = f"dynamo index: {len(QUERY_SEQ)} lookups, one call each, {WORKERS} workers"
    index, tree = populated
    if impl == "kvmm":
        info(benchmark, "kvmm", "BlockIndex.prefix_hits", len(QUERY_SEQ), "queries")
        got = benchmark(lambda: [index.prefix_hits(q) for q in QUERY_SEQ])
        assert len(got) == len(QUERY_SEQ)
    else:
        info(benchmark, "baseline", "Dynamo RadixTree.find_matches", len(QUERY_LOCAL), "queries")
        got = benchmark(lambda: [tree.find_matches(q) for q in QUERY_LOCAL])
        assert len(got) == len(QUERY_LOCAL)


@pytest.mark.parametrize("impl", ["kvmm", "dynamo"])
def test_batched_queries(benchmark, impl, populated):
    benchmark.group = f"dynamo index: {len(QUERY_SEQ)} lookups, kvmm in one prefix_hits_many call, {WORKERS} workers"
    index, tree = populated
    if impl == "kvmm":
        offsets = np.cumsum([0] + [len(q) for q in QUERY_SEQ])
        flat = np.concatenate(QUERY_SEQ)
        info(benchmark, "kvmm", "BlockIndex.prefix_hits_many", len(QUERY_SEQ), "queries")
        got = benchmark(index.prefix_hits_many, offsets, flat)
        scores = tree.find_matches(QUERY_LOCAL[0]).scores
        assert got[0, :, 0].tolist() == [scores.get((w, 0), 0) for w in range(WORKERS)]
    else:
        info(benchmark, "baseline", "Dynamo RadixTree.find_matches (no batch call)", len(QUERY_LOCAL), "queries")
        got = benchmark(lambda: [tree.find_matches(q) for q in QUERY_LOCAL])
        assert len(got) == len(QUERY_LOCAL)
