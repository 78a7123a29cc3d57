"""Capture pre-RoPE queries and keys (and the true attention logits) from a transformers model.

Needs the ``hf`` extra (torch, transformers); importing this module without them raises
:class:`~kvmm.errors.BackendUnavailableError`.  Supported: decoder models whose attention
module has ``q_proj`` / ``k_proj`` (Llama, Qwen2, Mistral, ...) and optionally ``q_norm`` /
``k_norm`` applied per head before RoPE (Qwen3).

* :func:`rope_from_config` reads ``head_dim``, ``rope_theta`` and the scaling from
  ``model.config`` (``rope_parameters`` in transformers 5, ``rope_scaling`` + ``rope_theta``
  before), as a :class:`~kvmm.compress.RopeConfig` with the ``half`` layout HF models use.
* :func:`capture_qk` runs the model once with forward hooks on q_proj/k_proj (q_norm/k_norm
  when present) and returns per layer ``q (tokens, heads, head_dim)`` and
  ``k (tokens, kv_heads, head_dim)`` as float64 numpy arrays, pre-RoPE.
* :func:`attention_logits` returns the model's own pre-softmax logits ``(heads, T, T)`` per
  layer (scaled by ``1/sqrt(d)``, before the causal mask), captured by an attention function
  registered with transformers' ``AttentionInterface`` that then computes eager attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np

from kvmm._validate import as_index_array
from kvmm.compress.rope import RopeConfig, RopeScaling
from kvmm.errors import BackendUnavailableError, BadInputError, ShapeError

try:
    import torch
    import transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailableError(f"kvmm.compress.hf needs torch and transformers (pip install 'kvmm[hf]'): {exc}") from exc

__all__ = ["rope_from_config", "capture_qk", "attention_logits", "model_shape"]

_CAPTURE_NAME = "kvmm_capture_logits"


#: model types whose RoPE rotates adjacent pairs (x[2f], x[2f+1]) instead of the two halves
INTERLEAVED_MODEL_TYPES = frozenset({"gptj", "cohere", "cohere2", "codegen"})


def rope_from_config(config: Any) -> RopeConfig:
    """The model's RoPE as a :class:`RopeConfig`.

    Layout: ``interleaved`` for GPT-J-style and Cohere-style models (``model_type`` in
    :data:`INTERLEAVED_MODEL_TYPES`), which rotate adjacent pairs; ``half`` (Llama, Qwen, Mistral,
    GPT-NeoX, ...) otherwise.

    ``config`` is a transformers config or a plain dict (a model's ``config.json``); a multimodal
    config's ``text_config`` is used when the top level has no attention sizes.  The RoPE
    parameters come from ``rope_parameters`` (transformers 5) or, when that is absent or empty,
    ``rope_scaling`` (transformers 4 and older ``config.json`` files); ``rope_theta`` is read from
    inside them first, then from the config.  As transformers does, a top-level
    ``original_max_position_embeddings`` overrides the one inside for llama3 / yarn scaling.
    Raises :class:`BadInputError` for partial rotary embeddings (``partial_rotary_factor``,
    ``rotary_pct`` or a ``rotary_dim`` smaller than the head) or unsupported RoPE types.
    """
    config = _text_config(config)
    heads = getattr(config, "num_attention_heads", None)
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    if not head_dim:
        raise BadInputError("config has neither head_dim nor hidden_size and num_attention_heads")
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, Mapping) or not params:
        params = getattr(config, "rope_scaling", None)
    params = dict(params) if isinstance(params, Mapping) else {}
    if params and isinstance(next(iter(params.values())), Mapping):
        raise BadInputError("per-layer-type rope parameters (e.g. Gemma) are not supported")
    theta = params.get("rope_theta")
    if theta is None:
        theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = 10000.0
    partial = params.get("partial_rotary_factor") or getattr(config, "partial_rotary_factor", None) \
        or getattr(config, "rotary_pct", None) or 1.0
    if float(partial) != 1.0:
        raise BadInputError(f"partial_rotary_factor={partial} is not supported; expected 1.0 (full RoPE)")
    rotary_dim = getattr(config, "rotary_dim", None)
    if rotary_dim is not None and int(rotary_dim) != int(head_dim):
        raise BadInputError(f"partial rotary embeddings (rotary_dim={rotary_dim} of head_dim={head_dim}) are not "
                            f"supported; expected rotary_dim == head_dim (full RoPE)")
    original = getattr(config, "original_max_position_embeddings", None)
    if original and params.get("rope_type", params.get("type")) in ("llama3", "yarn"):
        params["original_max_position_embeddings"] = original
    scaling = RopeScaling.from_hf(params, getattr(config, "max_position_embeddings", None))
    return RopeConfig(int(head_dim), float(theta), _layout(config), scaling)


def model_shape(model: Any) -> dict[str, int]:
    """``num_layers``, ``num_heads``, ``num_kv_heads``, ``head_dim`` of a transformers model."""
    c = getattr(model, "config", None)
    if c is None:
        raise BadInputError(f"{type(model).__name__} has no .config; expected a transformers model")
    c = _text_config(c)
    heads = c.num_attention_heads
    return {"num_layers": int(c.num_hidden_layers), "num_heads": int(heads),
            "num_kv_heads": int(getattr(c, "num_key_value_heads", None) or heads),
            "head_dim": int(getattr(c, "head_dim", None) or c.hidden_size // heads)}


def capture_qk(model: Any, input_ids: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pre-RoPE ``(q, k)`` of every layer for one sequence of token ids ``(T,)`` or ``(1, T)``.

    Runtime complexity: one forward pass.
    """
    ids = _as_ids(input_ids)
    attn_modules = _attention_modules(model)
    shape = model_shape(model)
    captured: dict[tuple[int, str], np.ndarray] = {}
    handles = []
    for layer, attn in enumerate(attn_modules):
        for kind, heads in (("q", shape["num_heads"]), ("k", shape["num_kv_heads"])):
            norm = getattr(attn, f"{kind}_norm", None)
            target = norm if norm is not None else getattr(attn, f"{kind}_proj")
            handles.append(target.register_forward_hook(_make_hook(captured, layer, kind, heads, shape["head_dim"])))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return [(captured[(i, "q")], captured[(i, "k")]) for i in range(len(attn_modules))]


def attention_logits(model: Any, input_ids: Any) -> list[np.ndarray]:
    """The model's own pre-softmax, pre-mask logits ``q_rot . k_rot / sqrt(d)``, ``(heads, T, T)`` per layer."""
    from transformers import AttentionInterface  # the optional hf extra (torch is loaded by now)

    ids = _as_ids(input_ids)
    logits: dict[int, np.ndarray] = {}

    def capture(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        groups = query.shape[1] // key.shape[1]
        key_all = key.repeat_interleave(groups, dim=1)
        value_all = value.repeat_interleave(groups, dim=1)
        scores = torch.matmul(query, key_all.transpose(2, 3)) * scaling
        logits[int(module.layer_idx)] = scores[0].detach().to(torch.float64).cpu().numpy()
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, :, : key_all.shape[-2]]
        else:
            t = scores.shape[-1]
            causal = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, value_all).transpose(1, 2).contiguous()
        return out, weights

    AttentionInterface.register(_CAPTURE_NAME, capture)
    previous = model.config._attn_implementation
    _set_attn(model, _CAPTURE_NAME)
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        _set_attn(model, previous)
    return [logits[i] for i in sorted(logits)]


def _text_config(config: Any) -> Any:
    """The decoder's config: ``config`` itself, or its ``text_config`` (Qwen2.5-VL, Llava, ... keep
    the language model's sizes and RoPE there); a ``config.json`` dict becomes attribute-readable."""
    if isinstance(config, Mapping):
        config = SimpleNamespace(**config)
    text = getattr(config, "text_config", None)
    if text is not None and getattr(config, "num_attention_heads", None) is None:
        config = SimpleNamespace(**text) if isinstance(text, Mapping) else text
    return config


def _layout(config: Any) -> str:
    model_type = str(getattr(config, "model_type", "") or "").lower()
    return "interleaved" if model_type in INTERLEAVED_MODEL_TYPES else "half"


def _set_attn(model: Any, name: str) -> None:
    setter = getattr(model, "set_attn_implementation", None)
    try:
        if setter is None:
            raise AttributeError
        setter(name)
    except Exception:  # older transformers or a name it does not validate: set it directly
        model.config._attn_implementation = name
        for module in model.modules():
            cfg = getattr(module, "config", None)
            if cfg is not None:
                cfg._attn_implementation = name


def _make_hook(captured, layer, kind, heads, head_dim):
    def hook(module, inputs, output):
        out = output[0] if isinstance(output, tuple) else output
        arr = out.detach().to(torch.float64).cpu().numpy()
        captured[(layer, kind)] = arr.reshape(arr.shape[0], arr.shape[1], heads, head_dim)[0]
    return hook


def _attention_modules(model: Any) -> list[Any]:
    mods = [m for m in model.modules() if hasattr(m, "q_proj") and hasattr(m, "k_proj")]
    if not mods:
        raise BadInputError(f"{type(model).__name__} has no attention module with q_proj/k_proj")
    return mods


def _as_ids(input_ids: Any) -> torch.Tensor:
    """One sequence of token ids as a ``(1, T)`` long tensor; float ids raise (not truncated to a token)."""
    arr = np.asarray(input_ids)
    if not (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[0] == 1)) or arr.size == 0:
        raise ShapeError(f"input_ids must be one sequence (T,) or (1, T), got shape {arr.shape}")
    return torch.from_numpy(as_index_array(arr.reshape(-1), "input_ids"))[None]
