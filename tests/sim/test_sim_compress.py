"""Token compression in the simulator: TokenTable + any TokenScorer, per-request budget, repacking."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.sim import GiB, SimConfig, simulate
from kvmm.sim.simulator import resolve_trace

BASE = dict(workload="conversation", max_requests=120, load=0.7, gpu_kv_bytes=24 * GiB, policy="timely")


class RecentOnly:
    """A user's scorer (no kvmm base class): keep the newest tokens; records what it was shown."""

    def __init__(self):
        self.seen: dict[int, int] = {}
        self.lengths: list[int] = []

    def observe(self, seq_id, attention=None, **_):
        self.seen[seq_id] = len(attention)
        self.lengths.append(len(attention))

    def scores(self, seq_id):
        return np.arange(self.seen[seq_id], dtype=np.float64)

    def on_evict(self, seq_id, live_indices):
        self.seen[seq_id] -= len(live_indices)


def test_compressed_requests_hold_fewer_blocks_so_more_run():
    plain = simulate(SimConfig(**BASE))
    packed = simulate(SimConfig(**BASE, token_budget=2048, scorer="random"))
    assert packed.tokens_evicted > 0 and plain.tokens_evicted == 0
    assert packed.max_running > plain.max_running  # the pool is what limited the batch
    assert packed.ttft_p50 < plain.ttft_p50


def test_a_user_scorer_object_runs_and_the_budget_holds():
    budget, interval = 1024, 32
    engines = []
    res = simulate(SimConfig(**BASE, token_budget=budget, scorer=RecentOnly(), repack_interval=interval),
                   engine_hook=engines.append)
    comp = engines[0].compressor
    scorer = comp.scorer
    assert isinstance(scorer, RecentOnly) and scorer.lengths  # a per-run copy, called
    prompts = set(resolve_trace("conversation", 120).input_length.tolist())
    # a compression sees a whole prompt right after its prefill, else at most budget + interval live tokens
    assert all(n <= budget + interval or n in prompts for n in scorer.lengths)
    assert any(n in prompts for n in scorer.lengths) and any(budget < n <= budget + interval for n in scorer.lengths)
    assert res.tokens_evicted == sum(n - budget for n in scorer.lengths)
    # every request finished: the table is empty and every block went back to the pool
    comp.table.check()
    pool = engines[0].hier.pool
    pool.check()
    assert pool.num_free == pool.num_blocks and comp.reserved == 0


@pytest.mark.parametrize("kw", [dict(token_budget=0), dict(scorer="nope"), dict(scorer=object()), dict(repack_interval=0)])
def test_bad_compression_configs(kw):
    with pytest.raises(BadInputError):
        SimConfig(**kw)


def test_every_scorer_name_builds_and_validating_a_config_loads_no_compression_code():
    import subprocess
    import sys

    from kvmm.sim.compression import make_scorer
    from kvmm.sim.config import SCORER_NAMES

    assert all(callable(make_scorer(name).scores) for name in SCORER_NAMES)
    code = ("import sys; from kvmm.sim.config import SimConfig; SimConfig(token_budget=64, scorer='snapkv'); "
            "print('kvmm.sim.compression' in sys.modules, 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
