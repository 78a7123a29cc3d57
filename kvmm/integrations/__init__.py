"""Adapters that run kvmm components inside serving stacks.

* :mod:`kvmm.integrations.vllm` - kvmm eviction policies as vLLM ``CachePolicy`` classes and
  kvmm admission policies in vLLM's CPU KV offloading (tested against ``vllm==0.33.0``).
* :mod:`kvmm.integrations.kvpress` - any kvmm ``TokenScorer`` as a kvpress ``ScorerPress``
  (tested against ``kvpress==0.5.5``).
* :mod:`kvmm.integrations.lmcache` - any kvmm tier as an LMCache storage plugin, kvmm eviction
  orders as LMCache cache policies (tested against ``lmcache==0.5.6``).
* :mod:`kvmm.integrations.sglang` - any kvmm tier as SGLang's HiCache storage backend, kvmm
  LRU/FIFO/LFU as SGLang radix-cache eviction strategies (tested against ``sglang==0.5.23``).

Nothing here is imported by ``import kvmm``: each submodule imports its host package when it
is itself imported, so kvmm never depends on any of them.
"""
