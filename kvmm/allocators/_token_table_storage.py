"""Row and pool storage of :class:`~kvmm.allocators.token_table.TokenTable`: segments and growth.

Each row (sequence) owns a token segment of ``tok_slot`` and a block segment of ``blk_pool``.
Handing out a row, doubling the row arrays, moving a full segment to the pools' ends and
compacting the pools is bookkeeping apart from what the table means by its arrays, so it lives
here; the table calls it under its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvmm._arrays import grown
from kvmm.allocators import _token_table_kernels as kernels
from kvmm.allocators._token_table_lookup import note_index_change

if TYPE_CHECKING:
    from kvmm.allocators.token_table import TokenTable

ROW_ARRAYS = ("row_seq", "row_incarnation", "row_first_position", "row_live", "row_tok_start", "row_tok_len",
              "row_tok_cap", "row_blk_start", "row_blk_len", "row_blk_cap")


def register_row(table: TokenTable, key: int, first_position: int, tok_cap: int, blk_cap: int) -> int:
    """Give sequence ``key`` a row with empty segments (caller holds the lock); return the row.

    Inlined scalar writes: this is on the per-request path (``add_sequence``).
    """
    row = table.free_rows.pop() if table.free_rows else _new_row(table)
    table.row_of[key] = row
    note_index_change(table, key)
    table.row_seq[row] = key
    table.row_incarnation[row] = table.next_incarnation
    table.next_incarnation += 1
    table.row_first_position[row] = first_position
    # row_live, row_tok_len and row_blk_len are already 0 (free_sequence zeroes them; check())
    if table.tok_end + tok_cap > table.tok_slot.shape[0] or table.blk_end + blk_cap > table.blk_pool.shape[0]:
        ensure_pool_room(table, tok_cap, blk_cap)
    table.row_tok_start[row] = table.tok_end
    table.row_tok_cap[row] = tok_cap
    table.tok_end += tok_cap
    table.row_blk_start[row] = table.blk_end
    table.row_blk_cap[row] = blk_cap
    table.blk_end += blk_cap
    return row


def _new_row(table: TokenTable) -> int:
    """A never-used row (the row arrays double when full)."""
    if table.num_rows == table.row_seq.shape[0]:
        for name in ROW_ARRAYS:
            setattr(table, name, grown(getattr(table, name), 2 * table.num_rows))
    table.num_rows += 1
    return table.num_rows - 1


def reserve(table: TokenTable, rows: np.ndarray, counts: np.ndarray, need: np.ndarray) -> None:
    """Grow the segments of rows that lack room (doubling; moved to the pools' ends)."""
    tok_short = table.row_tok_len[rows] + counts > table.row_tok_cap[rows]
    blk_short = table.row_blk_len[rows] + need > table.row_blk_cap[rows]
    if not (tok_short.any() or blk_short.any()):
        return
    grow_tok = rows[tok_short]
    new_tok = np.maximum(2 * table.row_tok_cap[grow_tok], table.row_tok_len[grow_tok] + counts[tok_short])
    grow_blk = rows[blk_short]
    new_blk = np.maximum(2 * table.row_blk_cap[grow_blk], table.row_blk_len[grow_blk] + need[blk_short])
    ensure_pool_room(table, int(new_tok.sum()), int(new_blk.sum()))
    for row, cap in zip(grow_tok.tolist(), new_tok.tolist()):
        s, n = table.row_tok_start[row], table.row_tok_len[row]
        table.tok_slot[table.tok_end:table.tok_end + n] = table.tok_slot[s:s + n]
        table.row_tok_start[row], table.row_tok_cap[row] = table.tok_end, cap
        table.tok_end += cap
    for row, cap in zip(grow_blk.tolist(), new_blk.tolist()):
        s, n = table.row_blk_start[row], table.row_blk_len[row]
        table.blk_pool[table.blk_end:table.blk_end + n] = table.blk_pool[s:s + n]
        table.row_blk_start[row], table.row_blk_cap[row] = table.blk_end, cap
        table.blk_end += cap


def ensure_pool_room(table: TokenTable, extra_tok: int, extra_blk: int) -> None:
    """Make room for ``extra`` entries at the pools' ends, compacting live rows if needed."""
    if (table.tok_end + extra_tok <= table.tok_slot.shape[0]
            and table.blk_end + extra_blk <= table.blk_pool.shape[0]):
        return  # the common case: O(1), no scan of the rows
    used = np.flatnonzero(table.row_incarnation[:table.num_rows] != 0)
    if table.tok_end + extra_tok > table.tok_slot.shape[0]:
        table.tok_slot, table.tok_end = _compact(table.tok_slot, table.row_tok_start, table.row_tok_len,
                                                 table.row_tok_cap, used, extra_tok, -1)
    if table.blk_end + extra_blk > table.blk_pool.shape[0]:
        table.blk_pool, table.blk_end = _compact(table.blk_pool, table.row_blk_start, table.row_blk_len,
                                                 table.row_blk_cap, used, extra_blk, -1)


def _compact(pool: np.ndarray, start: np.ndarray, length: np.ndarray, cap: np.ndarray, rows: np.ndarray,
             extra: int, fill_value: int):
    """A new pool (about twice what is needed) holding ``rows``' segments back to back; updates ``start``."""
    needed = int(cap[rows].sum()) + extra
    new = np.full(max(2 * needed, 16), fill_value, dtype=pool.dtype)
    end = kernels.compact_segments(pool, start, length, cap, rows, new)  # a kernel: O(rows) Python loops hurt churn
    return new, int(end)
