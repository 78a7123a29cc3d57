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

from typing import Any, Iterator

import numpy as np

from kvmm.traces.trace import (KVTrace, TraceBuilder, as_trace_file, field_int, field_seconds_ms, hash_list,
                               iter_json_lines, trace_name, write_json_lines)

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
    Python's ``hash()`` gives them; ``request_id`` defaults to the request index)."""
    rid = trace.columns.get("request_id", np.arange(trace.num_requests).astype(str))
    chunk = trace.columns.get("chunk_size", np.full(trace.num_requests, trace.block_tokens))
    return write_json_lines(path, (
        {"timestamp": int(trace.timestamp_ms[r]) / 1000.0, "request_id": str(rid[r]), "chunk_size": int(chunk[r]),
         "seq_len": int(trace.input_length[r]), "chunk_hashes": trace.blocks_of(r).tolist()}
        for r in range(trace.num_requests)))


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
