"""A seeded shared-prefix workload, produced as a Mooncake trace (so it replays like the real ones).

Each request = one of ``num_prefixes`` shared contexts (system prompt, document, conversation
history) followed by a unique suffix; ``prefix_ratio`` sets the mean share of the prompt that
is the shared context, i.e. the prefix-cache ratio once the context has been seen.  Arrivals
are Poisson, or with ``burstiness = b > 0`` a two-state Markov-modulated Poisson process: phases
of exponential length (mean ``burst_seconds``) alternate between rate ``(1 + b) x arrival_rate``
and ``(1 - b) x arrival_rate`` (same mean rate).  Same parameters and seed -> the same trace, on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvmm._validate import as_count, as_fraction, as_positive_float
from kvmm.errors import BadInputError
from kvmm.traces.trace import MOONCAKE_BLOCK_TOKENS, KVTrace

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """Parameters of a seeded shared-prefix workload; :meth:`trace` builds it."""

    num_requests: int = 1000
    arrival_rate: float = 4.0  # requests per second (Poisson)
    prefix_ratio: float = 0.5  # mean share of the prompt that is a shared context
    input_tokens: int = 8192  # mean prompt length
    output_tokens: int = 256  # mean output length
    num_prefixes: int = 200  # distinct shared contexts, popularity Zipf(zipf_s)
    zipf_s: float = 0.8
    seed: int = 0
    burstiness: float = 0.0  # 0: Poisson; b in (0, 1): MMPP with rates (1 +- b) x arrival_rate
    burst_seconds: float = 30.0  # mean phase length of the MMPP

    def __post_init__(self) -> None:
        as_count(self.num_requests, "num_requests", minimum=1)
        as_positive_float(self.arrival_rate, "arrival_rate")
        as_fraction(self.prefix_ratio, "prefix_ratio", include_zero=True)
        as_count(self.input_tokens, "input_tokens", minimum=MOONCAKE_BLOCK_TOKENS)
        as_count(self.output_tokens, "output_tokens", minimum=1)
        as_count(self.num_prefixes, "num_prefixes", minimum=1)
        as_positive_float(self.zipf_s, "zipf_s", allow_zero=True)
        as_count(self.seed, "seed")
        as_positive_float(self.burstiness, "burstiness", allow_zero=True)
        if self.burstiness >= 1.0:
            raise BadInputError(f"burstiness must be in [0, 1), got {self.burstiness!r}")
        as_positive_float(self.burst_seconds, "burst_seconds")

    @property
    def name(self) -> str:
        return f"shared-prefix(r={self.prefix_ratio:g}, n={self.num_requests}, seed={self.seed})"

    def trace(self) -> KVTrace:
        """The workload as a :class:`~kvmm.traces.KVTrace` (512-token blocks, prefix-chained ids).

        Runtime complexity: O(requests + blocks).
        """
        rng = np.random.default_rng(self.seed)
        bt = MOONCAKE_BLOCK_TOKENS
        n = self.num_requests
        if self.burstiness > 0.0:
            ts = np.floor(_mmpp(rng, n, self.arrival_rate, self.burstiness, self.burst_seconds) * 1000.0).astype(np.int64)
        else:
            gaps = rng.exponential(1.0 / self.arrival_rate, n)
            gaps[0] = 0.0
            ts = np.floor(np.cumsum(gaps) * 1000.0).astype(np.int64)
        # shared contexts: whole blocks, lengths around prefix_ratio * input_tokens
        ctx_mean = self.prefix_ratio * self.input_tokens
        ctx_blocks = np.maximum(np.rint(ctx_mean * rng.lognormal(0.0, 0.3, self.num_prefixes) / bt), 0).astype(np.int64)
        if self.prefix_ratio == 0.0:
            ctx_blocks[:] = 0
        ctx_first = np.concatenate(([0], np.cumsum(ctx_blocks)[:-1]))
        next_id = int(ctx_blocks.sum())
        pop = 1.0 / np.arange(1, self.num_prefixes + 1) ** self.zipf_s
        choice = rng.choice(self.num_prefixes, size=n, p=pop / pop.sum())
        suffix_mean = max((1.0 - self.prefix_ratio) * self.input_tokens, 1.0)
        suffix = np.maximum(np.rint(suffix_mean * rng.lognormal(0.0, 0.4, n)), 1).astype(np.int64)
        out_len = np.maximum(np.rint(self.output_tokens * rng.lognormal(0.0, 0.5, n)), 1).astype(np.int64)
        offsets = [0]
        ids: list[np.ndarray] = []
        in_len = np.empty(n, dtype=np.int64)
        for r in range(n):
            c = int(choice[r])
            ctx = np.arange(ctx_first[c], ctx_first[c] + ctx_blocks[c], dtype=np.int64)
            in_len[r] = int(ctx_blocks[c]) * bt + int(suffix[r])
            n_suffix_blocks = -(-int(suffix[r]) // bt)
            ids.append(ctx)
            ids.append(np.arange(next_id, next_id + n_suffix_blocks, dtype=np.int64))
            next_id += n_suffix_blocks
            offsets.append(offsets[-1] + ctx.shape[0] + n_suffix_blocks)
        return KVTrace(
            name=self.name, timestamp_ms=ts, input_length=in_len, output_length=out_len,
            block_offsets=np.asarray(offsets, dtype=np.int64),
            block_ids=np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64),
        )


def _mmpp(rng: np.random.Generator, n: int, rate: float, b: float, phase_s: float) -> np.ndarray:
    """``n`` arrival times (from 0) of a two-state MMPP: rates ``(1 + b) rate`` and ``(1 - b) rate``
    in alternating phases of mean length ``phase_s`` (memoryless: a phase switch just redraws)."""
    out = np.empty(n)
    t = 0.0
    high = bool(rng.random() < 0.5)
    phase_end = rng.exponential(phase_s)
    i = 0
    while i < n:
        gap = rng.exponential(1.0 / (rate * (1.0 + b if high else 1.0 - b)))
        if t + gap > phase_end:
            t = phase_end
            high = not high
            phase_end += rng.exponential(phase_s)
            continue
        t += gap
        out[i] = t
        i += 1
    return out - out[0]
