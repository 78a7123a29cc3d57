"""numba kernels of :meth:`TokenTable.plan` and :meth:`TokenTable.commit` (the repacker).

The planner (``plan_select`` picks the rows with sparse blocks, ``plan_gather`` copies their
blocks, ``plan_repack`` proposes the moves, on the copy and without the GIL) and the commit
(``validate_moves`` re-checks them against the live table, ``commit_moves`` applies them) run
off the per-request path, so they live apart from the append / evict / view kernels of
:mod:`kvmm.allocators._token_table_kernels`, whose conventions (array names, ``FREE`` /
``SHARED``, valid arguments) and plain-Python reference (``NaiveTokenTable.plan`` / ``commit``)
they share.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.allocators._token_table_kernels import FREE

#: ``plan_select`` status of a row that needs the planner (its slots are copied).
PLAN_ROW = -2
#: ``plan_select`` status of a row with no movable block (the planner skips it).
SKIP_ROW = -1


@njit(cache=True, nogil=True)
def plan_select(num_rows, row_incarnation, block_size, row_blk_start, row_blk_len, blk_pool, block_row,
                block_live, block_fill, ref_counts, status_out):
    """Sort rows into those :func:`plan_repack` has work for and those whose plan is known.

    Reads only per-block counters (no slot), so :meth:`TokenTable.plan` copies the slots of the
    sparse rows alone.  Over a row's movable blocks (owned, ref count 1), with ``L`` live tokens:
    when there are exactly ``ceil(L / block_size)`` of them, each holds its live tokens at offsets
    ``[0, fill)`` (``block_live == block_fill``) and at most one is not full, the planner would
    free nothing, move nothing and name as the row's tail block the non-full one (else the last
    one): ``status_out[r]`` is that block.  Rows without a movable block get ``SKIP_ROW``; every
    other row gets ``PLAN_ROW``.  Returns the number of blocks held by ``PLAN_ROW`` rows.
    Runtime complexity: O(rows + held blocks).
    """
    planned_blocks = 0
    for r in range(num_rows):
        if row_incarnation[r] == 0:
            status_out[r] = SKIP_ROW
            continue
        start = row_blk_start[r]
        n = row_blk_len[r]
        count = 0
        live = 0
        holey = False
        partial = 0
        partial_block = -1
        last_block = -1
        for j in range(n):
            b = blk_pool[start + j]
            if block_row[b] != r or ref_counts[b] != 1:
                continue
            count += 1
            live += block_live[b]
            last_block = b
            if block_live[b] != block_fill[b]:
                holey = True
            if block_fill[b] < block_size:
                partial += 1
                partial_block = b
        if count == 0:
            status_out[r] = SKIP_ROW
        elif holey or partial > 1 or count != (live + block_size - 1) // block_size:
            status_out[r] = PLAN_ROW
            planned_blocks += n
        else:
            status_out[r] = partial_block if partial == 1 else last_block
    return planned_blocks


@njit(cache=True, nogil=True)
def plan_gather(num_rows, status, block_size, row_blk_start, row_blk_len, blk_pool, block_row, block_live,
                block_fill, slot_logical, ref_counts, local_start, local_global, local_row, local_live, local_fill,
                local_movable, local_slot_logical):
    """Copy the blocks of ``PLAN_ROW`` rows into a small table with local block ids ``0..K-1``.

    Local block ``i`` is global block ``local_global[i]``; row ``r``'s blocks become the local
    ids ``local_start[r] .. local_start[r] + row_blk_len[r] - 1`` (a shared block listed by two
    rows gets two local ids: the planner never reads or moves it).  Runtime complexity:
    O(rows + K * block_size).
    """
    k = 0
    for r in range(num_rows):
        local_start[r] = k
        if status[r] != PLAN_ROW:
            continue
        start = row_blk_start[r]
        for j in range(row_blk_len[r]):
            b = np.int64(blk_pool[start + j])
            local_global[k] = b
            local_row[k] = block_row[b]
            local_live[k] = block_live[b]
            local_fill[k] = block_fill[b]
            local_movable[k] = 1 if (block_row[b] >= 0 and ref_counts[b] == 1) else 0
            base = b * block_size
            lbase = np.int64(k) * block_size
            for o in range(block_size):
                local_slot_logical[lbase + o] = slot_logical[base + o]
            k += 1


@njit(cache=True, nogil=True)
def plan_repack(num_rows, row_incarnation, block_size, row_blk_start, row_blk_len, blk_pool,
                block_row, block_live, block_fill, slot_logical, movable, budget):
    """Propose token moves that free the most blocks for the fewest moves, within ``budget``.

    Per row, a full repack keeps the ``ceil(live / block_size)`` densest movable blocks and
    empties the others (each emptied block costs its live tokens in moves, the least any plan
    freeing that many blocks can cost).  Across rows the emptied blocks are taken cheapest
    first while the total cost fits ``budget`` (blocks with no live token cost nothing and are
    always taken).  A row all of whose blocks were taken is also *densified*, if the budget still
    allows: its partial block ``T`` (the kept block needing the fewest extra moves) ends up
    holding its live tokens at offsets ``[0, r)`` and becomes the row's last block at commit.

    One call plans every row (rows with ``row_incarnation == 0`` are skipped).  Returns
    ``(src, dst, move_row, move_logical, move_incarnation, free_blocks, free_rows, tail_rows,
    tail_blocks, min_moves)``.  Runtime complexity: O(B + S + moves) for B held blocks and S
    slots in planned rows when every candidate fits the budget (a full repack), plus
    O(B log B) for the cheapest-first selection otherwise.
    """
    total_blocks = 0
    max_n = 0
    for r in range(num_rows):
        if row_incarnation[r] != 0:
            total_blocks += row_blk_len[r]
            if row_blk_len[r] > max_n:
                max_n = row_blk_len[r]
    order = np.empty(max_n, dtype=np.int64)
    bucket = np.empty(block_size + 2, dtype=np.int64)
    # Phase 1: every row's removal candidates, with costs and ranks.
    cand_row = np.empty(total_blocks, dtype=np.int64)
    cand_block = np.empty(total_blocks, dtype=np.int64)
    cand_key = np.empty(total_blocks, dtype=np.int64)
    row_cands = np.zeros(num_rows, dtype=np.int64)
    nc = 0
    for r in range(num_rows):
        if row_incarnation[r] == 0:
            continue
        count, keep, live = _row_candidates(r, block_size, row_blk_start, row_blk_len, blk_pool,
                                            block_row, block_live, movable, order, bucket)
        row_cands[r] = count - keep
        for rank in range(count - keep):
            b = blk_pool[row_blk_start[r] + order[rank]]
            cand_row[nc] = r
            cand_block[nc] = b
            # cost first, then rank in its row (keeps each row's taken set a prefix), then row
            cand_key[nc] = (np.int64(block_live[b]) * (max_n + 1) + rank) * (num_rows + 1) + r
            nc += 1
    # Phase 2: cheapest blocks first, while the moves fit the budget (when every candidate
    # fits, e.g. a full repack, the order does not matter: take them all without sorting).
    row_taken = np.zeros(num_rows, dtype=np.int64)
    spent = 0
    taken = 0
    all_cost = 0
    for k in range(nc):
        all_cost += block_live[cand_block[k]]
    if budget < 0 or all_cost <= budget:
        for r in range(num_rows):
            row_taken[r] = row_cands[r]
        spent = all_cost
        taken = nc
    else:
        sel = np.argsort(cand_key[:nc], kind="mergesort")
        for k in range(nc):
            b = cand_block[sel[k]]
            cost = block_live[b]
            if spent + cost > budget:
                break
            spent += cost
            row_taken[cand_row[sel[k]]] += 1
            taken += 1
    min_moves = spent
    # Phase 3: per row, the moves (sources in removal order, destinations in kept blocks).
    max_moves = spent  # plus at most block_size densifying moves per fully planned row
    for r in range(num_rows):
        if row_incarnation[r] != 0 and row_taken[r] == row_cands[r]:
            max_moves += block_size
    src = np.empty(max_moves, dtype=np.int64)
    dst = np.empty(max_moves, dtype=np.int64)
    move_row = np.empty(max_moves, dtype=np.int32)
    move_logical = np.empty(max_moves, dtype=np.int64)
    move_incarnation = np.empty(max_moves, dtype=np.int64)
    free_blocks = np.empty(taken, dtype=np.int32)
    free_rows = np.empty(taken, dtype=np.int32)
    tail_rows = np.empty(num_rows, dtype=np.int32)
    tail_blocks = np.empty(num_rows, dtype=np.int32)
    nm = 0
    nf = 0
    nt = 0
    kept_mark = np.zeros(max_n, dtype=np.uint8)
    sink = np.zeros(1, dtype=np.int64)
    # per-row scratch: candidate source and destination slots (compacted without branches)
    src_buf = np.empty(max_n * block_size + block_size, dtype=np.int64)
    dst_buf = np.empty(max_n * block_size + block_size, dtype=np.int64)
    for r in range(num_rows):
        if row_incarnation[r] == 0:
            continue
        count, keep, live = _row_candidates(r, block_size, row_blk_start, row_blk_len, blk_pool,
                                            block_row, block_live, movable, order, bucket)
        full = row_taken[r] == count - keep
        if row_taken[r] == 0 and not full:
            continue
        start = row_blk_start[r]
        n = row_blk_len[r]
        for j in range(n):
            kept_mark[j] = 0
        for rank in range(count - keep, count):
            kept_mark[order[rank]] = 1
        # Warm the row's slots in list order first (one read per cache line): the passes below
        # visit blocks in removal order, which defeats the hardware prefetcher and costs one
        # memory miss per block (about 4x slower on a large table).
        _warm_blocks(blk_pool, start, n, block_size, slot_logical, sink)
        # The partial block T: the kept block with the fewest live tokens at offsets >= rem.
        t_pos = -1
        extra = 0
        rem = live - (keep - 1) * block_size
        if keep > 0:
            best = -1
            for j in range(n - 1, -1, -1):  # later blocks win ties: the current tail first
                if kept_mark[j] == 0:
                    continue
                base = np.int64(blk_pool[start + j]) * block_size
                hi = 0
                for o in range(rem, block_size):
                    hi += slot_logical[base + o] >= 0
                if best < 0 or hi < best:
                    best = hi
                    t_pos = j
            extra = best
        densify = full and t_pos >= 0 and (budget < 0 or spent + extra <= budget)
        if densify:
            spent += extra
        # Sources: live slots of the taken blocks in removal order, then T's at offsets >= rem.
        ns = 0
        for rank in range(row_taken[r]):
            b = blk_pool[start + order[rank]]
            free_blocks[nf] = b
            free_rows[nf] = r
            nf += 1
            base = np.int64(b) * block_size
            for o in range(block_size):
                src_buf[ns] = base + o
                ns += slot_logical[base + o] >= 0
        if densify:
            base = np.int64(blk_pool[start + t_pos]) * block_size
            for o in range(rem, block_size):
                src_buf[ns] = base + o
                ns += slot_logical[base + o] >= 0
        if ns == 0:
            if densify:
                tail_rows[nt] = r
                tail_blocks[nt] = blk_pool[start + t_pos]
                nt += 1
            continue
        # Destinations: holes of the kept blocks but T in list order, then T's holes below rem
        # (only as many as there are sources).
        nd = 0
        for j in range(n):
            if kept_mark[j] == 0 or j == t_pos:
                continue
            base = np.int64(blk_pool[start + j]) * block_size
            for o in range(block_size):
                dst_buf[nd] = base + o
                nd += slot_logical[base + o] < 0
            if nd >= ns:
                break
        if nd < ns and t_pos >= 0:
            base = np.int64(blk_pool[start + t_pos]) * block_size
            for o in range(rem):
                dst_buf[nd] = base + o
                nd += slot_logical[base + o] < 0
        inc = row_incarnation[r]
        for k in range(ns):  # sources never exceed destinations
            sl = src_buf[k]
            src[nm] = sl
            dst[nm] = dst_buf[k]
            move_row[nm] = r
            move_logical[nm] = slot_logical[sl]
            move_incarnation[nm] = inc
            nm += 1
        if densify:
            tail_rows[nt] = r
            tail_blocks[nt] = blk_pool[start + t_pos]
            nt += 1
    # views, not copies: the spare capacity is at most block_size entries per row
    return (src[:nm], dst[:nm], move_row[:nm], move_logical[:nm], move_incarnation[:nm], free_blocks[:nf],
            free_rows[:nf], tail_rows[:nt], tail_blocks[:nt], min_moves)


@njit(cache=True, nogil=True)
def local_to_global_slots(slots, local_global, block_size):
    """Rewrite slots of :func:`plan_gather`'s local table as global slots, in place.  O(slots)."""
    for i in range(slots.shape[0]):
        s = slots[i]
        slots[i] = local_global[s // block_size] * block_size + s % block_size


@njit(cache=True, nogil=True)
def validate_moves(src, dst, move_row, move_logical, move_incarnation, trusted, block_size, row_incarnation,
                   row_tok_start, row_tok_len, tok_slot, block_row, slot_logical, ref_counts, out_valid):
    """Mark which planned moves still apply to the current table (``out_valid``); return their count.

    A move applies when its row is the same sequence incarnation, the source slot still holds
    that live token, the destination slot is empty, both blocks are exclusively held by the row
    (not shared, ref count 1).  Moves of one plan never share a slot or a token, so each move's
    validity does not depend on the others.  ``trusted``: the table has not changed since the
    plan was made, so only the allocator's ref counts (which other users of the allocator may
    have raised) are re-checked.  Every index is bounds-checked first either way, so no plan can
    make the kernel read out of bounds.  Runtime complexity: O(moves).
    """
    n_valid = 0
    num_rows = row_incarnation.shape[0]
    num_slots = slot_logical.shape[0]
    for i in range(src.shape[0]):
        r = move_row[i]
        s = src[i]
        d = dst[i]
        logical = move_logical[i]
        ok = (0 <= r < num_rows and 0 <= s < num_slots and 0 <= d < num_slots and s != d
              and 0 <= logical < row_tok_len[r])
        if ok:
            sb = s // block_size
            db = d // block_size
            ok = ref_counts[sb] == 1 and ref_counts[db] == 1
            if ok and not trusted:
                ok = (row_incarnation[r] == move_incarnation[i] and row_incarnation[r] != 0
                      and tok_slot[row_tok_start[r] + logical] == s
                      and slot_logical[s] == logical and slot_logical[d] < 0
                      and block_row[sb] == r and block_row[db] == r)
        out_valid[i] = ok
        if ok:
            n_valid += 1
    return n_valid


@njit(cache=True, nogil=True)
def commit_moves(src, dst, move_row, move_logical, valid, free_blocks, free_rows, free_incarnation, tail_rows,
                 tail_blocks, tail_incarnation, block_size, row_incarnation, row_tok_start, row_tok_len,
                 row_blk_start, row_blk_len, tok_slot, blk_pool, block_row, block_live, block_fill, slot_logical, ref_counts,
                 out_freed):
    """Apply a validated plan in one pass: flip the valid moves, release emptied blocks, set tails.

    1. Every valid move (``valid[i]``; its data was copied already) flips its mapping.
    2. A plan block is released only if it is still held by the same row incarnation, holds no
       live token and is not shared (ref count 1); each row that lost blocks compacts its block
       list once (O(row blocks), not once per freed block).
    3. A designated partial block becomes its row's last block with its fill lowered to just past
       its last live token, so appends continue densely.
    Ids in the plan are bounds-checked (entries out of range are skipped).  Returns how many
    block ids were written to ``out_freed``.  Runtime complexity: O(moves + plan blocks + blocks
    of the rows that lost or reordered blocks + tails * block_size).
    """
    num_rows = row_incarnation.shape[0]
    num_blocks = block_row.shape[0]
    sink = np.zeros(1, dtype=np.int64)
    warm_row = -1
    for i in range(src.shape[0]):
        if not valid[i]:
            continue
        if move_row[i] != warm_row:  # a plan lists each row's moves together: warm the row once
            warm_row = move_row[i]
            _warm_row(warm_row, block_size, row_tok_start, row_tok_len, row_blk_start, row_blk_len, tok_slot,
                      blk_pool, slot_logical, sink)
        s = src[i]
        d = dst[i]
        logical = move_logical[i]
        tok_slot[row_tok_start[move_row[i]] + logical] = d
        slot_logical[d] = logical
        slot_logical[s] = -1
        sb = s // block_size
        db = d // block_size
        block_live[sb] -= 1
        block_live[db] += 1
        off = d - db * block_size + 1
        if off > block_fill[db]:
            block_fill[db] = off
    nf = 0
    for i in range(free_blocks.shape[0]):
        b = free_blocks[i]
        r = free_rows[i]
        if (0 <= b < num_blocks and 0 <= r < num_rows and row_incarnation[r] == free_incarnation[i]
                and block_row[b] == r and block_live[b] == 0 and ref_counts[b] == 1):
            block_row[b] = FREE  # marks it for removal from the row's list below
            block_fill[b] = 0
            out_freed[nf] = b
            nf += 1
    # compact each affected row's block list once, dropping the blocks just freed (a listed block
    # is otherwise owned by the row or shared, never FREE)
    last = -1
    for i in range(free_rows.shape[0]):
        r = free_rows[i]
        if r == last or not (0 <= r < num_rows) or row_incarnation[r] != free_incarnation[i]:
            continue
        last = r
        start = row_blk_start[r]
        w = start
        for j in range(start, start + row_blk_len[r]):
            if block_row[blk_pool[j]] != FREE:
                blk_pool[w] = blk_pool[j]
                w += 1
        row_blk_len[r] = w - start
    for i in range(tail_rows.shape[0]):
        r = tail_rows[i]
        t = tail_blocks[i]
        if not (0 <= r < num_rows and 0 <= t < num_blocks and row_incarnation[r] == tail_incarnation[i]
                and block_row[t] == r):
            continue
        start = row_blk_start[r]
        n = row_blk_len[r]
        w = start
        for j in range(start, start + n):
            if blk_pool[j] != t:
                blk_pool[w] = blk_pool[j]
                w += 1
        blk_pool[start + n - 1] = t
        fill = 0
        for o in range(block_size):
            if slot_logical[np.int64(t) * block_size + o] >= 0:
                fill = o + 1
        block_fill[t] = fill
    return nf


@njit(cache=True, nogil=True)
def _row_candidates(r, block_size, row_blk_start, row_blk_len, blk_pool, block_row, block_live,
                    movable, order_out, bucket):
    """Order row ``r``'s movable blocks for removal; return (movable count, keep count, live).

    ``order_out[:count]`` receives list positions sorted by (live ascending, later first): the
    first ``count - keep`` of them are the blocks a full repack frees (the sparsest ones, so
    freeing them moves the fewest tokens).  A counting sort over the live counts (``bucket``:
    ``block_size + 2`` scratch entries): no allocation, O(blocks + block_size) per row.
    """
    start = row_blk_start[r]
    n = row_blk_len[r]
    for v in range(block_size + 2):
        bucket[v] = 0
    count = 0
    live = 0
    for j in range(n):
        b = blk_pool[start + j]
        if block_row[b] == r and movable[b]:
            bucket[block_live[b] + 1] += 1
            live += block_live[b]
            count += 1
    for v in range(1, block_size + 2):
        bucket[v] += bucket[v - 1]
    for j in range(n - 1, -1, -1):  # later first within one live count
        b = blk_pool[start + j]
        if block_row[b] == r and movable[b]:
            v = block_live[b]
            order_out[bucket[v]] = j
            bucket[v] += 1
    keep = (live + block_size - 1) // block_size
    return count, keep, live


@njit(cache=True, nogil=True)
def _warm_blocks(blk_pool, start, n, block_size, slot_logical, sink):
    """Read one word per cache line of blocks ``blk_pool[start:start + n]`` into ``sink``."""
    acc = 0
    for j in range(start, start + n):
        base = np.int64(blk_pool[j]) * block_size
        for o in range(0, block_size, 8):
            acc += slot_logical[base + o]
    sink[0] += acc


@njit(cache=True, nogil=True)
def _warm_row(r, block_size, row_tok_start, row_tok_len, row_blk_start, row_blk_len, tok_slot, blk_pool,
              slot_logical, sink):
    """Warm row ``r``'s blocks and its logical tokens in memory order (one read per cache line)."""
    _warm_blocks(blk_pool, row_blk_start[r], row_blk_len[r], block_size, slot_logical, sink)
    acc = 0
    t0 = row_tok_start[r]
    for t in range(t0, t0 + row_tok_len[r], 8):
        acc += tok_slot[t]
    sink[0] += acc
