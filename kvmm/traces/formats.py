"""One entry point for every trace format: :func:`load_trace`, :func:`save_trace`,
:func:`detect_format` and :func:`iter_trace_chunks` (streaming block ids for huge traces).

Formats (``format=`` names; aliases in :data:`FORMAT_ALIASES`):

=========== ============================================ ==================================
name        file                                         reader / writer
=========== ============================================ ==================================
mooncake    Mooncake FAST'25 JSONL (``hash_ids``)        :func:`~kvmm.traces.load_mooncake`
bailian     Qwen-Bailian JSONL (``chat_id``, ...)        :func:`~kvmm.traces.load_bailian`
lmcache     LMCache lookup-hash log JSONL                :func:`~kvmm.traces.load_lmcache`
vllm        vLLM KV events, msgpack or JSONL             :func:`~kvmm.traces.load_vllm_kv_events`
oracle      libCacheSim ``oracleGeneral`` binary         :func:`~kvmm.traces.load_oracle_general`
=========== ============================================ ==================================

Detection (``format=None``): a bundled trace name is Mooncake; ``*.oracleGeneral*`` files are
oracle, ``*.msgpack`` / ``*.mpk`` vLLM events; otherwise the content decides: the first JSON
line's fields (``chat_id`` -> bailian, ``chunk_hashes`` -> lmcache, ``hash_ids`` -> mooncake,
a batch or an event -> vllm); a binary file that decodes as a msgpack KV-event batch is vllm,
else a file whose size is a multiple of 24 is oracle.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import BadInputError
from kvmm.traces.bailian import iter_bailian, load_bailian, write_bailian
from kvmm.traces.lmcache import iter_lmcache, load_lmcache, write_lmcache
from kvmm.traces.mooncake import BUNDLED_TRACES, iter_mooncake, load_mooncake, resolve_trace_path, write_mooncake
from kvmm.traces.oracle import iter_oracle_general_chunks, load_oracle_general, write_oracle_general
from kvmm.traces.trace import KVTrace, block_chunks, json_value, require_folder
from kvmm.traces.vllm_events import iter_vllm_requests, load_vllm_kv_events, vllm_events_encoding, write_vllm_kv_events

__all__ = ["FORMATS", "FORMAT_ALIASES", "load_trace", "save_trace", "detect_format", "iter_trace_chunks",
           "format_name"]

#: Canonical format names.
FORMATS = ("mooncake", "bailian", "lmcache", "vllm", "oracle")
#: Other accepted spellings -> canonical name.
FORMAT_ALIASES = {"qwen-bailian": "bailian", "vllm-events": "vllm", "vllm-kv-events": "vllm",
                  "oraclegeneral": "oracle", "oracle-general": "oracle", "libcachesim": "oracle"}

_LOADERS: dict[str, Callable[..., KVTrace]] = {
    "mooncake": load_mooncake, "bailian": load_bailian, "lmcache": load_lmcache,
    "vllm": load_vllm_kv_events, "oracle": load_oracle_general,
}
_WRITERS: dict[str, Callable[..., Path]] = {
    "mooncake": write_mooncake, "bailian": write_bailian, "lmcache": write_lmcache,
    "vllm": write_vllm_kv_events, "oracle": write_oracle_general,
}


def format_name(format: Any) -> str:
    """The canonical name of ``format`` (case-insensitive, aliases allowed), else :class:`BadInputError`."""
    if isinstance(format, str):
        key = format.strip().lower()
        key = FORMAT_ALIASES.get(key, key)
        if key in FORMATS:
            return key
    raise BadInputError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")


def load_trace(path_or_name: Any, format: str | None = None, *, skip_bad: bool = False, **options: Any) -> KVTrace:
    """Load a trace of any supported format into a :class:`~kvmm.traces.KVTrace`.

    ``path_or_name``: a file, or a bundled trace name (``conversation``, ``synthetic``).
    ``format``: one of :data:`FORMATS` (default: :func:`detect_format`).  ``options`` go to the
    format's reader (e.g. ``medium="GPU"`` for vLLM events).  Bad input (missing file,
    directory, ``None``, unknown format): :class:`~kvmm.errors.BadInputError`; malformed
    records: :class:`~kvmm.errors.TraceFormatError` unless ``skip_bad``.
    """
    path, fmt = _resolve(path_or_name, format)
    _check_options(_LOADERS[fmt], options, fmt, "reader")
    if fmt == "mooncake":  # keeps the bundled name as the trace name
        return load_mooncake(path_or_name if isinstance(path_or_name, str) and path_or_name in BUNDLED_TRACES else path,
                             skip_bad=skip_bad, **options)
    return _LOADERS[fmt](path, skip_bad=skip_bad, **options)


def save_trace(trace: KVTrace, path: Any, format: str, **options: Any) -> Path:
    """Write ``trace`` to ``path`` in ``format`` (options go to the writer, e.g.
    ``encoding="jsonl"`` for vLLM events or ``obj_size=`` for oracle)."""
    if not isinstance(trace, KVTrace):
        raise BadInputError(f"trace must be a KVTrace, got {type(trace).__name__}")
    if not isinstance(path, (str, Path)) or Path(path).is_dir():
        raise BadInputError(f"path must be a file path (str or Path), got {path!r}")
    require_folder(path)
    try:
        trace.check()
    except (AssertionError, AttributeError, TypeError, IndexError) as exc:
        raise BadInputError(f"trace {getattr(trace, 'name', '?')!r} is not a consistent KVTrace "
                            f"({type(exc).__name__} {exc}); see KVTrace.check()") from None
    fmt = format_name(format)
    _check_options(_WRITERS[fmt], options, fmt, "writer")
    return _WRITERS[fmt](trace, path, **options)


def detect_format(path_or_name: Any) -> str:
    """Guess the format of a trace file (rules in the module docstring)."""
    path, _ = resolve_trace_path(path_or_name)
    lower = path.name.lower()
    if ".oraclegeneral" in lower:
        return "oracle"
    if lower.endswith((".msgpack", ".mpk")):
        return "vllm"
    if vllm_events_encoding(path) == "jsonl":
        return _detect_json(path)
    if _looks_like_msgpack_batch(path):
        return "vllm"
    if path.stat().st_size % 24 == 0:
        return "oracle"
    raise BadInputError(f"cannot tell the format of {str(path)!r}: not JSON lines, not a msgpack KV-event stream and "
                        f"its size is not a multiple of 24 (oracleGeneral); pass format= one of {', '.join(FORMATS)}")


def iter_trace_chunks(path_or_name: Any, format: str | None = None, *, chunk_refs: int = 1 << 18,
                      skip_bad: bool = False, stats: dict | None = None, **options: Any) -> Iterator[np.ndarray]:
    """Stream a trace's block ids as int64 arrays of about ``chunk_refs`` references, in order.

    Memory: O(chunk_refs) for Mooncake, Qwen-Bailian, LMCache and oracle files; vLLM events
    also keep the parent of every distinct block (to rebuild prefixes).
    """
    chunk_refs = as_count(chunk_refs, "chunk_refs", minimum=1)
    path, fmt = _resolve(path_or_name, format)
    if fmt == "vllm":
        _check_options(iter_vllm_requests, {**options, "skip_bad": skip_bad}, fmt, "reader")
        records = ((ids,) for _, _, ids, _, _ in iter_vllm_requests(path, skip_bad=skip_bad, stats=stats, **options))
        return block_chunks(records, chunk_refs)
    if options:  # the other streaming readers take none
        raise BadInputError(f"the {fmt} reader takes no option {', '.join(map(repr, sorted(options)))}")
    if fmt == "oracle":
        return iter_oracle_general_chunks(path, chunk_refs, skip_bad=skip_bad, stats=stats)
    streams = {"mooncake": iter_mooncake, "bailian": iter_bailian, "lmcache": iter_lmcache}
    records = streams[fmt](path, skip_bad=skip_bad, stats=stats)
    if fmt == "mooncake":
        records = ((rec.hash_ids,) for rec in records)
    return block_chunks(records, chunk_refs)


def _check_options(func: Callable, options: dict, fmt: str, what: str) -> None:
    """Unknown keyword options are bad input, not a ``TypeError`` from deep inside."""
    accepted = [n for n, p in inspect.signature(func).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise BadInputError(f"the {fmt} {what} takes no option {', '.join(map(repr, unknown))}; "
                            f"its options are {', '.join(accepted) or 'none'}")


def _resolve(path_or_name: Any, format: str | None) -> tuple[Path, str]:
    path, _ = resolve_trace_path(path_or_name)
    return path, (detect_format(path) if format is None else format_name(format))


def _detect_json(path: Path) -> str:
    with open(path, "rb") as fh:
        for raw in fh:
            raw = raw.lstrip(b"\xef\xbb\xbf")
            if raw.strip():
                break
        else:
            return "mooncake"  # an empty file: any JSONL reader gives an empty trace
    try:
        obj = json_value(raw)
    except ValueError as exc:
        raise BadInputError(f"cannot tell the format of {str(path)!r}: its first line is not JSON ({exc}); "
                            f"pass format= one of {', '.join(FORMATS)}") from None
    if isinstance(obj, dict):
        for key, fmt in (("chat_id", "bailian"), ("chunk_hashes", "lmcache"), ("hash_ids", "mooncake"),
                         ("events", "vllm"), ("type", "vllm")):
            if key in obj:
                return fmt
    if isinstance(obj, list) and obj:
        return "vllm"
    raise BadInputError(f"cannot tell the format of {str(path)!r} from its first line (fields: "
                        f"{sorted(obj) if isinstance(obj, dict) else type(obj).__name__}); "
                        f"pass format= one of {', '.join(FORMATS)}")


def _looks_like_msgpack_batch(path: Path) -> bool:
    try:  # the optional traces extra
        import msgpack
    except ImportError:  # pragma: no cover
        return False
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    try:
        obj = _first_msgpack(msgpack, head)
    except Exception:  # noqa: BLE001 - any decoding failure means "not msgpack"
        return False
    return (isinstance(obj, dict) and "events" in obj) or (
        isinstance(obj, list) and len(obj) in (2, 3) and isinstance(obj[1], list) and isinstance(obj[0], (int, float)))


def _first_msgpack(msgpack, head: bytes):
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(head)
    return next(unpacker)
