"""KvmmHiCacheStorage against a dict model under random SGLang calls (sglang venv only)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvmm.testing.engines.sglang_env import storage_config  # first: loads SGLang

# isort: split
import torch  # noqa: E402

import kvmm.integrations.sglang as ks  # noqa: E402
from kvmm.policies import LRUPolicy  # noqa: E402
from kvmm.tiers import ArenaTier, ManagedTier  # noqa: E402

KEYS = st.sampled_from([f"h{i}" for i in range(6)])
DTYPES = st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.int8])


class StorageMachine(RuleBasedStateMachine):
    """The model: key -> (dtype, shape, bytes) of the first value set (SGLang never rewrites a page)."""

    def __init__(self) -> None:
        super().__init__()
        self.backend = ks.KvmmHiCacheStorage(storage_config(None), tier=ManagedTier(ArenaTier(1 << 20), LRUPolicy()))
        self.model: dict[str, tuple] = {}

    @rule(keys=st.lists(KEYS, max_size=4), dtype=DTYPES, n=st.integers(0, 24), seed=st.integers(0, 2**16))
    def batch_set(self, keys, dtype, n, seed):
        gen = torch.Generator().manual_seed(seed)
        values = [torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8, generator=gen).view(dtype)
                  for _ in keys]
        assert self.backend.batch_set(keys, values)
        for k, v in zip(keys, values):
            self.model.setdefault(k, (v.dtype, tuple(v.shape), v.view(torch.uint8).numpy().tobytes()))

    @rule(keys=st.lists(KEYS, max_size=6))
    def batch_get_and_exists(self, keys):
        got = self.backend.batch_get(keys)
        for k, tensor in zip(keys, got):
            if k not in self.model:
                assert tensor is None
            else:
                assert (tensor.dtype, tuple(tensor.shape), tensor.view(torch.uint8).numpy().tobytes()) == self.model[k]
        leading = next((i for i, k in enumerate(keys) if k not in self.model), len(keys))
        assert self.backend.batch_exists(keys) == leading

    @rule(key=KEYS)
    def get_into_a_target(self, key):
        if key in self.model:
            dtype, shape, raw = self.model[key]
            target = torch.empty(shape, dtype=dtype)
            assert self.backend.get(key, target) is target and target.view(torch.uint8).numpy().tobytes() == raw

    @rule()
    def clear(self):
        assert self.backend.clear() == len(self.model)
        self.model.clear()

    @invariant()
    def tier_is_consistent(self):
        self.backend.tier.check()
        assert sorted(k.removesuffix(self.backend.key_suffix) for k in self.backend.tier.keys()) == sorted(self.model)


TestStorageMachine = StorageMachine.TestCase
TestStorageMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
