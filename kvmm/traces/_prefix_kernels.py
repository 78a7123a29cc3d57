"""numba kernel of :class:`~kvmm.traces.shared_prefix.SharedPrefixTrace` (imported lazily: only
when a trace's flat ``block_ids`` is first read)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["materialise_paths"]


@njit(cache=True, nogil=True)
def materialise_paths(request_node: np.ndarray, node_parent: np.ndarray, node_ids: np.ndarray, offsets: np.ndarray,
                      out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Write request ``r``'s root-to-``request_node[r]`` path into ``out[offsets[r]:offsets[r+1]]``.
    Runtime complexity: O(len(out))."""
    for r in range(request_node.shape[0]):
        pos = offsets[r + 1] - 1
        v = request_node[r]
        while v >= 0:
            out[pos] = node_ids[v]
            pos -= 1
            v = node_parent[v]
