"""kvmm: fast, verified data structures for managing the KV cache of LLM serving.

Import the component you need; subpackages load on first use so ``import kvmm`` stays cheap::

    from kvmm.allocators import BlockAllocator
    from kvmm.policies import StackDistanceTracker
"""

from __future__ import annotations

from kvmm._lazy import lazy_exports
from kvmm.errors import KvmmError

__version__ = "0.1.0"
__all__ = ["KvmmError", "__version__", "allocators", "policies", "compress", "tiers", "traces", "sim", "plan"]

_SUBPACKAGES = {"allocators", "policies", "compress", "tiers", "traces", "sim", "plan", "protocols", "errors", "report"}

__getattr__, __dir__ = lazy_exports(__name__, {}, globals(), frozenset(_SUBPACKAGES))
