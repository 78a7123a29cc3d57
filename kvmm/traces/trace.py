"""The one trace object every reader returns (:class:`KVTrace`) and the rules they share.

A trace is a sequence of requests; each request references an ordered list of KV blocks
(prefix order), identified by 64-bit ids.  Layout (CSR over requests), worked example for two
requests with 3 and 2 blocks::

    block_offsets = [0, 3, 5]          # request r owns block_ids[block_offsets[r]:block_offsets[r+1]]
    block_ids     = [0, 1, 2, 0, 7]

Format-specific per-request fields (a Qwen-Bailian ``chat_id``, an LMCache ``request_id``, ...)
live in ``columns``: name -> array with one entry per request.

Shared bad-input rules (every reader):

* the path must be an existing file: ``None``, a directory or a missing file raise
  :class:`~kvmm.errors.BadInputError` at the call, before any record is read;
* a malformed record raises :class:`~kvmm.errors.TraceFormatError` naming the file and the
  1-based line (JSONL) or record (binary formats); with ``skip_bad=True`` it is skipped and
  counted instead (``trace.bad_lines``, or ``stats["bad_lines"]`` when streaming);
* JSONL: blank lines are ignored; ``\\n`` / ``\\r\\n`` line ends, a last line without one, a
  UTF-8 byte-order mark at the start and unknown extra fields are accepted; a line nested too
  deeply for the JSON parser is a malformed line like any other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvmm.errors import BadInputError, TraceFormatError

__all__ = ["KVTrace", "MooncakeTrace", "MooncakeRecord", "MOONCAKE_BLOCK_TOKENS", "TraceBuilder",
           "as_trace_file", "iter_json_lines", "block_chunks", "trace_name", "write_json_lines", "atomic_file"]

#: the one message for a trace without requests (``kvmm mrc`` and ``kvmm simulate`` alike)
NO_REQUESTS = "the trace has no requests; expected at least one"

#: Tokens per block in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512

_UTF8_BOM = b"\xef\xbb\xbf"
INT64_MAX = 2**63 - 1
UINT64_MASK = 2**64 - 1


@dataclass(frozen=True)
class MooncakeRecord:
    """One request of a trace (what :meth:`KVTrace.records` yields)."""

    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass
class KVTrace:
    """A whole trace as arrays (CSR over requests; see the module docstring).

    ``block_ids`` are 64-bit words held as int64 (an id ``>= 2**63`` keeps its bit pattern, as
    the trackers read keys).  ``block_tokens`` is the tokens per block of the source format
    (Mooncake 512, Qwen-Bailian 16, LMCache its ``chunk_size``, vLLM its ``block_size``).
    ``columns``: extra per-request arrays of the source format, each of length
    ``num_requests``; ``source_format``: the reader that produced it.
    """

    name: str
    timestamp_ms: np.ndarray  # int64, one per request
    input_length: np.ndarray  # int64
    output_length: np.ndarray  # int64
    block_offsets: np.ndarray  # int64, len = requests + 1
    block_ids: np.ndarray  # int64, all requests' blocks concatenated
    bad_lines: int = 0
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    source_format: str = "mooncake"

    @property
    def num_requests(self) -> int:
        return int(self.timestamp_ms.shape[0])

    def blocks_of(self, request: int) -> np.ndarray:
        return self.block_ids[self.block_offsets[request] : self.block_offsets[request + 1]]

    def head(self, n: int) -> KVTrace:
        """The first ``n`` requests (all of them when ``n >= num_requests``), columns included.

        Arrays are views of this trace's.  Runtime complexity: O(number of columns).
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise BadInputError(f"n must be a non-negative integer, got {n!r}")
        k = min(int(n), self.num_requests)
        if k == self.num_requests:
            return self
        end = int(self.block_offsets[k])
        return KVTrace(f"{self.name}[:{k}]", self.timestamp_ms[:k], self.input_length[:k], self.output_length[:k],
                       self.block_offsets[: k + 1], self.block_ids[:end], self.bad_lines, self.block_tokens,
                       {name: col[:k] for name, col in self.columns.items()}, self.source_format)

    def records(self) -> Iterator[MooncakeRecord]:
        for r in range(self.num_requests):
            yield MooncakeRecord(
                int(self.timestamp_ms[r]), int(self.input_length[r]), int(self.output_length[r]),
                tuple(int(v) for v in self.blocks_of(r).view(np.uint64)),
            )

    def check(self) -> None:
        """Assert every invariant of the layout.  Runtime complexity: O(requests + blocks)."""
        n = self.num_requests
        # one timestamp, input and output length per request, all int64
        for arr in (self.timestamp_ms, self.input_length, self.output_length):
            assert arr.dtype == np.int64 and arr.shape == (n,)
        # offsets: n + 1 non-decreasing entries from 0 to the number of block references
        off = self.block_offsets
        assert off.dtype == np.int64 and off.shape == (n + 1,) and off[0] == 0
        assert np.all(np.diff(off) >= 0) and off[-1] == self.block_ids.shape[0]
        # block ids are one flat int64 array
        assert self.block_ids.dtype == np.int64 and self.block_ids.ndim == 1
        # every extra column has one entry per request
        for name, col in self.columns.items():
            assert len(col) == n, name
        assert self.bad_lines >= 0 and self.block_tokens >= 1


#: The reader-neutral name is :class:`KVTrace`; this alias keeps older code working.
MooncakeTrace = KVTrace


class TraceBuilder:
    """Accumulates requests row by row, then builds a :class:`KVTrace` (used by every reader).

    ``columns``: name -> numpy dtype of the extra per-request fields the format carries.
    Block ids are Python ints in ``[0, 2**64)``.
    Runtime complexity: O(1) amortised per block added, O(total) for :meth:`build`.
    """

    def __init__(self, columns: dict[str, Any] | None = None) -> None:
        self.times: list[int] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.offsets: list[int] = [0]
        self.ids: list[int] = []
        self.column_dtypes = dict(columns or {})
        self.columns: dict[str, list] = {name: [] for name in self.column_dtypes}

    def add(self, timestamp_ms: int, input_length: int, output_length: int, ids: Iterable[int], **columns: Any) -> None:
        self.times.append(timestamp_ms)
        self.inputs.append(input_length)
        self.outputs.append(output_length)
        self.ids.extend(ids)
        self.offsets.append(len(self.ids))
        for name, values in self.columns.items():
            values.append(columns[name])

    def build(self, name: str, *, bad_lines: int = 0, block_tokens: int = MOONCAKE_BLOCK_TOKENS,
              source_format: str = "mooncake") -> KVTrace:
        return KVTrace(
            name=name,
            timestamp_ms=np.asarray(self.times, dtype=np.int64),
            input_length=np.asarray(self.inputs, dtype=np.int64),
            output_length=np.asarray(self.outputs, dtype=np.int64),
            block_offsets=np.asarray(self.offsets, dtype=np.int64),
            block_ids=np.asarray(self.ids, dtype=np.uint64).view(np.int64),
            bad_lines=bad_lines,
            block_tokens=block_tokens,
            columns={n: np.asarray(v, dtype=self.column_dtypes[n]) for n, v in self.columns.items()},
            source_format=source_format,
        )


def as_trace_file(path: Any, what: str = "trace") -> Path:
    """``path`` as a :class:`Path` to an existing regular file, or :class:`BadInputError`."""
    if not isinstance(path, (str, os.PathLike)):
        raise BadInputError(f"{what} path must be a str or os.PathLike, got {type(path).__name__}")
    try:
        p = Path(path)
        exists, is_dir = p.exists(), p.is_dir()
    except (TypeError, ValueError, OSError) as exc:  # embedded NUL, name too long, ...
        raise BadInputError(f"{what} path {str(path)!r} is not usable: {exc}") from None
    if is_dir:
        raise BadInputError(f"{what} path {str(p)!r} is a directory; expected a trace file")
    if not exists:
        raise BadInputError(f"{what} file {str(p)!r} does not exist")
    return p


def trace_name(path: Path) -> str:
    """A trace's display name: its file name without the known format suffixes."""
    name = path.name
    for suffix in (".zst", ".bin", ".oracleGeneral", ".jsonl", ".json", ".msgpack", ".mpk"):
        if name.lower().endswith(suffix.lower()) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def write_json_lines(path: Any, rows: Iterable[dict]) -> Path:
    """Write one JSON object per line (the JSONL writers of every format), atomically."""
    with atomic_file(path) as fh:
        for row in rows:
            fh.write((json.dumps(row, separators=(", ", ": ")) + "\n").encode("utf-8"))
    return Path(path)


@contextmanager
def atomic_file(path: Any) -> Iterator[Any]:
    """A binary file handle whose content replaces ``path`` only when the block completes:
    written to ``<path>.tmp``, synced, renamed over ``path``; on an error the temporary file
    is removed and ``path`` is untouched.  Every trace writer uses it, so no trace is left torn."""
    path = require_folder(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def require_folder(path: Any) -> Path:
    """``path`` as a :class:`Path` whose folder exists, else :class:`BadInputError`."""
    path = Path(path)
    if not path.parent.is_dir():
        raise BadInputError(f"cannot write trace {str(path)!r}: its folder {str(path.parent)!r} does not exist")
    return path


def iter_json_lines(path: Path, parse: Callable[[Any], Any], *, skip_bad: bool = False,
                    stats: dict | None = None) -> Iterator[Any]:
    """Yield ``parse(obj)`` for each JSON line of ``path``, with the shared bad-line rules.

    ``parse`` raises ``ValueError`` (message: what is wrong, what was expected) for a bad
    record.  ``path`` must already be checked by :func:`as_trace_file`.
    """
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
                rec = parse(json_value(raw))
            except ValueError as exc:
                if not skip_bad:
                    raise TraceFormatError(f"{path}:{lineno}: {exc}") from None
                if stats is not None:
                    stats["bad_lines"] += 1
                continue
            yield rec


def json_value(raw: bytes) -> Any:
    """Decode one JSON line; any failure (bad UTF-8, bad JSON, too deep) is a ``ValueError``."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise ValueError(f"not valid JSON ({exc})") from None


def block_chunks(records: Iterable[tuple], chunk_refs: int) -> Iterator[np.ndarray]:
    """Group the block ids of streamed records (``(..., ids)`` tuples, ids last) into int64
    arrays of about ``chunk_refs`` references each (a request is never split)."""
    pending: list[int] = []
    for rec in records:
        pending.extend(rec[-1])
        if len(pending) >= chunk_refs:
            yield np.asarray(pending, dtype=np.uint64).view(np.int64)
            pending = []
    if pending:
        yield np.asarray(pending, dtype=np.uint64).view(np.int64)


# ---------------------------------------------------------------------------- field checks
def field_int(obj: dict, name: str, *, minimum: int = 0, maximum: int = INT64_MAX, expected: str = "") -> int:
    """``obj[name]`` as an int in ``[minimum, maximum]`` (bools rejected), else ``ValueError``."""
    if name not in obj:
        raise ValueError(f"missing field {name!r}" + (f"; expected {expected}" if expected else ""))
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > maximum:
        raise ValueError(f"field {name!r} must be an integer in [{minimum}, {maximum}], got {str(v)[:60]!r}")
    return v


def field_seconds_ms(obj: dict, name: str, expected: str = "") -> int:
    """A non-negative time in seconds (int or float) as integer milliseconds."""
    if name not in obj:
        raise ValueError(f"missing field {name!r}" + (f"; expected {expected}" if expected else ""))
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < INT64_MAX / 1000):
        raise ValueError(f"field {name!r} must be a finite non-negative number of seconds, got {str(v)[:60]!r}")
    return int(round(v * 1000))


_INT_ONLY = {int}


def uint64_list(obj: dict, name: str) -> list[int]:
    """``obj[name]``: a list of non-negative integers below ``2**64`` (the block ids of the
    Mooncake and Qwen-Bailian formats, bools rejected), else ``ValueError``."""
    ids = obj.get(name)
    if type(ids) is list and (not ids or ({*map(type, ids)} == _INT_ONLY and min(ids) >= 0 and max(ids) <= UINT64_MASK)):
        return ids  # fast path: plain ints in range (what json.loads gives)
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 or h > UINT64_MASK
                                        for h in ids):
        raise ValueError(f"field {name!r} must be a list of non-negative integers below 2**64, got {str(ids)[:60]!r}")
    return ids


def hash_word(h: Any) -> int:
    """A block hash as a 64-bit word in ``[0, 2**64)``.

    Integers in ``[-2**63, 2**64)`` keep their 64-bit pattern (negative ones, e.g. Python
    ``hash()`` values, wrap as two's complement); ``bytes`` and hex strings keep their last 8
    bytes, big-endian, which is how vLLM turns its byte hashes into integers
    (``maybe_convert_block_hash``).
    """
    if isinstance(h, bool):
        raise ValueError(f"a block hash must be an integer, bytes or a hex string, got {h!r}")
    if isinstance(h, int):
        if not -(2**63) <= h <= UINT64_MASK:
            raise ValueError(f"block hash {h} does not fit 64 bits")
        return h & UINT64_MASK
    if isinstance(h, (bytes, bytearray)):
        if not h:
            raise ValueError("empty bytes block hash")
        return int.from_bytes(bytes(h[-8:]), "big")
    if isinstance(h, str):
        text = h[2:] if h[:2].lower() == "0x" else h
        try:
            raw = bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)
        except ValueError:
            raise ValueError(f"block hash {h[:40]!r} is not a hex string") from None
        if not raw:
            raise ValueError("empty block hash string")
        return int.from_bytes(raw[-8:], "big")
    raise ValueError(f"a block hash must be an integer, bytes or a hex string, got {type(h).__name__}")


def hash_list(obj: dict, name: str) -> list[int]:
    """``obj[name]``: a list of block hashes (see :func:`hash_word`) as 64-bit words."""
    ids = obj.get(name)
    if not isinstance(ids, list):
        raise ValueError(f"field {name!r} must be a list of block hashes, got {str(ids)[:60]!r}")
    return [hash_word(h) for h in ids]
