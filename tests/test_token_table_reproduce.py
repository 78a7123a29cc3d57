"""The vtoken reproduce section runs (quick) and its replay obeys the bounds it reports."""

import io

import numpy as np

from kvmm.allocators import _reproduce_vtoken as rv
from kvmm.report import Report


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


def test_synthetic_attention_rows_are_causal_distributions():
    gen = rv.SyntheticAttention(0)
    gen.add_tokens(0, 50)
    rows = gen.rows(0, np.arange(50), 45, queries=3)
    assert rows.shape == (1, 3, 50)
    np.testing.assert_allclose(rows.sum(axis=-1), 1.0)
    assert np.all(rows[0, 0, 44:] == 0) and np.all(rows[0, 2, 46:] == 0)


def test_reproduce_quick_writes_the_tables(tmp_path):
    report = Report(tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    rv.reproduce(report)
    md = "\n".join(report.chunks)
    assert "naive evict" in md and "27.2 %-72.3 %" in md and "minimum moves" in md
    assert md.count("| H2O |") == 2
