"""The request table: every request of a run, as structure-of-arrays indexed by request.

One table holds what the trace says of each request (read-only: arrival, prompt and output
lengths, its blocks and their pool keys, its priority class) and what happened to it (the
prefill it still needs, its hits, its claim, its first token and finish times).  The instances
of a cluster or of a PD deployment share one table: each request is served by one instance
(prefilled by one and decoded by another in PD), which writes its row; results read the table,
not the instances.

Layout, for a trace of three requests with 512-token blocks::

    input_len   [1024, 4096, 1536]      prompt tokens (>= 1)
    output_len  [   1,    1,    1]      output tokens (>= 1)
    offsets     [0, 2, 10, 13]          blocks of request r: ids[offsets[r]:offsets[r + 1]]
    ids         [0 1 | 10 .. 17 | 0 1 2]  trace block ids (the tiers' keys)
    keys        (13, 2) uint64           pool keys of the same blocks: rows (id, 1)

Hot columns the event loop reads one request at a time are also kept as Python lists
(``*_py``): a list item is several times cheaper to read than a numpy scalar.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm.sim.hierarchy import pool_keys
from kvmm.traces.trace import KVTrace

__all__ = ["RequestTable", "HeldBlocks"]


class RequestTable:
    """What the trace says of every request and what the simulation did with it.

    ``arrival``: each request's arrival second (the load-scaled timestamps).  ``priority_share``
    of the requests, drawn with ``priority_seed``, form the high-priority class (0; the rest 1).
    """

    def __init__(self, trace: KVTrace, arrival: np.ndarray, *, priority_share: float = 0.0,
                 priority_seed: int = 0) -> None:
        n = trace.num_requests
        self.n = n
        self.trace = trace
        self.arrival = arrival
        self.arrival_py = arrival.tolist()
        self.input_len = np.maximum(trace.input_length, 1)
        self.output_len = np.maximum(trace.output_length, 1)
        self.offsets = trace.block_offsets
        self.ids = trace.block_ids.astype(np.int64)
        self.keys = pool_keys(self.ids)
        self.block_tokens = bt = int(trace.block_tokens)
        total_blocks = -(-(self.input_len + self.output_len - 1) // bt)  # the last token's KV is never written
        self.extra_blocks = np.maximum(total_blocks - np.diff(self.offsets), 0)
        draw = np.random.default_rng(priority_seed).random(n)
        self.priority_class = np.where(draw < priority_share, 0, 1).astype(np.int8)
        self.copy_read_only_columns()
        # what happened to each request
        self.prefill_tokens = np.zeros(n, dtype=np.int64)  # prompt tokens still to compute
        self.gpu_at_arrival = np.zeros(n, dtype=np.int64)  # GPU prefix blocks found at arrival
        self.gpu_at_take = np.zeros(n, dtype=np.int64)  # GPU prefix blocks the request took (its GPU hits)
        self.staged_blocks = np.zeros(n, dtype=np.int64)  # lower-tier blocks claimed (after the GPU prefix)
        self.staged_bytes = np.zeros(n, dtype=np.int64)
        self.stage_seconds = np.zeros(n)  # copy time of the claim (per-tier bandwidths)
        self.fabric_bytes = np.zeros(n, dtype=np.int64)  # bytes of the claim read over a cluster's fabric
        self.claim_source = np.zeros(n, dtype=np.int64)
        self.claim_id = np.full(n, -1, dtype=np.int64)
        self.remaining = np.zeros(n, dtype=np.int64)  # output tokens left to decode when it joins decode
        # the decode step count of its instance at which it has decoded them all
        # (Instance.decode_steps: remaining = finish_step - decode_steps while it decodes)
        self.finish_step = np.zeros(n, dtype=np.int64)
        self.first_token = np.full(n, np.nan)
        # staging wait: first asked for (``need``: the scheduler would have run it now) -> its KV ready
        self.need_at = np.full(n, np.nan)
        self.kv_ready_at = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)

    def copy_read_only_columns(self) -> None:
        """Python-int copies of the per-request columns the event loop only reads (again, when a
        caller has replaced a column after construction)."""
        self.offsets_py = self.offsets.tolist()
        self.input_len_py = self.input_len.tolist()
        self.output_len_py = self.output_len.tolist()
        self.extra_blocks_py = self.extra_blocks.tolist()
        self.priority_py = self.priority_class.tolist()

    def blocks(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pool keys, trace ids)`` of request ``r``'s prompt blocks."""
        o0, o1 = self.offsets_py[r], self.offsets_py[r + 1]
        return self.keys[o0:o1], self.ids[o0:o1]

    def staging_waits(self) -> np.ndarray:
        """Per request: seconds from its first ``need`` to its staged KV being ready (0 when
        ready before; nan when it never waited on a claim)."""
        return np.maximum(self.kv_ready_at - self.need_at, 0.0)


class HeldBlocks(dict):
    """request -> the GPU block ids it holds, keeping ``blocks``, the total of their counts, as
    entries come and go (every role stores and pops here, PD's included), so a cluster's view reads
    the blocks its requests hold in O(1).  Runtime complexity: O(1) per store or pop."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        super().__init__()
        self.blocks = 0

    def __setitem__(self, r: int, ids: np.ndarray) -> None:
        old = self.get(r)
        if old is not None:
            self.blocks -= old.shape[0]
        self.blocks += ids.shape[0]
        super().__setitem__(r, ids)

    def pop(self, r: int, *default: Any) -> Any:
        if r not in self:
            return super().pop(r, *default)
        ids = super().pop(r)
        self.blocks -= ids.shape[0]
        return ids
