"""Repack plans of :class:`~kvmm.allocators.token_table.TokenTable`: the plan and commit phases.

:meth:`TokenTable.plan` snapshots the sparse rows under the table's lock and plans on the copy
in a GIL-free kernel; :meth:`TokenTable.commit` re-checks every move against the current table,
copies the data of the moves that still apply and frees the emptied blocks.  Both phases, and
the plan / result records they exchange, live here, apart from the table's per-request paths
(sequences, append, evict, views), which they only read and update through the table's arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kvmm.allocators import _token_table_repack_kernels as kernels
from kvmm.errors import BadInputError, StalePlanError

if TYPE_CHECKING:
    from kvmm.allocators.token_table import TokenTable


@dataclass(frozen=True)
class RepackPlan:
    """Proposed token moves of one :meth:`TokenTable.plan` call (read-only arrays).

    ``src[i] -> dst[i]`` moves the live token at logical position ``move_logical[i]`` of the
    sequence in row ``move_row[i]``.  ``free_blocks`` are the blocks the moves empty (or that
    were already empty); ``tail_blocks[i]`` becomes the last block of row ``tail_rows[i]``.
    ``min_moves`` is the fewest moves any plan needs to free the same number of blocks (the live
    tokens in them); ``num_moves - min_moves`` are the extra moves that make partial blocks dense.
    """

    table_id: int
    plan_id: int
    src: np.ndarray
    dst: np.ndarray
    move_row: np.ndarray
    move_logical: np.ndarray
    move_incarnation: np.ndarray
    free_blocks: np.ndarray
    free_rows: np.ndarray
    free_incarnation: np.ndarray
    tail_rows: np.ndarray
    tail_blocks: np.ndarray
    tail_incarnation: np.ndarray
    min_moves: int
    #: the table's change counter when the plan was made (commit re-validates less when unchanged)
    table_version: int = field(default=-1, repr=False)

    @property
    def num_moves(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_blocks(self) -> int:
        """Blocks this plan frees if every move still applies at commit."""
        return int(self.free_blocks.shape[0])


@dataclass(frozen=True)
class CommitResult:
    """What :meth:`TokenTable.commit` did: moves applied, plan indices of dropped moves, blocks freed."""

    applied: int
    dropped: np.ndarray
    freed_blocks: np.ndarray = field(repr=False)

    @property
    def num_freed(self) -> int:
        return int(self.freed_blocks.shape[0])


def plan_repack(table: TokenTable, limit: int) -> RepackPlan:
    """The body of :meth:`TokenTable.plan` (``limit``: the validated budget, -1 for none)."""
    bs = table.block_size
    with table.lock:
        # Only rows with sparse blocks need the planner; the others' plans (nothing to move,
        # the tail block to keep) follow from per-block counters.  So the lock is held for
        # O(rows + blocks) reads plus a copy of the sparse rows' slots, not of the pool.
        n = table.num_rows
        incarnation = table.row_incarnation[:n].copy()
        blk_len = table.row_blk_len[:n].copy()
        status = np.empty(n, dtype=np.int64)
        ref_counts = np.asarray(table.allocator.ref_counts)
        k = kernels.plan_select(n, incarnation, bs, table.row_blk_start, blk_len, table.blk_pool, table.block_row,
                                table.block_live, table.block_fill, ref_counts, status)
        whole = 2 * k >= table.num_blocks_total  # most blocks are sparse: plain copies beat a gather
        if whole:
            blk_start = table.row_blk_start[:n].copy()
            blk_pool = table.blk_pool[:table.blk_end].copy()
            block_row = table.block_row.copy()
            block_live = table.block_live.copy()
            block_fill = table.block_fill.copy()
            slot_logical = table.slot_logical.copy()
            movable = ((block_row >= 0) & (ref_counts == 1)).view(np.uint8)
        else:
            blk_start = np.empty(n, dtype=np.int64)
            local_global = np.empty(k, dtype=np.int64)
            block_row = np.empty(k, dtype=np.int32)
            block_live = np.empty(k, dtype=np.int32)
            block_fill = np.empty(k, dtype=np.int32)
            movable = np.empty(k, dtype=np.uint8)
            slot_logical = np.empty(k * bs, dtype=np.int64)
            kernels.plan_gather(n, status, bs, table.row_blk_start, blk_len, table.blk_pool, table.block_row,
                                table.block_live, table.block_fill, table.slot_logical, ref_counts, blk_start,
                                local_global, block_row, block_live, block_fill, movable, slot_logical)
            blk_pool = np.arange(k, dtype=np.int32)
        plan_id = table.next_plan_id
        table.next_plan_id += 1
        version = table.version
    planned = np.where(status == kernels.PLAN_ROW, incarnation, 0)
    (src, dst, mrow, mlog, minc, fblocks, frows, trows, tblocks, min_moves) = kernels.plan_repack(
        n, planned, bs, blk_start, blk_len, blk_pool, block_row, block_live, block_fill, slot_logical,
        movable, limit)
    if not whole:  # back to global block ids and slots
        kernels.local_to_global_slots(src, local_global, bs)
        kernels.local_to_global_slots(dst, local_global, bs)
        fblocks = local_global[fblocks].astype(np.int32)
        tblocks = local_global[tblocks].astype(np.int32)
    # tails: the planned rows' and the dense rows' (their current tail block), in row order
    dense_rows = np.flatnonzero(status >= 0).astype(np.int32)
    trows = np.concatenate([trows, dense_rows])
    tblocks = np.concatenate([tblocks, status[dense_rows].astype(np.int32)])
    order = np.argsort(trows, kind="stable")
    trows, tblocks = trows[order], tblocks[order]
    arrays = [src, dst, mrow, mlog, minc, fblocks, frows, incarnation[frows],
              trows, tblocks, incarnation[trows]]
    for a in arrays:
        a.setflags(write=False)
    plan = RepackPlan(table.table_id, plan_id, *arrays[:5], *arrays[5:8], *arrays[8:], int(min_moves), version)
    with table.lock:  # commit (maybe on another thread) reads and deletes entries under the lock
        table.issued_plans[plan_id] = plan
    return plan


def commit_plan(table: TokenTable, plan: RepackPlan,
                copy_slots: Callable[[np.ndarray, np.ndarray], None] | None) -> CommitResult:
    """The body of :meth:`TokenTable.commit`, for a plan of this table (checked by the caller)."""
    with table.lock:
        if table.committed_plans.get(plan.plan_id) is plan:
            raise StalePlanError(f"plan {plan.plan_id} was already committed; make a new plan")
        if table.issued_plans.get(plan.plan_id) is not plan:
            raise BadInputError(f"plan {plan.plan_id} was not produced by this table's plan() (a hand-made or "
                                f"altered RepackPlan); expected the object plan() returned")
        ref_counts = np.asarray(table.allocator.ref_counts)
        valid = np.empty(plan.num_moves, dtype=np.bool_)
        n_valid = kernels.validate_moves(plan.src, plan.dst, plan.move_row, plan.move_logical,
                                         plan.move_incarnation, plan.table_version == table.version,
                                         table.block_size, table.row_incarnation, table.row_tok_start,
                                         table.row_tok_len, table.tok_slot, table.block_row, table.slot_logical,
                                         ref_counts, valid)
        if copy_slots is not None and n_valid:
            if n_valid == plan.num_moves:
                copy_slots(plan.src, plan.dst)  # may raise: nothing has changed yet
            else:
                copy_slots(plan.src[valid], plan.dst[valid])
        table.committed_plans[plan.plan_id] = plan
        del table.issued_plans[plan.plan_id]
        freed = np.empty(plan.num_blocks, dtype=np.int32)
        nf = kernels.commit_moves(plan.src, plan.dst, plan.move_row, plan.move_logical, valid, plan.free_blocks,
                                  plan.free_rows, plan.free_incarnation, plan.tail_rows, plan.tail_blocks,
                                  plan.tail_incarnation, table.block_size, table.row_incarnation,
                                  table.row_tok_start, table.row_tok_len, table.row_blk_start, table.row_blk_len,
                                  table.tok_slot,
                                  table.blk_pool, table.block_row, table.block_live, table.block_fill,
                                  table.slot_logical, ref_counts, freed)
        freed = freed[:nf]
        if nf:
            table.allocator.free(freed)
        table.total_blocks -= nf
        table.version += 1
    dropped = np.flatnonzero(~valid)
    return CommitResult(int(n_valid), dropped, freed)
