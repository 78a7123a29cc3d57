"""The contract every :class:`~kvmm.protocols.Router` passes.

::

    class TestMyRouter(RouterContract):
        def make_router(self, num_instances):
            return MyRouter()
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.cluster.view import COUNT_FIELDS, ClusterView, RouteRequest
from kvmm.protocols import Router

__all__ = ["RouterContract", "FakeBlockIndex", "route_steps"]


class FakeBlockIndex:
    """A dict-of-sets stand-in for :class:`~kvmm.cluster.BlockIndex`: ``prefix_hits(keys)`` is
    the int64 ``(num_instances, len(media))`` array of the longest run of ``keys``, from the
    first, that each instance holds in each medium.  ``store(instance, keys, medium)`` adds keys.
    Runtime complexity: O(instances x media x keys) per ``prefix_hits``."""

    def __init__(self, num_instances: int, media: tuple = ("GPU", "CPU")) -> None:
        self.num_instances = num_instances
        self.media = tuple(media)
        self.held = [[set() for _ in self.media] for _ in range(num_instances)]
        self.calls = 0

    def store(self, instance: int, keys: Any, medium: str = "GPU") -> None:
        self.held[instance][self.media.index(medium)].update(int(k) for k in keys)

    def prefix_hits(self, keys: Any) -> np.ndarray:
        self.calls += 1
        keys = [int(k) for k in keys]
        out = np.zeros((self.num_instances, len(self.media)), dtype=np.int64)
        for i, per_medium in enumerate(self.held):
            for m, held in enumerate(per_medium):
                k = 0
                while k < len(keys) and keys[k] in held:
                    k += 1
                out[i, m] = k
        return out

    def snapshot(self) -> list:
        return [[sorted(s) for s in per_medium] for per_medium in self.held]


@st.composite
def route_steps(draw: Any, num_instances: int, max_steps: int = 25, block_alphabet: int = 8) -> list:
    """A list of routing steps for ``num_instances``: each a dict with ``blocks`` (a short list
    of small block ids, often sharing prefixes), ``session`` (-1 or 0..3), ``queue``,
    ``running`` (small counts), ``kv`` (fractions), ``prefill`` (queued prompt tokens, often
    equal), ``held`` (KV blocks of running and queued requests) and ``store`` (an ``(instance,
    keys, medium)`` the index learns before the step, or None)."""
    n = num_instances
    counts = st.lists(st.integers(0, 6), min_size=n, max_size=n)
    tokens = st.lists(st.sampled_from([0, 16, 40, 64, 100, 300]), min_size=n, max_size=n)
    blocks_held = st.lists(st.integers(0, 12), min_size=n, max_size=n)
    step = st.fixed_dictionaries({
        "blocks": st.lists(st.integers(0, block_alphabet - 1), max_size=6),
        "session": st.integers(-1, 3),
        "queue": counts,
        "running": counts,
        "kv": st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=n, max_size=n),
        "prefill": tokens,
        "held": blocks_held,
        "store": st.none() | st.tuples(st.integers(0, n - 1), st.lists(st.integers(0, block_alphabet - 1), max_size=5),
                                       st.sampled_from(["GPU", "CPU"])),
    })
    return draw(st.lists(step, min_size=1, max_size=max_steps))


#: tokens per KV block of the generated views and requests
BLOCK_TOKENS = 16


def build_step(step: dict, number: int, index: FakeBlockIndex | None, num_instances: int) -> tuple:
    """The (RouteRequest, ClusterView) of one generated step; the index learns ``store`` first.
    A step without ``prefill`` / ``held`` (written before they existed) leaves those at zero."""

    if index is not None and step["store"] is not None:
        instance, keys, medium = step["store"]
        index.store(instance, keys, medium)
    request = RouteRequest(number, float(number), np.array(step["blocks"], dtype=np.int64),
                           BLOCK_TOKENS * len(step["blocks"]) + 1, 8, step["session"])
    queue = np.array(step["queue"], dtype=np.int64)
    held = np.array(step.get("held", [0] * num_instances), dtype=np.int64)
    view = ClusterView(num_instances, queue_lengths=queue, running=np.array(step["running"], dtype=np.int64),
                       kv_utilisation=np.array(step["kv"], dtype=np.float64), index=index, now=float(number),
                       waiting=queue.copy(), prefill_tokens=np.array(step.get("prefill", [0] * num_instances), dtype=np.int64),
                       running_blocks=held // 2, queued_blocks=held - held // 2, block_tokens=BLOCK_TOKENS)
    return request, view


class RouterContract:
    """Contract suite for a router; subclass it and define ``make_router(num_instances)``.

    Over Hypothesis-generated sequences of requests and views (1 to 5 instances, a
    :class:`FakeBlockIndex` in the view unless ``uses_index = False``):

    * it is a :class:`~kvmm.protocols.Router`;
    * every answer is an int (not a bool) in ``[0, num_instances)`` (what
      :func:`~kvmm.cluster.routers.checked_route` enforces in the simulator);
    * it is deterministic: two fresh routers given the same sequence answer the same;
    * it changes neither the view (every per-instance array, ``now``, ``block_tokens``,
      ``scraped_at``, the index's contents) nor the request's ``block_ids``.
    """

    #: give the views a block index (precise-prefix needs one; set False to test without).
    uses_index: bool = True
    #: Hypothesis settings of the generated sequences.
    contract_settings = settings(max_examples=25, deadline=None)

    def make_router(self, num_instances: int) -> Any:
        """A fresh router for ``num_instances`` instances (override)."""
        raise NotImplementedError("subclass RouterContract and define make_router(num_instances)")

    def test_speaks_the_protocol(self) -> None:
        assert isinstance(self.make_router(3), Router)

    def test_answers_in_range_deterministically_without_mutating(self) -> None:
        @self.contract_settings
        @given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), route_steps(n))))
        def run(case: tuple) -> None:
            n, steps = case
            first = self._replay(n, steps, check=True)
            assert self._replay(n, steps, check=False) == first, "the same inputs gave different instances"

        run()

    def _replay(self, n: int, steps: list, check: bool) -> list[int]:
        router = self.make_router(n)
        index = FakeBlockIndex(n) if self.uses_index else None
        answers = []
        for number, step in enumerate(steps):
            request, view = build_step(step, number, index, n)
            before = _view_state(view), request.block_ids.copy()
            choice = router.route(request, view)
            if check:
                assert isinstance(choice, (int, np.integer)) and not isinstance(choice, (bool, np.bool_)), \
                    f"route returned {choice!r}; expected an int"
                assert 0 <= int(choice) < n, f"route returned {choice} for {n} instances"
                assert _view_state(view) == before[0], "route changed the view"
                np.testing.assert_array_equal(request.block_ids, before[1], err_msg="route changed block_ids")
            answers.append(int(choice))
        return answers


def _view_state(view: Any) -> tuple:
    index = view.index
    return (view.num_instances, [getattr(view, name).tolist() for name in COUNT_FIELDS], view.kv_utilisation.tolist(),
            view.now, view.block_tokens, view.scraped_at, index.snapshot() if isinstance(index, FakeBlockIndex) else None)
