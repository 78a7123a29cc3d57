"""Model architecture from a Hugging Face ``config.json``: parameter counts, weight and KV bytes,
FLOPs per token.

:class:`ModelArch` is everything the roofline and the KV-capacity account need to know about a
decoder-only transformer: dense (Llama, Qwen2/3), mixture-of-experts (Qwen3-MoE, Mixtral,
DeepSeek) and multi-head latent attention (DeepSeek-V2/V3).  ``ModelArch.named(...)`` reads the
shipped ``models.json`` (the relevant keys of each model's published ``config.json`` and where
they were copied from); ``ModelArch.from_hf_config(...)`` reads any config.

Counting conventions (docs/latency.md, "Models"): every linear layer, embedding, lm_head, norm
vector, attention bias and router; SwiGLU MLPs have three matrices (gate, up, down).  Rotary
tables and the multi-token-prediction module of DeepSeek-V3 (``num_nextn_predict_layers``, not
used for plain serving) are not parameters here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvmm._validate import as_count
from kvmm.errors import BadInputError

__all__ = ["ModelArch", "dtype_bytes", "DTYPE_BYTES"]

#: Bytes per element of the weight and KV-cache dtypes the latency model knows.
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1}

_MODELS_JSON = Path(__file__).with_name("models.json")


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer, as far as serving cost goes.

    Dense layers have a SwiGLU MLP of ``intermediate_size``; the layers listed in
    ``moe_layer_indices`` instead route each token to ``experts_per_token`` of
    ``n_routed_experts`` experts (each a SwiGLU MLP of ``moe_intermediate_size``) plus
    ``n_shared_experts`` always-on experts of ``shared_expert_intermediate_size``.  With
    ``kv_lora_rank > 0`` attention is MLA: the cache holds one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per token and layer instead of K and V per KV head.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    # mixture of experts (all zero for a dense model)
    n_routed_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    n_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layer_indices: tuple[int, ...] = ()
    router_bias: bool = False  # DeepSeek-V3's e_score_correction_bias: one float per expert and layer
    # multi-head latent attention (all zero for MHA/GQA)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise BadInputError(f"ModelArch.name must be a non-empty string, got {self.name!r}")
        for f in fields(self):
            if f.type == "int":
                as_count(getattr(self, f.name), f"ModelArch.{f.name}")
        for name in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size"):
            as_count(getattr(self, name), f"ModelArch.{name}", minimum=1)
        indices = tuple(self.moe_layer_indices)
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_layers for i in indices) \
                or len(set(indices)) != len(indices):
            raise BadInputError(f"ModelArch.moe_layer_indices must be distinct layer indices in [0, {self.num_layers}), "
                                f"got {indices!r}")
        object.__setattr__(self, "moe_layer_indices", tuple(sorted(indices)))
        self._check_moe()
        self._check_attention()
        if len(self.moe_layer_indices) < self.num_layers:
            as_count(self.intermediate_size, "ModelArch.intermediate_size (dense layers exist)", minimum=1)

    def _check_moe(self) -> None:
        if not self.n_routed_experts:
            if self.moe_layer_indices or self.experts_per_token or self.n_shared_experts:
                raise BadInputError("ModelArch: MoE fields are set but n_routed_experts is 0; expected n_routed_experts >= 1 "
                                    "for a mixture-of-experts model")
            return
        if not 1 <= self.experts_per_token <= self.n_routed_experts:
            raise BadInputError(f"ModelArch.experts_per_token must be in [1, n_routed_experts={self.n_routed_experts}], "
                                f"got {self.experts_per_token}")
        as_count(self.moe_intermediate_size, "ModelArch.moe_intermediate_size", minimum=1)
        if not self.moe_layer_indices:
            raise BadInputError("ModelArch.moe_layer_indices is empty but n_routed_experts > 0; expected the MoE layers")
        if self.n_shared_experts:
            as_count(self.shared_expert_intermediate_size, "ModelArch.shared_expert_intermediate_size", minimum=1)

    def _check_attention(self) -> None:
        if self.kv_lora_rank:
            for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                as_count(getattr(self, name), f"ModelArch.{name} (MLA)", minimum=1)
        elif self.num_attention_heads % self.num_kv_heads:
            raise BadInputError(f"ModelArch: num_attention_heads={self.num_attention_heads} is not a multiple of "
                                f"num_kv_heads={self.num_kv_heads}; expected whole query groups (GQA)")

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_hf_config(cls, config: str | Path | Mapping[str, Any], *, name: str | None = None) -> ModelArch:
        """Read a Hugging Face ``config.json``: a path to the file, a folder holding one, or the
        parsed dict.  Knows the Llama, Qwen2, Qwen3, Qwen3-MoE (``decoder_sparse_step``,
        ``mlp_only_layers``), Mixtral (``num_local_experts``) and DeepSeek-V2/V3
        (``n_routed_experts``, ``first_k_dense_replace``, ``moe_layer_freq``, MLA) spellings; a
        ``text_config`` block (multimodal wrappers) is read instead of the outer one.  A missing
        essential key raises :class:`BadInputError` naming it.  Runtime O(num_layers)."""
        source = ""
        if isinstance(config, (str, Path)):
            config, source = _read_config_file(Path(config)), str(config)
        if not isinstance(config, Mapping):
            raise BadInputError(f"config must be a path to a config.json, a folder holding one, or a dict, "
                                f"got {type(config).__name__}")
        cfg = dict(config)
        if isinstance(cfg.get("text_config"), Mapping):
            cfg = {**cfg, **cfg["text_config"]}
        return cls(name=name or _config_name(cfg), source=source, **_arch_fields(cfg))

    @classmethod
    def named(cls, name: str) -> ModelArch:
        """A shipped model (see :meth:`names`; old simulator names such as ``llama3-8b`` are
        aliases).  Case-insensitive."""
        if not isinstance(name, str):
            raise BadInputError(f"model name must be a string, got {type(name).__name__}")
        entries, aliases = _shipped()
        key = aliases.get(name.strip().lower())
        if key is None:
            raise BadInputError(f"unknown model {name!r}; expected one of {cls.names()} (or an alias: "
                                f"{sorted(a for a in aliases if a not in entries)})")
        return _shipped_arch(key)

    @staticmethod
    def names() -> list[str]:
        """The shipped models' canonical names."""
        return sorted(_shipped()[0])

    # ------------------------------------------------------------------ derived figures

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def total_params(self) -> int:
        """Every parameter of the model (embedding and lm_head once each, or once when tied)."""
        dense_layers = self.num_layers - len(self.moe_layer_indices)
        return (self._embedding_params() * (1 if self.tie_word_embeddings else 2)
                + self.num_layers * (self._attention_params() + 2 * self.hidden_size)
                + dense_layers * self._mlp_params(self.intermediate_size)
                + len(self.moe_layer_indices) * self._moe_layer_params(self.n_routed_experts)
                + self.hidden_size)

    def active_params(self, *, embedding: bool = True) -> int:
        """Parameters one token uses: attention, dense MLPs, the shared and ``experts_per_token``
        routed experts and the router of each MoE layer, lm_head and norms; the embedding table
        too unless ``embedding=False`` (publishers differ: Qwen's "activated" figures count it,
        DeepSeek's 36.6B does not)."""
        lm_head = self._embedding_params()
        table = self._embedding_params() if embedding and not self.tie_word_embeddings else 0
        dense_layers = self.num_layers - len(self.moe_layer_indices)
        return (table + lm_head
                + self.num_layers * (self._attention_params() + 2 * self.hidden_size)
                + dense_layers * self._mlp_params(self.intermediate_size)
                + len(self.moe_layer_indices) * self._moe_layer_params(self.experts_per_token)
                + self.hidden_size)

    def weight_bytes(self, dtype: str = "bf16") -> int:
        """Bytes of all weights stored in ``dtype`` ("bf16", "fp16" or "fp8")."""
        return self.total_params() * dtype_bytes(dtype, "dtype")

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", *, tp: int = 1) -> int:
        """KV-cache bytes one token adds, whole model (``tp=1``) or on each of ``tp`` GPUs.

        GQA: ``layers x 2 x kv_heads x head_dim x bytes``; under tensor parallelism each GPU holds
        ``max(1, kv_heads // tp)`` heads (vLLM replicates a head when there are fewer than tp).
        MLA: ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``, the same latent on every GPU."""
        nbytes = dtype_bytes(kv_dtype, "kv_dtype")
        tp = self.check_tp(tp)
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * nbytes
        heads = self.num_kv_heads if tp == 1 else max(1, self.num_kv_heads // tp)
        return self.num_layers * 2 * heads * self.head_dim * nbytes

    def gemm_flops_per_token(self) -> int:
        """FLOPs of the weight GEMMs one new token goes through (2 per multiply-add): attention
        projections, dense MLPs, shared and routed experts actually used, routers; not the
        lm_head (:meth:`lm_head_flops_per_row`) and not attention scores
        (:meth:`attention_flops_per_pair`)."""
        dense_layers = self.num_layers - len(self.moe_layer_indices)
        linear = (self.num_layers * self._attention_matrix_params()
                  + dense_layers * self._mlp_params(self.intermediate_size)
                  + len(self.moe_layer_indices) * (self._moe_layer_params(self.experts_per_token)
                                                   - (self.n_routed_experts if self.router_bias else 0)))
        return 2 * linear

    def attention_flops_per_pair(self, *, absorbed: bool = False) -> int:
        """FLOPs of one query-key pair over all layers: ``QK^T`` and ``AV``, 2 per multiply-add.

        GQA: ``layers x 4 x heads x head_dim``.  MLA as vLLM prefills (keys and values expanded
        from the latent): ``layers x 2 x heads x (qk_nope + qk_rope + v_head_dim)``;
        ``absorbed=True``, as vLLM's MLA decode kernels work in the latent space:
        ``layers x 2 x heads x (2 kv_lora_rank + qk_rope)``."""
        if not self.is_mla:
            return self.num_layers * 4 * self.num_attention_heads * self.head_dim
        if absorbed:
            width = 2 * self.kv_lora_rank + self.qk_rope_head_dim
        else:
            width = self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim
        return self.num_layers * 2 * self.num_attention_heads * width

    def check_tp(self, tp: int) -> int:
        """``tp`` if vLLM can shard this model over ``tp`` GPUs: the attention heads split evenly, and
        the KV heads either split evenly or (fewer than tp) are each replicated on ``tp / kv_heads``
        GPUs; :class:`BadInputError` otherwise."""
        tp = as_count(tp, "tp", minimum=1)
        if self.num_attention_heads % tp:
            raise BadInputError(f"tp={tp} does not divide {self.name}'s {self.num_attention_heads} attention heads; "
                                f"expected a divisor of num_attention_heads")
        if not self.is_mla and self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise BadInputError(f"tp={tp} and {self.name}'s {self.num_kv_heads} KV heads do not divide one another; "
                                f"expected tp to divide num_kv_heads or be a multiple of it")
        return tp

    def lm_head_flops_per_row(self) -> int:
        """FLOPs of the logits of one position: ``2 x hidden x vocab``."""
        return 2 * self.hidden_size * self.vocab_size

    def streamed_params(self) -> int:
        """Parameters every forward pass reads whatever the routing: all but the embedding table
        (a gather of a few rows; read in full as the lm_head when tied) and the routed experts."""
        dense_layers = self.num_layers - len(self.moe_layer_indices)
        moe_fixed = self._moe_layer_params(0)  # shared experts and router
        return (self._embedding_params()
                + self.num_layers * (self._attention_params() + 2 * self.hidden_size)
                + dense_layers * self._mlp_params(self.intermediate_size)
                + len(self.moe_layer_indices) * moe_fixed
                + self.hidden_size)

    def routed_expert_params(self) -> int:
        """Parameters of one routed expert across all MoE layers (0 for a dense model)."""
        return len(self.moe_layer_indices) * self._mlp_params(self.moe_intermediate_size)

    def __repr__(self) -> str:
        kind = "MoE " if self.is_moe else ""
        kind += "MLA" if self.is_mla else f"GQA {self.num_attention_heads}/{self.num_kv_heads}"
        return (f"ModelArch({self.name!r}: {self.num_layers} layers, hidden {self.hidden_size}, {kind}, "
                f"{self.total_params() / 1e9:.2f}B params)")

    # ------------------------------------------------------------------ helpers

    def _embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def _attention_matrix_params(self) -> int:
        h, heads = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            return 2 * h * heads * self.head_dim + 2 * h * self.num_kv_heads * self.head_dim
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = h * self.q_lora_rank + self.q_lora_rank * heads * qk if self.q_lora_rank else h * heads * qk
        kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim)
              + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return q + kv + heads * self.v_head_dim * h

    def _attention_params(self) -> int:
        extra = 0
        if self.is_mla:
            extra = self.q_lora_rank + self.kv_lora_rank  # the latents' RMSNorm vectors
        elif self.qkv_bias:
            extra = (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim
        return self._attention_matrix_params() + extra

    def _mlp_params(self, intermediate: int) -> int:
        return 3 * self.hidden_size * intermediate

    def _moe_layer_params(self, routed: int) -> int:
        """One MoE layer with ``routed`` of its routed experts, the shared experts and the router."""
        router = self.n_routed_experts * self.hidden_size + (self.n_routed_experts if self.router_bias else 0)
        return (routed * self._mlp_params(self.moe_intermediate_size)
                + self.n_shared_experts * self._mlp_params(self.shared_expert_intermediate_size) + router)


def dtype_bytes(dtype: str, what: str = "dtype") -> int:
    """Bytes per element of ``dtype``; :class:`BadInputError` for an unknown one."""
    if not isinstance(dtype, str) or dtype.lower() not in DTYPE_BYTES:
        raise BadInputError(f"{what} must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype.lower()]


def _read_config_file(path: Path) -> dict:
    if path.is_dir():
        path = path / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError(f"no config file at {path}; expected a config.json or a folder holding one") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"cannot read {path} as JSON ({exc}); expected a Hugging Face config.json") from None


def _config_name(cfg: Mapping[str, Any]) -> str:
    for key in ("_name_or_path", "name_or_path", "model_type"):
        if isinstance(cfg.get(key), str) and cfg[key]:
            return cfg[key]
    return "model"


def _need(cfg: Mapping[str, Any], key: str, *, minimum: int = 1) -> int:
    if key not in cfg or cfg[key] is None:
        raise BadInputError(f"config lacks {key!r}; expected a Hugging Face config.json of a decoder-only transformer")
    return as_count(cfg[key], f"config[{key!r}]", minimum=minimum)


def _get(cfg: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = cfg.get(key)
    return default if value is None else as_count(value, f"config[{key!r}]")


def _arch_fields(cfg: Mapping[str, Any]) -> dict:
    """ModelArch keyword arguments from a Hugging Face config dict."""
    if cfg.get("use_sliding_window") is True or cfg.get("layer_types"):
        raise BadInputError("config uses sliding-window or per-layer attention types (use_sliding_window / layer_types), "
                            "which the latency model does not represent; expected full attention in every layer")
    layers = _need(cfg, "num_hidden_layers")
    hidden = _need(cfg, "hidden_size")
    heads = _need(cfg, "num_attention_heads")
    kv_heads = _get(cfg, "num_key_value_heads", heads) or heads
    head_dim = _get(cfg, "head_dim")
    if not head_dim:
        if hidden % heads:
            raise BadInputError(f"config lacks 'head_dim' and hidden_size={hidden} is not a multiple of "
                                f"num_attention_heads={heads}; expected an explicit head_dim")
        head_dim = hidden // heads
    model_type = str(cfg.get("model_type", "")).lower()
    out = dict(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads,
               head_dim=head_dim, vocab_size=_need(cfg, "vocab_size"),
               tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
               # Qwen2 always has q/k/v biases (its config has no attention_bias key); others say so
               qkv_bias=bool(cfg.get("attention_bias", model_type.startswith("qwen2"))))
    out.update(_moe_fields(cfg, layers))
    out["intermediate_size"] = (_need(cfg, "intermediate_size") if len(out["moe_layer_indices"]) < layers
                                else _get(cfg, "intermediate_size"))
    if cfg.get("kv_lora_rank"):
        out.update(q_lora_rank=_get(cfg, "q_lora_rank"), kv_lora_rank=_need(cfg, "kv_lora_rank"),
                   qk_nope_head_dim=_need(cfg, "qk_nope_head_dim"), qk_rope_head_dim=_need(cfg, "qk_rope_head_dim"),
                   v_head_dim=_need(cfg, "v_head_dim"))
    return out


def _moe_fields(cfg: Mapping[str, Any], layers: int) -> dict:
    """MoE fields from the DeepSeek (n_routed_experts), Qwen-MoE (num_experts) or Mixtral
    (num_local_experts) spellings; {} for a dense model."""
    experts_key = next((k for k in ("n_routed_experts", "num_experts", "num_local_experts") if cfg.get(k)), None)
    if experts_key is None:
        for key in ("num_experts_per_tok", "n_shared_experts", "moe_intermediate_size"):
            if cfg.get(key):
                raise BadInputError(f"config has {key!r} but no expert count; expected 'n_routed_experts', "
                                    "'num_experts' or 'num_local_experts'")
        return {"moe_layer_indices": ()}
    n = _need(cfg, experts_key)
    if experts_key == "num_local_experts":  # Mixtral: every layer, intermediate_size is the expert's
        size, moe = _need(cfg, "intermediate_size"), tuple(range(layers))
    else:
        size = _need(cfg, "moe_intermediate_size")
        if experts_key == "n_routed_experts":  # DeepSeek: a dense prefix, then every moe_layer_freq-th layer
            first, freq = _get(cfg, "first_k_dense_replace"), _get(cfg, "moe_layer_freq", 1) or 1
            moe = tuple(i for i in range(first, layers) if i % freq == 0)
        else:  # Qwen2/3-MoE: every decoder_sparse_step-th layer not listed in mlp_only_layers
            step, dense_only = _get(cfg, "decoder_sparse_step", 1) or 1, set(cfg.get("mlp_only_layers") or ())
            moe = tuple(i for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    shared, shared_size = _get(cfg, "n_shared_experts"), size
    if _get(cfg, "shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of its own size
        shared, shared_size = 1, _get(cfg, "shared_expert_intermediate_size")
    return dict(n_routed_experts=n, experts_per_token=_need(cfg, "num_experts_per_tok"), moe_intermediate_size=size,
                n_shared_experts=shared, shared_expert_intermediate_size=shared_size if shared else 0,
                moe_layer_indices=moe, router_bias=cfg.get("topk_method") == "noaux_tc")


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[dict, dict]:
    """(models.json entries, lower-case name or alias -> canonical name)."""
    entries = json.loads(_MODELS_JSON.read_text(encoding="utf-8"))
    aliases = {}
    for key, entry in entries.items():
        aliases[key.lower()] = key
        for alias in entry.get("aliases", ()):
            aliases[alias.lower()] = key
    return entries, aliases


@functools.cache
def _shipped_arch(key: str) -> ModelArch:
    entry = _shipped()[0][key]
    arch = ModelArch.from_hf_config(entry["hf_config"], name=key)
    return ModelArch(**{f.name: getattr(arch, f.name) for f in fields(arch) if f.name != "source"}, source=entry["source"])
