"""Decode-time token compression in the simulator: a :class:`TokenTable` over the GPU pool + a scorer.

With ``SimConfig(token_budget=B, scorer=..., repack_interval=I)`` every request's KV lives in a
:class:`~kvmm.allocators.TokenTable` sequence on the engine's :class:`BlockAllocator`:

* after its prefill the prompt is compressed to ``B`` live tokens (prefill-time compression, as
  SnapKV does) and the freed blocks are repacked back to the pool at once;
* each decode step appends one token; a request that would pass ``B + I`` live tokens is first
  compressed back to ``B`` (the scorer picks, :func:`~kvmm.compress.evict_to_budget` marks,
  ``plan``/``commit`` frees whole blocks);
* a request is admitted only when the pool can hold its peak (the prompt before compression, or
  ``B + I`` tokens plus one partial block) on top of every running request's remaining peak
  (after its prefill a request reserves only its decode peak), so no running request ever runs
  out of blocks (no preemption is modelled).

Evidence: the simulator has no model, so a scorer that needs attention gets a synthetic
observation at each compression: per-token weights from a seeded heavy-tailed (Pareto 1.5) draw
over the live tokens.  Which tokens survive is therefore arbitrary; how many, and so the blocks
held and the batch that fits, is what the simulator measures.  Compressed blocks are not prefix
cached (their content is no longer a prefix), so the GPU prefix cache is off with compression.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from kvmm.allocators.token_table import TokenTable
from kvmm.compress import scorers as S
from kvmm.compress.eviction import evict_to_budget
from kvmm.errors import OutOfBlocksError

__all__ = ["Compressor", "make_scorer"]


def make_scorer(scorer: Any) -> Any:
    """A fresh scorer for one run: by name, or a deep copy of the given object."""
    if not isinstance(scorer, str):
        return copy.deepcopy(scorer)
    return {"h2o": S.H2OScorer, "scissorhands": S.ScissorhandsScorer, "snapkv": S.SnapKVScorer,
            "streamingllm": S.StreamingLLMScorer, "random": S.RandomScorer}[scorer]()


class Compressor:
    """One engine's token table, scorer and block reservations.  Runtime complexity: O(live tokens)
    per compression (synthetic evidence, scoring, eviction, repack)."""

    def __init__(self, pool, scorer: Any, budget: int, interval: int, seed: int = 0) -> None:
        self.table = TokenTable(pool)
        self.pool = pool
        self.bt = pool.block_size
        self.scorer = make_scorer(scorer)
        self.budget = budget
        self.interval = interval
        self.rng = np.random.default_rng(seed)
        self.reserved = 0  # sum of the running requests' peak blocks
        self.peak: dict[int, int] = {}
        self.compressions = 0
        self.tokens_evicted = 0

    def peak_blocks(self, input_len: int, output_len: int) -> int:
        """Most blocks a request can hold: its prompt before compression, or budget + interval tokens
        (plus one partial block), never more than its whole context."""
        bt = self.bt
        whole = -(-(input_len + output_len - 1) // bt) + 1
        return min(whole, max(-(-input_len // bt), -(-(self.budget + self.interval) // bt) + 1))

    def start(self, r: int, input_len: int, output_len: int) -> bool:
        """Give ``r`` its prompt tokens if the pool can hold its peak beyond every running peak."""
        peak = self.peak_blocks(input_len, output_len)
        if self.pool.num_free - (self.reserved - self.table.total_blocks) < peak:
            return False
        self.table.add_sequence(r)
        try:
            self.table.append([r], [input_len])
        except OutOfBlocksError:  # pragma: no cover - the reservation check above prevents it
            self.table.free_sequence(r)
            return False
        self.peak[r] = peak
        self.reserved += peak
        return True

    def after_prefill(self, r: int) -> None:
        """Prefill-time compression to the budget; from now on ``r`` needs at most its decode peak."""
        self.compress([r])
        decode_peak = min(self.peak[r], -(-(self.budget + self.interval) // self.bt) + 1)
        self.reserved -= self.peak[r] - decode_peak
        self.peak[r] = decode_peak

    def grow(self, rs: list[int], k: int) -> None:
        """``k <= interval`` decode tokens for each of ``rs``; those that would pass budget + interval
        live tokens are compressed to the budget first."""
        if not rs:
            return
        self.compress_due(rs, k)
        self.table.append(rs, [k] * len(rs))

    def compress_due(self, rs: list[int], k: int) -> None:
        """Compress to the budget those of ``rs`` that ``k`` more tokens would take past budget +
        interval live tokens (so no request ever holds more); :meth:`grow` does it first too, and
        the engine calls it before timing the steps, whose KV reads are the live tokens."""
        live = self.table.live_counts(rs)
        over = [r for r, n in zip(rs, live.tolist()) if n + k > self.budget + self.interval]
        if over:
            self.compress(over)

    def live_counts(self, rs: list[int]) -> np.ndarray:
        """Live tokens of each of ``rs`` (what its next decode step reads)."""
        return self.table.live_counts(rs).astype(np.int64)

    def live_total(self, rs: list[int]) -> int:
        return int(self.table.live_counts(rs).sum()) if rs else 0

    def compress(self, rs: list[int]) -> None:
        """Evict ``rs`` to the budget with the scorer, then repack (free the emptied blocks)."""
        todo = []
        for r, n in zip(rs, self.table.live_counts(rs).tolist()):
            if n > self.budget:
                weights = self.rng.pareto(1.5, n) + 1.0
                self.scorer.observe(r, attention=weights / weights.sum())
                todo.append(r)
        if not todo:
            return
        evicted = evict_to_budget(self.table, self.scorer, todo, self.budget)
        self.tokens_evicted += int(evicted.sum())
        self.compressions += len(todo)
        self.table.commit(self.table.plan())

    def finish(self, r: int) -> None:
        self.table.free_sequence(r)
        if hasattr(self.scorer, "forget"):
            self.scorer.forget(r)
        self.reserved -= self.peak.pop(r)
