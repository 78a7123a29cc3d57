"""The "triattention" report section on the bundled trained model's real attention."""

import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvmm.compress import RopeConfig, calibrate, hf  # noqa: E402
from kvmm.compress.pydoc_model import heldout_ids, load_model  # noqa: E402
from kvmm.reproduce import triattention as rt  # noqa: E402


@pytest.fixture(scope="module")
def window():
    """Calibration on the first 1,024 held-out bytes; one evaluation window of 384 cached + 64 future tokens."""
    model = load_model()
    rope = hf.rope_from_config(model.config)
    pairs = hf.capture_qk(model, heldout_ids(1024, 0))
    cal = calibrate([q for q, _ in pairs], [k for _, k in pairs], rope=rope)
    ids = heldout_ids(448, 5000)
    return cal, hf.capture_qk(model, ids), hf.attention_logits(model, ids)


def test_policy_recall_on_the_real_model_beats_single_layer_recent_and_key_norm(window):
    cal, pairs, logits = window
    run = rt.recall_experiment(pairs, logits, cal, 384)
    for frac in rt.FRACTIONS:
        values = {m: run[(m, frac)] for m in rt._method_order(cal.num_layers)}
        assert all(0.0 <= v <= 1.0 for v in values.values())
        oracle = values[rt.ORACLE]
        assert max(values.values()) <= oracle + 1e-9  # nobody beats the per-(layer, KV head) ceiling
        assert values["random"] < values["TriAttention (head)"]
    at25 = {m: run[(m, 0.25)] for m in rt._method_order(cal.num_layers)}
    best_single = max(at25[f"TriAttention (layer {i} for all)"] for i in range(cal.num_layers))
    # issue 11's done-when: the default policy at 25 % >= the best single-layer aggregation, > recent and key norm
    assert at25["TriAttention (head)"] >= best_single
    assert at25["TriAttention (head)"] > at25["recent only"] and at25["TriAttention (head)"] > at25["key norm"]


def test_recall_experiment_counts_attention_mass_exactly():
    # two layers, one head each: the future query puts all its mass on key 1 in layer 0, key 2 in layer 1
    rng = np.random.default_rng(0)
    pairs = [(rng.normal(size=(5, 1, 8)), rng.normal(size=(5, 1, 8))) for _ in range(2)]
    logits = [np.full((1, 5, 5), -1e9) for _ in range(2)]
    for lg in logits:
        lg[0, np.arange(5), np.arange(5)] = 0.0  # prefix queries attend to themselves
    logits[0][0, 4, 1] = 50.0
    logits[1][0, 4, 2] = 50.0
    cal = calibrate([p[0] for p in pairs], [p[1] for p in pairs], rope=RopeConfig(8))
    run = rt.recall_experiment(pairs, logits, cal, 4, fractions=(0.25,))
    assert run[(rt.ORACLE, 0.25)] == pytest.approx(1.0)  # keeps key 1 in layer 0 and key 2 in layer 1
    # recent only keeps key 3 in both layers: no mass
    assert run[("recent only", 0.25)] == pytest.approx(0.0, abs=1e-12)


SCRIPT = r"""
import sys, io
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from pathlib import Path
from kvmm.report import Report
from kvmm.reproduce import triattention
buf = io.StringIO()
triattention.reproduce(Report(out=Path(sys.argv[1]), quick=True, progress_enabled=False, stream=buf))
print(buf.getvalue())
"""


def test_section_without_the_hf_extra_says_it_was_skipped(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Skipped: this section needs the hf extra (torch, transformers)" in proc.stdout


def test_decode_timing_reports_mean_and_std_over_repetitions():
    from kvmm.reproduce import _decode_timing as dt

    full, small, ratio = dt._compare(lambda: sum(range(3000)), lambda: sum(range(300)), 0.002)
    assert full.shape == small.shape == ratio.shape == (dt.REPEATS,) and dt.REPEATS >= 5
    assert np.all(full > 0) and np.all(small > 0)
    np.testing.assert_allclose(ratio, full / small)


def test_decode_timing_sizes_repetitions_on_the_given_clock():
    # a fake CPU clock: the full call costs 2 ms, the compressed one 0.5 ms; min_rep 10 ms makes
    # 5 and 20 calls per repetition, and the per-call means are exact
    from kvmm.reproduce import _decode_timing as dt

    now, counts = [0.0], {"full": 0, "small": 0}

    def call(name, cost):
        def fn():
            counts[name] += 1
            now[0] += cost
        return fn

    full, small, ratio = dt._compare(call("full", 0.002), call("small", 0.0005), 0.01, clock=lambda: now[0])
    np.testing.assert_allclose(full, 0.002)
    np.testing.assert_allclose(small, 0.0005)
    np.testing.assert_allclose(ratio, 4.0)
    assert counts == {"full": 3 + 5 * dt.REPEATS, "small": 3 + 20 * dt.REPEATS}


def test_a_row_whose_spread_blurs_what_it_reports_is_marked():
    from kvmm.reproduce._decode_timing import spread_verdict

    tight = np.array([0.100, 0.101, 0.099])
    assert spread_verdict(tight, np.array([3.0, 3.1, 2.9]), [np.array([0.400, 0.401, 0.399])]) == "ok"
    # the case: full step 193 ± 79 ms at 2k, 146 ± 62 ms at 8k
    wide = np.array([0.193 - 0.079, 0.193, 0.193 + 0.079])
    assert spread_verdict(wide, np.array([3.0, 3.1, 2.9]), [np.array([0.146 - 0.062, 0.146, 0.146 + 0.062])]) == \
        "full time within spread of the next context's"
    assert spread_verdict(tight, np.array([0.8, 1.3, 1.1]), []) == "speed-up within spread of 1x"


def test_recall_chart_is_horizontal_bars_with_every_method_readable():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvmm.reproduce import triattention as ta

    methods = ta._method_order(4)
    recalls = {(m, f): [0.1 + 0.01 * i, 0.12 + 0.01 * i] for i, m in enumerate(methods) for f in ta.FRACTIONS}
    fig, ax = plt.subplots()
    ta._draw_recall(ax, recalls, 4)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    rotations = {t.get_rotation() for t in ax.get_yticklabels()}
    plt.close(fig)
    assert labels == methods and len(methods) == 15  # one labelled row per method, table order
    assert rotations == {0.0}
