"""KvmmPress over a TriAttentionPolicy warns about the policy settings kvpress cannot apply.

The real kvpress runs in its own CI venv (tests/integrations/test_kvpress_press.py); here the
settings check is tested directly, and the press's wiring with a stand-in ``kvpress`` module
(a bare ``ScorerPress`` dataclass) when kvpress itself is not installed.
"""

import dataclasses
import importlib
import sys
import types
import warnings

import numpy as np
import pytest

from kvmm.compress import RopeConfig, TriAttentionPolicy, TriAttentionScorer, calibrate
from kvmm.integrations._press_settings import unhonoured_settings, warn_unhonoured_policies


def _scorer():
    rng = np.random.default_rng(0)
    return TriAttentionScorer(calibrate(rng.normal(size=(32, 4, 8)), rng.normal(size=(32, 2, 8)),
                                        rope=RopeConfig(8, 100.0)))


def test_default_policy_names_every_setting_kvpress_drops():
    dropped = unhonoured_settings(TriAttentionPolicy(_scorer(), budget=64))
    assert [s.split(" ")[0] for s in dropped] == ["aggregation='head'", "budget=64", "protect_prompt=True",
                                                   "trigger='slack'"]


def test_the_closest_policy_still_names_budget_and_trigger():
    policy = TriAttentionPolicy(_scorer(), aggregation="layer_head", protect_prompt=False, trigger="interval",
                                interval=8, table=None)
    assert [s.split(" ")[0] for s in unhonoured_settings(policy)] == ["budget=1024", "trigger='interval'"]


def test_one_warning_for_several_policies_and_none_without():
    s = _scorer()
    a, b = TriAttentionPolicy(s, aggregation="global"), TriAttentionPolicy(s, protect_prompt=False)
    with pytest.warns(UserWarning, match="uses only the per-layer TriAttentionScorer") as record:
        warn_unhonoured_policies([a, b, a])
    assert len(record) == 1
    text = str(record[0].message)
    assert "aggregation='global'" in text and "aggregation='head'" in text and "protect_prompt=True" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unhonoured_policies([])


@pytest.fixture
def kvmm_press(monkeypatch):
    """kvmm.integrations.kvpress imported over a stand-in kvpress when the real one is absent."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        importlib.import_module("kvpress")
    except ImportError:
        fake = types.ModuleType("kvpress")
        fake.ScorerPress = dataclasses.dataclass(type("ScorerPress", (), {"__annotations__": {"compression_ratio": float},
                                                                        "compression_ratio": 0.0}))
        utils = types.ModuleType("kvpress.utils")
        utils.get_prerope_query_states = lambda *a, **k: None
        monkeypatch.setitem(sys.modules, "kvpress", fake)
        monkeypatch.setitem(sys.modules, "kvpress.utils", utils)
        monkeypatch.delitem(sys.modules, "kvmm.integrations.kvpress", raising=False)
    module = importlib.import_module("kvmm.integrations.kvpress")
    yield module.KvmmPress
    if not hasattr(sys.modules.get("kvpress"), "__file__"):  # drop the module built over the stand-in
        sys.modules.pop("kvmm.integrations.kvpress", None)


def test_kvmm_press_warns_for_a_policy_and_not_for_its_scorer(kvmm_press):
    s = _scorer()
    with pytest.warns(UserWarning, match=r"kvpress cannot apply its .*protect_prompt=True") as record:
        kvmm_press(TriAttentionPolicy(s), 0.5)
    assert record[0].filename == __file__  # points at the caller's line
    with pytest.warns(UserWarning, match="budget=8"):
        kvmm_press([TriAttentionPolicy(s, budget=8)] * 2, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kvmm_press(s, 0.5)
        kvmm_press([s, s], 0.5)
