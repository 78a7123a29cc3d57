"""The same-run peer for the allocator benchmarks: vLLM v1's ``BlockPool`` when importable.

``baseline()`` returns a driver with the operations a scheduler performs per request, written
the way vLLM's ``KVCacheManager`` performs them on its ``BlockPool`` (``get_cached_block`` per
key until the first miss, ``touch`` the hits, ``get_new_blocks`` for the rest,
``cache_full_blocks``, ``free_blocks`` last-first).  When vLLM is not importable it falls back to
the plain-Python reference (``kvmm/testing/models/block_allocator.py``), and says so in its label.

vLLM reserves block 0 as its null block, so its pool gets one block more than kvmm's: both then
hand out the same blocks in the same order (vLLM's ids are kvmm's + 1) and hit the same keys.
"""

from __future__ import annotations

import numpy as np

from kvmm.testing.models.block_allocator import NaiveBlockAllocator


class _Request:
    """The one attribute of vLLM's ``Request`` that ``cache_full_blocks`` reads."""

    __slots__ = ("block_hashes",)

    def __init__(self, block_hashes):
        self.block_hashes = block_hashes


class VllmDriver:
    label = "vLLM 0.33 BlockPool"

    def __init__(self, num_blocks: int, block_size: int) -> None:
        from vllm.v1.core.block_pool import BlockPool

        self.block_size = block_size
        self.pool = BlockPool(num_gpu_blocks=num_blocks + 1, enable_caching=True, hash_block_size=block_size)

    @staticmethod
    def keys(hash_ids: np.ndarray):
        """A request's block keys as vLLM ``BlockHash`` bytes (one per hash id)."""
        return [int(h).to_bytes(8, "little") for h in hash_ids]

    def admit(self, hashes) -> tuple[list, int]:
        pool = self.pool
        hits = []
        for h in hashes:
            cached = pool.get_cached_block(h, [0])
            if cached is None:
                break
            hits.append(cached[0])
        pool.touch(hits)
        blocks = hits + pool.get_new_blocks(len(hashes) - len(hits))
        pool.cache_full_blocks(_Request(hashes), blocks, len(hits), len(hashes), self.block_size, 0)
        return blocks, len(hits)

    def free(self, blocks) -> None:
        self.pool.free_blocks(reversed(blocks))


class NaiveDriver:
    label = "plain-Python reference (vLLM not importable)"

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = NaiveBlockAllocator(num_blocks, block_size)

    @staticmethod
    def keys(hash_ids: np.ndarray):
        return [(int(h), 0) for h in hash_ids]

    def admit(self, hashes) -> tuple[list, int]:
        return self.pool.admit(hashes)

    def free(self, blocks) -> None:
        self.pool.free(blocks[::-1])


def baseline(num_blocks: int, block_size: int):
    """vLLM's BlockPool driver when vLLM imports, else the plain-Python reference's."""
    try:
        return VllmDriver(num_blocks, block_size)
    except Exception:  # noqa: BLE001 - any import or construction failure means "not available"
        return NaiveDriver(num_blocks, block_size)
