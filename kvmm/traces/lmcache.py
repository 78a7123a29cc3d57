"""LMCache lookup-hash logs (JSONL): the chunk hashes LMCache looked up for each request.

No published schema was found for these logs; the reader takes the field list kvmm was asked
to support (``timestamp``, ``request_id``, ``chunk_size``, ``seq_len``, ``chunk_hashes``), one
JSON object per line, as below.

One JSON object per lookup::

    {"timestamp": 1733145600.25, "request_id": "cmpl-7f3a", "chunk_size": 256, "seq_len": 1000,
     "chunk_hashes": [-4512962519012345678, 8123456789012345678, ...]}

* ``timestamp``: seconds (any epoch; kept as integer milliseconds);
* ``request_id``: string or integer (kept as a string column);
* ``chunk_size``: tokens per chunk (the trace's ``block_tokens`` is the first record's);
* ``seq_len``: tokens looked up (the request's ``input_length``);
* ``chunk_hashes``: the prefix-chained chunk hashes, in order.  LMCache hashes with Python's
  ``hash()``, so values are signed 64-bit integers; unsigned 64-bit integers and hex strings
  (last 8 bytes kept) are accepted too.  Ids keep their 64-bit pattern.

Bad-line rules: those of :mod:`kvmm.traces.trace`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kvmm.errors import TraceConversionError
from kvmm.traces.fidelity import Changes, column_ints, require_exact_seconds, require_non_negative
from kvmm.traces.trace import (
    MOONCAKE_BLOCK_TOKENS,
    KVTrace,
    TraceBuilder,
    as_trace_file,
    field_int,
    field_seconds_ms,
    hash_list,
    iter_json_lines,
    trace_name,
    write_json_lines,
)

__all__ = ["iter_lmcache", "load_lmcache", "write_lmcache"]

_FIELDS = "timestamp, request_id, chunk_size, seq_len, chunk_hashes"
_COLUMNS = {"request_id": np.str_, "chunk_size": np.int64}


def iter_lmcache(path: Any, *, skip_bad: bool = False, stats: dict | None = None) -> Iterator[tuple]:
    """Stream ``(timestamp_ms, seq_len, request_id, chunk_size, chunk_hashes)`` tuples."""
    return iter_json_lines(as_trace_file(path), _parse, skip_bad=skip_bad, stats=stats)


def load_lmcache(path: Any, *, skip_bad: bool = False) -> KVTrace:
    """Load an LMCache lookup-hash log (one request per lookup; ``output_length`` 0).
    Runtime complexity: O(file size)."""
    path = as_trace_file(path)
    stats: dict = {}
    builder = TraceBuilder(_COLUMNS)
    for ts, seq_len, rid, chunk, ids in iter_json_lines(path, _parse, skip_bad=skip_bad, stats=stats):
        builder.add(ts, seq_len, 0, ids, request_id=rid, chunk_size=chunk)
    trace = builder.build(trace_name(path), bad_lines=stats["bad_lines"], source_format="lmcache")
    if trace.num_requests:
        trace.block_tokens = int(trace.columns["chunk_size"][0])
    return trace


def write_lmcache(trace: KVTrace, path: Any) -> Any:
    """Write ``trace`` as an LMCache lookup-hash log (hashes as signed 64-bit integers, as
    Python's ``hash()`` gives them; ``request_id`` defaults to the request index, ``chunk_size``
    to ``block_tokens``).

    Refuses (:class:`~kvmm.errors.TraceConversionError`): negative times or lengths, timestamps
    above 2**50 ms, a ``chunk_size`` column whose first value is not ``block_tokens`` (the
    reader takes the block size from the first record), an empty trace whose blocks are not
    512 tokens (no record to carry it).  Warns (:class:`~kvmm.errors.TraceConversionWarning`):
    output lengths (the log has none: they reload as 0) and other columns are dropped.
    """
    require_non_negative(trace, "lmcache", ("timestamp_ms", "input_length"))
    require_exact_seconds(trace, "lmcache")
    n = trace.num_requests
    chunk = column_ints(trace, "lmcache", "chunk_size", 1)
    if chunk is None:
        chunk = np.full(n, trace.block_tokens)
    if n and int(chunk[0]) != trace.block_tokens:
        raise TraceConversionError(f"trace {trace.name!r} has block_tokens {trace.block_tokens} but its first "
                                   f"chunk_size is {int(chunk[0])}; an LMCache log's block size is its first record's "
                                   "chunk_size, so it would reload differently")
    if not n and trace.block_tokens != MOONCAKE_BLOCK_TOKENS:
        raise TraceConversionError(f"empty trace {trace.name!r} has {trace.block_tokens}-token blocks; an LMCache log "
                                   f"records the block size only in its records (an empty one reloads as "
                                   f"{MOONCAKE_BLOCK_TOKENS})")
    rid = trace.columns.get("request_id", np.arange(n).astype(str))
    changes = Changes(trace, "lmcache", _COLUMNS)
    changes.differs("output_length", trace.output_length, np.zeros(n, dtype=np.int64), "is not carried (reloads as 0)")
    changes.warn()
    return write_json_lines(path, (
        {"timestamp": int(trace.timestamp_ms[r]) / 1000.0, "request_id": str(rid[r]), "chunk_size": int(chunk[r]),
         "seq_len": int(trace.input_length[r]), "chunk_hashes": trace.blocks_of(r).tolist()}
        for r in range(n)))


def _parse(obj: Any) -> tuple:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    ts = field_seconds_ms(obj, "timestamp", expected=_FIELDS)
    rid = obj.get("request_id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise ValueError(f"field 'request_id' must be a string or an integer, got {str(rid)[:40]!r}")
    chunk = field_int(obj, "chunk_size", minimum=1, expected=_FIELDS)
    seq_len = field_int(obj, "seq_len", expected=_FIELDS)
    return ts, seq_len, str(rid), chunk, hash_list(obj, "chunk_hashes")
