"""What a router sees: one request (:class:`RouteRequest`) and the cluster (:class:`ClusterView`).

The simulator builds one :class:`RouteRequest` per request and owns one :class:`ClusterView`
whose arrays it updates in place between routing decisions; routers only read them (see
:class:`kvmm.protocols.Router`).  docs/cluster.md ("What a router sees") says how the simulator
fills each field and how stale it may be.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_index_array, as_positive_float
from kvmm.errors import BadInputError, DTypeError, ShapeError

__all__ = ["RouteRequest", "ClusterView", "LOAD_FIELDS"]

#: the per-instance int64 count arrays of a view, in the order ``__init__`` takes them
COUNT_FIELDS = ("queue_lengths", "running", "waiting", "inbound", "prefill_tokens", "running_tokens", "running_blocks",
                "queued_blocks", "kv_blocks_used", "kv_blocks_total")
#: the per-instance signals a metrics scrape copies (every per-instance array but the pool sizes)
LOAD_FIELDS = tuple(name for name in COUNT_FIELDS if name != "kv_blocks_total") + ("kv_utilisation",)


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

    Per instance (arrays of shape ``(num_instances,)``; int64 unless said):

    * ``queue_lengths``: requests queued, ``waiting + inbound`` when the simulator fills it;
    * ``running``: requests in the running batch (decoding or part-way through their prefill);
    * ``waiting``: requests that arrived and wait for admission;
    * ``inbound``: requests routed there that have not arrived yet;
    * ``prefill_tokens``: prompt tokens still to compute for its inbound, waiting and
      part-prefilled requests (see docs/cluster.md for how each is counted);
    * ``running_tokens``: KV tokens the running requests hold (decode contexts plus the prompt
      tokens computed so far of the part-prefilled ones);
    * ``running_blocks``: GPU KV blocks the running requests hold (reserved at admission);
    * ``queued_blocks``: prompt blocks of the inbound and waiting requests;
    * ``kv_blocks_used`` / ``kv_blocks_total``: GPU pool blocks in use / in the pool;
    * ``kv_utilisation``: float64 in [0, 1], pool blocks in use / pool blocks.

    And ``index`` (a :class:`~kvmm.cluster.BlockIndex`, anything with ``prefix_hits(keys)`` and
    ``media``, or ``None``), ``now`` (simulated time in seconds), ``block_tokens`` (tokens per
    KV block; 0 when unknown), ``metrics_interval_s`` (0: the per-instance signals are exact as
    of ``now``; > 0: they are as of the last metrics scrape) and ``scraped_at`` (the time the
    per-instance signals describe: ``now`` when exact).

    The simulator owns the view and updates these arrays in place.  An array given with the
    right dtype and shape is used as is (not copied), so the owner's in-place updates are what
    routers read; anything else is converted into a new array.  Missing arrays start at zero.
    Runtime complexity: O(num_instances) to build.
    """

    __slots__ = COUNT_FIELDS + ("num_instances", "kv_utilisation", "index", "now", "block_tokens",
                                "metrics_interval_s", "scraped_at")

    def __init__(self, num_instances: int, *, queue_lengths: Any = None, running: Any = None,
                 kv_utilisation: Any = None, index: Any = None, now: float = 0.0, waiting: Any = None,
                 inbound: Any = None, prefill_tokens: Any = None, running_tokens: Any = None,
                 running_blocks: Any = None, queued_blocks: Any = None, kv_blocks_used: Any = None,
                 kv_blocks_total: Any = None, block_tokens: int = 0, metrics_interval_s: float = 0.0,
                 scraped_at: float | None = None) -> None:
        n = as_count(num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        given = dict(queue_lengths=queue_lengths, running=running, waiting=waiting, inbound=inbound,
                     prefill_tokens=prefill_tokens, running_tokens=running_tokens, running_blocks=running_blocks,
                     queued_blocks=queued_blocks, kv_blocks_used=kv_blocks_used, kv_blocks_total=kv_blocks_total)
        counts = {name: _counts(given[name], n, name) for name in COUNT_FIELDS}
        used, total = counts["kv_blocks_used"], counts["kv_blocks_total"]
        over = np.flatnonzero((total > 0) & (used > total)) if kv_blocks_total is not None else ()
        if len(over):
            i = int(over[0])
            raise BadInputError(f"kv_blocks_used[{i}] = {int(used[i])} exceeds kv_blocks_total[{i}] = {int(total[i])}; "
                                "expected blocks in use <= pool blocks")
        kv = _utilisation(kv_utilisation, n)
        if index is not None:
            if not callable(getattr(index, "prefix_hits", None)) or not hasattr(index, "media"):
                raise DTypeError(f"index must be a BlockIndex (prefix_hits(keys) and media) or None, "
                                 f"got {type(index).__name__}")
            held = getattr(index, "num_instances", n)
            if held != n:
                raise BadInputError(f"index covers {held} instances but the view has {n}; expected the same count")
        now = as_positive_float(now, "now", allow_zero=True)
        block_tokens = as_count(block_tokens, "block_tokens")
        interval = as_positive_float(metrics_interval_s, "metrics_interval_s", allow_zero=True)
        scraped = now if scraped_at is None else as_positive_float(scraped_at, "scraped_at", allow_zero=True)
        if scraped > now:
            raise BadInputError(f"scraped_at = {scraped} is after now = {now}; expected a scrape at or before now")
        self.num_instances = n
        for name, arr in counts.items():
            setattr(self, name, arr)
        self.kv_utilisation = kv
        self.index = index
        self.now = now
        self.block_tokens = block_tokens
        self.metrics_interval_s = interval
        self.scraped_at = scraped

    def load(self) -> np.ndarray:
        """Waiting plus running requests per instance (a new int64 array).
        Runtime complexity: O(num_instances)."""
        return self.queue_lengths + self.running

    def __repr__(self) -> str:
        return (f"ClusterView(num_instances={self.num_instances}, queue_lengths={self.queue_lengths.tolist()}, "
                f"running={self.running.tolist()}, prefill_tokens={self.prefill_tokens.tolist()}, "
                f"kv_utilisation={self.kv_utilisation.tolist()}, "
                f"index={type(self.index).__name__ if self.index is not None else None}, now={self.now}, "
                f"metrics_interval_s={self.metrics_interval_s})")


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
