"""Hypothesis strategies for KV-cache workloads and kvmm's inputs.

::

    from hypothesis import given
    from kvmm.testing import strategies as kst

    @given(kst.prefix_sharing_requests())
    def test_my_policy_never_forgets(requests): ...

Block keys and request streams follow the Mooncake convention: a request is a list of block
ids in prefix order, prefix-chained, so two requests share a block id only where they share
the whole prefix up to and including that block.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from kvmm.compress.rope import RopeConfig, RopeScaling
from kvmm.errors import KvmmError
from kvmm.traces import KVTrace

__all__ = [
    "block_keys", "key_arrays", "prefix_sharing_requests", "mooncake_traces", "attention_rows", "rope_configs",
    "rope_qk", "tier_keys", "tier_values", "tier_operations", "ledger_events", "apply_ledger_events",
]

_UINT64_MAX = 2**64 - 1


def block_keys(*, words: int = 2) -> st.SearchStrategy:
    """One 128-bit content key as a tuple of ``words`` uint64 words (BlockAllocator's key layout)."""
    return st.tuples(*[st.integers(0, _UINT64_MAX)] * words)


def key_arrays(*, max_blocks: int = 8, universe: int | None = 6) -> st.SearchStrategy:
    """A ``(n, 2)`` uint64 array of block keys.  With ``universe`` keys repeat (drawn from that
    many distinct keys, one of them with the top bit set); ``None``: any 128-bit keys."""
    if universe is None:
        one = block_keys()
    else:
        one = st.sampled_from([(k, 0) for k in range(universe - 1)] + [(7, 2**63 + 5)])
    return st.lists(one, max_size=max_blocks).map(lambda ks: np.array(ks, dtype=np.uint64).reshape(-1, 2))


@st.composite
def prefix_sharing_requests(draw: Any, *, max_requests: int = 30, max_blocks: int = 12, max_roots: int = 3) -> list:
    """A stream of requests (lists of int block ids) that share prefixes like multi-turn chats.

    Each request either starts a new conversation (a fresh root block), continues one (its
    previous request's blocks, then new ones) or branches off one (a prefix of it, then new
    ones).  Ids are prefix-chained: an id means one exact prefix.
    """
    next_id = 0
    histories: list[list[int]] = []
    out = []
    for _ in range(draw(st.integers(1, max_requests))):
        kind = draw(st.sampled_from(["new", "continue", "branch"])) if histories else "new"
        if kind == "new" or len(histories) < 1:
            base: list[int] = []
            if len(histories) >= max_roots:
                base = histories[draw(st.integers(0, len(histories) - 1))][:1]
        else:
            past = histories[draw(st.integers(0, len(histories) - 1))]
            base = list(past) if kind == "continue" else past[: draw(st.integers(1, len(past)))]
        grow = draw(st.integers(0 if base else 1, max(0, max_blocks - len(base))))
        blocks = base[:max_blocks] + list(range(next_id, next_id + grow))
        next_id += grow
        histories.append(blocks)
        out.append(blocks)
    return out


@st.composite
def mooncake_traces(draw: Any, *, max_requests: int = 30, max_blocks: int = 12, block_tokens: int = 512) -> Any:
    """A :class:`~kvmm.traces.KVTrace` built from :func:`prefix_sharing_requests`:
    non-decreasing timestamps, ``input_length`` consistent with the blocks (the last block may
    be partial), ids prefix-chained."""
    requests = draw(prefix_sharing_requests(max_requests=max_requests, max_blocks=max_blocks))
    n = len(requests)
    gaps = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    inputs = [0 if not r else (len(r) - 1) * block_tokens + draw(st.integers(1, block_tokens)) for r in requests]
    outputs = draw(st.lists(st.integers(1, 2048), min_size=n, max_size=n))
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in requests])]).astype(np.int64)
    ids = np.array([b for r in requests for b in r], dtype=np.int64)
    return KVTrace(name="hypothesis", timestamp_ms=np.cumsum(gaps).astype(np.int64),
                   input_length=np.array(inputs, dtype=np.int64), output_length=np.array(outputs, dtype=np.int64),
                   block_offsets=offsets, block_ids=ids)


@st.composite
def attention_rows(draw: Any, *, heads: int | None = None, queries: int | None = None, live: int | None = None,
                   max_live: int = 32) -> np.ndarray:
    """Attention probabilities ``(heads, queries, live)`` float64: each row non-negative and
    summing to 1, with peaked and flat rows both likely (softmax of logits scaled by a drawn
    temperature)."""
    h = heads if heads is not None else draw(st.integers(1, 4))
    q = queries if queries is not None else draw(st.integers(1, 3))
    n = live if live is not None else draw(st.integers(1, max_live))
    seed = draw(st.integers(0, 2**32 - 1))
    temperature = draw(st.sampled_from([0.1, 1.0, 5.0]))
    logits = np.random.default_rng(seed).normal(size=(h, q, n)) * temperature
    rows = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return rows / rows.sum(axis=-1, keepdims=True)


def rope_configs(*, head_dims: tuple[int, ...] = (2, 4, 8, 16, 64, 128)) -> st.SearchStrategy:
    """A :class:`~kvmm.compress.RopeConfig`: head size, base, layout and scaling (none, linear,
    llama3 or yarn)."""
    scalings = st.one_of(
        st.just(RopeScaling()),
        st.builds(lambda f: RopeScaling(kind="linear", factor=f), st.sampled_from([2.0, 4.0])),
        st.builds(lambda f: RopeScaling(kind="llama3", factor=f, original_max_position_embeddings=8192),
                  st.sampled_from([8.0, 32.0])),
        st.builds(lambda f: RopeScaling(kind="yarn", factor=f, original_max_position_embeddings=4096),
                  st.sampled_from([2.0, 4.0])),
    )
    return st.builds(RopeConfig, head_dim=st.sampled_from(head_dims),
                     theta=st.sampled_from([10000.0, 500000.0, 1e6]), layout=st.sampled_from(["half", "interleaved"]),
                     scaling=scalings)


@st.composite
def rope_qk(draw: Any, *, max_tokens: int = 16, heads: int | None = None) -> dict:
    """Pre-RoPE queries and keys with their positions and RoPE, and the rotated (post-RoPE) ones.

    Returns ``dict(rope, q, k, q_positions, k_positions, q_rot, k_rot)``; ``q``/``k`` are
    ``(tokens, heads, head_dim)`` float64, positions int64 (keys before queries, as in decode).
    """
    rope = draw(rope_configs(head_dims=(2, 4, 8, 16)))
    h = heads if heads is not None else draw(st.integers(1, 3))
    nk = draw(st.integers(1, max_tokens))
    nq = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    start = draw(st.integers(0, 100_000))
    k_pos = start + np.sort(rng.choice(4 * max_tokens, size=nk, replace=False)).astype(np.int64)
    q_pos = k_pos[-1] + 1 + np.arange(nq, dtype=np.int64)
    q = rng.normal(size=(nq, h, rope.head_dim))
    k = rng.normal(size=(nk, h, rope.head_dim))
    return dict(rope=rope, q=q, k=k, q_positions=q_pos, k_positions=k_pos,
                q_rot=rope.apply(q, q_pos), k_rot=rope.apply(k, k_pos))


def tier_keys() -> st.SearchStrategy:
    """Keys a tier accepts: small ints (so they repeat), strings, bytes and tuples."""
    return st.one_of(st.integers(0, 9), st.sampled_from(["a", "b", ("t", 1), b"k"]))


@st.composite
def tier_values(draw: Any, *, max_elements: int = 40) -> np.ndarray:
    """A numeric array of any dtype kind kvmm tiers store (0-d and empty included), recognisable content."""
    dtype = np.dtype(draw(st.sampled_from([np.uint8, np.float16, np.int32, np.float64, np.bool_, np.complex64])))
    shape = draw(st.sampled_from([s for s in [(), (0,), (3,), (2, 5), (4, 4, 2), (40,)] if int(np.prod(s)) <= max_elements]))
    seed = draw(st.integers(0, 255))
    return ((np.arange(int(np.prod(shape))) + seed) % 7).astype(dtype).reshape(shape)


def tier_operations(*, max_ops: int = 40) -> st.SearchStrategy:
    """A list of tier operations: ``("put", key, array)``, ``("get", key)``, ``("delete", key)``."""
    op = st.one_of(st.tuples(st.just("put"), tier_keys(), tier_values()),
                   st.tuples(st.just("get"), tier_keys()), st.tuples(st.just("delete"), tier_keys()))
    return st.lists(op, max_size=max_ops)


def ledger_events(*, max_events: int = 60, max_bytes: int = 400) -> st.SearchStrategy:
    """A sequence of CommitmentLedger events for :func:`apply_ledger_events`.

    ``("claim", nbytes, work_ahead)``, ``("advance", seconds)``, ``("poll", timely, fifo)``,
    ``("request", i)``, ``("need", i)``, ``("ready", i)``, ``("consume", i)``, ``("release", i)``,
    ``("progress", tokens, seconds)``; ``i`` picks a claim made so far (modulo their number).
    """
    i = st.integers(0, 1000)
    event = st.one_of(
        st.tuples(st.just("claim"), st.integers(1, max_bytes), st.floats(0, 1e4)),
        st.tuples(st.just("advance"), st.floats(0, 5)),
        st.tuples(st.just("poll"), st.booleans(), st.booleans()),
        *[st.tuples(st.just(name), i) for name in ("request", "need", "ready", "consume", "release")],
        st.tuples(st.just("progress"), st.floats(1, 1e4), st.floats(1e-3, 10)),
    )
    return st.lists(event, max_size=max_events)


def apply_ledger_events(ledger: Any, events: list, *, now: float = 0.0) -> dict:
    """Apply :func:`ledger_events` to a ledger, skipping only the calls its documented state
    machine forbids (the ledger raises :class:`~kvmm.errors.KvmmError` for those and must stay
    unchanged; callers may check that).  Returns ``dict(now, claims, granted, rejected)``.
    """
    claims: list[int] = []
    granted: list[int] = []
    rejected = 0
    for event in events:
        name = event[0]
        try:
            if name == "claim":
                claims.append(int(ledger.claim(len(claims), None, event[1], now=now, work_ahead=event[2])))
            elif name == "advance":
                now += event[1]
            elif name == "poll":
                granted += ledger.poll(now, timely=event[1], fifo=event[2]).tolist()
            elif name == "progress":
                ledger.observe_progress(event[1], event[2])
            elif claims:
                cid = claims[event[1] % len(claims)]
                call = {"request": ledger.request, "need": ledger.need, "ready": ledger.mark_ready,
                        "consume": ledger.consume, "release": ledger.release}[name]
                call([cid], now=now)
        except KvmmError:
            rejected += 1
    return dict(now=now, claims=claims, granted=granted, rejected=rejected)
