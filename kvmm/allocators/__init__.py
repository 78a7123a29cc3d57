"""kvmm.allocators: paged KV blocks with a keyed prefix cache (see DESIGN.md and docs/allocator.md),
and the vToken token table with background repacking (docs/vtoken.md)."""

from kvmm.allocators._secret import prefix_secret
from kvmm.allocators.block_allocator import BlockAllocator
from kvmm.allocators.token_table import CommitResult, RepackPlan, TokenTable

__all__ = ["BlockAllocator", "TokenTable", "RepackPlan", "CommitResult", "prefix_secret"]
