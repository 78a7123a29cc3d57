"""The bundled pydoc-llama model: corpus split, loading, and a held-out loss far below an untrained model's."""

import json

import numpy as np
import pytest

from kvmm.compress.pydoc_model import MODEL_DIR, byte_ids, corpus_split, heldout_ids
from kvmm.errors import BadInputError


def test_corpus_split_is_the_last_tenth_of_the_sorted_topics():
    from pydoc_data.topics import topics

    train, held = corpus_split()
    full = "\n\n".join(topics[name] for name in sorted(topics)).encode("utf-8")
    assert train + held == full and len(held) == len(full) - int(len(full) * 0.9)
    ids = heldout_ids(10, start=len(held) - 4)  # wraps around
    np.testing.assert_array_equal(ids, np.concatenate([byte_ids(held[-4:]), byte_ids(held[:6])]))
    with pytest.raises(BadInputError, match="length must be > 0"):
        heldout_ids(0)


def test_committed_files_are_small_and_described():
    weights = MODEL_DIR / "weights.npz"
    assert weights.stat().st_size <= 5 * 2**20
    readme = (MODEL_DIR / "README.md").read_text()
    metrics = json.loads((MODEL_DIR / "metrics.json").read_text())
    for word in ("pydoc_data.topics", "PSF", "seed", "held-out", "scripts/train_tiny_llama.py"):
        assert word in readme
    assert f"{metrics['heldout_loss_trained_nats']:.3f}" in readme


def test_heldout_loss_far_below_an_untrained_model_of_the_same_size():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from kvmm.compress.pydoc_model import load_model

    model = load_model()
    torch.manual_seed(0)
    untrained = transformers.LlamaForCausalLM(model.config).eval()
    batch = torch.from_numpy(np.stack([heldout_ids(257, start) for start in (0, 9000, 21000, 33000)]))

    def loss(m):
        with torch.no_grad():
            logits = m(input_ids=batch[:, :-1]).logits
        return float(torch.nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1)))

    trained_loss, untrained_loss = loss(model), loss(untrained)
    assert untrained_loss > 5.0  # about ln 256: uniform over bytes
    assert trained_loss < untrained_loss - 2.5, (trained_loss, untrained_loss)


def test_load_model_without_weights_is_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    from kvmm.compress.pydoc_model import load_model

    with pytest.raises(BadInputError, match="no weights.npz"):
        load_model(tmp_path)
