"""The same-run baselines of the benchmarks that are neither kvmm nor a plain-Python reference model.

Each module is timed next to kvmm in the same run (bench/conftest.py: role ``"baseline"``) and is
not part of the package:

* :mod:`bench.baselines.stack_kernels_v0`: the stack-distance kernel and exact tracker as first
  committed (5464a2d), copied verbatim: the version the performance issue measured
  (bench/test_bench_stack_distance.py);
* :mod:`bench.baselines.vllm_events_v0`: the vLLM KV-event reader's prefix reconstruction before
  issue 19 item 3 (quadratic in the chain length), copied verbatim (bench/test_bench_traces_vllm.py);
* :mod:`bench.baselines.peer_block_pool`: vLLM v1's ``BlockPool`` driven the way its
  ``KVCacheManager`` drives it, or the plain-Python model when vLLM is not importable
  (bench/test_bench_allocator_peer.py).

The frozen copies are kept as their sources wrote them (pyproject.toml excludes them from ruff).
The plain-Python reference models the benchmarks also time live in :mod:`kvmm.testing.models`.
"""
