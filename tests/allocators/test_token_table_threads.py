"""A background thread plans in a loop while the main thread appends, evicts and commits."""

import queue
import threading

import numpy as np

from kvmm.allocators import BlockAllocator, TokenTable


def test_background_planner_with_concurrent_mutation():
    bs = 4
    alloc = BlockAllocator(512, bs)
    table = TokenTable(alloc)
    store = np.zeros(512 * bs, dtype=np.int64)  # slot -> token identity
    plans: queue.Queue = queue.Queue(maxsize=4)
    stop = threading.Event()
    made = [0]

    def planner():
        while not stop.is_set():
            plan = table.plan(budget=64)
            made[0] += 1
            try:
                plans.put(plan, timeout=0.01)
            except queue.Full:
                pass

    def copy(src, dst):
        store[dst] = store[src]

    rng = np.random.default_rng(1)
    for s in range(16):
        table.add_sequence(s)
    thread = threading.Thread(target=planner, daemon=True)
    thread.start()
    applied = dropped = freed = 0
    try:
        for step in range(300):
            seqs = table.sequences
            counts = rng.integers(0, 4, size=len(seqs))
            lengths = [table.num_tokens(s) for s in seqs]
            if int(counts.sum()) and alloc.num_free > 20:
                slots = table.append(seqs, counts)
                store[slots] = [s * 100_000 + n0 + i for s, c, n0 in zip(seqs, counts, lengths) for i in range(c)]
            for s in rng.choice(seqs, size=4, replace=False):
                live = np.flatnonzero(table.live_mask(s))
                if live.size > 8:
                    table.evict(s, rng.choice(live, size=live.size // 3, replace=False))
            if step % 50 == 49:  # sequences finish and new ones arrive while plans are in flight
                table.free_sequence(seqs[0])
                table.add_sequence(1000 + step)
            while not plans.empty():
                result = table.commit(plans.get_nowait(), copy_slots=copy)
                applied += result.applied
                dropped += result.dropped.size
                freed += result.num_freed
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    table.check()
    alloc.check()
    assert made[0] > 0 and applied > 0 and freed > 0
    for s in table.sequences:
        logical = np.flatnonzero(table.live_mask(s))
        assert np.array_equal(store[table.slot_mapping(s)], s * 100_000 + logical)
    # a final full repack on the quiet table leaves every sequence dense
    table.commit(table.plan(), copy_slots=copy)
    table.check()
    assert all(table.is_dense(s) for s in table.sequences)
