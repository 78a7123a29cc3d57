"""Shared engine of the bad-input fuzz suite (tests/<package>/test_fuzz_bad_input_*.py).

A fuzz test builds a small structure, then makes many calls of its public methods with
arguments drawn (by Hypothesis, derandomized) from valid values for the current state mixed
with :data:`NASTY` values: wrong types, shapes and dtypes, NaN/inf, huge, negative, repeated
and foreign ids.  :meth:`Fuzz.call` asserts the three promises of the ground rules: every
failure is a :class:`~kvmm.errors.KvmmError`; after a failure the structure's whole state
(:func:`tests.state_snapshot.state_of`) is unchanged; after a success ``check()`` passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from kvmm.errors import KvmmError
from tests.state_snapshot import state_of


class DeepKey(tuple):
    """A tuple nested ``depth`` levels deep whose repr stays short (printers recurse otherwise)."""

    def __new__(cls, depth: int):
        key: Any = 0
        for _ in range(depth - 1):
            key = (key,)
        return super().__new__(cls, (key,))

    def __repr__(self) -> str:
        return "DeepKey(5000)"


#: Values that are wrong for nearly every parameter (and a few that are right for some).
NASTY: list[Any] = [
    None, "x", b"\x00", 1.5, float("nan"), float("inf"), -float("inf"), -1, 0, 1, 3, 2**31, 2**62, 2**64,
    -(2**63) - 1, True, [], [0], [0, 0], [1, 2, 3], [-1], [10**9], [[1, 2], [3]], [1, True], [1.5], ["a"], [None],
    np.array([1.5]), np.array([[1, 2]]), np.array([1, 2], dtype=np.int8), np.array([2**63], dtype=np.uint64),
    np.zeros((2, 2)), np.array([np.nan]), np.int64(2), np.uint64(2**64 - 1), np.float32("nan"), object(), {1: 2},
    {1}, (1, 2), DeepKey(5000), (), [[]], np.array([], dtype=np.float64), 1j, [2**64], np.array(["a"]),
]

#: Settings of every fuzz test: seeded (derandomized), no deadline (a loaded 2-core machine).
FUZZ_SETTINGS = settings(max_examples=40, derandomize=True, deadline=None, database=None, print_blob=False,
                         suppress_health_check=list(HealthCheck))


def arg(valid: st.SearchStrategy, bad_share: int = 1, good_share: int = 2) -> st.SearchStrategy:
    """A valid value (``good_share`` parts) or a nasty one (``bad_share`` parts)."""
    return st.one_of(*([valid] * good_share + [st.sampled_from(NASTY)] * bad_share))


class Fuzz:
    """Counts calls on one structure and checks each against the three promises."""

    total = 0  # calls made by every Fuzz in this process

    def __init__(self, obj: Any, check: Callable[[Any], None] | None = None, state: Callable[[Any], Any] | None = None):
        self.obj = obj
        self.check = check or (lambda o: o.check())
        self.state = state or snapshot_of
        self.calls = self.failures = 0

    def call(self, fn: Callable, *args: Any, **kw: Any) -> tuple[bool, Any]:
        """Call ``fn``; return (succeeded, result).  Asserts the promises above."""
        before = self.state(self.obj)
        self.calls += 1
        Fuzz.total += 1
        try:
            out = fn(*args, **kw)
        except KvmmError:
            self.failures += 1
            after = self.state(self.obj)
            assert after == before, f"{_name(fn)}{_short(args, kw)} raised but changed the structure"
            return False, None
        except Exception as err:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"{_name(fn)}{_short(args, kw)} raised {type(err).__name__}: {err}; "
                                 f"expected a KvmmError") from err
        self.check(self.obj)
        return True, out


def run_counted(fuzz: Callable[[], None], calls_per_example: int) -> None:
    """Run a Hypothesis fuzz function; assert it made ``max_examples * calls_per_example`` calls."""
    before = Fuzz.total
    fuzz()
    assert Fuzz.total - before >= FUZZ_SETTINGS.max_examples * calls_per_example


def snapshot_of(obj: Any) -> Any:
    """The structure's own ``snapshot()`` (its documented state, without lazily merged caches) when
    it has one, else every attribute (:func:`~tests.state_snapshot.state_of`)."""
    snap = getattr(obj, "snapshot", None)
    return state_of(snap()) if callable(snap) else state_of(obj)


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def _short(args: tuple, kw: dict) -> str:
    text = ", ".join([repr(a)[:60] for a in args] + [f"{k}={v!r:.60}" for k, v in kw.items()])
    return f"({text})"
