"""Mooncake FAST'25 request traces (JSONL) and the copies bundled with kvmm.

One JSON object per line::

    {"timestamp": ms_since_start, "input_length": tokens, "output_length": tokens,
     "hash_ids": [int, ...]}

``hash_ids`` are the prompt's 512-token blocks, prefix-chained (equal ids mean equal prefix up
to and including that block).  The bundled traces are Apache-2.0, from kvcache-ai/Mooncake
(see ``kvmm/traces/data/README.md``).

Layout of a loaded trace (CSR over requests), worked example for two requests with 3 and 2
blocks::

    block_offsets = [0, 3, 5]          # request r owns block_ids[block_offsets[r]:block_offsets[r+1]]
    block_ids     = [0, 1, 2, 0, 7]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator

import numpy as np

from kvmm.errors import BadInputError, TraceFormatError

__all__ = ["MooncakeRecord", "MooncakeTrace", "iter_mooncake", "load_mooncake", "bundled_trace_path", "BUNDLED_TRACES"]

#: Bundled trace names -> file names in ``kvmm/traces/data``.
BUNDLED_TRACES = {"conversation": "conversation_trace.jsonl", "synthetic": "synthetic_trace.jsonl"}

_UTF8_BOM = b"\xef\xbb\xbf"
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1

#: Tokens per block in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class MooncakeRecord:
    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass
class MooncakeTrace:
    """A whole trace as arrays (CSR over requests; see the module docstring)."""

    name: str
    timestamp_ms: np.ndarray  # int64, one per request
    input_length: np.ndarray  # int64
    output_length: np.ndarray  # int64
    block_offsets: np.ndarray  # int64, len = requests + 1
    block_ids: np.ndarray  # int64, all requests' hash_ids concatenated (ids >= 2**63: same 64-bit word)
    bad_lines: int = 0

    @property
    def num_requests(self) -> int:
        return int(self.timestamp_ms.shape[0])

    def blocks_of(self, request: int) -> np.ndarray:
        return self.block_ids[self.block_offsets[request] : self.block_offsets[request + 1]]

    def records(self) -> Iterator[MooncakeRecord]:
        for r in range(self.num_requests):
            yield MooncakeRecord(
                int(self.timestamp_ms[r]), int(self.input_length[r]), int(self.output_length[r]),
                tuple(int(v) for v in self.blocks_of(r)),
            )


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled trace: ``"conversation"`` or ``"synthetic"``."""
    if name not in BUNDLED_TRACES:
        raise BadInputError(f"unknown bundled trace {name!r}; expected one of {sorted(BUNDLED_TRACES)}")
    return Path(str(resources.files("kvmm.traces") / "data" / BUNDLED_TRACES[name]))


def iter_mooncake(path: str | Path, *, skip_bad: bool = False, stats: dict | None = None) -> Iterator[MooncakeRecord]:
    """Stream the records of a Mooncake JSONL file (constant memory).

    A malformed line (bad JSON or UTF-8, a missing field, a value out of range) raises
    :class:`TraceFormatError` naming the file and the 1-based line; with ``skip_bad=True`` it is
    skipped and counted in ``stats["bad_lines"]`` instead.  Blank lines are ignored; ``\n`` and
    ``\r\n`` line ends, a last line without one, a UTF-8 byte-order mark at the start and
    unknown extra fields are accepted.  ``hash_ids`` may be any 64-bit unsigned integers
    (``< 2**64``); the other fields must fit int64.
    """
    path = Path(path)
    if stats is not None:
        stats.setdefault("bad_lines", 0)
    # Binary lines, decoded one at a time: a bad byte is then an error of its own line (and
    # skippable), not of whatever text-mode read buffer it falls in.
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM):]
            if not raw.strip():
                continue
            try:
                rec = _parse(raw)
            except ValueError as exc:
                if not skip_bad:
                    raise TraceFormatError(f"{path}:{lineno}: {exc}") from None
                if stats is not None:
                    stats["bad_lines"] += 1
                continue
            yield rec


def load_mooncake(path_or_name: str | Path, *, skip_bad: bool = False) -> MooncakeTrace:
    """Load a whole trace into arrays.  ``path_or_name`` may be a bundled name.

    Neither an existing file nor a bundled name: :class:`BadInputError`.
    """
    if isinstance(path_or_name, str) and path_or_name in BUNDLED_TRACES:
        path = bundled_trace_path(path_or_name)
        name = path_or_name
    else:
        path = Path(path_or_name)
        name = path.stem
        if not path.is_file():
            raise BadInputError(f"trace {str(path_or_name)!r} is neither a file nor a bundled trace name "
                                f"{sorted(BUNDLED_TRACES)}")
    stats: dict = {}
    ts, il, ol, offsets, ids = [], [], [], [0], []
    for rec in iter_mooncake(path, skip_bad=skip_bad, stats=stats):
        ts.append(rec.timestamp_ms)
        il.append(rec.input_length)
        ol.append(rec.output_length)
        ids.extend(rec.hash_ids)
        offsets.append(len(ids))
    return MooncakeTrace(
        name=name,
        timestamp_ms=np.asarray(ts, dtype=np.int64),
        input_length=np.asarray(il, dtype=np.int64),
        output_length=np.asarray(ol, dtype=np.int64),
        block_offsets=np.asarray(offsets, dtype=np.int64),
        # ids >= 2**63 keep their 64-bit word (two's complement), as the trackers read keys
        block_ids=np.asarray(ids, dtype=np.uint64).view(np.int64),
        bad_lines=stats.get("bad_lines", 0),
    )


def _parse(raw: bytes) -> MooncakeRecord:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    out = []
    for field_name in ("timestamp", "input_length", "output_length"):
        if field_name not in obj:
            raise ValueError(f"missing field {field_name!r}; expected timestamp, input_length, output_length, hash_ids")
        v = obj[field_name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > _INT64_MAX:
            raise ValueError(f"field {field_name!r} must be a non-negative integer below 2**63, got {v!r}")
        out.append(v)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 or h > _UINT64_MAX
                                        for h in ids):
        raise ValueError(f"field 'hash_ids' must be a list of non-negative integers below 2**64, got {str(ids)[:60]!r}")
    return MooncakeRecord(out[0], out[1], out[2], tuple(ids))
