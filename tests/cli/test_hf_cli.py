"""``kvmm calibrate`` on a tiny random model saved to a folder, with a tiny offline tokenizer."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from kvmm.cli import main  # noqa: E402
from kvmm.compress import Calibration  # noqa: E402

WORDS = "the cat sat on a mat and then it ran to see dog who was by door".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(WORDS) + 1, hidden_size=64, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256,
                                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                                    "rope_theta": 10000.0})
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def _rows(out):
    return [line.split() for line in out.splitlines() if line.split() and line.split()[0].isdigit()]


def test_calibrate_command_writes_file_and_prints_every_head(model_dir, tmp_path, capsys):
    text = tmp_path / "text.txt"
    rng = np.random.default_rng(0)
    text.write_text(" ".join(rng.choice(WORDS, size=120)), encoding="utf-8")
    out = tmp_path / "cal.npz"
    assert main(["calibrate", str(model_dir), str(text), "--out", str(out), "--max-delta", "64"]) == 0
    printed = capsys.readouterr().out
    cal = Calibration.load(out, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)
    assert cal.n_tokens.tolist() == [60, 60] and cal.rope.scaling.kind == "llama3"  # first half calibrates
    rows = _rows(printed)
    assert [(int(r[0]), int(r[1])) for r in rows] == [(layer, head) for layer in range(2) for head in range(4)]
    for r in rows:
        assert -1.0 <= float(r[2]) <= 1.0 and -1.0 <= float(r[3]) <= 1.0
        assert float(r[4]) == pytest.approx(cal.head_concentration()[int(r[0]), int(r[1])], abs=5e-4)
    assert "mean Pearson in sample" in printed and "mean Pearson out of sample" in printed
    assert "tokens 60..119, distances 1..59" in printed
    # the out-of-sample column: calibrated on tokens 0..59, measured on 60..119 (recomputed here)
    from kvmm.compress import calibrate, logit_curve, mean_logit_by_distance, pearson
    from kvmm.compress.hf import capture_qk, rope_from_config

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    pairs = capture_qk(model, np.asarray(tok(text.read_text())["input_ids"]))
    rope = rope_from_config(model.config)
    ref_cal = calibrate([q[:60] for q, _ in pairs], [k[:60] for _, k in pairs], rope=rope)
    deltas = np.arange(1, 60)
    for layer, (q, k) in enumerate(pairs):
        out = pearson(logit_curve(ref_cal, deltas)[layer], mean_logit_by_distance(q[60:], k[60:], rope, deltas))
        np.testing.assert_allclose([float(r[3]) for r in rows if int(r[0]) == layer], out, atol=6e-4)


def test_calibrate_with_token_ids(model_dir, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(i) for i in np.random.default_rng(1).integers(0, len(WORDS), 50)))
    out = tmp_path / "c2.npz"
    assert main(["calibrate", str(model_dir), str(ids), "--token-ids", "--out", str(out), "--max-tokens", "40",
                 "--calibration-fraction", "1"]) == 0
    assert Calibration.load(out).n_tokens.tolist() == [40, 40]
    printed = capsys.readouterr().out
    rows = _rows(printed)
    assert len(rows) == 8 and all(r[3] == "n/a" for r in rows)
    assert "out-of-sample Pearson not measured" in printed


def test_calibrate_bad_input_is_a_clear_error(model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 x")
    assert main(["calibrate", str(model_dir), str(bad), "--token-ids"]) == 2
    assert "whitespace-separated integers" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "missing"), str(bad)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["calibrate", str(model_dir), str(bad), "--calibration-fraction", "0"]) == 2
    assert "--calibration-fraction must be in (0, 1]" in capsys.readouterr().err


def test_calibrate_without_a_tokenizer_is_one_line_that_suggests_token_ids(model_dir, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare"
    bare.mkdir()
    for f in model_dir.iterdir():  # the model without its tokenizer files
        if f.is_file() and not f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, bare / f.name)
    text = tmp_path / "text.txt"
    text.write_text("alpha beta", encoding="utf-8")
    assert main(["calibrate", str(bare), str(text), "--out", str(tmp_path / "c.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"kvmm calibrate: error: cannot load a tokenizer from {bare}")
    assert "--token-ids" in err
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(i % 8 + 1) for i in range(40)))
    assert main(["calibrate", str(bare), str(ids), "--token-ids", "--out", str(tmp_path / "c.npz")]) == 0
