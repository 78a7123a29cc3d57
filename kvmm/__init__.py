"""kvmm: fast, verified data structures for managing the KV cache of LLM serving.

Import the component you need; subpackages load on first use so ``import kvmm`` stays cheap::

    from kvmm.allocators import BlockAllocator
    from kvmm.policies import StackDistanceTracker
"""

from __future__ import annotations

import importlib

from kvmm.errors import KvmmError

__version__ = "0.1.0"
__all__ = ["KvmmError", "__version__", "allocators", "policies", "compress", "tiers", "traces", "sim"]

_SUBPACKAGES = {"allocators", "policies", "compress", "tiers", "traces", "sim", "protocols", "errors", "report"}


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kvmm.{name}")
    raise AttributeError(f"module 'kvmm' has no attribute {name!r}")
