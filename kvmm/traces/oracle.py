"""libCacheSim's ``oracleGeneral`` binary trace format: read and write.

A file is a flat array of packed 24-byte little-endian records, one per object reference::

    offset 0   u32  time               (seconds)
    offset 4   u64  obj_id
    offset 12  u32  size               (bytes; kvmm writes 1 per block by default)
    offset 16  i64  next_access_vtime  (1-based index of the next reference to obj_id, -1: none)

Worked example: the references ``7, 9, 7`` at second 0 are the records
``(0, 7, 1, 3), (0, 9, 1, -1), (0, 7, 1, -1)``.

The format has no request boundaries, so a loaded trace has one request per record (one block
each; ``input_length`` is the record's size, the ``obj_size`` and ``next_access_vtime`` fields
are kept in ``columns``).  Writing a kvmm trace keeps the block reference order and each
request's arrival second, so libCacheSim can simulate any kvmm trace
(``libcachesim.TraceReader(path, libcachesim.TraceType.ORACLE_GENERAL_TRACE)``).  Compressed
(``.zst``) files must be decompressed first.

Bad records: a file whose size is not a multiple of 24 has a torn last record, and a record
with ``next_access_vtime < -1`` is malformed; both raise :class:`TraceFormatError` naming the
1-based record, or are skipped and counted with ``skip_bad=True``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import BadInputError, TraceConversionError, TraceFormatError
from kvmm.traces.fidelity import Changes, column_ints
from kvmm.traces.trace import KVTrace, as_trace_file, atomic_file, trace_name

__all__ = ["ORACLE_GENERAL_DTYPE", "load_oracle_general", "iter_oracle_general_chunks", "write_oracle_general"]

#: The record layout (packed, little-endian).
ORACLE_GENERAL_DTYPE = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("size", "<u4"), ("next_access_vtime", "<i8")])
assert ORACLE_GENERAL_DTYPE.itemsize == 24

_U32_MAX = 2**32 - 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def load_oracle_general(path: Any, *, skip_bad: bool = False) -> KVTrace:
    """Load an ``oracleGeneral`` file: one request (of one block) per record.
    Runtime complexity: O(records)."""
    path = as_trace_file(path)
    records, bad = _read_checked(path, 0, None, skip_bad)
    n = records.shape[0]
    sizes = records["size"].astype(np.int64)
    return KVTrace(
        name=trace_name(path),
        timestamp_ms=records["time"].astype(np.int64) * 1000,
        input_length=sizes,
        output_length=np.zeros(n, dtype=np.int64),
        block_offsets=np.arange(n + 1, dtype=np.int64),
        block_ids=records["obj_id"].view(np.int64).copy(),
        bad_lines=bad,
        block_tokens=1,
        columns={"obj_size": sizes, "next_access_vtime": records["next_access_vtime"].astype(np.int64)},
        source_format="oracle",
    )


def iter_oracle_general_chunks(path: Any, chunk_refs: int = 1 << 20, *, skip_bad: bool = False,
                               stats: dict | None = None) -> Iterator[np.ndarray]:
    """Stream the object ids (int64 words) in chunks of ``chunk_refs`` records; memory
    O(chunk_refs)."""
    path = as_trace_file(path)
    chunk_refs = as_count(chunk_refs, "chunk_refs", minimum=1)
    if stats is not None:
        stats.setdefault("bad_lines", 0)
    total = path.stat().st_size // ORACLE_GENERAL_DTYPE.itemsize
    start = 0
    while True:
        count = min(chunk_refs, total - start)
        records, bad = _read_checked(path, start, count, skip_bad, last=start + count >= total)
        if stats is not None:
            stats["bad_lines"] += bad
        if records.size:
            yield records["obj_id"].view(np.int64).copy()
        start += count
        if start >= total:
            return


def write_oracle_general(trace: KVTrace, path: Any, *, obj_size: int | None = None) -> Path:
    """Write every block reference of ``trace`` as one record, in order (atomically: a
    temporary file renamed over ``path``).

    ``time`` is the request's arrival in whole seconds; ``size`` is ``obj_size`` for every
    record (default: the trace's ``obj_size`` column when every request is one block, as in a
    loaded oracle trace, else 1); ``next_access_vtime`` is computed.  Timestamps outside
    ``[0, 2**32)`` seconds are refused (:class:`~kvmm.errors.TraceConversionError`).  The format
    keeps only the reference stream, so a :class:`~kvmm.errors.TraceConversionWarning` says
    what the reload changes: request boundaries (one request per block), milliseconds, the
    block size (1), input lengths (the records' size), output lengths (0) and other columns.
    Runtime complexity: O(refs log refs).
    """
    if obj_size is not None and (isinstance(obj_size, bool) or not isinstance(obj_size, (int, np.integer))
                                 or not 0 <= obj_size <= _U32_MAX):
        raise BadInputError(f"obj_size must be an integer in [0, 2**32), got {obj_size!r}")
    counts = np.diff(trace.block_offsets)
    seconds = trace.timestamp_ms // 1000
    if seconds.size and (int(seconds.min()) < 0 or int(seconds.max()) > _U32_MAX):
        raise TraceConversionError(f"timestamps span [{int(seconds.min())}, {int(seconds.max())}] s; oracleGeneral "
                                   "stores u32 seconds (rebase the trace's timestamps to start near 0)")
    one_each = bool(np.all(counts == 1))
    sizes = column_ints(trace, "oracle", "obj_size", 0) if obj_size is None and one_each else None
    if sizes is not None and sizes.size and int(sizes.max()) > _U32_MAX:
        raise TraceConversionError(f"trace {trace.name!r}: obj_size values must fit u32, got {int(sizes.max())}")
    sizes = np.full(int(counts.sum()), 1 if obj_size is None else obj_size, dtype=np.int64) if sizes is None else sizes
    _warn_oracle_changes(trace, counts, sizes, one_each)
    records = np.zeros(trace.block_ids.shape[0], dtype=ORACLE_GENERAL_DTYPE)
    records["time"] = np.repeat(seconds, counts)
    records["obj_id"] = trace.block_ids.view(np.uint64)
    records["size"] = sizes
    records["next_access_vtime"] = next_access_vtime(trace.block_ids)
    with atomic_file(path) as fh:
        records.tofile(fh)
    return Path(path)


def _warn_oracle_changes(trace: KVTrace, counts: np.ndarray, sizes: np.ndarray, one_each: bool) -> None:
    changes = Changes(trace, "oracle", ("obj_size", "next_access_vtime"))
    if not one_each:
        changes.add(f"request boundaries are not kept: {trace.num_requests} requests become {int(counts.sum())} "
                    "one-block requests")
    if np.any(trace.timestamp_ms % 1000):
        changes.add("timestamps keep whole seconds only (milliseconds dropped)")
    if trace.block_tokens != 1:
        changes.add(f"block_tokens {trace.block_tokens} reloads as 1 (the format has no block size)")
    if one_each:
        changes.differs("input_length", trace.input_length, sizes, "reloads as the records' size")
    changes.differs("output_length", trace.output_length, np.zeros_like(trace.output_length), "is not carried (reloads as 0)")
    if one_each and "next_access_vtime" in trace.columns:
        changes.differs("next_access_vtime", np.asarray(trace.columns["next_access_vtime"]),
                        next_access_vtime(trace.block_ids), "is recomputed from the references")
    changes.warn()


def next_access_vtime(ids: np.ndarray) -> np.ndarray:
    """For each reference, the 1-based index of the next reference to the same id, else -1.
    Runtime complexity: O(n log n)."""
    n = ids.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return out
    order = np.argsort(ids, kind="stable")  # equal ids stay in reference order
    same = ids[order[1:]] == ids[order[:-1]]
    out[order[:-1][same]] = order[1:][same] + 1
    return out


def _read_checked(path: Path, start: int, count: int | None, skip_bad: bool, last: bool = True) -> tuple[np.ndarray, int]:
    """Records ``[start, start + count)`` (``None``: to the end) and the number of bad ones dropped."""
    if start == 0:
        with open(path, "rb") as fh:
            if fh.read(4) == _ZSTD_MAGIC:
                raise BadInputError(f"{path} is zstd-compressed; decompress it first (zstd -d {path.name})")
    size = path.stat().st_size
    total = size // ORACLE_GENERAL_DTYPE.itemsize
    if count is None:
        count = total - start
    with open(path, "rb") as fh:
        fh.seek(start * ORACLE_GENERAL_DTYPE.itemsize)
        records = np.fromfile(fh, dtype=ORACLE_GENERAL_DTYPE, count=count)
    bad = 0
    malformed = np.flatnonzero(records["next_access_vtime"] < -1)
    if malformed.size:
        if not skip_bad:
            i = int(malformed[0])
            raise TraceFormatError(f"{path}: record {start + i + 1}: next_access_vtime "
                                   f"{int(records['next_access_vtime'][i])} must be -1 or a reference index")
        records = np.delete(records, malformed)
        bad += int(malformed.size)
    if last and size % ORACLE_GENERAL_DTYPE.itemsize:
        if not skip_bad:
            raise TraceFormatError(f"{path}: record {total + 1}: torn record ({size % ORACLE_GENERAL_DTYPE.itemsize} "
                                   f"of {ORACLE_GENERAL_DTYPE.itemsize} bytes); the file size must be a multiple of 24")
        bad += 1
    return records, bad
