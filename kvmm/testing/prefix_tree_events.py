"""Random KV-event streams shaped as engines emit them, for comparing block indexes
(``BlockIndex`` against NVIDIA Dynamo's ``RadixTree``: tests/integrations/test_dynamo_index.py,
bench/test_bench_dynamo_index.py).

One global prefix tree of blocks: each block has a *local* hash (its tokens, Dynamo's
``tokens_hash``) and a *sequence* hash (its whole prefix, vLLM's block hash and Dynamo's
``block_hash``), both random 62-bit ints.  Each worker holds a subtree closed under parents
(as a prefix cache does); an event is

* ``("stored", worker, parent or None, blocks)``: the worker extends a block it holds (or the
  root) by a path of blocks it does not hold, taken from the tree or new;
* ``("removed", worker, blocks)``: the worker evicts leaves of what it holds (tails before
  heads, as vLLM's free queue does);
* ``("cleared", worker)``: ``AllBlocksCleared``.

``queries`` are root paths of the tree (some extended by unknown blocks), as a router looks up.
Dynamo's radix tree refuses a store under a parent the worker does not hold, so every stream
here keeps that rule.
"""

from __future__ import annotations

import json

import numpy as np

__all__ = ["PrefixTreeStream", "dynamo_event_json"]


class PrefixTreeStream:
    """``events``, ``queries`` (lists of block ids), ``local[b]`` / ``seq[b]`` (hashes of block
    ``b``) of a random stream over ``workers`` workers (see the module docstring)."""

    def __init__(self, seed: int, workers: int = 16, events: int = 2000, queries: int = 200,
                 clear_rate: float = 0.002) -> None:
        rng = np.random.default_rng(seed)
        self.workers = workers
        parent: list[int] = []  # block -> parent block (-1: root)
        children: list[list[int]] = []
        roots: list[int] = []

        def new_block(p: int) -> int:
            parent.append(p)
            children.append([])
            (children[p] if p >= 0 else roots).append(len(parent) - 1)
            return len(parent) - 1

        held = [set() for _ in range(workers)]
        self.events: list[tuple] = []
        for _ in range(events):
            w = int(rng.integers(workers))
            mine = held[w]
            u = rng.random()
            if u < clear_rate:
                mine.clear()
                self.events.append(("cleared", w))
                continue
            if u < 0.35 and mine:  # evict 1-4 leaves
                leaves = [b for b in mine if not any(c in mine for c in children[b])]
                gone = [int(b) for b in rng.choice(leaves, size=min(len(leaves), int(rng.integers(1, 5))), replace=False)]
                mine.difference_update(gone)
                self.events.append(("removed", w, gone))
                continue
            # extend: from the root or a block it holds, down a path of 1-8 blocks it does not hold
            starts = [-1] + sorted(mine)
            p = start = starts[int(rng.integers(len(starts)))] if rng.random() < 0.8 else -1
            path = []
            for _ in range(int(rng.integers(1, 9))):
                options = [c for c in (children[p] if p >= 0 else roots) if c not in mine]
                b = int(options[int(rng.integers(len(options)))]) if options and rng.random() < 0.7 else new_block(p)
                path.append(b)
                p = b
            mine.update(path)
            self.events.append(("stored", w, start if start >= 0 else None, path))
        n = len(parent)
        self.local = rng.integers(1, 2**62, size=n + 64, dtype=np.int64)
        self.seq = rng.integers(1, 2**62, size=n + 64, dtype=np.int64)
        self.parent = parent
        self.queries: list[list[int]] = []
        for _ in range(queries):
            b = int(rng.integers(n))
            path = []
            while b >= 0:
                path.append(b)
                b = parent[b]
            path.reverse()
            extra = int(rng.integers(0, 3))
            self.queries.append(path + list(range(n, n + extra)))  # blocks no worker holds

    def apply_to_index(self, index, events=None) -> None:
        """Feed ``events`` (default: all) to a :class:`~kvmm.cluster.BlockIndex` keyed by sequence hash."""
        for ev in self.events if events is None else events:
            if ev[0] == "stored":
                index.stored(ev[1], self.seq[ev[3]], "GPU")
            elif ev[0] == "removed":
                index.removed(ev[1], self.seq[ev[2]], "GPU")
            else:
                index.cleared(ev[1])


def dynamo_event_json(stream: PrefixTreeStream, ev: tuple, event_id: int) -> bytes:
    """One event as Dynamo's ``KvCacheEvent`` JSON (``lib/kv-router`` protocols: ``data`` is
    ``{"stored": {"parent_hash", "blocks": [{"block_hash", "tokens_hash"}]}}``,
    ``{"removed": {"block_hashes"}}`` or ``"cleared"``)."""
    if ev[0] == "stored":
        parent = None if ev[2] is None else int(stream.seq[ev[2]])
        data = {"stored": {"parent_hash": parent,
                           "blocks": [{"block_hash": int(stream.seq[b]), "tokens_hash": int(stream.local[b])}
                                      for b in ev[3]]}}
    elif ev[0] == "removed":
        data = {"removed": {"block_hashes": [int(stream.seq[b]) for b in ev[2]]}}
    else:
        data = "cleared"
    return json.dumps({"event_id": event_id, "data": data}).encode()
