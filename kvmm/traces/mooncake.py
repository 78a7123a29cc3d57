"""Mooncake FAST'25 request traces (JSONL) and the copies bundled with kvmm.

One JSON object per line::

    {"timestamp": ms_since_start, "input_length": tokens, "output_length": tokens,
     "hash_ids": [int, ...]}

``hash_ids`` are the prompt's 512-token blocks, prefix-chained (equal ids mean equal prefix up
to and including that block).  The bundled traces are Apache-2.0, from kvcache-ai/Mooncake
(see ``kvmm/traces/data/README.md``).  Loaded traces are :class:`~kvmm.traces.KVTrace` objects
(``MooncakeTrace`` is the same class); the bad-line rules are those of
:mod:`kvmm.traces.trace`.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from kvmm.errors import BadInputError
from kvmm.traces.fidelity import Changes, require_block_tokens, require_non_negative
from kvmm.traces.trace import (
    MOONCAKE_BLOCK_TOKENS,
    KVTrace,
    MooncakeRecord,
    MooncakeTrace,
    TraceBuilder,
    as_trace_file,
    field_int,
    iter_json_lines,
    trace_name,
    uint64_list,
    write_json_lines,
)

__all__ = ["MooncakeRecord", "MooncakeTrace", "iter_mooncake", "load_mooncake", "write_mooncake",
           "bundled_trace_path", "resolve_trace_path", "BUNDLED_TRACES", "MOONCAKE_BLOCK_TOKENS"]

#: Bundled trace names -> file names in ``kvmm/traces/data``.
BUNDLED_TRACES = {"conversation": "conversation_trace.jsonl", "synthetic": "synthetic_trace.jsonl"}

_FIELDS = "timestamp, input_length, output_length, hash_ids"


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled trace: ``"conversation"`` or ``"synthetic"``."""
    if not isinstance(name, str) or name not in BUNDLED_TRACES:
        raise BadInputError(f"unknown bundled trace {name!r}; expected one of {sorted(BUNDLED_TRACES)}")
    return Path(str(resources.files("kvmm.traces") / "data" / BUNDLED_TRACES[name]))


def resolve_trace_path(path_or_name: Any) -> tuple[Path, str]:
    """``(path, name)`` of a bundled trace name or an existing trace file, else :class:`BadInputError`."""
    if isinstance(path_or_name, str) and path_or_name in BUNDLED_TRACES:
        return bundled_trace_path(path_or_name), path_or_name
    try:
        path = as_trace_file(path_or_name)
    except BadInputError as exc:
        if "does not exist" not in str(exc):
            raise
        raise BadInputError(f"trace {str(path_or_name)!r} is neither a file nor a bundled trace name "
                            f"{sorted(BUNDLED_TRACES)}") from None
    return path, trace_name(path)


def iter_mooncake(path: Any, *, skip_bad: bool = False, stats: dict | None = None) -> Iterator[MooncakeRecord]:
    """Stream the records of a Mooncake JSONL file (constant memory).

    The path is checked at the call (a missing file, a directory or ``None``:
    :class:`BadInputError`).  A malformed line (bad JSON or UTF-8, nested too deeply, a missing
    field, a value out of range) raises :class:`TraceFormatError` naming the file and the
    1-based line; with ``skip_bad=True`` it is skipped and counted in ``stats["bad_lines"]``.
    ``hash_ids`` may be any 64-bit unsigned integers (``< 2**64``); the other fields must fit
    int64.
    """
    return iter_json_lines(as_trace_file(path), _parse, skip_bad=skip_bad, stats=stats)


def load_mooncake(path_or_name: Any, *, skip_bad: bool = False) -> KVTrace:
    """Load a whole trace into arrays.  ``path_or_name`` may be a bundled name.

    Neither an existing file nor a bundled name (``None`` included): :class:`BadInputError`.
    Runtime complexity: O(file size).
    """
    path, name = resolve_trace_path(path_or_name)
    stats: dict = {}
    builder = TraceBuilder()
    for rec in iter_json_lines(path, _parse, skip_bad=skip_bad, stats=stats):
        builder.add(rec.timestamp_ms, rec.input_length, rec.output_length, rec.hash_ids)
    return builder.build(name, bad_lines=stats["bad_lines"], block_tokens=MOONCAKE_BLOCK_TOKENS,
                         source_format="mooncake")


def write_mooncake(trace: KVTrace, path: Any) -> Path:
    """Write ``trace`` as Mooncake JSONL (``timestamp`` in ms; ids as unsigned 64-bit integers).

    Refuses (:class:`~kvmm.errors.TraceConversionError`) a trace whose blocks are not 512 tokens
    or with negative times or lengths; warns (:class:`~kvmm.errors.TraceConversionWarning`)
    that its columns are dropped: the format has none.
    """
    require_block_tokens(trace, "mooncake", MOONCAKE_BLOCK_TOKENS)
    require_non_negative(trace, "mooncake")
    Changes(trace, "mooncake").warn()
    return write_json_lines(path, ({"timestamp": int(trace.timestamp_ms[r]), "input_length": int(trace.input_length[r]),
                                    "output_length": int(trace.output_length[r]),
                                    "hash_ids": trace.blocks_of(r).view("uint64").tolist()}
                                   for r in range(trace.num_requests)))


def _parse(obj: Any) -> MooncakeRecord:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    ts, il, ol = (field_int(obj, f, expected=_FIELDS) for f in ("timestamp", "input_length", "output_length"))
    return MooncakeRecord(ts, il, ol, tuple(uint64_list(obj, "hash_ids")))
