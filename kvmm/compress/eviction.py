"""Token eviction to a budget: scorer picks, :class:`~kvmm.allocators.TokenTable` marks dead.

The whole integration of a token-level eviction policy with paged memory is::

    scorer.observe(seq, attention=attn_rows, positions=table.positions(seq))
    evict_to_budget(table, scorer, [seq], budget=256)
    table.commit(table.plan(budget=4096), copy_slots=arena.copy_slots)   # later, off the critical path
"""

from __future__ import annotations

import numpy as np

from kvmm._validate import as_index_array
from kvmm.compress.scorers import select_victims
from kvmm.errors import BadInputError, ShapeError

__all__ = ["evict_to_budget"]


def evict_to_budget(table, scorer, seq_ids, budget, *, protect_shared: bool = True) -> np.ndarray:
    """Evict each sequence's lowest-scored live tokens until at most ``budget`` remain.

    ``budget`` is one integer or one per sequence.  ``scorer.scores(seq)`` must cover the
    sequence's live tokens (observe first).  With ``protect_shared`` tokens in read-only shared
    blocks (a cached prefix) are evicted only when nothing else is left, since evicting them
    frees no memory.  All evictions go to the table in one batched call; then each scorer that
    has ``on_evict`` is told which live indices went.  Returns the number evicted per sequence.
    Runtime complexity: O(sum of live tokens * log).
    """
    seq_list = as_index_array(seq_ids, "seq_ids").tolist()  # floats (0.7 -> sequence 0) raise
    budgets = np.asarray(budget)
    if budgets.ndim > 1 or (budgets.ndim == 1 and budgets.shape[0] != len(seq_list)):
        raise ShapeError(f"budget must be one integer or one per sequence ({len(seq_list)}), got shape {budgets.shape}")
    budgets = np.broadcast_to(budgets, (len(seq_list),))
    if budgets.dtype.kind not in "iu" or (budgets.size and budgets.min() < 0):
        raise BadInputError(f"budget must be integers >= 0, got {budget!r}")
    picks = []
    for seq, b in zip(seq_list, budgets.tolist()):
        live = table.live_mask(seq)
        scores = np.asarray(scorer.scores(seq), dtype=np.float64)
        n_live = int(live.sum())
        if scores.shape != (n_live,):
            raise ShapeError(f"scorer gave {scores.shape[0]} scores for sequence {seq}, which has {n_live} live "
                             "tokens; observe the sequence's current live tokens first")
        if protect_shared and n_live > b:
            shared = table.shared_mask(seq)
            if shared.any():  # shared tokens rank above everything, even protected (+inf) ones
                scores = np.where(np.isposinf(scores), np.finfo(np.float64).max, scores)
                scores[shared] = np.inf
        victims = select_victims(scores, int(b))
        picks.append((seq, victims, np.flatnonzero(live)[victims]))
    counts = np.array([v.size for _, v, _ in picks], dtype=np.int64)
    if counts.sum():
        table.evict_many([s for s, _, _ in picks], counts, np.concatenate([p for _, _, p in picks]))
        for seq, victims, _ in picks:
            if victims.size and hasattr(scorer, "on_evict"):
                scorer.on_evict(seq, victims)
    return counts
