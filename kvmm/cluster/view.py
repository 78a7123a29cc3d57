"""What a router sees: one request (:class:`RouteRequest`) and the cluster (:class:`ClusterView`).

The simulator builds one :class:`RouteRequest` per request and owns one :class:`ClusterView`
whose arrays it updates in place between routing decisions; routers only read them (see
:class:`kvmm.protocols.Router`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_index_array, as_positive_float
from kvmm.errors import BadInputError, DTypeError, ShapeError

__all__ = ["RouteRequest", "ClusterView"]


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One request as a router sees it.

    ``index``: request number in the trace; ``arrival_s``: arrival time in seconds;
    ``block_ids``: the request's trace block ids (int64) in prefix order; ``input_length`` /
    ``output_length``: tokens; ``session``: conversation id (Bailian ``chat_id`` root, a
    Mooncake session, ...) or ``-1`` when the trace has none.

    A ``block_ids`` that is not already a 1-D int64 array is converted (a copy); a 1-D int64
    array is kept as given (the simulator's slice of the trace, no copy per request).
    Runtime complexity: O(1) for an int64 array, O(blocks) otherwise.
    """

    index: int
    arrival_s: float
    block_ids: np.ndarray
    input_length: int
    output_length: int
    session: int = -1

    def __post_init__(self) -> None:
        ids = self.block_ids
        if not (type(ids) is np.ndarray and ids.dtype == np.int64 and ids.ndim == 1):
            object.__setattr__(self, "block_ids", as_index_array(ids, "block_ids"))
        object.__setattr__(self, "index", as_count(self.index, "index"))
        object.__setattr__(self, "arrival_s", as_positive_float(self.arrival_s, "arrival_s", allow_zero=True))
        object.__setattr__(self, "input_length", as_count(self.input_length, "input_length"))
        object.__setattr__(self, "output_length", as_count(self.output_length, "output_length"))
        object.__setattr__(self, "session", as_count(self.session, "session", minimum=-1))


class ClusterView:
    """What a router may read about the cluster, as plain attributes.

    * ``num_instances``: instances in the cluster (>= 1);
    * ``queue_lengths``: int64 ``(num_instances,)``, requests waiting per instance;
    * ``running``: int64 ``(num_instances,)``, requests running per instance;
    * ``kv_utilisation``: float64 ``(num_instances,)`` in [0, 1], GPU pool blocks in use / pool
      blocks;
    * ``index``: a :class:`~kvmm.cluster.BlockIndex` (anything with ``prefix_hits(keys)`` and
      ``media``) or ``None``;
    * ``now``: simulated time in seconds.

    The simulator owns the view and updates these arrays in place.  An array given with the
    right dtype and shape is used as is (not copied), so the owner's in-place updates are what
    routers read; anything else is converted into a new array.  Missing arrays start at zero.
    Runtime complexity: O(num_instances) to build.
    """

    __slots__ = ("num_instances", "queue_lengths", "running", "kv_utilisation", "index", "now")

    def __init__(self, num_instances: int, *, queue_lengths: Any = None, running: Any = None,
                 kv_utilisation: Any = None, index: Any = None, now: float = 0.0) -> None:
        n = as_count(num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        queue = _counts(queue_lengths, n, "queue_lengths")
        run = _counts(running, n, "running")
        kv = _utilisation(kv_utilisation, n)
        if index is not None:
            if not callable(getattr(index, "prefix_hits", None)) or not hasattr(index, "media"):
                raise DTypeError(f"index must be a BlockIndex (prefix_hits(keys) and media) or None, "
                                 f"got {type(index).__name__}")
            held = getattr(index, "num_instances", n)
            if held != n:
                raise BadInputError(f"index covers {held} instances but the view has {n}; expected the same count")
        self.num_instances = n
        self.queue_lengths = queue
        self.running = run
        self.kv_utilisation = kv
        self.index = index
        self.now = as_positive_float(now, "now", allow_zero=True)

    def load(self) -> np.ndarray:
        """Waiting plus running requests per instance (a new int64 array).
        Runtime complexity: O(num_instances)."""
        return self.queue_lengths + self.running

    def __repr__(self) -> str:
        return (f"ClusterView(num_instances={self.num_instances}, queue_lengths={self.queue_lengths.tolist()}, "
                f"running={self.running.tolist()}, kv_utilisation={self.kv_utilisation.tolist()}, "
                f"index={type(self.index).__name__ if self.index is not None else None}, now={self.now})")


def _counts(x: Any, n: int, name: str) -> np.ndarray:
    if x is None:
        return np.zeros(n, dtype=np.int64)
    if not (type(x) is np.ndarray and x.dtype == np.int64):
        x = as_index_array(x, name)
    if x.shape != (n,):
        raise ShapeError(f"{name} must have shape ({n},) (one count per instance), got {x.shape}")
    if x.size and int(x.min()) < 0:
        raise BadInputError(f"{name} holds a negative count {int(x.min())}; expected counts >= 0")
    return x


def _utilisation(x: Any, n: int) -> np.ndarray:
    if x is None:
        return np.zeros(n, dtype=np.float64)
    if not (type(x) is np.ndarray and x.dtype == np.float64):
        arr = np.asarray(x)
        if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
            raise DTypeError(f"kv_utilisation must hold numbers in [0, 1], got dtype {arr.dtype}")
        x = arr.astype(np.float64)
    if x.shape != (n,):
        raise ShapeError(f"kv_utilisation must have shape ({n},) (one fraction per instance), got {x.shape}")
    if x.size and not (np.all(x >= 0.0) and np.all(x <= 1.0)):  # NaN fails both
        raise BadInputError(f"kv_utilisation must be in [0, 1] (blocks in use / pool blocks), got {x.tolist()}")
    return x
