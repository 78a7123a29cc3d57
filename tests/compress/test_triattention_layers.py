"""TriAttentionPolicy across layers: each aggregation against a plain top-k reference, options, table eviction."""

import numpy as np
import pytest

from kvmm.compress import RopeConfig, TriAttentionPolicy, TriAttentionScorer, calibrate
from kvmm.errors import BadInputError, KvmmError, ShapeError

D, HEADS, KV, LAYERS = 8, 4, 2, 3


def _calibration(seed=0):
    rng = np.random.default_rng(seed)
    q = [rng.normal(size=(64, HEADS, D)) + rng.normal(size=(1, HEADS, D)) * 2 for _ in range(LAYERS)]
    k = [rng.normal(size=(64, KV, D)) for _ in range(LAYERS)]
    return calibrate(q, k, rope=RopeConfig(D, 100.0))


def _top(scores, candidates, k):
    """Plain reference: the k best candidates, ties to the later token."""
    idx = [i for i in range(scores.size) if candidates[i]]
    idx.sort(key=lambda i: (-scores[i], -i))
    return set(idx[:k])


def _reference_mask(cal, keys, budget, aggregation):
    n = keys.shape[0]
    per = np.stack([TriAttentionScorer(cal, layer=layer).kv_head_scores(keys[:, layer], np.arange(n), now=n)
                    for layer in range(LAYERS)])  # (L, G, n)
    out = np.zeros((LAYERS, KV, n), dtype=bool)
    everyone = np.ones(n, dtype=bool)
    for layer in range(LAYERS):
        for g in range(KV):
            if aggregation == "head":
                keep = _top(per[:, g].mean(axis=0), everyone, budget)
            elif aggregation == "global":
                keep = _top(per.reshape(-1, n).max(axis=0), everyone, budget)
            elif aggregation == "layer":
                keep = _top(per[layer].max(axis=0), everyone, budget)
            else:
                keep = _top(per[layer, g], everyone, budget)
            out[layer, g, sorted(keep)] = True
    return out


@pytest.mark.parametrize("aggregation", ["head", "global", "layer", "layer_head"])
def test_each_aggregation_keeps_the_reference_sets(aggregation):
    cal = _calibration()
    keys = np.random.default_rng(1).normal(size=(30, LAYERS, KV, D))
    policy = TriAttentionPolicy.from_calibration(cal, budget=9, aggregation=aggregation, protect_prompt=False)
    policy.observe(0, keys=keys)
    mask = np.moveaxis(policy.select(0, 9), 0, -1)
    np.testing.assert_array_equal(mask, _reference_mask(cal, keys, 9, aggregation))
    assert (mask.sum(axis=2) == 9).all()
    evicted = policy.compress(0)
    np.testing.assert_array_equal(np.sort(evicted), np.flatnonzero(~mask.reshape(-1, 30).any(axis=0)))
    np.testing.assert_array_equal(policy.keep_mask(0), mask[:, :, mask.reshape(-1, 30).any(axis=0)])
    policy.check()


def test_per_layer_choice_ignores_other_layers_keys():
    cal = _calibration()
    rng = np.random.default_rng(2)
    keys = rng.normal(size=(25, LAYERS, KV, D))
    other = keys.copy()
    other[:, 1:] = rng.normal(size=(25, LAYERS - 1, KV, D))  # different keys in layers 1 and 2
    masks = []
    for k in (keys, other):
        policy = TriAttentionPolicy.from_calibration(cal, budget=6, aggregation="layer", protect_prompt=False)
        policy.observe(0, keys=k)
        masks.append(policy.select(0, 6))
    np.testing.assert_array_equal(masks[0][:, 0], masks[1][:, 0])  # layer 0 decides for itself only
    assert not np.array_equal(masks[0][:, 1:], masks[1][:, 1:])


def test_prompt_protection_and_slack_trigger():
    cal = _calibration()
    rng = np.random.default_rng(3)
    policy = TriAttentionPolicy.from_calibration(cal, budget=10, interval=4, aggregation="global")
    policy.observe(5, keys=rng.normal(size=(6, LAYERS, KV, D)))  # the prompt: 6 protected tokens
    for _ in range(7):  # 13 live: below budget + interval = 14
        policy.observe(5, keys=rng.normal(size=(1, LAYERS, KV, D)))
        assert policy.step(5).size == 0
    policy.observe(5, keys=rng.normal(size=(1, LAYERS, KV, D)))  # 14 live: compress back to 10
    evicted = policy.step(5)
    assert evicted.size == 4 and policy.live_positions(5).size == 10
    assert set(range(6)) <= set(policy.live_positions(5).tolist())  # every prompt token stayed
    assert not set(evicted.tolist()) & set(range(6))
    policy.check()
    small = TriAttentionPolicy.from_calibration(cal, budget=4, interval=1, aggregation="global")
    small.observe(0, keys=rng.normal(size=(6, LAYERS, KV, D)))  # prompt longer than the budget
    small.observe(0, keys=rng.normal(size=(3, LAYERS, KV, D)))
    np.testing.assert_array_equal(np.sort(small.step(0)), [6, 7, 8])  # only decode tokens can go


def test_interval_trigger_and_table_evicts_only_tokens_no_head_keeps():
    class Table:
        calls = []

        def evict(self, seq, positions):
            self.calls.append(np.asarray(positions).copy())

    cal = _calibration()
    keys = np.random.default_rng(4).normal(size=(20, LAYERS, KV, D))
    table = Table()
    policy = TriAttentionPolicy.from_calibration(cal, budget=5, interval=20, table=table, aggregation="head",
                                                 protect_prompt=False, trigger="interval")
    policy.observe(0, keys=keys)
    expect = _reference_mask(cal, keys, 5, "head")
    evicted = policy.step(0)
    held_anywhere = expect.reshape(-1, 20).any(axis=0)
    assert 5 < held_anywhere.sum() <= 10  # two KV heads keep different tokens: the union is larger
    np.testing.assert_array_equal(table.calls[-1], np.flatnonzero(~held_anywhere))
    np.testing.assert_array_equal(evicted, np.flatnonzero(~held_anywhere))
    policy.observe(0, keys=keys[:1])
    assert policy.step(0).size == 0  # interval: 1 step since the compression, not 20
    policy.check()


def test_bad_configuration_and_shapes():
    cal = _calibration()
    for kwargs in (dict(aggregation="mean"), dict(trigger="always"), dict(protect_prompt="yes")):
        with pytest.raises(BadInputError):
            TriAttentionPolicy.from_calibration(cal, **kwargs)
    with pytest.raises(BadInputError, match="list of them"):
        TriAttentionPolicy([])
    with pytest.raises(BadInputError, match="calibration must be a Calibration"):
        TriAttentionPolicy.from_calibration(object())
    policy = TriAttentionPolicy.from_calibration(cal)
    with pytest.raises(ShapeError, match="layers=3"):
        policy.observe(0, keys=np.ones((2, KV, D)))  # a one-layer shape for a three-layer policy
    assert policy._seqs == {}


def test_bad_evictions_and_budgets_raise_and_change_nothing():
    policy = TriAttentionPolicy.from_calibration(_calibration(), budget=4)
    policy.observe(0, keys=np.random.default_rng(1).normal(size=(6, LAYERS, KV, D)))
    before = (policy.live_positions(0), policy.keep_mask(0))
    for bad in ([1, 1], [[1], [9]], [1.5], [True, False]):  # a repeat is not one eviction (as TokenScorerBase)
        with pytest.raises(KvmmError):
            policy.on_evict(0, bad)
    for budget in (-1, 0, 1.5):
        with pytest.raises(KvmmError, match="budget"):
            policy.select(0, budget)
    np.testing.assert_array_equal(policy.live_positions(0), before[0])
    np.testing.assert_array_equal(policy.keep_mask(0), before[1])
    policy.on_evict(0, [[1], [3]])  # any integer shape, raveled, as TokenScorerBase takes it
    assert policy.live_positions(0).tolist() == [0, 2, 4, 5]


@pytest.mark.parametrize("aggregation", ["head", "global", "layer", "layer_head"])
def test_a_sequence_with_no_live_tokens_checks_and_compresses_to_nothing(aggregation):
    policy = TriAttentionPolicy.from_calibration(_calibration(), budget=4, aggregation=aggregation)
    policy.observe(0, keys=np.zeros((0, LAYERS, KV, D)))
    policy.check()  # every aggregation's group view of an empty held mask
    assert policy.select(0, 4).shape == (0, LAYERS, KV)
    assert policy.compress(0).tolist() == [] and policy.keep_mask(0).shape == (LAYERS, KV, 0)
    policy.observe(0, keys=np.random.default_rng(2).normal(size=(6, LAYERS, KV, D)))
    evicted = policy.compress(0)  # 4 of 6 kept per selection group: at most 2 evicted, exactly 2 with one group
    assert evicted.size <= 2 and (aggregation != "global" or evicted.size == 2)
    assert sorted(policy.live_positions(0).tolist() + evicted.tolist()) == list(range(6))
    policy.check()
