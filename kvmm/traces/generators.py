"""Seeded synthetic request traces: concurrent tool-calling agents and multi-turn conversations.

Both return a :class:`~kvmm.traces.KVTrace` (the same CSR arrays as a loaded Mooncake
file: timestamp in ms, input/output length in tokens, prefix-chained ``hash_ids`` of 512-token
blocks, numbered densely in order of first appearance), so every consumer takes either.

How block ids are made (the Mooncake convention): a request's prompt is its session's context;
block ``b`` covers tokens ``[512 b, 512 (b+1))``.  A *full* block keeps its id for as long as
the context only grows (equal id = equal prefix up to that block); the last, partial block gets a
fresh id in every request (its content changes when the context grows, and the Mooncake release
gives every partial block its own id).  Sessions that share a system prompt share its full
blocks.  ``len(hash_ids) == ceil(input_length / 512)`` for every request.

Agent model (``agent_trace``): ``num_agents`` concurrent slots, each running tasks back to back.
A task starts from one of ``system_prompts`` shared prompts plus a task description, then runs
a number of steps: a request (prompt = whole context), the model's output (decoded at
``decode_tokens_per_s``), a tool call whose wait is log-normal (widely varying: median
``tool_wait_median_s``, log-sd ``tool_wait_sigma``), after which output and tool result are
appended to the context.  While one agent waits on its tool the others run: the reuse working set
is the live context of the whole pool.

Conversation model (``conversation_trace``): sessions arrive as a Poisson process; each turn
appends the previous answer and a new user message to the context; users think for an
exponential time between turns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvmm._validate import as_count, as_positive_float
from kvmm.errors import BadInputError
from kvmm.traces.trace import MOONCAKE_BLOCK_TOKENS, KVTrace

__all__ = ["agent_trace", "conversation_trace"]


def agent_trace(num_agents: int = 16, *, tasks: int | None = None, steps: tuple[int, int] = (8, 40),
                system_prompts: int = 4, system_prompt_tokens: int = 4096,
                task_tokens: tuple[int, int] = (500, 6000), output_tokens: tuple[int, int] = (50, 600),
                tool_result_tokens: tuple[int, int] = (100, 4000), tool_wait_median_s: float = 4.0,
                tool_wait_sigma: float = 1.2, decode_tokens_per_s: float = 40.0,
                max_context_tokens: int = 131072, seed: int = 0, name: str = "agents") -> KVTrace:
    """A trace of ``num_agents`` concurrent tool-calling agents running ``tasks`` tasks in all
    (default ``2 * num_agents``).  Token ranges are inclusive ``(low, high)`` and drawn
    log-uniformly (wide spread); ``steps`` uniformly.  A task ends after its steps or when its
    context would pass ``max_context_tokens`` (a first prompt longer than that is cut to it, so
    no ``input_length`` exceeds it).  Same seed, same trace.

    Runtime complexity: O(total blocks referenced).
    """
    num_agents = as_count(num_agents, "num_agents", minimum=1)
    tasks = 2 * num_agents if tasks is None else as_count(tasks, "tasks", minimum=1)
    steps = _as_range(steps, "steps", minimum=1)
    system_prompts = as_count(system_prompts, "system_prompts", minimum=1)
    system_prompt_tokens = as_count(system_prompt_tokens, "system_prompt_tokens", minimum=0)
    task_tokens = _as_range(task_tokens, "task_tokens", minimum=1)
    output_tokens = _as_range(output_tokens, "output_tokens", minimum=1)
    tool_result_tokens = _as_range(tool_result_tokens, "tool_result_tokens", minimum=0)
    wait_median = as_positive_float(tool_wait_median_s, "tool_wait_median_s")
    wait_sigma = as_positive_float(tool_wait_sigma, "tool_wait_sigma", allow_zero=True)
    decode_tps = as_positive_float(decode_tokens_per_s, "decode_tokens_per_s")
    max_context_tokens = _as_max_context(max_context_tokens, system_prompt_tokens)
    rng = np.random.default_rng(seed)
    builder = _TraceBuilder(system_prompts, system_prompt_tokens)
    slot_free_at = rng.uniform(0.0, wait_median, size=num_agents)  # staggered starts
    for _ in range(tasks):
        slot = int(np.argmin(slot_free_at))
        now = float(slot_free_at[slot])
        session = builder.new_session(int(rng.integers(system_prompts)), _log_uniform(rng, task_tokens),
                                      max_context_tokens)
        for _ in range(int(rng.integers(steps[0], steps[1] + 1))):
            out = _log_uniform(rng, output_tokens)
            builder.request(session, now, out)
            now += out / decode_tps
            result = _log_uniform(rng, tool_result_tokens)
            if session.tokens + out + result > max_context_tokens:
                break
            session.tokens += out + result
            now += wait_median * float(np.exp(wait_sigma * rng.standard_normal()))
        slot_free_at[slot] = now
    return builder.build(name)


def conversation_trace(num_sessions: int = 200, *, turns: tuple[int, int] = (2, 12), arrival_rate_per_s: float = 1.0,
                       system_prompts: int = 8, system_prompt_tokens: int = 1024,
                       user_tokens: tuple[int, int] = (20, 2000), output_tokens: tuple[int, int] = (50, 800),
                       think_time_mean_s: float = 30.0, decode_tokens_per_s: float = 40.0,
                       max_context_tokens: int = 131072, seed: int = 0, name: str = "conversations") -> KVTrace:
    """A trace of ``num_sessions`` multi-turn chat sessions arriving as a Poisson process.

    Token ranges are inclusive ``(low, high)`` drawn log-uniformly; ``turns`` uniformly; user
    think time between turns is exponential with mean ``think_time_mean_s``.  No request's
    context exceeds ``max_context_tokens`` (a longer first prompt is cut).  Same seed, same
    trace.  Runtime complexity: O(total blocks referenced).
    """
    num_sessions = as_count(num_sessions, "num_sessions", minimum=1)
    turns = _as_range(turns, "turns", minimum=1)
    rate = as_positive_float(arrival_rate_per_s, "arrival_rate_per_s")
    system_prompts = as_count(system_prompts, "system_prompts", minimum=1)
    system_prompt_tokens = as_count(system_prompt_tokens, "system_prompt_tokens", minimum=0)
    user_tokens = _as_range(user_tokens, "user_tokens", minimum=1)
    output_tokens = _as_range(output_tokens, "output_tokens", minimum=1)
    think = as_positive_float(think_time_mean_s, "think_time_mean_s")
    decode_tps = as_positive_float(decode_tokens_per_s, "decode_tokens_per_s")
    max_context_tokens = _as_max_context(max_context_tokens, system_prompt_tokens)
    rng = np.random.default_rng(seed)
    builder = _TraceBuilder(system_prompts, system_prompt_tokens)
    arrival = 0.0
    for _ in range(num_sessions):
        arrival += rng.exponential(1.0 / rate)
        now = arrival
        session = builder.new_session(int(rng.integers(system_prompts)), _log_uniform(rng, user_tokens),
                                      max_context_tokens)
        for _ in range(int(rng.integers(turns[0], turns[1] + 1))):
            out = _log_uniform(rng, output_tokens)
            builder.request(session, now, out)
            now += out / decode_tps
            user = _log_uniform(rng, user_tokens)
            if session.tokens + out + user > max_context_tokens:
                break
            session.tokens += out + user
            now += rng.exponential(think)
    return builder.build(name)


# --------------------------------------------------------------------------- helpers
@dataclass
class _Session:
    prompt: int  # which shared system prompt
    tokens: int  # context length in tokens (prompt included)
    own_full: list  # ids of this session's full blocks after the shared prompt blocks


class _TraceBuilder:
    """Accumulates requests and hands out block ids; ``build`` sorts by time and renumbers."""

    def __init__(self, system_prompts: int, system_prompt_tokens: int) -> None:
        self.prompt_tokens = system_prompt_tokens
        self.prompt_full = system_prompt_tokens // MOONCAKE_BLOCK_TOKENS
        # shared full blocks of each system prompt
        self.prompt_ids = np.arange(system_prompts * self.prompt_full, dtype=np.int64).reshape(system_prompts, -1)
        self.next_id = system_prompts * self.prompt_full
        self.times: list[float] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.blocks: list[np.ndarray] = []

    def new_session(self, prompt: int, first_tokens: int, max_context_tokens: int) -> _Session:
        """A session whose first prompt is the shared prompt plus ``first_tokens``, cut so that
        no request ever exceeds ``max_context_tokens``."""
        return _Session(prompt, min(self.prompt_tokens + first_tokens, max_context_tokens), [])

    def request(self, session: _Session, now: float, output_tokens: int) -> None:
        full = session.tokens // MOONCAKE_BLOCK_TOKENS
        own_needed = full - self.prompt_full
        while len(session.own_full) < own_needed:  # blocks that became full since last request
            session.own_full.append(self.next_id)
            self.next_id += 1
        ids = [self.prompt_ids[session.prompt], np.asarray(session.own_full, dtype=np.int64)]
        if session.tokens % MOONCAKE_BLOCK_TOKENS:
            ids.append(np.array([self.next_id], dtype=np.int64))  # the partial last block
            self.next_id += 1
        self.times.append(now)
        self.inputs.append(session.tokens)
        self.outputs.append(output_tokens)
        self.blocks.append(np.concatenate(ids))

    def build(self, name: str) -> KVTrace:
        times_ms = np.round(np.asarray(self.times, dtype=np.float64) * 1000.0).astype(np.int64)
        order = np.argsort(times_ms, kind="stable")
        counts = np.array([b.shape[0] for b in self.blocks], dtype=np.int64)[order]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        raw = np.concatenate([self.blocks[r] for r in order]) if order.size else np.zeros(0, dtype=np.int64)
        # renumber densely in order of first appearance (as the Mooncake release does)
        uniq, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
        rank = np.empty(uniq.shape[0], dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.shape[0])
        return KVTrace(
            name=name,
            timestamp_ms=times_ms[order],
            input_length=np.asarray(self.inputs, dtype=np.int64)[order],
            output_length=np.asarray(self.outputs, dtype=np.int64)[order],
            block_offsets=offsets,
            block_ids=rank[inverse.reshape(-1)].astype(np.int64),
        )


def _as_max_context(value, system_prompt_tokens: int) -> int:
    """``max_context_tokens``: room for the shared prompt plus at least one token."""
    value = as_count(value, "max_context_tokens", minimum=1)
    if value <= system_prompt_tokens:
        raise BadInputError(f"max_context_tokens ({value}) must exceed system_prompt_tokens ({system_prompt_tokens}); "
                            f"every request holds the shared prompt plus its own tokens")
    return value


def _as_range(value, name: str, *, minimum: int) -> tuple[int, int]:
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise BadInputError(f"{name} must be a (low, high) pair of integers, got {value!r}") from None
    lo = as_count(lo, f"{name}[0]", minimum=minimum)
    hi = as_count(hi, f"{name}[1]", minimum=minimum)
    if hi < lo:
        raise BadInputError(f"{name} must have low <= high, got {value!r}")
    return lo, hi


def _log_uniform(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    if lo == hi:
        return lo
    if lo == 0:
        return int(rng.integers(0, hi + 1))
    return int(min(hi, max(lo, round(float(np.exp(rng.uniform(np.log(lo), np.log(hi + 1))))))))
