"""Sequence lookups of :class:`~kvmm.allocators.token_table.TokenTable`: caller arguments to rows.

Every public call of the table starts by turning sequence ids into rows and batch arguments
(counts, positions) into validated int64 arrays.  Those paths are tuned separately (short lists
of plain ints skip numpy validation; the sorted id index for batched lookups is merged lazily),
so they live here, apart from the table's state changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvmm._validate import as_index_array
from kvmm.errors import BadInputError, DTypeError, ShapeError, UnknownSequenceError

if TYPE_CHECKING:
    from kvmm.allocators.token_table import TokenTable

#: Batches up to this size given as lists of plain ints skip numpy validation (dict lookups).
SMALL_BATCH = 64


def lookup_row(table: TokenTable, seq_id) -> int:
    """Row of the registered sequence ``seq_id`` (raises :class:`UnknownSequenceError` otherwise)."""
    key = seq_key(seq_id)
    row = table.row_of.get(key)
    if row is None:
        raise UnknownSequenceError(f"sequence {key} is not registered; call add_sequence({key}) first")
    return row


def lookup_rows(table: TokenTable, seq_ids) -> np.ndarray:
    """Rows of ``seq_ids`` (vectorised through the sorted id index).

    A short list of plain ints is looked up in ``row_of`` directly (no array, no index
    merge); anything else, or any bad id, takes the general path, which raises the error.
    Runtime complexity: O(n log S), plus O(S + k log k) once after k adds/frees.
    """
    if type(seq_ids) is list and len(seq_ids) <= SMALL_BATCH:
        rows = _small_rows(table, seq_ids)
        if rows is not None:
            return rows
    ids = as_index_array(seq_ids, "seq_ids", dtype=np.int64)
    if table.index_touched:
        with table.lock:
            table.seq_sorted, table.seq_sorted_rows = sorted_index(table)
            table.index_touched.clear()
    keys = table.seq_sorted
    idx = np.searchsorted(keys, ids)
    found = idx < keys.shape[0]
    found[found] = keys[idx[found]] == ids[found]
    if not found.all():
        s = int(ids[np.flatnonzero(~found)[0]])
        raise UnknownSequenceError(f"sequence {s} is not registered; call add_sequence({s}) first")
    rows = table.seq_sorted_rows[idx]
    # distinct ids <=> distinct rows: a count per row (O(n + rows)) for large batches, else a sort
    if rows.shape[0] > 1:
        if 16 * rows.shape[0] >= table.num_rows:
            repeated = int(np.bincount(rows).max()) > 1
        else:
            ordered = np.sort(rows)
            repeated = bool((ordered[1:] == ordered[:-1]).any())
        if repeated:
            raise BadInputError("seq_ids repeats a sequence; expected each sequence at most once per call")
    return rows


def _small_rows(table: TokenTable, seq_ids: list) -> np.ndarray | None:
    """Rows of a short list of registered, distinct plain-int ids, or None (use the general path)."""
    row_of = table.row_of
    rows = []
    for key in seq_ids:
        row = row_of.get(key) if type(key) is int else None
        if row is None:
            return None
        rows.append(row)
    if len(rows) > 1 and len(set(rows)) != len(rows):
        return None
    return np.array(rows, dtype=np.int64)


def note_index_change(table: TokenTable, key: int) -> None:
    """Queue ``key`` for the next index merge (caller holds the lock).

    Small batches bypass the index, so merges may not come by themselves: merge once the
    queue outgrows the map (amortised O(1 + log k) per change).
    """
    table.index_touched.append(key)
    if len(table.index_touched) > max(SMALL_BATCH * 64, len(table.row_of)):
        table.seq_sorted, table.seq_sorted_rows = sorted_index(table)
        table.index_touched.clear()


def sorted_index(table: TokenTable) -> tuple[np.ndarray, np.ndarray]:
    """The sorted (sequence id, row) index with pending adds/frees merged (stores nothing).

    Entries of every touched key (added or freed since the last merge, in any order, even
    freed and re-added) are dropped, then the touched keys still registered are inserted at
    their current rows; when ``4 k >= S`` the index is rebuilt from the map instead.  Runtime
    complexity: O(S) array moves + O(k log k) for S sequences and k touched keys (O(S log S)
    for a rebuild).
    """
    keys, rows = table.seq_sorted, table.seq_sorted_rows
    if not table.index_touched:
        return keys, rows
    if 4 * len(table.index_touched) >= len(table.row_of):  # most of the map changed: rebuild it
        n = len(table.row_of)
        keys = np.fromiter(table.row_of.keys(), dtype=np.int64, count=n)
        rows = np.fromiter(table.row_of.values(), dtype=np.int64, count=n)
        order = np.argsort(keys, kind="stable")
        return keys[order], rows[order]
    touched = np.unique(np.array(table.index_touched, dtype=np.int64))
    at = np.searchsorted(keys, touched)
    hit = at < keys.shape[0]
    hit[hit] = keys[at[hit]] == touched[hit]
    keys, rows = np.delete(keys, at[hit]), np.delete(rows, at[hit])
    current = np.array([table.row_of.get(k, -1) for k in touched.tolist()], dtype=np.int64)  # -1: freed
    live = current >= 0
    added, added_rows = touched[live], current[live]
    at = np.searchsorted(keys, added)
    return np.insert(keys, at, added), np.insert(rows, at, added_rows)


def seq_key(seq_id) -> int:
    if type(seq_id) is int and -(2**63) <= seq_id < 2**63:  # the common case, checked cheaply
        return seq_id
    if isinstance(seq_id, (bool, np.bool_)) or not isinstance(seq_id, (int, np.integer)):
        raise DTypeError(f"seq_id must be an integer, got {seq_id!r} ({type(seq_id).__name__})")
    key = int(seq_id)
    if not -(2**63) <= key < 2**63:  # ids live in int64 arrays
        raise BadInputError(f"seq_id {key} does not fit int64; expected an id in [-2**63, 2**63)")
    return key


def small_counts(counts, n: int, limit: int) -> int | None:
    """Sum of ``counts`` if it is a list of ``n`` plain ints in ``[0, limit]``, else None."""
    if type(counts) is not list or len(counts) != n or n > SMALL_BATCH:
        return None
    total = 0
    for c in counts:
        if type(c) is not int or c < 0 or c > limit:
            return None
        total += c
    return total


def per_sequence_counts(counts, n: int) -> np.ndarray:
    """``counts`` as a new int64 array of ``n`` entries ``>= 0`` (one per sequence of a batch)."""
    counts = as_index_array(counts, "counts", dtype=np.int64)
    if counts.shape != (n,):
        raise ShapeError(f"counts must have one entry per sequence ({n}), got shape {counts.shape}")
    if counts.size and int(counts.min()) < 0:
        raise BadInputError(f"counts must be >= 0, got {int(counts.min())}")
    return counts
