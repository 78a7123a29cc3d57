"""Qwen-Bailian request traces (JSONL, Apache-2.0) and their conversation structure.

One JSON object per line::

    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, 1091, ...]}

* ``chat_id``: the request; ``parent_chat_id``: the previous request of the same conversation
  (``-1`` for the first turn); ``turn``: its turn number;
* ``timestamp``: arrival time in seconds (kept as integer milliseconds, ``timestamp_ms``);
* ``input_length`` / ``output_length``: prompt and output tokens;
* ``type``: ``text``, ``search``, ``image`` or ``file`` (any string is kept);
* ``hash_ids``: the prompt's 16-token blocks as salted SipHash values remapped to sequential
  integers (equal ids = equal prefix up to and including that block).

The published files are Git LFS objects and are not bundled; the reader is written from the
specification above and tested on fixtures written in that format.  ``chat_id``,
``parent_chat_id``, ``turn`` and ``type`` are kept in ``trace.columns`` so per-turn reuse and
think time can be analysed (:func:`conversation_turns`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.traces.fidelity import (
    Changes,
    column_ints,
    column_strings,
    require_block_tokens,
    require_exact_seconds,
    require_non_negative,
)
from kvmm.traces.trace import (
    KVTrace,
    TraceBuilder,
    as_trace_file,
    field_int,
    field_seconds_ms,
    iter_json_lines,
    trace_name,
    uint64_list,
    write_json_lines,
)

__all__ = ["BAILIAN_BLOCK_TOKENS", "iter_bailian", "load_bailian", "write_bailian", "conversation_turns"]

#: Tokens per block in the Qwen-Bailian traces.
BAILIAN_BLOCK_TOKENS = 16

_FIELDS = "chat_id, parent_chat_id, timestamp, input_length, output_length, type, turn, hash_ids"
_COLUMNS = {"chat_id": np.int64, "parent_chat_id": np.int64, "turn": np.int64, "type": np.str_}


def iter_bailian(path: Any, *, skip_bad: bool = False, stats: dict | None = None) -> Iterator[tuple]:
    """Stream ``(timestamp_ms, input_length, output_length, chat_id, parent_chat_id, turn, type,
    hash_ids)`` tuples; bad-line rules of :mod:`kvmm.traces.trace`."""
    return iter_json_lines(as_trace_file(path), _parse, skip_bad=skip_bad, stats=stats)


def load_bailian(path: Any, *, skip_bad: bool = False) -> KVTrace:
    """Load a Qwen-Bailian JSONL trace (``block_tokens`` 16; the conversation fields in
    ``columns``).  Runtime complexity: O(file size)."""
    path = as_trace_file(path)
    stats: dict = {}
    builder = TraceBuilder(_COLUMNS)
    for ts, il, ol, chat, parent, turn, kind, ids in iter_json_lines(path, _parse, skip_bad=skip_bad, stats=stats):
        builder.add(ts, il, ol, ids, chat_id=chat, parent_chat_id=parent, turn=turn, type=kind)
    return builder.build(trace_name(path), bad_lines=stats["bad_lines"], block_tokens=BAILIAN_BLOCK_TOKENS,
                         source_format="bailian")


def write_bailian(trace: KVTrace, path: Any) -> Any:
    """Write ``trace`` as Qwen-Bailian JSONL.  Missing conversation columns are written as a
    conversation of one turn per request (``chat_id`` = request index, ``parent_chat_id`` -1,
    ``turn`` 1, ``type`` text).

    Refuses (:class:`~kvmm.errors.TraceConversionError`) what the format cannot hold: blocks
    other than 16 tokens, negative times or lengths, timestamps above 2**50 ms (float seconds),
    conversation columns its reader would reject.  Warns
    (:class:`~kvmm.errors.TraceConversionWarning`) when other columns are dropped.
    """
    require_block_tokens(trace, "bailian", BAILIAN_BLOCK_TOKENS)
    require_non_negative(trace, "bailian")
    require_exact_seconds(trace, "bailian")
    n = trace.num_requests
    chat = column_ints(trace, "bailian", "chat_id", 0)
    parent = column_ints(trace, "bailian", "parent_chat_id", -1)
    turn = column_ints(trace, "bailian", "turn", 0)
    kind = column_strings(trace, "bailian", "type")
    chat = np.arange(n) if chat is None else chat
    parent = np.full(n, -1) if parent is None else parent
    turn = np.ones(n, dtype=np.int64) if turn is None else turn
    kind = np.full(n, "text") if kind is None else kind
    Changes(trace, "bailian", _COLUMNS).warn()
    return write_json_lines(path, (
        {"chat_id": int(chat[r]), "parent_chat_id": int(parent[r]), "timestamp": int(trace.timestamp_ms[r]) / 1000.0,
         "input_length": int(trace.input_length[r]), "output_length": int(trace.output_length[r]),
         "type": str(kind[r]), "turn": int(turn[r]), "hash_ids": trace.blocks_of(r).view(np.uint64).tolist()}
        for r in range(n)))


def conversation_turns(trace: KVTrace) -> dict[str, np.ndarray]:
    """Per-request conversation view of a trace with ``chat_id`` / ``parent_chat_id`` columns.

    Returns arrays with one entry per request:

    * ``parent``: index of the parent request in the trace (-1: a first turn, or a parent
      that is not in the trace);
    * ``think_time_s``: seconds from the parent's arrival to this request's (NaN without a
      parent); this includes the parent's own generation time, which the format does not give;
    * ``reused_blocks``: length of the common block prefix with the parent (what a prefix cache
      that kept the parent's blocks could serve).

    Runtime complexity: O(requests + blocks).
    """
    if not isinstance(trace, KVTrace):
        raise BadInputError(f"conversation_turns needs a KVTrace, got {type(trace).__name__}")
    if "chat_id" not in trace.columns or "parent_chat_id" not in trace.columns:
        raise BadInputError("conversation_turns needs a trace with chat_id and parent_chat_id columns "
                            "(a Qwen-Bailian trace); this one has " + (", ".join(sorted(trace.columns)) or "none"))
    chat, parent_chat = trace.columns["chat_id"], trace.columns["parent_chat_id"]
    index = {int(c): r for r, c in enumerate(chat)}
    n = trace.num_requests
    parent = np.array([index.get(int(p), -1) if p >= 0 else -1 for p in parent_chat], dtype=np.int64)
    think = np.full(n, np.nan)
    reused = np.zeros(n, dtype=np.int64)
    for r in np.flatnonzero(parent >= 0):
        p = int(parent[r])
        think[r] = (int(trace.timestamp_ms[r]) - int(trace.timestamp_ms[p])) / 1000.0
        mine, theirs = trace.blocks_of(r), trace.blocks_of(p)
        k = min(mine.size, theirs.size)
        differ = np.flatnonzero(mine[:k] != theirs[:k])
        reused[r] = int(differ[0]) if differ.size else k
    return {"parent": parent, "think_time_s": think, "reused_blocks": reused}


def _parse(obj: Any) -> tuple:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    chat = field_int(obj, "chat_id", expected=_FIELDS)
    parent = field_int(obj, "parent_chat_id", minimum=-1, expected=_FIELDS)
    ts = field_seconds_ms(obj, "timestamp", expected=_FIELDS)
    il = field_int(obj, "input_length", expected=_FIELDS)
    ol = field_int(obj, "output_length", expected=_FIELDS)
    turn = field_int(obj, "turn", expected=_FIELDS)
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"field 'type' must be a non-empty string (text, search, image, file), got {str(kind)[:40]!r}")
    return ts, il, ol, chat, parent, turn, kind, uint64_list(obj, "hash_ids")
