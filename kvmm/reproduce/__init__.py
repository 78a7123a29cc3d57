"""The paper reproductions behind ``kvmm reproduce``: one module per paper.

Each module defines ``reproduce(report)`` and is listed once in :data:`kvmm.report.SECTIONS`.
They use only the public library (allocators, policies, tiers, compress, sim); the component
packages hold no experiment code.

* :mod:`~kvmm.reproduce.prefix_cache`: prefix-cache hit ratio vs pool size (BlockAllocator)
* :mod:`~kvmm.reproduce.vtoken`: vToken (token table + repacking)
* :mod:`~kvmm.reproduce.efficientagent`: EfficientAgent (working set, refill admission)
* :mod:`~kvmm.reproduce.tempokv`: TempoKV (commitment ledger, staging policies)
* :mod:`~kvmm.reproduce.triattention`: TriAttention (RoPE trig-series scoring)
"""
