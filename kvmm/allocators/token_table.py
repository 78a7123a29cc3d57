"""Token table with background repacking (vToken): token-level eviction that frees whole blocks.

Token-level eviction policies (H2O, Scissorhands, random, ...) drop single tokens, but paged KV
memory is handed out in blocks: a block with one live token cannot go back to the pool.  The
token table decouples *is this token alive* from *where does it sit*.  Each sequence keeps a
stable **logical view**: logical position ``i`` always means the ``i``-th token ever appended to
it, dead or alive.  Each live logical token maps to a physical **slot**
``block * block_size + offset``.  Evicting a token only marks it dead; a **repacker** later
moves live tokens out of sparse blocks into holes of dense ones and returns whole blocks to the
:class:`~kvmm.allocators.BlockAllocator`.

Repacking has two phases so it can run off the critical path: :meth:`TokenTable.plan` proposes
``src slot -> dst slot`` moves without touching the mapping (its kernel releases the GIL, so a
background thread can plan while the main thread appends and evicts); :meth:`TokenTable.commit`
re-checks every move against the current table, copies the data of the moves that still apply
(``copy_slots``, e.g. :meth:`KVArena.copy_slots`), flips their mapping and frees the emptied
blocks.

Layout (structure of arrays; no Python object per token or block), worked example with
``block_size = 4``.  Sequence 7 (row ``r``) appended 10 tokens (logical 0..9) into blocks 9, 2, 5::

    block 9: slots 36..39 <- logical 0 1 2 3
    block 2: slots  8..11 <- logical 4 5 6 7
    block 5: slots 20..21 <- logical 8 9          (fill = 2: slots 22, 23 never written)

    row_tok_start[r] = 0, row_tok_len[r] = 10     tok_slot[0:10] = 36 37 38 39 8 9 10 11 20 21
    row_blk_start[r] = 0, row_blk_len[r] = 3      blk_pool[0:3]  = 9 2 5
    slot_logical[36..39] = 0 1 2 3, [8..11] = 4 5 6 7, [20..23] = 8 9 -1 -1

Evicting logical 4, 5, 6 sets their ``tok_slot`` and ``slot_logical`` entries to -1
(``block_live`` of blocks 9, 2, 5 becomes 4, 1, 2).  Seven live tokens need ``ceil(7/4) = 2``
blocks, so a full plan empties the sparsest block, 2, with one move (logical 7: slot 11 -> slot
22, the first hole of the partial block 5), and block 5 becomes the last block.  After commit::

    tok_slot[0:10] = 36 37 38 39 -1 -1 -1 22 20 21     blk_pool[0:2] = 9 5     block 2: freed
    live_mask      =  1  1  1  1  0  0  0  1  1  1     positions()   = 0 1 2 3 7 8 9

The logical view did not change (logical 7 is still the 8th token ever appended); only its slot
did.  Every block but the last is full and the last holds its live tokens at its first offsets, so
an unmodified paged-attention kernel given ``block_table(7) = [9, 5]`` and context length 7 reads
exactly the seven live tokens (attention does not depend on key order once RoPE has been applied
to the keys; original positions stay available from :meth:`TokenTable.positions`).

Rows are reused after :meth:`free_sequence`; a row's *incarnation* number (unique per
:meth:`add_sequence`) lets a stale plan recognise that a row now holds another sequence.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable

import numpy as np

from kvmm._validate import as_count, as_index_array, check_ids_in_range
from kvmm.allocators import _token_table_kernels as kernels
from kvmm.allocators._token_table_kernels import FREE, SHARED
from kvmm.allocators._token_table_lookup import (
    lookup_row,
    lookup_rows,
    note_index_change,
    per_sequence_counts,
    seq_key,
    small_counts,
    sorted_index,
)
from kvmm.allocators._token_table_plan import CommitResult, RepackPlan, commit_plan, plan_repack
from kvmm.allocators._token_table_storage import ROW_ARRAYS, register_row, reserve
from kvmm.errors import (
    BadInputError,
    InvalidIdError,
    OutOfBlocksError,
    ShapeError,
    StalePlanError,
)

__all__ = ["TokenTable", "RepackPlan", "CommitResult"]

_TABLE_IDS = itertools.count(1)


class TokenTable:
    """Per-sequence logical token views over a :class:`BlockAllocator`, with repacking.

    ``TokenTable(allocator)`` takes blocks from ``allocator`` as sequences grow and gives them
    back when a sequence is freed or a repack empties them.  Sequence ids are Python ints.

    Sharing: blocks passed as ``shared_blocks`` to :meth:`add_sequence` (a cached prefix) are
    held read-only: the table touches them (ref count + 1) and never moves tokens into or out of
    them; nor out of or into any block whose allocator ref count is above 1.  Evicting a token
    inside a shared block only marks it dead for this sequence; the memory comes back only when
    every holder frees the block, and until then a paged kernel still reads that slot (mask it,
    or keep shared prefixes out of eviction: ``evict_to_budget(..., protect_shared=True)``).
    Repacking changes what a block holds, so blocks of a sequence that evicts tokens must not be
    put in the allocator's prefix cache under their original content key.
    """

    def __init__(self, allocator, *, initial_sequences: int = 16, initial_tokens: int = 4096) -> None:
        for attr in ("num_blocks", "block_size", "allocate_many", "free", "touch", "ref_counts"):
            if not hasattr(allocator, attr):
                raise BadInputError(f"allocator must be a BlockAllocator (missing {attr!r}), got {type(allocator).__name__}")
        self.allocator = allocator
        # the allocator's plain allocate(n), when it has one (BlockAllocator does): see append
        self._allocate = getattr(allocator, "allocate", None)
        self.block_size = int(allocator.block_size)
        self.num_blocks_total = int(allocator.num_blocks)
        self.table_id = next(_TABLE_IDS)
        self.lock = threading.Lock()  # guards every array below against the planner's snapshot
        # preallocation only (the arrays grow): bounded so nonsense fails clearly, not with MemoryError
        rows = max(as_count(initial_sequences, "initial_sequences", maximum=1 << 24), 1)
        initial_tokens = as_count(initial_tokens, "initial_tokens", maximum=1 << 28)
        self.row_of: dict[int, int] = {}
        # The same map as sorted arrays, for batched lookups (np.searchsorted).  Kept lazily:
        # add_sequence / free_sequence only note the change (O(1)); the next batched lookup merges
        # all changes since the last one in one O(S + k log k) pass, instead of an O(S) array
        # insert or delete per call (which made S adds/frees cost O(S^2)).
        self.seq_sorted = np.zeros(0, dtype=np.int64)
        self.seq_sorted_rows = np.zeros(0, dtype=np.int64)
        self.index_touched: list[int] = []  # keys added or freed since the index was last merged
        self.free_rows: list[int] = []
        self.num_rows = 0  # rows ever used (high-water mark)
        self.row_seq = np.zeros(rows, dtype=np.int64)
        self.row_incarnation = np.zeros(rows, dtype=np.int64)  # 0 = row unused
        self.row_first_position = np.zeros(rows, dtype=np.int64)
        self.row_live = np.zeros(rows, dtype=np.int64)
        self.row_tok_start = np.zeros(rows, dtype=np.int64)
        self.row_tok_len = np.zeros(rows, dtype=np.int64)
        self.row_tok_cap = np.zeros(rows, dtype=np.int64)
        self.row_blk_start = np.zeros(rows, dtype=np.int64)
        self.row_blk_len = np.zeros(rows, dtype=np.int64)
        self.row_blk_cap = np.zeros(rows, dtype=np.int64)
        self.tok_slot = np.full(max(int(initial_tokens), 16), -1, dtype=np.int64)
        self.tok_end = 0
        self.blk_pool = np.full(max(int(initial_tokens) // self.block_size, 16), -1, dtype=np.int32)
        self.blk_end = 0
        nb = self.num_blocks_total
        self.block_row = np.full(nb, FREE, dtype=np.int32)
        self.block_live = np.zeros(nb, dtype=np.int32)
        self.block_fill = np.zeros(nb, dtype=np.int32)
        self.block_shared = np.zeros(nb, dtype=np.int32)  # rows holding the block read-only
        self.slot_logical = np.full(nb * self.block_size, -1, dtype=np.int64)
        self.next_incarnation = 1
        self.next_plan_id = 1
        # Plans handed out by plan() and not yet committed.  commit() accepts only these very
        # objects, so a hand-made or altered RepackPlan can never reach the kernels.  Committed
        # plans the caller still holds, so a second commit of one says so.  Both are weak: a plan
        # the caller drops leaves them, so neither grows with the number of plans made.
        self.issued_plans: weakref.WeakValueDictionary[int, RepackPlan] = weakref.WeakValueDictionary()
        self.committed_plans: weakref.WeakValueDictionary[int, RepackPlan] = weakref.WeakValueDictionary()
        # Bumped by every change of the mapping: a plan made at the current version is valid by
        # construction, so commit re-checks only the allocator's ref counts.
        self.version = 0
        self.total_live = 0
        self.total_blocks = 0  # sum over sequences of blocks held (a shared block once per holder)

    # ------------------------------------------------------------------ sequences
    def add_sequence(self, seq_id: int, *, shared_blocks=None, first_position: int = 0) -> None:
        """Register ``seq_id``, optionally starting with full read-only blocks (a cached prefix).

        ``shared_blocks`` (block ids, in prefix order) become logical tokens
        ``0 .. len(shared_blocks) * block_size - 1``, all live; the table touches each block.
        A block may come from the allocator's prefix cache or from another sequence of this
        table, which must hold it full with every token live.  ``first_position`` is the
        original position of logical token 0.  Runtime complexity: O(shared tokens), amortised
        (the batched-lookup index is updated lazily, by the next batched call).
        """
        key = seq_key(seq_id)
        if key in self.row_of:
            raise BadInputError(f"sequence {key} is already registered; expected a new sequence id")
        if type(first_position) is not int or not 0 <= first_position <= 2**62:  # plain ints in range skip the helper
            first_position = as_count(first_position, "first_position", maximum=2**62)  # int64 positions
        if shared_blocks is None:  # the common case, kept to a few scalar writes
            with self.lock:
                register_row(self, key, int(first_position), tok_cap=8, blk_cap=2)
                self.version += 1
            return
        shared = as_index_array(shared_blocks, "shared_blocks", dtype=np.int32)
        check_ids_in_range(shared, self.num_blocks_total, "shared_blocks")
        if np.unique(shared).size != shared.size:
            raise BadInputError("shared_blocks contains a block twice; expected distinct block ids")
        owned = shared[self.block_row[shared] >= 0]
        for b in owned:
            if self.block_live[b] != self.block_size:
                owner = int(self.row_seq[self.block_row[b]])
                raise InvalidIdError(
                    f"block {int(b)} of sequence {owner} is not full of live tokens "
                    f"({int(self.block_live[b])}/{self.block_size}); only full, intact blocks can be shared")
        with self.lock:
            if shared.size:
                self.allocator.touch(shared)  # raises (changing nothing) on a bad block
            n_tok = shared.size * self.block_size
            row = register_row(self, key, int(first_position), tok_cap=max(n_tok, 8), blk_cap=max(shared.size, 2))
            self.version += 1
            for b in owned:  # an owned block becomes read-only for its owner too
                self.slot_logical[b * self.block_size:(b + 1) * self.block_size] = -1
                self.block_row[b] = SHARED
                self.block_live[b] = 0
                self.block_shared[b] = 1
            self.block_row[shared] = SHARED
            self.block_shared[shared] += 1
            s = self.row_blk_start[row]
            self.blk_pool[s:s + shared.size] = shared
            self.row_blk_len[row] = shared.size
            t = self.row_tok_start[row]
            self.tok_slot[t:t + n_tok] = (shared.astype(np.int64)[:, None] * self.block_size
                                          + np.arange(self.block_size)).ravel()
            self.row_tok_len[row] = n_tok
            self.row_live[row] = n_tok
            self.total_live += n_tok
            self.total_blocks += shared.size

    def free_sequence(self, seq_id: int) -> None:
        """Drop ``seq_id`` and give its blocks back to the allocator (last block first).

        Runtime complexity: O(blocks * block_size) (the batched-lookup index is updated lazily).
        """
        key = seq_key(seq_id)
        row = lookup_row(self, key)
        with self.lock:
            n_blocks = int(self.row_blk_len[row])
            if n_blocks:
                s = self.row_blk_start[row]
                blocks = self.blk_pool[s:s + n_blocks][::-1].copy()  # a request frees last-first
                self.allocator.free(blocks)
                kernels.release_row_blocks(blocks, row, self.block_size, self.block_row, self.block_live,
                                           self.block_fill, self.block_shared, self.slot_logical)
                self.total_blocks -= n_blocks
                self.row_blk_len[row] = 0
            self.total_live -= int(self.row_live[row])
            del self.row_of[key]
            note_index_change(self, key)
            self.row_incarnation[row] = 0
            self.row_live[row] = 0
            self.row_tok_len[row] = 0
            self.free_rows.append(row)
            self.version += 1

    # ------------------------------------------------------------------ append / evict
    def append(self, seq_ids, counts) -> np.ndarray:
        """Append ``counts[i]`` tokens to ``seq_ids[i]`` (one call per scheduler step).

        Returns the new tokens' slots (int64, batch order, ``counts[i]`` per sequence): where
        the caller writes their K/V.  Takes new blocks from the allocator as needed; raises
        :class:`OutOfBlocksError` (changing nothing) when the pool cannot hold them.
        Runtime complexity: O(sequences + tokens + new blocks), amortised.
        """
        rows = lookup_rows(self, seq_ids)
        pool_slots = self.num_blocks_total * self.block_size
        total = small_counts(counts, rows.shape[0], pool_slots)
        if total is not None:  # a short list of valid plain ints: already checked, no numpy reductions
            counts = np.array(counts, dtype=np.int64)
        else:
            counts = per_sequence_counts(counts, rows.shape[0])
            if counts.size and int(counts.max()) > pool_slots:  # also keeps the sums below from overflowing
                raise OutOfBlocksError(
                    f"appending {int(counts.max())} tokens to one sequence exceeds the pool's {pool_slots} token slots")
            total = int(counts.sum())
        with self.lock:
            need = np.empty(rows.shape[0], dtype=np.int64)
            total_need, short = kernels.blocks_needed(rows, counts, self.block_size, self.row_blk_start,
                                                      self.row_blk_len, self.row_tok_len, self.row_tok_cap,
                                                      self.row_blk_cap, self.blk_pool, self.block_row,
                                                      self.block_fill, need)
            if total_need > int(self.allocator.num_free):
                raise OutOfBlocksError(
                    f"appending {total} tokens needs {total_need} new blocks; "
                    f"the allocator has {int(self.allocator.num_free)} free")
            if total_need and self._allocate is not None:
                # allocate_many(need) equals one allocate(total) split in request order; the
                # plain-int call skips its per-call array validation (the small-batch path)
                ids = np.asarray(self._allocate(int(total_need)), dtype=np.int32)
                if rows.shape[0] == 1:
                    offsets = np.array([0, total_need], dtype=np.int64)
                else:
                    offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
                    np.cumsum(need, out=offsets[1:])
            elif total_need:
                offsets, ids = self.allocator.allocate_many(need)
                offsets = np.asarray(offsets, dtype=np.int64)
                ids = np.asarray(ids, dtype=np.int32)
                if offsets.shape[0] == need.shape[0]:  # start offsets only: close the CSR
                    offsets = np.append(offsets, ids.shape[0])
            else:
                offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
                ids = np.zeros(0, dtype=np.int32)
            if short:
                reserve(self, rows, counts, need)
            out = np.empty(total, dtype=np.int64)
            kernels.append_tokens(rows, counts, offsets, ids, self.block_size,
                                  self.row_tok_start, self.row_tok_len, self.row_blk_start, self.row_blk_len,
                                  self.row_live, self.tok_slot, self.blk_pool, self.block_row, self.block_live,
                                  self.block_fill, self.slot_logical, out)
            self.total_live += out.shape[0]
            self.total_blocks += total_need
            self.version += 1
        return out

    def evict(self, seq_id: int, logical_positions) -> None:
        """Mark ``logical_positions`` of ``seq_id`` dead (no data moves, no block is freed).

        Raises :class:`InvalidIdError` for positions out of range, repeated or already dead.
        Runtime complexity: O(positions).
        """
        row = lookup_row(self, seq_id)
        positions = as_index_array(logical_positions, "logical_positions", dtype=np.int64)
        self._evict_rows(np.array([row], dtype=np.int64), np.array([0, positions.shape[0]], dtype=np.int64),
                         positions)

    def evict_many(self, seq_ids, counts, logical_positions) -> None:
        """Batched :meth:`evict`: ``counts[i]`` positions of ``logical_positions`` per sequence."""
        rows = lookup_rows(self, seq_ids)
        counts = per_sequence_counts(counts, rows.shape[0])
        positions = as_index_array(logical_positions, "logical_positions", dtype=np.int64)
        offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        if positions.shape[0] != offsets[-1]:
            raise ShapeError(f"logical_positions must hold sum(counts) = {int(offsets[-1])} entries, got {positions.shape[0]}")
        self._evict_rows(rows, offsets, positions)

    def _evict_rows(self, rows: np.ndarray, offsets: np.ndarray, positions: np.ndarray) -> None:
        """Evict validated (rows, CSR offsets, positions): all or nothing (the kernel checks positions)."""
        with self.lock:
            status, where = kernels.evict_tokens(rows, offsets, positions, self.block_size, self.row_tok_start,
                                                 self.row_tok_len, self.row_live, self.tok_slot, self.block_row,
                                                 self.block_live, self.slot_logical)
            if status != kernels.OK:
                owner = int(np.searchsorted(offsets, where, side="right") - 1)
                row = int(rows[owner])
                what = {kernels.OUT_OF_RANGE: f"is out of range; expected positions in [0, {int(self.row_tok_len[row])})",
                        kernels.DEAD: "is already dead; expected live tokens only",
                        kernels.REPEATED: "is repeated; expected distinct positions"}[int(status)]
                raise InvalidIdError(f"logical position {int(positions[where])} of sequence {int(self.row_seq[row])} {what}")
            self.total_live -= positions.shape[0]
            self.version += 1

    # ------------------------------------------------------------------ repacking
    def plan(self, budget: int | None = None) -> RepackPlan:
        """Propose moves that free the most blocks for the fewest moved tokens (mapping unchanged).

        ``budget`` caps the number of moves (``None``: no cap, a full repack).  Blocks whose
        tokens are all dead are always included (they cost no move).  Safe to call from a
        background thread: under the lock it reads the per-block counters to find the rows with
        sparse blocks and copies only those rows' blocks (the arrays whole when those hold half
        the pool or more), then plans on the copy in a GIL-free kernel (rows whose blocks are all
        dense are planned from the counters alone).  Runtime
        complexity: O(R + B) under the lock, plus O(Bs * block_size + Bs log Bs + moves) for B
        held blocks of which Bs belong to sequences with sparse blocks, R rows.
        """
        limit = -1 if budget is None else as_count(budget, "budget", maximum=2**63 - 1)
        return plan_repack(self, limit)

    def commit(self, plan: RepackPlan, copy_slots: Callable[[np.ndarray, np.ndarray], None] | None = None) -> CommitResult:
        """Apply the moves of ``plan`` that are still valid; free the blocks they emptied.

        A move still applies when the sequence is the same, its token is still live at the
        source and the destination is still empty (appends, evictions and other commits since
        the plan may invalidate some; those are dropped and listed).  ``copy_slots(src, dst)``,
        when given, is called with the applying moves before the mapping flips (pass your KV
        arena's ``copy_slots``): the safe way to copy.  Without it the caller must have copied
        ``plan.src -> plan.dst`` itself, after the plan and before any other call that can
        write or free slots (append, free_sequence, commit).  Raises :class:`StalePlanError` for
        a plan of another table or one already committed.  Runtime complexity: O(moves + freed
        blocks * their sequences' blocks).
        """
        if not isinstance(plan, RepackPlan):
            raise BadInputError(f"plan must be a RepackPlan from TokenTable.plan(), got {type(plan).__name__}")
        if plan.table_id != self.table_id:
            raise StalePlanError(f"plan {plan.plan_id} belongs to token table {plan.table_id}, not this table ({self.table_id})")
        return commit_plan(self, plan, copy_slots)

    # ------------------------------------------------------------------ views
    def block_table(self, seq_id: int) -> np.ndarray:
        """The sequence's physical block ids (int32, PagedAttention layout; a copy)."""
        return self._blocks_of(lookup_row(self, seq_id)).copy()

    def block_tables(self, seq_ids) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`block_table` of many sequences in one call, as CSR ``(offsets int64 [n+1], ids int32)``.

        Sequence ``seq_ids[i]``'s blocks are ``ids[offsets[i]:offsets[i + 1]]``.  Runtime
        complexity: O(n log S + blocks) (one gather kernel, no Python loop per sequence).
        """
        rows = lookup_rows(self, seq_ids)
        offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.row_blk_len[rows], out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.int32)
        kernels.gather_segments(rows, self.row_blk_start, offsets, self.blk_pool, out)
        return offsets, out

    def slot_mapping(self, seq_id: int, *, live_only: bool = True) -> np.ndarray:
        """Slots of the live tokens in logical order (``live_only=False``: every token, -1 if dead)."""
        slots = self._tokens_of(lookup_row(self, seq_id))
        return slots[slots >= 0] if live_only else slots.copy()

    def live_mask(self, seq_id: int) -> np.ndarray:
        """Boolean mask over every logical position of the sequence: True where live."""
        return self._tokens_of(lookup_row(self, seq_id)) >= 0

    def positions(self, seq_id: int) -> np.ndarray:
        """Original positions (int64) of the live tokens, in logical order."""
        row = lookup_row(self, seq_id)
        return np.flatnonzero(self._tokens_of(row) >= 0).astype(np.int64) + self.row_first_position[row]

    def shared_mask(self, seq_id: int) -> np.ndarray:
        """Over the live tokens: True where the token sits in a read-only (shared) block."""
        slots = self.slot_mapping(seq_id)
        return self.block_row[slots // self.block_size] == SHARED

    def num_tokens(self, seq_id: int) -> int:
        """Logical length: tokens ever appended (dead or alive)."""
        return int(self.row_tok_len[lookup_row(self, seq_id)])

    def num_live(self, seq_id: int) -> int:
        return int(self.row_live[lookup_row(self, seq_id)])

    def num_blocks(self, seq_id: int) -> int:
        return int(self.row_blk_len[lookup_row(self, seq_id)])

    def live_counts(self, seq_ids) -> np.ndarray:
        """Live tokens per sequence (int64), batched."""
        return self.row_live[lookup_rows(self, seq_ids)].copy()

    def block_counts(self, seq_ids) -> np.ndarray:
        """Blocks held per sequence (int64), batched."""
        return self.row_blk_len[lookup_rows(self, seq_ids)].copy()

    def context_lengths(self, seq_ids) -> np.ndarray:
        """Context length to give an unmodified paged-attention kernel with ``block_table(seq)``.

        1 + the index of the sequence's last live slot in the concatenation of its blocks, or
        0: the fewest leading slots that cover every
        live token, so every slot such a kernel reads, dead ones inside included (those need a
        mask).  It equals the live count when the sequence is dense (:meth:`is_dense`), e.g.
        right after a full repack; with naive eviction (no repack) it stays near the number of
        tokens ever appended.  It measures the KV bytes a decode step reads.  Int64, batched.
        Runtime complexity: O(n log S + trailing dead slots); O(tokens) for a sequence whose last
        live token sits in a shared block.
        """
        rows = lookup_rows(self, seq_ids)
        out = np.empty(rows.shape[0], dtype=np.int64)
        kernels.context_lengths(rows, self.block_size, self.row_tok_start, self.row_tok_len, self.row_blk_start,
                                self.row_blk_len, self.blk_pool, self.tok_slot, self.block_row, self.block_fill,
                                self.slot_logical, out)
        return out

    @property
    def sequences(self) -> list[int]:
        return list(self.row_of)

    def __len__(self) -> int:
        return len(self.row_of)

    def __contains__(self, seq_id) -> bool:
        return isinstance(seq_id, (int, np.integer)) and int(seq_id) in self.row_of

    def is_dense(self, seq_id: int) -> bool:
        """True if a paged kernel with context length = live tokens reads exactly the live tokens.

        That is: every block but the last is full of live tokens, the last holds its live tokens
        at offsets ``[0, live % block_size)`` (all of it when that is 0), and there are just
        ``ceil(live / block_size)`` blocks.  Runtime complexity: O(tokens).
        """
        row = lookup_row(self, seq_id)
        live = int(self.row_live[row])
        blocks = self._blocks_of(row).astype(np.int64)
        expect = (blocks[:, None] * self.block_size + np.arange(self.block_size)).ravel()[:live]
        slots = self._tokens_of(row)
        slots = slots[slots >= 0]
        return blocks.size == -(-live // self.block_size) and np.array_equal(np.sort(slots), np.sort(expect))

    # ------------------------------------------------------------------ checks
    def snapshot(self) -> dict:
        """Copies of every array and counter (and the allocator's snapshot), for tests."""
        out = {name: getattr(self, name).copy() for name in _ARRAYS}
        # the lookup index as a map (merging it lazily is not a change of state)
        out["seq_sorted"], out["seq_sorted_rows"] = (a.copy() for a in sorted_index(self))
        out["scalars"] = np.array([self.num_rows, self.tok_end, self.blk_end, self.next_incarnation,
                                   self.total_live, self.total_blocks], dtype=np.int64)
        out["row_of"] = np.array(sorted(self.row_of.items()), dtype=np.int64).reshape(-1, 2)
        out["free_rows"] = np.array(self.free_rows, dtype=np.int64)
        out["committed_plans"] = np.array(sorted(self.committed_plans.keys()), dtype=np.int64)
        if hasattr(self.allocator, "snapshot"):
            for k, v in self.allocator.snapshot().items():
                out[f"allocator.{k}"] = np.asarray(v).copy()
        return out

    def check(self) -> None:
        """Assert every invariant of the table (expensive; for tests).  O(rows + tokens + slots)."""
        bs = self.block_size
        refs = np.asarray(self.allocator.ref_counts)
        used = np.flatnonzero(self.row_incarnation[:self.num_rows] != 0)
        # The sequence map and the in-use rows are the same set, both ways.
        assert len(self.row_of) == used.size, "row_of and in-use rows disagree"
        for seq, row in self.row_of.items():
            assert self.row_incarnation[row] != 0 and self.row_seq[row] == seq, f"row {row} does not hold sequence {seq}"
        # The sorted index, with pending adds/frees merged, holds the same map, strictly increasing.
        index_keys, index_rows = sorted_index(self)
        assert index_keys.tolist() == sorted(self.row_of), "seq_sorted disagrees with row_of"
        assert index_rows.tolist() == [self.row_of[q] for q in sorted(self.row_of)], "seq_sorted_rows wrong"
        # Every key of the stored index that is not pending a merge is still registered, at its row.
        pending = set(self.index_touched)
        for key, row in zip(self.seq_sorted.tolist(), self.seq_sorted_rows.tolist()):
            assert key in pending or self.row_of.get(key) == row, f"stale index entry for untouched sequence {key}"
        # Free rows are unused, listed once, and with used rows cover every row ever used.
        assert sorted(self.free_rows + used.tolist()) == list(range(self.num_rows)), "free/used rows do not partition rows"
        assert np.all(self.row_incarnation[self.num_rows:] == 0), "a row beyond num_rows is in use"
        # Unused rows hold nothing (add_sequence relies on it: it does not reset these).
        unused = self.row_incarnation == 0
        for counter in (self.row_live, self.row_tok_len, self.row_blk_len):
            assert not counter[unused].any(), "an unused row has tokens or blocks"
        # Every row's token and block segments fit their capacity and lie inside the pools, disjoint.
        for start, length, cap, end, what in ((self.row_tok_start, self.row_tok_len, self.row_tok_cap, self.tok_end, "token"),
                                              (self.row_blk_start, self.row_blk_len, self.row_blk_cap, self.blk_end, "block")):
            s, ln, c = start[used], length[used], cap[used]
            assert np.all(ln <= c) and np.all(s >= 0) and np.all(s + c <= end), f"a {what} segment overflows"
            order = np.argsort(s)
            assert np.all(s[order][1:] >= (s + c)[order][:-1]), f"two {what} segments overlap"
        total_live = 0
        total_blocks = 0
        seen_slot = np.zeros(self.slot_logical.shape[0], dtype=np.bool_)
        shared_holders = np.zeros(self.num_blocks_total, dtype=np.int64)
        for row in used.tolist():
            toks = self._tokens_of(row)
            blocks = self._blocks_of(row)
            # A row lists each block once, each either owned by it or shared.
            assert np.unique(blocks).size == blocks.size, f"row {row} lists a block twice"
            kinds = self.block_row[blocks]
            assert np.all((kinds == row) | (kinds == SHARED)), f"row {row} lists a block it does not hold"
            shared_holders[blocks[kinds == SHARED]] += 1
            # Live tokens sit in the row's blocks; in owned blocks the reverse map points back.
            live = np.flatnonzero(toks >= 0)
            slots = toks[live]
            assert np.all(np.isin(slots // bs, blocks)), f"row {row} has a live token outside its blocks"
            in_owned = self.block_row[slots // bs] == row
            assert np.array_equal(self.slot_logical[slots[in_owned]], live[in_owned]), f"row {row}: slot_logical mismatch"
            # No two live tokens of owned blocks share a slot.
            assert not seen_slot[slots[in_owned]].any() and np.unique(slots[in_owned]).size == in_owned.sum(), "slot used twice"
            seen_slot[slots[in_owned]] = True
            # The live counter matches.
            assert self.row_live[row] == live.size, f"row {row}: live count {self.row_live[row]} != {live.size}"
            total_live += live.size
            total_blocks += blocks.size
        # Every occupied slot is accounted for by exactly one live token (no orphans).
        assert np.array_equal(self.slot_logical >= 0, seen_slot), "an occupied slot has no live token"
        owned = np.flatnonzero(self.block_row >= 0)
        per_block = (self.slot_logical.reshape(-1, bs) >= 0)
        # Owned blocks: live count matches occupancy; slots at or past the fill are empty.
        assert np.array_equal(self.block_live[owned], per_block[owned].sum(axis=1)), "block_live mismatch"
        past_fill = np.arange(bs)[None, :] >= self.block_fill[:, None]
        assert not (per_block & past_fill).any(), "a slot at or past its block's fill is occupied"
        assert np.all((self.block_fill >= 0) & (self.block_fill <= bs)), "fill out of range"
        # Shared blocks: held read-only by exactly block_shared rows; none has a reverse map.
        shared = self.block_row == SHARED
        assert np.array_equal(shared_holders, np.where(shared, self.block_shared, 0)), "block_shared mismatch"
        assert np.all(self.block_shared[~shared] == 0), "a non-shared block has sharers"
        assert not per_block[shared].any(), "a shared block has reverse-mapped tokens"
        # Held blocks are allocated: at least one reference per holder.
        held = self.block_row != FREE
        assert np.all(refs[owned] >= 1), "an owned block has ref count 0"
        assert np.all(refs[shared] >= self.block_shared[shared]), "a shared block has fewer refs than holders"
        # Free blocks carry no state.
        assert np.all(self.block_live[~held] == 0) and not per_block[~held].any(), "a free block holds tokens"
        assert total_live == self.total_live and total_blocks == self.total_blocks, "total counters mismatch"

    # ------------------------------------------------------------------ helpers
    def _tokens_of(self, row: int) -> np.ndarray:
        s = self.row_tok_start[row]
        return self.tok_slot[s:s + self.row_tok_len[row]]

    def _blocks_of(self, row: int) -> np.ndarray:
        s = self.row_blk_start[row]
        return self.blk_pool[s:s + self.row_blk_len[row]]


_ARRAYS = ROW_ARRAYS + ("tok_slot", "blk_pool", "block_row", "block_live", "block_fill", "block_shared", "slot_logical")
