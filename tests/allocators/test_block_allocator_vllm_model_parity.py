"""BlockAllocator against a model of vLLM v1's ``BlockPool`` on random operation streams.

The model below follows vLLM's own data structures, written independently of kvmm's code and
of ``kvmm/testing/models/block_allocator.py``: one object per block, a doubly linked free queue between a
fake head and a fake tail (``popleft_n``, ``remove``, ``append_n``, ``prepend_n``), and a map
from block hash to an insertion-ordered ``{block_id: block}`` dict.  Its operations are vLLM's
``get_new_blocks`` (evicting the cached hash of every block it takes), ``touch`` (a block at ref
0 leaves the free queue), ``free_blocks`` (decrement all, then fresh blocks are prepended in
order and hashed ones appended in order), ``cache_full_blocks`` (a block that already carries
the expected hash is skipped), ``get_cached_block`` (first block of the hash), ``evict_blocks``
and ``reset_prefix_cache``.  Deliberate differences, as documented: no null block (vLLM
reserves block 0).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator
from kvmm.testing.allocator_machine import assert_same_snapshot


class _Block:
    __slots__ = ("block_id", "ref_cnt", "block_hash", "prev", "next")

    def __init__(self, block_id):
        self.block_id, self.ref_cnt, self.block_hash, self.prev, self.next = block_id, 0, None, None, None


class _FreeQueue:
    def __init__(self, blocks):
        self.head, self.tail = _Block(-1), _Block(-2)  # fake ends, as vLLM's queue
        self.head.next, self.tail.prev = self.tail, self.head
        self.num_free = 0
        self.append_n(blocks)

    def _link(self, after, block):
        block.prev, block.next = after, after.next
        after.next.prev = block
        after.next = block
        self.num_free += 1

    def remove(self, block):
        block.prev.next, block.next.prev = block.next, block.prev
        block.prev = block.next = None
        self.num_free -= 1

    def popleft_n(self, n):
        out = []
        for _ in range(n):
            out.append(self.head.next)
            self.remove(self.head.next)
        return out

    def append_n(self, blocks):
        for b in blocks:
            self._link(self.tail.prev, b)

    def prepend_n(self, blocks):
        after = self.head
        for b in blocks:
            self._link(after, b)
            after = b

    def ids(self):
        out, b = [], self.head.next
        while b is not self.tail:
            out.append(b.block_id)
            b = b.next
        return out


class VllmStylePool:
    def __init__(self, num_blocks):
        self.blocks = [_Block(i) for i in range(num_blocks)]
        self.queue = _FreeQueue(self.blocks)
        self.cached: dict[tuple[int, int], dict[int, _Block]] = {}

    def _maybe_evict(self, block):
        if block.block_hash is None:
            return False
        group = self.cached[block.block_hash]
        del group[block.block_id]
        if not group:
            del self.cached[block.block_hash]
        block.block_hash = None
        return True

    def get_new_blocks(self, n):
        assert n <= self.queue.num_free
        out = self.queue.popleft_n(n)
        for b in out:
            self._maybe_evict(b)
            b.ref_cnt += 1
        return [b.block_id for b in out]

    def touch(self, ids):
        for i in ids:
            b = self.blocks[i]
            if b.ref_cnt == 0:
                self.queue.remove(b)
            b.ref_cnt += 1

    def free_blocks(self, ids):
        blocks = [self.blocks[i] for i in ids]
        for b in blocks:
            b.ref_cnt -= 1
        freeable = [b for b in blocks if b.ref_cnt == 0]
        self.queue.prepend_n([b for b in freeable if b.block_hash is None])
        self.queue.append_n([b for b in freeable if b.block_hash is not None])

    def cache_full_blocks(self, ids, hashes):
        for i, h in zip(ids, hashes):
            b = self.blocks[i]
            if b.block_hash is not None:
                assert b.block_hash == h
                continue
            b.block_hash = h
            self.cached.setdefault(h, {})[i] = b

    def get_cached_block(self, h):
        group = self.cached.get(h)
        return next(iter(group)) if group else None

    def longest_hit(self, hashes):
        out = []
        for h in hashes:
            b = self.get_cached_block(h)
            if b is None:
                break
            out.append(b)
        return out

    def evict_blocks(self, ids):
        return sum(self._maybe_evict(self.blocks[i]) for i in set(ids))

    def reset_prefix_cache(self):
        if self.queue.num_free != len(self.blocks):
            return False
        self.cached = {}
        for b in self.blocks:
            b.block_hash = None
        return True


KEYS = [(k, 7) for k in range(6)] + [(2**64 - 1, 2**63 + 5)]  # few keys: duplicates are common


def _assert_same(pool: BlockAllocator, model: VllmStylePool) -> None:
    assert pool.free_queue().tolist() == model.queue.ids()
    assert pool.ref_counts.tolist() == [b.ref_cnt for b in model.blocks]
    assert pool.cached_map() == {k: list(v) for k, v in model.cached.items()}
    for key in KEYS:
        hit = pool.lookup([key])
        want = model.get_cached_block(key)
        assert hit.tolist() == ([] if want is None else [want])


def _stream(seed: int, steps: int, num_blocks: int = 12) -> None:
    rng = np.random.default_rng(seed)
    pool = BlockAllocator(num_blocks, 4, secret=bytes(16))
    model = VllmStylePool(num_blocks)
    held: list[int] = []  # one entry per reference a "request" holds
    evictions = 0
    for _ in range(steps):
        op = rng.integers(0, 8)
        if op == 0:  # allocate
            n = int(rng.integers(0, 4))
            if n <= model.queue.num_free:
                evictions += sum(b.block_hash is not None for b in
                                 [model.blocks[i] for i in model.queue.ids()[:n]])
                got = pool.allocate(n).tolist()
                assert got == model.get_new_blocks(n)
                held += got
        elif op == 1 and held:  # free a batch, each block once (vLLM's free_blocks takes a list of distinct blocks)
            distinct = list(dict.fromkeys(held))
            rng.shuffle(distinct)
            batch = distinct[: int(rng.integers(1, len(distinct) + 1))]
            pool.free(np.array(batch, dtype=rng.choice([np.int32, np.int64, np.uint32])))
            model.free_blocks(batch)
            for b in batch:
                held.remove(b)
        elif op == 2:  # touch any blocks (free cached ones leave the middle of the queue)
            ids = rng.integers(0, num_blocks, size=int(rng.integers(0, 3))).tolist()
            pool.touch(ids)
            model.touch(ids)
            held += ids
        elif op == 3 and held:  # cache held blocks; a block may be re-cached under the key it holds
            ids = list(dict.fromkeys(rng.choice(held, size=int(rng.integers(1, 3))).tolist()))
            keys = [model.blocks[i].block_hash or KEYS[int(rng.integers(0, len(KEYS)))] for i in ids]
            pool.cache_blocks(ids, keys)
            model.cache_full_blocks(ids, keys)
        elif op == 4:  # a request: longest hit, touch, new blocks, cache them (vLLM's allocate_slots order)
            keys = [KEYS[int(i)] for i in rng.integers(0, len(KEYS), size=int(rng.integers(0, 4)))]
            extra = int(rng.integers(0, 2))
            hits = model.longest_hit(keys)
            free_hits = len({b for b in hits if model.blocks[b].ref_cnt == 0})
            need = len(keys) - len(hits) + extra
            if need <= model.queue.num_free - free_hits:
                ids, h = pool.admit(keys, num_extra=np.int64(extra))
                model.touch(hits)
                evictions += sum(b.block_hash is not None for b in
                                 [model.blocks[i] for i in model.queue.ids()[:need]])
                new = model.get_new_blocks(need)
                model.cache_full_blocks(new[: len(keys) - len(hits)], keys[len(hits):])
                assert (ids.tolist(), h) == (hits + new, len(hits))
                held += ids.tolist()
        elif op == 5:
            ids = rng.integers(0, num_blocks, size=int(rng.integers(0, 3)))
            n = model.evict_blocks(ids.tolist())
            assert pool.evict(ids) == n
            evictions += n
        elif op == 6 and rng.random() < 0.2:
            assert pool.reset_prefix_cache() == model.reset_prefix_cache()
        elif op == 7:
            keys = [KEYS[int(i)] for i in rng.integers(0, len(KEYS), size=int(rng.integers(0, 4)))]
            assert pool.lookup(keys).tolist() == model.longest_hit(keys)
        _assert_same(pool, model)
        assert pool.stats["evictions"] == evictions
    pool.check()


@pytest.mark.parametrize("seed", range(6))
def test_same_blocks_queue_and_cache_as_a_vllm_style_block_pool(seed):
    _stream(seed, steps=300)


def test_caching_a_block_under_the_key_it_holds_is_a_no_op_and_another_key_raises():
    pool = BlockAllocator(4, 2, secret=bytes(16))
    ids = pool.allocate(2)
    pool.cache_blocks(ids, [(1, 0), (2, 0)])
    before = pool.snapshot()
    pool.cache_blocks(ids[::-1], [(2, 0), (1, 0)])  # each block under the key it already holds
    after = pool.snapshot()
    assert_same_snapshot(before, after)
    from kvmm.errors import BadInputError
    with pytest.raises(BadInputError, match="another cached key"):
        pool.cache_blocks(ids[:1], [(3, 0)])
    with pytest.raises(BadInputError, match="twice"):  # a duplicate is still an error, and changes nothing
        pool.cache_blocks([ids[0], ids[0]], [(1, 0), (1, 0)])
    after = pool.snapshot()
    assert_same_snapshot(before, after)
    pool.check()
