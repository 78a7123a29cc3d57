"""kvmm: fast, verified data structures for managing the KV cache of LLM serving.

Import the component you need; subpackages load on first use so ``import kvmm`` stays cheap::

    from kvmm.allocators import BlockAllocator
    from kvmm.policies import StackDistanceTracker

``kvmm.<package>`` works too (``import kvmm; kvmm.cluster.BlockIndex``).  How the packages are
layered and where each idea lives: docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports
from kvmm.errors import KvmmError

__version__ = "0.1.0"

#: every package (and public top-level module) of kvmm, imported on first use
_SUBPACKAGES = {"allocators", "policies", "compress", "tiers", "traces", "cluster", "sim", "plan", "reproduce",
                "integrations", "testing", "protocols", "errors", "report"}

__all__ = ["KvmmError", "__version__", *sorted(_SUBPACKAGES)]

if TYPE_CHECKING:  # what editors and type checkers see; at run time each package loads on first use
    from kvmm import (
        allocators,
        cluster,
        compress,
        errors,
        integrations,
        plan,
        policies,
        protocols,
        report,
        reproduce,
        sim,
        testing,
        tiers,
        traces,
    )

__getattr__, __dir__ = lazy_exports(__name__, {}, globals(), frozenset(_SUBPACKAGES))
