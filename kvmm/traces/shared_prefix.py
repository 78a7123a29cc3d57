"""A trace whose requests share their prefixes: :class:`SharedPrefixTrace`.

Some traces are built from events that each *extend* an earlier block chain (vLLM's
``BlockStored`` events: a request is the cached prefix it extends plus the blocks it stored).
Written out as :class:`~kvmm.traces.KVTrace`'s flat ``block_ids``, a chain of ``n`` one-block
events holds ``n (n + 1) / 2`` references (20,000 events: 2 * 10^8 int64, 1.6 GB), although it
carries only ``n`` blocks.  This class stores the chains once, as a forest of parent pointers:

* ``node_ids[v]``: the block id of node ``v`` (one node per stored block occurrence);
* ``node_parent[v]``: the node before it in its prefix (``-1``: the first block), always ``< v``;
* ``node_depth[v]``: the number of blocks from the root to ``v`` inclusive;
* ``request_node[r]``: the last node of request ``r`` (``-1``: a request with no blocks).

Request ``r``'s blocks are the path from the root to ``request_node[r]``.  Worked example:
events ``[A, B]``, then ``[C]`` after ``B``, then ``[D]`` after ``A`` give nodes
``A B C D`` with parents ``-1 0 1 0`` and ``request_node = [1, 2, 3]``: the requests are
``[A, B]``, ``[A, B, C]``, ``[A, D]``.

It *is* a :class:`KVTrace`: ``block_offsets``, the lengths, timestamps and columns are ordinary
arrays, and ``num_requests``, ``blocks_of``, ``head``, ``records`` and ``check`` work on the
forest without building the flat array.  ``block_ids`` is materialised the first time it is
read (one pass, O(references)), so every consumer of ``KVTrace`` (MRC trackers, the
simulator, the prefix-cache replay) works unchanged and pays for the references only when it
reads them.  Memory before that: O(requests + nodes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.traces.trace import KVTrace

__all__ = ["SharedPrefixTrace"]


class SharedPrefixTrace(KVTrace):
    """A :class:`KVTrace` stored as shared prefix chains (see the module docstring).

    Runtime complexity: construction O(requests + nodes); ``block_ids`` O(references) once;
    ``blocks_of(r)`` O(depth of r).
    """

    def __init__(self, name: str, timestamp_ms: np.ndarray, input_length: np.ndarray, output_length: np.ndarray,
                 request_node: np.ndarray, node_parent: np.ndarray, node_ids: np.ndarray, node_depth: np.ndarray, *,
                 bad_lines: int = 0, block_tokens: int = 16, columns: dict[str, np.ndarray] | None = None,
                 source_format: str = "vllm") -> None:
        self.request_node = np.asarray(request_node, dtype=np.int64)
        self.node_parent = np.asarray(node_parent, dtype=np.int64)
        self.node_ids = np.asarray(node_ids, dtype=np.int64)
        self.node_depth = np.asarray(node_depth, dtype=np.int64)
        lengths = np.where(self.request_node >= 0, self.node_depth[np.maximum(self.request_node, 0)], 0) \
            if self.node_depth.size else np.zeros(self.request_node.shape[0], dtype=np.int64)
        offsets = np.zeros(self.request_node.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        super().__init__(name, timestamp_ms, input_length, output_length, offsets, None, bad_lines, block_tokens,
                         dict(columns or {}), source_format)

    # ``block_ids`` is a dataclass field of KVTrace; here it is built on first read.
    @property
    def block_ids(self) -> np.ndarray:  # type: ignore[override]
        if self._block_ids is None:
            # numba, on first read of the block ids: reading and writing traces compiles nothing
            from kvmm.traces._prefix_kernels import materialise_paths

            out = np.empty(int(self.block_offsets[-1]), dtype=np.int64)
            materialise_paths(self.request_node, self.node_parent, self.node_ids, self.block_offsets, out)
            self._block_ids = out
        return self._block_ids

    @block_ids.setter
    def block_ids(self, value: Any) -> None:
        self._block_ids = value

    @property
    def materialised(self) -> bool:
        """Whether the flat ``block_ids`` array has been built."""
        return self._block_ids is not None

    def blocks_of(self, request: int) -> np.ndarray:
        if self._block_ids is not None:
            return super().blocks_of(request)
        path = []
        v = int(self.request_node[request])
        parent = self.node_parent
        while v >= 0:
            path.append(v)
            v = int(parent[v])
        return self.node_ids[path[::-1]] if path else np.zeros(0, dtype=np.int64)

    def head(self, n: int) -> KVTrace:
        """The first ``n`` requests, still sharing this trace's forest.  O(number of columns)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise BadInputError(f"n must be a non-negative integer, got {n!r}")
        k = min(int(n), self.num_requests)
        if k == self.num_requests:
            return self
        return SharedPrefixTrace(f"{self.name}[:{k}]", self.timestamp_ms[:k], self.input_length[:k],
                                 self.output_length[:k], self.request_node[:k], self.node_parent, self.node_ids,
                                 self.node_depth, bad_lines=self.bad_lines, block_tokens=self.block_tokens,
                                 columns={c: v[:k] for c, v in self.columns.items()}, source_format=self.source_format)

    def check(self) -> None:
        """Assert the forest's invariants, then KVTrace's (without materialising).
        Runtime complexity: O(requests + nodes)."""
        m = self.node_ids.shape[0]
        for arr in (self.node_parent, self.node_depth):
            assert arr.dtype == np.int64 and arr.shape == (m,)
        idx = np.arange(m)
        assert np.all((self.node_parent >= -1) & (self.node_parent < idx))  # parents come first: no cycles
        roots = self.node_parent < 0
        assert np.all(self.node_depth[roots] == 1)
        assert np.all(self.node_depth[~roots] == self.node_depth[self.node_parent[~roots]] + 1)
        assert self.request_node.dtype == np.int64 and self.request_node.shape == (self.num_requests,)
        assert np.all((self.request_node >= -1) & (self.request_node < m))
        if self._block_ids is None:
            saved, self._block_ids = self._block_ids, np.empty(int(self.block_offsets[-1]), dtype=np.int64)
            try:  # KVTrace.check reads only block_ids' shape and dtype
                super().check()
            finally:
                self._block_ids = saved
        else:
            super().check()

    def __repr__(self) -> str:
        return (f"SharedPrefixTrace(name={self.name!r}, requests={self.num_requests}, nodes={self.node_ids.shape[0]}, "
                f"references={int(self.block_offsets[-1])}, block_tokens={self.block_tokens}, "
                f"source_format={self.source_format!r})")
