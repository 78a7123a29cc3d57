"""The small RoPE model shipped with kvmm, for real attention in tests and ``kvmm reproduce``.

``pydoc-llama`` is a transformers ``LlamaForCausalLM`` (4 layers, hidden 128, 4 query heads,
2 KV heads, head_dim 32, RoPE theta 10,000, byte-level vocabulary of 256, context 2,048)
trained by ``scripts/train_tiny_llama.py`` on the text of Python's own documentation topics
(:mod:`pydoc_data.topics`, PSF licence, present on every CPython install).  The corpus split is
defined here so that training and every evaluation use the same held-out text: topics are
sorted by name and joined with blank lines; the last 10 % of the bytes is held out.

The weights are stored as float16 in ``kvmm/data/models/pydoc-llama/weights.npz`` with the
transformers config in ``config.json``; :func:`load_model` rebuilds the model in float32.
Needs the ``hf`` extra (torch, transformers) for :func:`load_model`; the corpus helpers need
only numpy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvmm.errors import BackendUnavailableError, BadInputError

__all__ = ["MODEL_DIR", "corpus_split", "heldout_ids", "load_model", "byte_ids"]

MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "models" / "pydoc-llama"
HELDOUT_FRACTION = 0.1


def corpus_split() -> tuple[bytes, bytes]:
    """``(train, heldout)`` UTF-8 bytes of :mod:`pydoc_data.topics`.

    Topics sorted by name and joined with a blank line; the last 10 % of the bytes (a contiguous
    tail of the alphabet of topics) is held out.  Deterministic for a given CPython version's
    documentation text.
    """
    from pydoc_data.topics import topics  # CPython's documentation text (~700 kB): loaded on use only

    text = "\n\n".join(topics[name] for name in sorted(topics)).encode("utf-8")
    cut = int(len(text) * (1 - HELDOUT_FRACTION))
    return text[:cut], text[cut:]


def byte_ids(data: bytes) -> np.ndarray:
    """Token ids of ``data`` under the byte-level vocabulary (one id per byte), int64."""
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def heldout_ids(length: int, start: int = 0) -> np.ndarray:
    """``length`` token ids of held-out text starting at byte ``start`` (wraps around)."""
    if length <= 0 or start < 0:
        raise BadInputError(f"length must be > 0 and start >= 0, got length={length}, start={start}")
    ids = byte_ids(corpus_split()[1])
    return np.take(ids, np.arange(start, start + length), mode="wrap")


def load_model(model_dir: Path | str | None = None) -> Any:
    """The trained ``LlamaForCausalLM`` in float32, eval mode (needs torch and transformers)."""
    try:  # the optional hf extra
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise BackendUnavailableError(f"the bundled model needs torch and transformers (pip install 'kvmm[hf]'): {exc}") from exc
    folder = Path(model_dir) if model_dir is not None else MODEL_DIR
    weights = folder / "weights.npz"
    if not weights.exists():
        raise BadInputError(f"no weights.npz in {folder}; train one with scripts/train_tiny_llama.py")
    config = LlamaConfig(**json.loads((folder / "config.json").read_text()))
    model = LlamaForCausalLM(config)
    with np.load(weights) as arrays:
        state = {name: torch.from_numpy(arrays[name].astype(np.float32)) for name in arrays.files}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        raise BadInputError(f"weights in {folder} do not match the config: missing {missing}, unexpected {unexpected}")
    model.eval()
    return model
