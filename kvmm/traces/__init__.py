"""Request traces: one trace object (:class:`KVTrace`) read from every public KV trace format,
the bundled Mooncake traces, and synthetic generators.

``load_trace(path_or_name, format=None)`` reads any format (see :mod:`kvmm.traces.formats`);
``save_trace(trace, path, format)`` writes one; the per-format readers and writers are
re-exported here.  ``MooncakeTrace`` is the older name of :class:`KVTrace`.
"""

from kvmm.traces.bailian import BAILIAN_BLOCK_TOKENS, conversation_turns, iter_bailian, load_bailian, write_bailian
from kvmm.traces.formats import FORMATS, detect_format, iter_trace_chunks, load_trace, save_trace
from kvmm.traces.generators import agent_trace, conversation_trace
from kvmm.traces.lmcache import iter_lmcache, load_lmcache, write_lmcache
from kvmm.traces.mooncake import BUNDLED_TRACES, bundled_trace_path, iter_mooncake, load_mooncake, write_mooncake
from kvmm.traces.oracle import iter_oracle_general_chunks, load_oracle_general, write_oracle_general
from kvmm.traces.trace import MOONCAKE_BLOCK_TOKENS, KVTrace, MooncakeRecord, MooncakeTrace
from kvmm.traces.vllm_events import iter_vllm_kv_events, load_vllm_kv_events, write_vllm_kv_events

__all__ = [
    "BAILIAN_BLOCK_TOKENS",
    "BUNDLED_TRACES",
    "FORMATS",
    "KVTrace",
    "MOONCAKE_BLOCK_TOKENS",
    "MooncakeRecord",
    "MooncakeTrace",
    "agent_trace",
    "bundled_trace_path",
    "conversation_trace",
    "conversation_turns",
    "detect_format",
    "iter_bailian",
    "iter_lmcache",
    "iter_mooncake",
    "iter_oracle_general_chunks",
    "iter_trace_chunks",
    "iter_vllm_kv_events",
    "load_bailian",
    "load_lmcache",
    "load_mooncake",
    "load_oracle_general",
    "load_trace",
    "load_vllm_kv_events",
    "save_trace",
    "write_bailian",
    "write_lmcache",
    "write_mooncake",
    "write_oracle_general",
    "write_vllm_kv_events",
]
