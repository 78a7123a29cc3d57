"""Adapters that run kvmm components inside serving stacks.

* :mod:`kvmm.integrations.vllm` - kvmm eviction policies as vLLM ``CachePolicy`` classes and
  kvmm admission policies in vLLM's CPU KV offloading (tested against ``vllm==0.33.0``).
* :mod:`kvmm.integrations.kvpress` - any kvmm ``TokenScorer`` as a kvpress ``ScorerPress``
  (tested against ``kvpress==0.5.5``).

Nothing here is imported by ``import kvmm``: each submodule imports its host package when it
is itself imported, so kvmm never depends on vLLM or kvpress.
"""
