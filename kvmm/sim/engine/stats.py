"""What one instance counts as it runs: the record the results read (not the loop's internals)."""

from __future__ import annotations

__all__ = ["InstanceStats"]


class InstanceStats:
    """Counters of one instance's run.  Claims and protected bytes are the staging
    controller's; per-request times are the request table's."""

    __slots__ = ("steps", "max_waiting", "max_running", "prefill_busy_s", "decode_busy_s", "gpu_hit_tokens",
                 "slow_hit_tokens")

    def __init__(self) -> None:
        self.steps = 0  # scheduler steps (a decode-only stretch of k steps counts k)
        self.max_waiting = 0  # longest queue seen
        self.max_running = 0  # largest decode batch seen
        self.prefill_busy_s = 0.0  # GPU-busy seconds of prefill (staged reads included)
        self.decode_busy_s = 0.0  # ... and of decode (the cost account splits the bill by them)
        self.gpu_hit_tokens = 0  # prompt tokens found in the GPU prefix cache when scheduled
        self.slow_hit_tokens = 0  # prompt tokens read from a lower tier
