"""What a trace writer may change: the checks every writer runs before writing a byte.

A writer either refuses what its format cannot hold (:class:`~kvmm.errors.TraceConversionError`:
a block size the format fixes or cannot record, a timestamp or length it cannot represent, a
column value its reader would reject) or writes the trace and says, in one
:class:`~kvmm.errors.TraceConversionWarning`, what the reloaded trace loses (columns the format
has no field for, output lengths, request boundaries).  The rules per format are in
docs/traces.md ("What each format keeps").
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable

import numpy as np

from kvmm.errors import TraceConversionError, TraceConversionWarning
from kvmm.traces.trace import KVTrace

__all__ = ["Changes", "require_block_tokens", "require_non_negative", "require_exact_seconds", "column_ints",
           "column_strings"]

#: Larger timestamps do not survive ``ms / 1000`` and back through a float64 exactly.
EXACT_SECONDS_MAX_MS = 2**50


def require_block_tokens(trace: KVTrace, fmt: str, fixed: int) -> None:
    """The format fixes the block size at ``fixed`` tokens."""
    if trace.block_tokens != fixed:
        raise TraceConversionError(
            f"trace {trace.name!r} has {trace.block_tokens}-token blocks but the {fmt} format fixes {fixed}-token "
            f"blocks: its reader would read every block as {fixed} tokens. Write it as "
            + ("mooncake (512), " if fixed != 512 else "") + "lmcache or vllm, which record the block size")


def require_non_negative(trace: KVTrace, fmt: str, names: Iterable[str] = ("timestamp_ms", "input_length",
                                                                           "output_length")) -> None:
    for name in names:
        arr = getattr(trace, name)
        if arr.size and int(arr.min()) < 0:
            r = int(np.argmin(arr))
            raise TraceConversionError(f"trace {trace.name!r}: request {r} has {name} {int(arr[r])}; the {fmt} "
                                       f"format holds non-negative values only")


def require_exact_seconds(trace: KVTrace, fmt: str) -> None:
    """The format stores float seconds: each millisecond timestamp must come back exactly."""
    ts = trace.timestamp_ms
    big = np.flatnonzero(ts > EXACT_SECONDS_MAX_MS)
    if big.size:
        r = int(big[0])
        raise TraceConversionError(f"trace {trace.name!r}: request {r}'s timestamp {int(ts[r])} ms does not survive "
                                   f"the {fmt} format's float seconds exactly (at most 2**50 ms); rebase the "
                                   "timestamps to start near 0")


def column_ints(trace: KVTrace, fmt: str, name: str, minimum: int) -> np.ndarray | None:
    """Column ``name`` as int64 with every value ``>= minimum`` (``None`` when absent)."""
    col = trace.columns.get(name)
    if col is None:
        return None
    arr = np.asarray(col)
    if arr.dtype.kind not in "iu" or (arr.size and (int(arr.min()) < minimum or int(arr.max()) > 2**63 - 1)):
        raise TraceConversionError(f"trace {trace.name!r}: column {name!r} must hold integers >= {minimum} for the "
                                   f"{fmt} format, got {arr.dtype} {arr[:5].tolist()!r}")
    return arr.astype(np.int64)


def column_strings(trace: KVTrace, fmt: str, name: str) -> np.ndarray | None:
    """Column ``name`` as non-empty strings (``None`` when absent)."""
    col = trace.columns.get(name)
    if col is None:
        return None
    arr = np.asarray(col)
    if arr.dtype.kind != "U" or (arr.size and not np.all(np.char.str_len(arr) > 0)):
        raise TraceConversionError(f"trace {trace.name!r}: column {name!r} must hold non-empty strings for the "
                                   f"{fmt} format, got {arr.dtype} {arr[:5].tolist()!r}")
    return arr


class Changes:
    """What a write changes, gathered and then reported as one :class:`TraceConversionWarning`."""

    def __init__(self, trace: KVTrace, fmt: str, carried_columns: Iterable[str] = ()) -> None:
        self.trace, self.fmt = trace, fmt
        self.items: list[str] = []
        dropped = sorted(set(trace.columns) - set(carried_columns))
        if dropped:
            self.add(f"columns {', '.join(dropped)} are not written (the format has no field for them)")

    def add(self, what: str) -> None:
        self.items.append(what)

    def differs(self, name: str, got: np.ndarray, written: np.ndarray, how: str) -> None:
        """Note ``name`` when the values the reader will give back differ from the trace's."""
        if got.shape != written.shape or not np.array_equal(got, written):
            self.add(f"{name} {how}")

    def warn(self) -> None:
        if self.items:
            warnings.warn(f"writing trace {self.trace.name!r} as {self.fmt} changes it: " + "; ".join(self.items),
                          TraceConversionWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stack level of the first frame outside kvmm.traces (the code that asked to write)."""
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level
