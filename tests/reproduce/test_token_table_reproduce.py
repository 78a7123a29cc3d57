"""The vtoken reproduce section runs (quick) and its replay obeys the bounds it reports."""

import io

import numpy as np

from kvmm.report import Report
from kvmm.reproduce import vtoken as rv


def test_replay_vtoken_never_holds_more_than_naive(tmp_path):
    w = rv.workload(quick=True)
    w.update(requests=4, decode=(16, 24))
    for name, make in rv.policies(w):
        st = rv.replay(make, w)
        assert st["vtoken"]["steps"] == st["naive"]["steps"] == st["full"]["steps"]
        assert st["vtoken"]["block_steps"] < st["naive"]["block_steps"] <= st["full"]["block_steps"], name
        # every repack frees a block for at least its live tokens; never fewer moves than that
        assert st["vtoken"]["moves"] >= st["vtoken"]["min_moves"]
        assert st["vtoken"]["dropped"] == 0
        # what a paged kernel reads: never fewer slots than live tokens; repacking reads fewer than naive
        assert st["naive"]["read_steps"] > st["vtoken"]["read_steps"] >= st["live_steps"] > 0
        # one step per decode token of the longest request, plus the prefill step; a repack every 8
        assert st["table_steps"] == max(rv_decode(w)) + 1
        assert len(st["vtoken"]["commit_moves"]) == -(-st["table_steps"] // w["repack_every"])
        assert sum(st["vtoken"]["commit_moves"]) == st["vtoken"]["moves"]
        # each repack timed REPEATS times (copies of the table), every timing positive
        assert st["vtoken"]["plan_s"].shape == (rv.REPEATS,) and np.all(st["vtoken"]["plan_s"] > 0)
        assert st["attention"].startswith("real: the bundled pydoc-llama model")


def test_synthetic_attention_rows_are_causal_distributions():
    gen = rv.SyntheticAttention(0)
    gen.add_tokens(0, 50)
    rows = gen.rows(0, np.arange(50), 45, queries=3)
    assert rows.shape == (1, 3, 50)
    np.testing.assert_allclose(rows.sum(axis=-1), 1.0)
    assert np.all(rows[0, 0, 44:] == 0) and np.all(rows[0, 2, 46:] == 0)


def test_model_attention_rows_are_renormalised_real_attention():
    gen = rv.ModelAttention([40, 60], seed=3)
    full = gen.matrices[1]
    assert full.shape == (60, 60) and np.allclose(np.triu(full, 1), 0) and np.allclose(full.sum(axis=1), 1, atol=1e-5)
    live = np.array([0, 3, 7, 20, 41, 50])
    rows = gen.rows(1, live, 50, queries=2)
    assert rows.shape == (1, 2, 6)
    np.testing.assert_allclose(rows.sum(axis=-1), 1.0)
    np.testing.assert_allclose(rows[0, 1], full[50, live] / full[50, live].sum(), rtol=1e-6)
    assert rows[0, 0, 5] == 0  # query 49 cannot see position 50
    assert not np.allclose(rows[0, 1], 1 / 6)  # a trained model's attention is not uniform


def test_reproduce_quick_writes_the_tables(tmp_path):
    report = Report(tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    rv.reproduce(report)
    md = "\n".join(report.chunks)
    assert "naive evict" in md and "27.2 %-72.3 %" in md and "minimum moves" in md
    assert "up to 1.37x" in md and "TPOT SLA ms" in md
    assert "ratio vs naive (kernel skips dead slots)" in md and "ratio vs naive (kernel reads dead slots)" in md
    assert "random (degenerate, see note)" in md and "degenerate by construction" in md
    assert "Attention rows: real: the bundled pydoc-llama model" in md
    # policy table, repack-cost table, and the SLA ratio table's three H2O budgets (32, 64, 128)
    assert md.count("| H2O |") == 5
    assert "x ± " in md  # ratios with their spread over the timing repetitions


def rv_decode(w):
    """The decode lengths replay() draws (same seed and order)."""
    rng = np.random.default_rng(w["seed"])
    rng.integers(w["prompt"][0], w["prompt"][1] + 1, size=w["requests"])
    return rng.integers(w["decode"][0], w["decode"][1] + 1, size=w["requests"]).tolist()


def test_synthetic_attention_is_labelled_when_chosen():
    w = dict(rv.workload(quick=True), attention="synthetic")
    source, label = rv.attention_source(w, [10, 12], [3, 4])
    assert isinstance(source, rv.SyntheticAttention) and label.startswith("synthetic:")
