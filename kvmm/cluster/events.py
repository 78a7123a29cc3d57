"""vLLM KV-event batches (``vllm/distributed/kv_events.py``) -> :class:`~kvmm.cluster.BlockIndex` calls.

The decoding is :mod:`kvmm.traces.vllm_events`'s (both wire shapes, positional and named, msgpack
or JSON): a batch becomes a list of operations, every one validated before the index changes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from kvmm.errors import BadInputError, KvmmError
from kvmm.traces.vllm_events import _batch, _msgpack

__all__ = ["decode_vllm_batch", "apply_vllm_batch"]

#: The medium of an event that names none (vLLM's default).
DEFAULT_MEDIUM = "GPU"


def decode_vllm_batch(batch: Any) -> tuple[list[tuple], int]:
    """One ``KVEventBatch`` as ``([("stored" | "removed", hashes, medium) | ("cleared",), ...],
    unknown events)``, in the batch's order; ``hashes`` are ints in ``[0, 2**64)``, ``medium``
    the event's (``"GPU"`` when it names none).

    ``batch``: the msgpack payload (bytes), one JSON line (str), the decoded object (a
    ``[ts, events, dp_rank]`` list, a ``{"ts", "events", ...}`` map, or one bare event) or a
    msgspec struct.  A batch that does not decode is a :class:`BadInputError`.
    Runtime complexity: O(blocks).
    """
    obj = _builtins(batch)
    stats: dict = {}
    try:
        _, _, events = _batch(obj, stats)
    except (ValueError, TypeError) as exc:
        raise BadInputError(f"not a vLLM KV event batch: {exc}") from None
    except OverflowError:  # an int timestamp beyond float range (10**400) fails math.isfinite
        raise BadInputError("not a vLLM KV event batch: a number (the batch ts?) is too large for a float; expected "
                            "a finite non-negative number of seconds") from None
    except RecursionError:
        raise BadInputError("not a vLLM KV event batch: it is nested too deeply; expected [ts, events, dp_rank] "
                            "with flat events") from None
    ops = []
    for ev in events:
        if ev[0] == "BlockStored":
            ops.append(("stored", ev[1], ev[4] or DEFAULT_MEDIUM))
        elif ev[0] == "BlockRemoved":
            ops.append(("removed", ev[1], ev[2] or DEFAULT_MEDIUM))
        else:
            ops.append(("cleared",))
    return ops, int(stats.get("unknown_events", 0))


def apply_vllm_batch(index, instance: int, batch: Any, *, lenient: bool = False) -> dict[str, int]:
    """:meth:`BlockIndex.apply_vllm_events <kvmm.cluster.BlockIndex.apply_vllm_events>`.

    Consecutive events of one kind go to the index as one batch call.  Strict (``lenient`` false):
    a batch whose removals all come before its first store or clear is atomic through the
    all-or-nothing ``removed_many``; otherwise the index's arrays are copied first and put back
    if a removal fails (O(entries)).  Runtime complexity: O(blocks) otherwise.
    """
    inst = index._instance(instance)
    ops, unknown = decode_vllm_batch(batch)
    for op in ops:  # every medium is known before anything changes
        if op[0] != "cleared":
            index._medium(op[2])
    width = index.key_width
    runs = _runs(ops, width or 1)  # vLLM hashes are 64-bit: an undecided index is given int64 keys (its first store decides)
    counts = {"stored": sum(len(op[1]) for op in ops if op[0] == "stored"),
              "removed": sum(len(op[1]) for op in ops if op[0] == "removed"),
              "cleared": sum(op[0] == "cleared" for op in ops), "unknown_events": unknown}
    first_other = next((k for k, run in enumerate(runs) if run[0] != "removed"), len(runs))
    needs_copy = not lenient and any(run[0] == "removed" for run in runs[first_other:])
    before = index.snapshot() if needs_copy else None
    try:
        for kind, media, offsets, keys in runs:
            if kind == "stored":
                index.stored_many(np.full(len(media), inst), offsets, keys, media)
            elif kind == "removed":
                index.removed_many(np.full(len(media), inst), offsets, keys, media, lenient=lenient)
            else:
                index.cleared(inst)
    except KvmmError:
        if before is not None:
            index.restore(before)
        index.key_width = width
        raise
    return counts


def _runs(ops: list[tuple], key_width: int) -> list[tuple]:
    """Consecutive stores (or removals) merged: ``(kind, media, offsets, keys)`` per run; a clear is a run of its own."""
    runs: list[tuple] = []
    k = 0
    while k < len(ops):
        kind = ops[k][0]
        if kind == "cleared":
            runs.append(("cleared", None, None, None))
            k += 1
            continue
        media, words = [], []
        offsets = [0]
        while k < len(ops) and ops[k][0] == kind:
            media.append(ops[k][2])
            words.extend(ops[k][1])
            offsets.append(len(words))
            k += 1
        hashes = np.array(words, dtype=np.uint64)
        if key_width == 1:
            keys = hashes.view(np.int64)
        else:
            keys = np.zeros((hashes.shape[0], 2), dtype=np.uint64)
            keys[:, 0] = hashes
        runs.append((kind, media, np.array(offsets, dtype=np.int64), keys))
    return runs


def _builtins(batch: Any) -> Any:
    """Bytes (msgpack), text (JSON) or a msgspec struct as plain lists, dicts and scalars."""
    if isinstance(batch, (bytes, bytearray, memoryview)):
        try:
            return _msgpack().unpackb(bytes(batch), raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types for bad bytes
            detail = "nested too deeply" if type(exc).__name__ == "StackError" else f"{type(exc).__name__}: {exc}"
            raise BadInputError(f"not a msgpack KV event batch: {detail}") from None
    if isinstance(batch, str):
        try:
            return json.loads(batch)
        except ValueError as exc:
            raise BadInputError(f"not a JSON KV event batch: {exc}") from None
        except RecursionError:
            raise BadInputError("not a JSON KV event batch: it is nested too deeply; expected [ts, events, "
                                "dp_rank] with flat events") from None
    if hasattr(type(batch), "__struct_fields__"):  # a msgspec Struct (vLLM's KVEventBatch itself)
        import msgspec  # no dependency of kvmm: whoever passes one of its structs has it

        return msgspec.to_builtins(batch)
    return batch
