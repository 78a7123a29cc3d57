"""vLLM KV-cache events (``vllm/distributed/kv_events.py``) saved to a file, as a kvmm trace.

vLLM's ``ZmqEventPublisher`` sends each ``KVEventBatch`` as one msgpack payload (the third ZMQ
frame), encoded by ``msgspec.msgpack.Encoder``.  A saved stream is read in either encoding:

* **msgpack**: the payloads concatenated, as a subscriber appends them to a file
  (``fh.write(payload)`` per message);
* **JSONL**: one batch (or one event) per line, the JSON form of the same structs
  (``msgspec.json.encode(batch)``).

Both wire shapes msgspec has produced are accepted, for the batch and for each event:

* positional (structs declared ``array_like=True``, vLLM before PR #42892): a batch is
  ``[ts, [event, ...], data_parallel_rank?]``; an event is ``[tag, field, ...]`` in declaration
  order: ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
  medium, lora_name, extra_keys?, group_idx?, ...]``, ``["BlockRemoved", block_hashes, medium,
  group_idx?]``, ``["AllBlocksCleared"]``;
* named (map encoding, later vLLM): a batch is ``{"ts": ..., "events": [...],
  "data_parallel_rank": ...}``; an event is ``{"type": "BlockStored", "block_hashes": [...],
  "parent_block_hash": ..., "block_size": 16, "medium": "GPU", ...}``.

Fields with defaults may be omitted (``omit_defaults=True``); unknown fields are ignored.
``block_hashes`` are vLLM's ``ExternalBlockHash``: an unsigned 64-bit integer
(``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``), or the raw hash bytes, of which the last 8 are kept
big-endian, the same integer vLLM itself derives (``maybe_convert_block_hash``); in JSON,
msgspec writes bytes as base64 strings.

Trace model: each ``BlockStored`` event becomes one request.  Its blocks are the event's
``block_hashes`` preceded (``ancestors=True``, the default) by the cached prefix they extend:
``parent_block_hash`` and its own ancestors, followed through earlier ``BlockStored`` events.
The prefix blocks were cache hits (vLLM emits no event for a hit), the event's own blocks were
stored; ``columns["new_blocks"]`` counts the latter.  ``timestamp_ms`` is the batch's ``ts``;
``input_length`` is blocks x ``block_size``; ``output_length`` is 0 (events carry no request
ids or output lengths, so a decode step that fills a block is a request of its own).
The prefix is followed through the blocks as they were when stored: a stored block's parent is
the *latest* stored occurrence of its ``parent_block_hash`` at that moment (a parent hash never
stored in the stream is a one-block prefix of its own), and storing a hash again later does not
rewrite the prefixes of blocks stored before.  For vLLM's chained hashes (a hash always has the
same parent) this is simply the chain; for other input it cannot loop.

Representation: requests share their prefixes.  The trace is a
:class:`~kvmm.traces.shared_prefix.SharedPrefixTrace` holding one parent pointer per stored
block, so reading is linear in the events and blocks of the file (a chain of 20,000 one-block
events, whose requests list 2 * 10^8 block references, loads in well under a second and a few
MB); the flat ``block_ids`` array is built on first read, so every consumer of
:class:`~kvmm.traces.KVTrace` works unchanged and pays for the references it reads.
``BlockRemoved`` / ``AllBlocksCleared`` events create no requests; streaming readers count
them in ``stats``.  Events of an unknown type are ignored and counted in
``stats["unknown_events"]``.  ``medium`` / ``group_idx`` keep only the events of one tier or
KV-cache group (an event without ``medium`` counts as ``"GPU"``).

Bad records: a batch that cannot be decoded or does not have the shapes above is a bad record
(:class:`TraceFormatError` naming the file and the 1-based line or msgpack object; skipped
and counted with ``skip_bad=True``).  A msgpack stream cannot be resynchronised after
undecodable bytes: with ``skip_bad=True`` the rest of the file counts as one bad record.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import BadInputError, TraceConversionError, TraceFormatError
from kvmm.traces.fidelity import Changes, column_ints, require_exact_seconds, require_non_negative
from kvmm.traces.shared_prefix import SharedPrefixTrace
from kvmm.traces.trace import (
    KVTrace,
    as_trace_file,
    atomic_file,
    hash_word,
    iter_json_lines,
    trace_name,
    write_json_lines,
)

__all__ = ["load_vllm_kv_events", "iter_vllm_kv_events", "iter_vllm_requests", "write_vllm_kv_events", "vllm_events_encoding"]

#: Positional field order of the array_like event structs (after the tag).
_POSITIONAL = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                    "lora_name", "extra_keys", "group_idx"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx"),
    "AllBlocksCleared": (),
}
_MSGPACK_HINT = "reading msgpack KV events needs the msgpack package: pip install 'kvmm[traces]' (or msgpack)"


def load_vllm_kv_events(path: Any, *, encoding: str | None = None, ancestors: bool = True, medium: str | None = None,
                        group_idx: int | None = None, skip_bad: bool = False, stats: dict | None = None) -> KVTrace:
    """Load a saved vLLM KV-event stream as a trace (model: see the module docstring).

    ``encoding``: ``"msgpack"`` or ``"jsonl"`` (default: detected from the first byte).
    ``stats``: filled with ``stored_events``, ``removed_blocks``, ``cleared``,
    ``unknown_events`` and ``bad_lines``.  Returns a :class:`~kvmm.traces.shared_prefix.SharedPrefixTrace`:
    requests share their prefix chains (one parent pointer per stored block), so loading is
    O(events + stored blocks) in time and memory even when the requests' prefixes, listed out,
    are quadratic (a chain of n one-block events has n (n + 1) / 2 block references); the flat
    ``block_ids`` is built on first read.
    """
    path = as_trace_file(path, "vLLM KV-event")
    stats = {} if stats is None else stats
    forest = _Forest()
    times, ranks, last, new, sizes = [], [], [], [], []
    for ts_ms, dp, node, fresh, block_size in _requests(path, encoding, ancestors, medium, group_idx, skip_bad,
                                                        stats, forest):
        times.append(ts_ms)
        ranks.append(dp)
        last.append(node)
        new.append(fresh)
        sizes.append(block_size)
    trace = SharedPrefixTrace(
        trace_name(path), np.asarray(times, dtype=np.int64), np.zeros(len(times), dtype=np.int64),
        np.zeros(len(times), dtype=np.int64), np.asarray(last, dtype=np.int64), np.asarray(forest.parent, dtype=np.int64),
        np.asarray(forest.ids, dtype=np.uint64).view(np.int64), np.asarray(forest.depth, dtype=np.int64),
        bad_lines=stats["bad_lines"], block_tokens=sizes[0] if sizes else 16, source_format="vllm",
        columns={"new_blocks": np.asarray(new, dtype=np.int64), "data_parallel_rank": np.asarray(ranks, dtype=np.int64)})
    trace.input_length = np.diff(trace.block_offsets) * np.asarray(sizes, dtype=np.int64)
    return trace


def iter_vllm_kv_events(path: Any, *, encoding: str | None = None, skip_bad: bool = False,
                        stats: dict | None = None) -> Iterator[tuple[float | None, int, list[tuple]]]:
    """Stream the decoded batches: ``(ts_seconds or None, data_parallel_rank or -1, events)``
    with each event one of ``("BlockStored", hashes, parent, block_size, medium, group_idx)``,
    ``("BlockRemoved", hashes, medium, group_idx)``, ``("AllBlocksCleared",)``; hashes are
    64-bit words (ints in ``[0, 2**64)``), ``parent`` may be ``None``."""
    path = as_trace_file(path, "vLLM KV-event")
    if stats is None:
        stats = {}
    stats.setdefault("bad_lines", 0)
    stats.setdefault("unknown_events", 0)
    encoding = vllm_events_encoding(path) if encoding is None else encoding
    if encoding == "jsonl":
        return iter_json_lines(path, lambda obj: _batch(obj, stats), skip_bad=skip_bad, stats=stats)
    if encoding == "msgpack":
        return _iter_msgpack(path, skip_bad, stats)
    raise BadInputError(f"encoding must be 'msgpack' or 'jsonl', got {encoding!r}")


def vllm_events_encoding(path: Path) -> str:
    """``"jsonl"`` when the first non-blank byte opens a JSON value (``{`` or ``[``; neither can
    start a msgpack batch), else ``"msgpack"``."""
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if head[:1] in (b"{", b"[") else "msgpack"


def write_vllm_kv_events(trace: KVTrace, path: Any, *, encoding: str = "msgpack", block_size: int | None = None,
                         medium: str = "GPU") -> Path:
    """Write ``trace`` as the KV events a prefix-caching vLLM whose cache never evicts would
    publish for it: per request,
    one batch (``ts`` = arrival in seconds, ``data_parallel_rank`` 0) holding one
    ``BlockStored`` event for the blocks after its longest already-stored prefix, with
    ``parent_block_hash`` the last block of that prefix (no event when every block is stored).
    Named (map) encoding; ``token_ids`` is empty (kvmm traces carry no tokens).

    Loading the file back with ``ancestors=True`` gives the trace's requests that store at
    least one block, unchanged, when the trace's ids are prefix-chained (an id always follows
    the same parent), as in Mooncake and Qwen-Bailian traces.  A trace whose ids are not is
    refused (:class:`~kvmm.errors.TraceConversionError`: the events record one parent per
    block, so the reader would rebuild other prefixes), as are negative timestamps, timestamps
    above 2**50 ms and a trace that stores no block with a ``block_size`` other than 16 (no
    event to carry it).  ``columns["data_parallel_rank"]`` is written (-1: none).  A
    :class:`~kvmm.errors.TraceConversionWarning` says what else the reload changes: requests
    that store no block (no event), ``input_length`` (reloads as blocks x ``block_size``),
    ``output_length`` (0), ``new_blocks`` (recomputed) and other columns (dropped).
    """
    if encoding not in ("msgpack", "jsonl"):
        raise BadInputError(f"encoding must be 'msgpack' or 'jsonl', got {encoding!r}")
    block_size = as_count(trace.block_tokens if block_size is None else block_size, "block_size", minimum=1)
    if not isinstance(medium, str):
        raise BadInputError(f"medium must be a string such as 'GPU', got {medium!r}")
    require_non_negative(trace, "vllm", ("timestamp_ms",))
    require_exact_seconds(trace, "vllm")
    ranks = column_ints(trace, "vllm", "data_parallel_rank", -1)
    _require_prefix_chained(trace)
    stored: set[int] = set()
    batches, kept, new = [], [], []
    for r in range(trace.num_requests):
        ids = trace.blocks_of(r).view(np.uint64).tolist()
        cached = 0
        while cached < len(ids) and ids[cached] in stored:
            cached += 1
        if cached == len(ids):
            continue
        stored.update(ids[cached:])
        kept.append(r)
        new.append(len(ids) - cached)
        event = {"type": "BlockStored", "block_hashes": ids[cached:],
                 "parent_block_hash": ids[cached - 1] if cached else None, "token_ids": [],
                 "block_size": int(block_size), "lora_id": None, "medium": medium, "lora_name": None}
        rank = 0 if ranks is None else int(ranks[r])
        batches.append({"ts": int(trace.timestamp_ms[r]) / 1000.0, "events": [event],
                        "data_parallel_rank": None if rank < 0 else rank})
    if not batches and block_size != 16:
        raise TraceConversionError(f"trace {trace.name!r} stores no block, so no event records its block_size "
                                   f"{block_size}; it would reload with 16")
    _warn_vllm_changes(trace, kept, new, block_size)
    if encoding == "jsonl":
        return write_json_lines(path, batches)
    msgpack = _msgpack()
    with atomic_file(path) as fh:
        for batch in batches:
            fh.write(msgpack.packb(batch, use_bin_type=True))
    return Path(path)


def _require_prefix_chained(trace: KVTrace) -> None:
    """Each id must have one predecessor (or always open its request) across the trace."""
    ids = trace.block_ids.view(np.uint64)
    if ids.size < 2:
        return
    opens = np.zeros(ids.size, dtype=bool)
    counts = np.diff(trace.block_offsets)
    opens[trace.block_offsets[:-1][counts > 0]] = True
    pred = np.empty_like(ids)
    pred[0] = 0
    pred[1:] = ids[:-1]
    pred[opens] = 0
    order = np.lexsort((pred, opens, ids))
    i, o, p = ids[order], opens[order], pred[order]
    clash = np.flatnonzero((i[1:] == i[:-1]) & ((o[1:] != o[:-1]) | (p[1:] != p[:-1])))
    if clash.size:
        a, b = int(order[clash[0]]), int(order[clash[0] + 1])
        where = [("opens a request" if opens[k] else f"follows block {int(pred[k])}") for k in (a, b)]
        req = np.searchsorted(trace.block_offsets, [a, b], side="right") - 1
        raise TraceConversionError(
            f"trace {trace.name!r} is not prefix-chained: block {int(ids[a])} {where[0]} in request {int(req[0])} and "
            f"{where[1]} in request {int(req[1])}; vLLM events record one parent per block, so the reader would "
            "rebuild other prefixes (write it as mooncake, bailian or lmcache)")


def _warn_vllm_changes(trace: KVTrace, kept: list[int], new: list[int], block_size: int) -> None:
    changes = Changes(trace, "vllm", ("new_blocks", "data_parallel_rank"))
    n, k = trace.num_requests, np.asarray(kept, dtype=np.int64)
    if len(kept) < n:
        changes.add(f"{n - len(kept)} of {n} requests store no new block, publish no event and are not in the "
                    "reloaded trace")
    changes.differs("input_length", trace.input_length[k], np.diff(trace.block_offsets)[k] * block_size,
                    f"is not carried (reloads as blocks x {block_size})")
    changes.differs("output_length", trace.output_length[k], np.zeros(k.size, dtype=np.int64), "is not carried (reloads as 0)")
    if "new_blocks" in trace.columns:
        changes.differs("new_blocks", np.asarray(trace.columns["new_blocks"])[k], np.asarray(new, dtype=np.int64),
                        "is recomputed from the blocks each request stores")
    changes.warn()


def iter_vllm_requests(path: Any, *, encoding: str | None = None, ancestors: bool = True, medium: str | None = None,
                       group_idx: int | None = None, skip_bad: bool = False,
                       stats: dict | None = None) -> Iterator[tuple[int, int, list[int], int, int]]:
    """Stream the trace's requests: ``(ts_ms, dp_rank, block ids, new blocks, block_size)`` per
    kept ``BlockStored`` event (model: module docstring).  Memory: one parent pointer per stored
    block; time O(blocks yielded) (a request's whole prefix is listed)."""
    path = as_trace_file(path, "vLLM KV-event")
    stats = {} if stats is None else stats
    forest = _Forest()
    return ((ts, dp, forest.path(node), new, bs)
            for ts, dp, node, new, bs in _requests(path, encoding, ancestors, medium, group_idx, skip_bad, stats, forest))


# ------------------------------------------------------------------------------ internals
class _Forest:
    """The prefix forest being read: one node per stored block (parent pointers, see
    :mod:`kvmm.traces.shared_prefix`) and the latest node of each block hash."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.latest: dict[int, int] = {}

    def add(self, h: int, parent: int) -> int:
        node = len(self.ids)
        self.ids.append(h)
        self.parent.append(parent)
        self.depth.append(1 if parent < 0 else self.depth[parent] + 1)
        self.latest[h] = node
        return node

    def path(self, node: int) -> list[int]:
        out = []
        while node >= 0:
            out.append(self.ids[node])
            node = self.parent[node]
        out.reverse()
        return out


def _requests(path: Path, encoding, ancestors: bool, medium, group_idx, skip_bad: bool, stats: dict, forest: _Forest):
    """``(ts_ms, dp, last node, new blocks, block_size)`` per kept ``BlockStored`` event, growing
    ``forest``.  Runtime complexity: O(1) per block hash."""
    for key in ("stored_events", "removed_blocks", "cleared"):
        stats.setdefault(key, 0)
    last_ts_ms = 0
    latest, add = forest.latest, forest.add
    for ts, dp, events in iter_vllm_kv_events(path, encoding=encoding, skip_bad=skip_bad, stats=stats):
        if ts is not None:
            last_ts_ms = int(round(ts * 1000))
        for ev in events:
            if ev[0] == "BlockRemoved":
                stats["removed_blocks"] += len(ev[1])
                continue
            if ev[0] == "AllBlocksCleared":
                stats["cleared"] += 1
                continue
            _, hashes, parent, block_size, ev_medium, ev_group = ev
            if medium is not None and (ev_medium or "GPU") != medium:
                continue
            if group_idx is not None and (ev_group or 0) != group_idx:
                continue
            stats["stored_events"] += 1
            node = -1
            if ancestors and parent is not None:
                node = latest.get(parent, -1)
                if node < 0:  # a parent never stored in this stream: the prefix is that one block
                    node = add(parent, -1)
            for h in hashes:
                node = add(h, node)
            yield last_ts_ms, dp, node, len(hashes), block_size


def _iter_msgpack(path: Path, skip_bad: bool, stats: dict) -> Iterator[tuple]:
    msgpack = _msgpack()
    size = path.stat().st_size
    with open(path, "rb") as fh:
        unpacker = msgpack.Unpacker(fh, raw=False, strict_map_key=False, max_buffer_size=max(size, 1 << 20))
        number = 0
        while True:
            number += 1
            try:
                obj = next(unpacker)
            except StopIteration:
                if unpacker.tell() < size:  # bytes left that do not form a whole object
                    _bad(path, f"msgpack object {number}", "truncated msgpack object at the end of the file",
                         skip_bad, stats)
                return
            except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
                _bad(path, f"msgpack object {number}", f"undecodable msgpack ({type(exc).__name__}: {exc}); the "
                     "rest of the file cannot be resynchronised", skip_bad, stats)
                return
            try:
                yield _batch(obj, stats)
            except ValueError as exc:
                _bad(path, f"msgpack object {number}", str(exc), skip_bad, stats)


def _bad(path: Path, where: str, why: str, skip_bad: bool, stats: dict) -> None:
    if not skip_bad:
        raise TraceFormatError(f"{path}: {where}: {why}")
    stats["bad_lines"] += 1


def _batch(obj: Any, stats: dict) -> tuple:
    """A decoded batch (or bare event) as ``(ts or None, dp_rank, [event tuples])``."""
    if isinstance(obj, dict) and "events" in obj:
        ts, events, dp = obj.get("ts"), obj["events"], obj.get("data_parallel_rank")
    elif isinstance(obj, dict) or (isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], str)):
        ts, events, dp = None, [obj], None  # one event on its own
    elif isinstance(obj, (list, tuple)) and len(obj) in (2, 3):
        ts, events, dp = obj[0], obj[1], obj[2] if len(obj) == 3 else None
    else:
        raise ValueError(f"expected a KV event batch ([ts, events, dp_rank] or {{'ts', 'events', ...}}) or one event, "
                         f"got {str(obj)[:60]!r}")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts)
                           or not 0 <= ts < 2**63 / 1000):
        raise ValueError(f"batch ts must be a finite non-negative number of seconds, got {str(ts)[:40]!r}")
    if dp is not None and (isinstance(dp, bool) or not isinstance(dp, int) or not 0 <= dp < 2**31):
        raise ValueError(f"data_parallel_rank must be a non-negative integer or null, got {str(dp)[:40]!r}")
    if not isinstance(events, (list, tuple)):
        raise ValueError(f"batch events must be a list, got {type(events).__name__}")
    parsed = []
    for ev in events:
        item = _event(ev)
        if item is None:
            stats["unknown_events"] = stats.get("unknown_events", 0) + 1
        else:
            parsed.append(item)
    return (None if ts is None else float(ts)), (-1 if dp is None else dp), parsed


def _event(ev: Any) -> tuple | None:
    if isinstance(ev, dict):
        tag, fields = ev.get("type"), ev
    elif isinstance(ev, (list, tuple)) and ev and isinstance(ev[0], str):
        tag = ev[0]
        fields = dict(zip(_POSITIONAL.get(tag, ()), ev[1:]))
    else:
        raise ValueError(f"expected a tagged KV event (map with 'type' or [tag, ...]), got {str(ev)[:60]!r}")
    if not isinstance(tag, str):
        raise ValueError(f"event type must be a string, got {str(tag)[:40]!r}")
    if tag == "AllBlocksCleared":
        return (tag,)
    if tag not in _POSITIONAL:
        return None
    hashes = fields.get("block_hashes")
    if not isinstance(hashes, (list, tuple)):
        raise ValueError(f"{tag}.block_hashes must be a list, got {str(hashes)[:60]!r}")
    words = [_hash(h) for h in hashes]
    ev_medium, ev_group = fields.get("medium"), fields.get("group_idx")
    if ev_medium is not None and not isinstance(ev_medium, str):
        raise ValueError(f"{tag}.medium must be a string or null, got {str(ev_medium)[:40]!r}")
    if ev_group is not None and (isinstance(ev_group, bool) or not isinstance(ev_group, int)):
        raise ValueError(f"{tag}.group_idx must be an integer or null, got {str(ev_group)[:40]!r}")
    if tag == "BlockRemoved":
        return tag, words, ev_medium, ev_group
    parent = fields.get("parent_block_hash")
    block_size = fields.get("block_size")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or not 1 <= block_size < 2**31:
        raise ValueError(f"BlockStored.block_size must be a positive integer, got {str(block_size)[:40]!r}")
    return tag, words, (None if parent is None else _hash(parent)), block_size, ev_medium, ev_group


def _hash(h: Any) -> int:
    if isinstance(h, str):  # msgspec's JSON form of bytes
        try:
            h = base64.b64decode(h, validate=True)
        except ValueError:
            raise ValueError(f"string block hash {h[:40]!r} is not base64 (msgspec's JSON form of bytes)") from None
    return hash_word(h)


def _msgpack():
    try:  # the optional traces extra
        import msgpack
    except ImportError:  # pragma: no cover - msgpack is in the test extra
        raise ImportError(_MSGPACK_HINT) from None
    return msgpack
