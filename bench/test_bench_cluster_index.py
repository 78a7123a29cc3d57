"""BlockIndex microbenchmarks, each against a plain-Python dict-of-sets index
(kvmm.testing.models.block_index.NaiveBlockIndex, the reference) in the same run.

Groups: small mixed batches (one event per call, stored and removed on both media, as a KV-event
stream arrives: ``stored_many`` / ``removed_many`` of one group against ``stored`` /
``removed``: the batch calls' fixed cost must be no higher), ingest of block events (a scheduler
step of BlockStored events, 16 blocks each, over 16 instances, then the BlockRemoved events of
the same blocks: ``stored_many`` + ``removed_many``), and batched ``prefix_hits_many`` of
64-block requests over 16 instances that hold shared prefixes of random lengths on two
media.  The targets (docs/performance.md): >= 5 M block events/s and >= 1 M requests/s, both >=
20x the dict-of-sets index.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import info, size, warm
from kvmm.cluster import BlockIndex
from kvmm.testing.models.block_index import NaiveBlockIndex

INSTANCES = 16
MEDIA = ("GPU", "CPU")


def step_events(seed: int, events: int, blocks: int):
    """One step's BlockStored events: (instances, offsets, keys, media) with distinct keys."""
    rng = np.random.default_rng(seed)
    instances = rng.integers(0, INSTANCES, size=events)
    media = rng.integers(0, 2, size=events)
    keys = rng.choice(2**40, size=events * blocks, replace=False)
    offsets = np.arange(events + 1, dtype=np.int64) * blocks
    return instances.astype(np.int64), offsets, keys.astype(np.int64), media.astype(np.int64)


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_ingest_block_events(benchmark, impl):
    benchmark.group = "cluster index: ingest block events (store + remove, 16-block events, 16 instances)"
    events = size(4096, 8)
    inst, offs, keys, media = step_events(0, events, 16)
    items = 2 * keys.shape[0]
    if impl == "kvmm":
        index = BlockIndex(INSTANCES, MEDIA)

        def cycle():
            index.stored_many(inst, offs, keys, media)
            index.removed_many(inst, offs, keys, media)

        warm(cycle)
        info(benchmark, "kvmm", "BlockIndex.stored_many + removed_many", items, "block events")
        benchmark(cycle)
        index.check()
        assert len(index) == 0 and index.stats["removed"] == index.stats["stored"]
    else:
        index = NaiveBlockIndex(INSTANCES, MEDIA)
        groups = [(int(inst[g]), keys[offs[g]:offs[g + 1]].tolist(), MEDIA[media[g]]) for g in range(events)]

        def cycle():
            for i, ks, m in groups:
                index.stored(i, ks, m)
            for i, ks, m in groups:
                index.removed(i, ks, m)

        info(benchmark, "baseline", "dict-of-sets index (plain Python)", items, "block events")
        benchmark(cycle)
        assert len(index) == 0


def populated(impl: str, requests: int):
    """16 instances holding prefixes of 64 conversations (64 blocks each) of random lengths, on
    either medium; ``requests`` lookups of those conversations (offsets, flat keys)."""
    rng = np.random.default_rng(1)
    convs = np.arange(64 * 64, dtype=np.int64).reshape(64, 64) + 10**9
    index = BlockIndex(INSTANCES, MEDIA) if impl == "kvmm" else NaiveBlockIndex(INSTANCES, MEDIA)
    for i in range(INSTANCES):
        for c in rng.choice(64, size=24, replace=False):
            held = convs[c, : int(rng.integers(1, 65))]
            index.stored(i, held if impl == "kvmm" else held.tolist(), MEDIA[int(rng.integers(2))])
    which = rng.integers(0, 64, size=requests)
    flat = convs[which].reshape(-1)
    offsets = np.arange(requests + 1, dtype=np.int64) * 64
    return index, offsets, flat, which, convs


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_prefix_hits_many_64_blocks_16_instances(benchmark, impl):
    benchmark.group = "cluster index: prefix_hits of 64-block requests over 16 instances (batched)"
    requests = size(4096, 4)
    index, offsets, flat, which, convs = populated(impl, requests)
    if impl == "kvmm":
        warm(index.prefix_hits_many, offsets[:2], flat[:64])
        info(benchmark, "kvmm", "BlockIndex.prefix_hits_many", requests, "requests")
        got = benchmark(index.prefix_hits_many, offsets, flat)
        assert got.shape == (requests, INSTANCES, 2)
        # the same answers as the reference, on a few requests
        model = populated("naive", 0)[0]
        for r in range(min(requests, 8)):
            assert got[r].tolist() == model.prefix_hits(convs[which[r]].tolist())
    else:
        reqs = [flat[offsets[r]:offsets[r + 1]].tolist() for r in range(requests)]
        info(benchmark, "baseline", "dict-of-sets index (plain Python)", requests, "requests")
        got = benchmark(lambda: [index.prefix_hits(r) for r in reqs])
        assert len(got) == requests


def mixed_small_batches(seed: int, calls: int):
    """``calls`` events of 1-8 keys each, stored then removed later on a random medium and
    instance: ``(kind, instance, keys, medium)``, keys int64 arrays."""
    rng = np.random.default_rng(seed)
    live, out = [], []
    for _ in range(calls):
        if live and rng.random() < 0.5:
            i, keys, m = live.pop(int(rng.integers(len(live))))
            out.append(("removed", i, keys, m))
        else:
            keys = rng.choice(2**40, size=int(rng.integers(1, 9)), replace=False).astype(np.int64)
            i, m = int(rng.integers(INSTANCES)), MEDIA[int(rng.integers(2))]
            live.append((i, keys, m))
            out.append(("stored", i, keys, m))
    out += [("removed", i, keys, m) for i, keys, m in live]
    return out


@pytest.mark.parametrize("impl", ["many", "single"])
def test_small_mixed_batches_fixed_cost(benchmark, impl):
    benchmark.group = "cluster index: one small event per call (stored/removed, mixed media): batch calls vs single calls"
    events = mixed_small_batches(3, size(20_000, 40))
    one = [np.zeros(1, dtype=np.int64) + i for i in range(INSTANCES)]
    offsets = {n: np.array([0, n], dtype=np.int64) for n in range(1, 9)}
    many_args = [(kind == "stored", one[i], offsets[keys.shape[0]], keys, [m]) for kind, i, keys, m in events]

    def batches():
        index = BlockIndex(INSTANCES, MEDIA)
        for store, inst, offs, keys, media in many_args:
            if store:
                index.stored_many(inst, offs, keys, media)
            else:
                index.removed_many(inst, offs, keys, media)
        return index

    def singles():
        index = BlockIndex(INSTANCES, MEDIA)
        for kind, i, keys, m in events:
            if kind == "stored":
                index.stored(i, keys, m)
            else:
                index.removed(i, keys, m)
        return index

    fn = batches if impl == "many" else singles
    warm(fn)
    if impl == "many":
        info(benchmark, "kvmm", "BlockIndex.stored_many / removed_many, one group a call", len(events), "calls")
    else:
        info(benchmark, "baseline", "BlockIndex.stored / removed (the single calls)", len(events), "calls")
    index = benchmark.pedantic(fn, rounds=size(5, 1), iterations=1)
    assert len(index) == 0 and index.stats["removed"] == index.stats["stored"]
