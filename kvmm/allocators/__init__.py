"""kvmm.allocators: paged KV blocks with a keyed prefix cache (see DESIGN.md and docs/allocator.md)."""

from kvmm.allocators.block_allocator import BlockAllocator

__all__ = ["BlockAllocator"]
