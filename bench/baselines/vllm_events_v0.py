"""The vLLM KV-event reader's prefix reconstruction before issue 19 item 3, kept verbatim as the
benchmark baseline (like ``stack_kernels_v0.py`` beside it).

Each ``BlockStored`` event walked its whole ancestor chain through a ``dict`` of parents and
built the request's block list as a Python list: O(depth) time and memory per event, so a chain
of n one-block events costs O(n^2) (20,000 events: 143 s and 3.0 GiB).  Not used by kvmm.
"""

from __future__ import annotations

from pathlib import Path

from kvmm.traces.vllm_events import iter_vllm_kv_events

__all__ = ["requests_v0"]


def requests_v0(path: Path, encoding=None, ancestors: bool = True, medium=None, group_idx=None, skip_bad: bool = False,
                stats: dict | None = None):
    """The old ``_requests`` generator: ``(ts_ms, dp, ids, new, block_size)`` per kept event."""
    return _requests(Path(path), encoding, ancestors, medium, group_idx, skip_bad, {} if stats is None else stats)


def _requests(path: Path, encoding, ancestors: bool, medium, group_idx, skip_bad: bool, stats: dict):
    for key in ("stored_events", "removed_blocks", "cleared"):
        stats.setdefault(key, 0)
    parent_of: dict[int, int | None] = {}
    last_ts_ms = 0
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
            prefix: list[int] = []
            node = parent
            while ancestors and node is not None and len(prefix) <= len(parent_of):
                prefix.append(node)
                node = parent_of.get(node)
            prefix.reverse()
            prev = parent
            for h in hashes:
                parent_of[h] = prev
                prev = h
            yield last_ts_ms, dp, prefix + hashes, len(hashes), block_size
