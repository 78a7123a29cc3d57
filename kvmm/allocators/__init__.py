"""kvmm.allocators: paged KV blocks with a keyed prefix cache (docs/allocator.md) and the vToken
token table with background repacking (docs/vtoken.md).  Their place among kvmm's layers:
docs/architecture.md.

Imports are lazy, so ``import kvmm.allocators`` loads neither numba nor the kernels; the first
use of a name loads its module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "BlockAllocator": "kvmm.allocators.block_allocator",
    "TokenTable": "kvmm.allocators.token_table",
    "RepackPlan": "kvmm.allocators._token_table_plan",
    "CommitResult": "kvmm.allocators._token_table_plan",
    "prefix_secret": "kvmm.allocators._secret",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.allocators._secret import prefix_secret
    from kvmm.allocators._token_table_plan import CommitResult, RepackPlan
    from kvmm.allocators.block_allocator import BlockAllocator
    from kvmm.allocators.token_table import TokenTable

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
