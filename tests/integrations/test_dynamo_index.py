"""kvmm's BlockIndex against NVIDIA Dynamo's own KV index, the Rust ``RadixTree`` of
``ai-dynamo-runtime`` (``dynamo._core.RadixTree``: ``apply_event(worker, json_bytes)``,
``find_matches(local_hashes)``), on random streams of prefix-tree events (issue 31, item 5).

Runs in the dynamo venv (.ci/run builds it with the pinned ai-dynamo-runtime); elsewhere it
skips.  BlockIndex is keyed by the blocks' sequence hashes (vLLM's block hash, Dynamo's
``block_hash``), Dynamo's tree by their local hashes under their parents; both must give every
worker the same prefix length on every query, at several points of every stream.
"""

from __future__ import annotations

import numpy as np
import pytest

dynamo_core = pytest.importorskip("dynamo._core", reason="needs ai-dynamo-runtime (the dynamo venv of .ci/run)")

from kvmm.cluster import BlockIndex  # noqa: E402
from kvmm.testing.prefix_tree_events import PrefixTreeStream, dynamo_event_json  # noqa: E402


def dynamo_lengths(tree, stream, query, workers):
    scores = tree.find_matches(stream.local[query].tolist()).scores  # {(worker, dp_rank): matched blocks}
    assert all(dp == 0 for _, dp in scores)
    return np.array([scores.get((w, 0), 0) for w in range(workers)])


@pytest.mark.parametrize("seed", range(6))
def test_per_worker_prefix_lengths_equal_dynamos_radix_tree(seed):
    workers = 16
    stream = PrefixTreeStream(seed, workers=workers, events=2500, queries=150, clear_rate=0.004)
    tree, index = dynamo_core.RadixTree(), BlockIndex(workers, ("GPU",))
    checkpoints = {len(stream.events) // 3, 2 * len(stream.events) // 3, len(stream.events)}
    compared = held = 0
    for k, ev in enumerate(stream.events, start=1):
        tree.apply_event(ev[1], dynamo_event_json(stream, ev, k))
        stream.apply_to_index(index, [ev])
        if k in checkpoints:
            index.check()
            for q in stream.queries:
                got = index.prefix_hits(stream.seq[q])[:, 0]
                assert got.tolist() == dynamo_lengths(tree, stream, q, workers).tolist(), (seed, k, q[:4])
                compared += 1
                held += int(got.max() > 0)
    assert compared == 3 * len(stream.queries) and held > compared // 2  # most queries find some worker
    assert {ev[0] for ev in stream.events} == {"stored", "removed", "cleared"}


def test_prefix_hits_many_equals_dynamo_on_every_query():
    stream = PrefixTreeStream(42, workers=8, events=1500, queries=300)
    tree, index = dynamo_core.RadixTree(), BlockIndex(8, ("GPU",))
    for k, ev in enumerate(stream.events, start=1):
        tree.apply_event(ev[1], dynamo_event_json(stream, ev, k))
    stream.apply_to_index(index)
    offsets = np.cumsum([0] + [len(q) for q in stream.queries])
    many = index.prefix_hits_many(offsets, stream.seq[np.concatenate(stream.queries)])[:, :, 0]
    for r, q in enumerate(stream.queries):
        assert many[r].tolist() == dynamo_lengths(tree, stream, q, 8).tolist()
