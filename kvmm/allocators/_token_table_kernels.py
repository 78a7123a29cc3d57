"""numba kernels of :class:`kvmm.allocators.TokenTable` (append, evict, views, segment compaction).

The repacker's kernels (plan, commit) are in :mod:`kvmm.allocators._token_table_repack_kernels`.
Every kernel is ``@njit(cache=True, nogil=True)`` and works on the table's arrays, passed in
explicitly; the Python class validates input before calling any of them, so kernels assume
valid arguments.  Their plain-Python reference is the operation-level model
:class:`kvmm.testing.models.token_table.NaiveTokenTable`,
compared with the table step by step by :class:`kvmm.testing.TokenTableMachine`.

Array names (see ``TokenTable`` for the layout and a worked example):

* per row (one row per live sequence): ``row_tok_start/len`` locate the row's logical tokens in
  ``tok_slot`` (CSR with spare capacity), ``row_blk_start/len`` its blocks in ``blk_pool``;
  ``row_live`` counts live tokens.
* per block: ``block_row`` (owning row, ``FREE`` or ``SHARED``), ``block_live`` (live tokens of
  the owner in it), ``block_fill`` (high-water offset: slots at ``offset >= fill`` are empty).
* per slot: ``slot_logical`` (the owner's logical position of the live token there, or -1).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: ``block_row`` value of a block this table does not hold.
FREE = -1
#: ``block_row`` value of a block held read-only (a shared prefix): never repacked.
SHARED = -2


@njit(cache=True, nogil=True)
def append_tokens(rows, counts, new_block_offsets, new_block_ids, block_size,
                  row_tok_start, row_tok_len, row_blk_start, row_blk_len, row_live,
                  tok_slot, blk_pool, block_row, block_live, block_fill, slot_logical, out_slots):
    """Append ``counts[i]`` tokens to row ``rows[i]``; write their slots to ``out_slots``.

    New tokens go to the row's tail block at its fill offset, then to the row's new blocks
    ``new_block_ids[new_block_offsets[i]:new_block_offsets[i + 1]]`` (exactly as many as needed,
    computed by the caller).  Runtime complexity: O(total tokens + new blocks).
    """
    out = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        next_new = new_block_offsets[i]
        tail = -1
        if row_blk_len[r] > 0:
            b = blk_pool[row_blk_start[r] + row_blk_len[r] - 1]
            if block_row[b] == r:
                tail = b
        for _ in range(counts[i]):
            if tail < 0 or block_fill[tail] == block_size:
                tail = new_block_ids[next_new]
                next_new += 1
                blk_pool[row_blk_start[r] + row_blk_len[r]] = tail
                row_blk_len[r] += 1
                block_row[tail] = r
                block_live[tail] = 0
                block_fill[tail] = 0
            slot = np.int64(tail) * block_size + block_fill[tail]
            block_fill[tail] += 1
            block_live[tail] += 1
            logical = row_tok_len[r]
            tok_slot[row_tok_start[r] + logical] = slot
            row_tok_len[r] += 1
            slot_logical[slot] = logical
            row_live[r] += 1
            out_slots[out] = slot
            out += 1


@njit(cache=True, nogil=True)
def compact_segments(pool, start, length, cap, rows, new):
    """Copy ``rows``' segments of ``pool`` back to back into ``new`` (each keeps its capacity);
    update ``start``; return the end.  Runtime complexity: O(rows + their entries).
    """
    end = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        s = start[r]
        for j in range(length[r]):
            new[end + j] = pool[s + j]
        start[r] = end
        end += cap[r]
    return end


@njit(cache=True, nogil=True)
def gather_segments(rows, start, out_offsets, pool, out):
    """Copy row ``rows[i]``'s segment ``pool[start[r]:...]`` to ``out[out_offsets[i]:out_offsets[i+1]]``.

    Runtime complexity: O(rows + entries).
    """
    for i in range(rows.shape[0]):
        s = start[rows[i]]
        for j in range(out_offsets[i + 1] - out_offsets[i]):
            out[out_offsets[i] + j] = pool[s + j]


@njit(cache=True, nogil=True)
def release_row_blocks(blocks, row, block_size, block_row, block_live, block_fill, block_shared, slot_logical):
    """Drop a freed row's hold on ``blocks``: owned blocks become free and empty; shared blocks
    lose one holder (and become free with the last).  One call instead of a dozen small numpy
    operations: ``free_sequence`` is on the per-request path.  Runtime complexity:
    O(blocks * block_size).
    """
    for i in range(blocks.shape[0]):
        b = np.int64(blocks[i])
        if block_row[b] == row:
            base = b * block_size
            for o in range(block_size):
                slot_logical[base + o] = -1
            block_row[b] = FREE
            block_live[b] = 0
            block_fill[b] = 0
        elif block_row[b] == SHARED:
            block_shared[b] -= 1
            if block_shared[b] == 0:
                block_row[b] = FREE


@njit(cache=True, nogil=True)
def context_lengths(rows, block_size, row_tok_start, row_tok_len, row_blk_start, row_blk_len, blk_pool, tok_slot,
                    block_row, block_fill, slot_logical, out):
    """Per row: 1 + the index, in the concatenation of its blocks, of its last live token, or 0.

    Scans back from the last block's fill through ``slot_logical`` (owned blocks), so it costs
    the trailing dead slots only; a shared block keeps no reverse map, so reaching one scans the
    row's tokens for its live slots there.  Runtime complexity: O(rows + trailing dead slots),
    plus O(row tokens) per shared block reached.
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        start = row_blk_start[r]
        length = 0
        for j in range(row_blk_len[r] - 1, -1, -1):
            b = np.int64(blk_pool[start + j])
            if block_row[b] == SHARED:
                best = -1
                t0 = row_tok_start[r]
                for t in range(t0, t0 + row_tok_len[r]):
                    slot = tok_slot[t]
                    if slot >= 0 and slot // block_size == b:
                        best = max(best, slot - b * block_size)
                if best >= 0:
                    length = j * block_size + best + 1
            else:
                for o in range(block_fill[b] - 1, -1, -1):
                    if slot_logical[b * block_size + o] >= 0:
                        length = j * block_size + o + 1
                        break
            if length:
                break
        out[i] = length


#: ``evict_tokens`` status codes (``OK`` or the kind of the first bad position).
OK, OUT_OF_RANGE, DEAD, REPEATED = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def evict_tokens(rows, offsets, positions, block_size, row_tok_start, row_tok_len, row_live, tok_slot,
                 block_row, block_live, slot_logical):
    """Mark logical ``positions[offsets[i]:offsets[i+1]]`` of row ``rows[i]`` dead, all or nothing.

    Only the mapping changes: the slot becomes a hole (no data moves, no block is freed).  A
    first pass checks every position (in range, live, not repeated: it marks each visited
    token by encoding its slot as ``-slot - 2``) and, on a bad one, undoes its marks and returns
    ``(status, index)`` having changed nothing.  Runtime complexity: O(positions).
    """
    bad = OK
    where = -1
    done = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(offsets[i], offsets[i + 1]):
            p = positions[k]
            if p < 0 or p >= row_tok_len[r]:
                bad = OUT_OF_RANGE
            else:
                v = tok_slot[row_tok_start[r] + p]
                if v == -1:
                    bad = DEAD
                elif v < -1:
                    bad = REPEATED
                else:
                    tok_slot[row_tok_start[r] + p] = -v - 2
            if bad != OK:
                where = k
                break
            done = k + 1
        if bad != OK:
            break
    # second pass: undo the marks (on error) or evict
    k = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(offsets[i], min(offsets[i + 1], done)):
            at = row_tok_start[r] + positions[k]
            slot = -tok_slot[at] - 2
            if bad != OK:
                tok_slot[at] = slot
                continue
            tok_slot[at] = -1
            row_live[r] -= 1
            b = slot // block_size
            if block_row[b] == r:  # shared blocks keep no per-token reverse state
                slot_logical[slot] = -1
                block_live[b] -= 1
    return bad, where


@njit(cache=True, nogil=True)
def blocks_needed(rows, counts, block_size, row_blk_start, row_blk_len, row_tok_len, row_tok_cap, row_blk_cap,
                  blk_pool, block_row, block_fill, need_out):
    """New blocks each row needs for ``counts`` more tokens; return (total, rows lacking pool room).

    Runtime complexity: O(rows).
    """
    total = 0
    short = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        room = 0
        if row_blk_len[r] > 0:
            tail = blk_pool[row_blk_start[r] + row_blk_len[r] - 1]
            if block_row[tail] == r:
                room = block_size - block_fill[tail]
        extra = counts[i] - room
        need = (extra + block_size - 1) // block_size if extra > 0 else 0
        need_out[i] = need
        total += need
        if row_tok_len[r] + counts[i] > row_tok_cap[r] or row_blk_len[r] + need > row_blk_cap[r]:
            short += 1
    return total, short
