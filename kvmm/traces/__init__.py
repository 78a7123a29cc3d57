"""Request traces: the Mooncake JSONL reader, the bundled traces, synthetic generators."""

from kvmm.traces.generators import agent_trace, conversation_trace
from kvmm.traces.mooncake import (
    BUNDLED_TRACES,
    MOONCAKE_BLOCK_TOKENS,
    MooncakeRecord,
    MooncakeTrace,
    bundled_trace_path,
    iter_mooncake,
    load_mooncake,
)

__all__ = [
    "BUNDLED_TRACES",
    "MOONCAKE_BLOCK_TOKENS",
    "MooncakeRecord",
    "MooncakeTrace",
    "agent_trace",
    "bundled_trace_path",
    "conversation_trace",
    "iter_mooncake",
    "load_mooncake",
]
