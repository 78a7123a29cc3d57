"""Drivers of the real serving engines next to kvmm, shared by tests/integrations and bench/.

Each module imports its engine when imported, so import one only where that engine is installed
(the per-engine venvs of .ci/run): :mod:`~kvmm.testing.engines.vllm_replay` (vLLM's CPU offloading
manager and a ManagedTier on one trace), :mod:`~kvmm.testing.engines.lmcache_replay` and
:mod:`~kvmm.testing.engines.lmcache_plugin_helpers` (LMCache's local CPU backend and storage
plugins), :mod:`~kvmm.testing.engines.sglang_env` (SGLang's HiCache host pool and storage
controller, with the import-time stubs SGLang needs on a CPU machine).  Nothing in kvmm imports
them; the adapters they drive are in :mod:`kvmm.integrations`.
"""
