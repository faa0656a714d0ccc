"""Read a HuggingFace checkpoint's config.json (and generation_config.json) into a frozen ModelSpec.

ModelSpec is our own view of a decoder-only model (the Llama family and the Gemma family): only the fields
the engine's forward needs, named once, with the differences between families (qkv bias, q/k norm,
head_dim, tied embeddings, rope scaling, and Gemma's activation, embedding scale, (1 + w) norms, post-norms,
soft-caps, per-layer windows and ropes) made explicit. Both rope layouts are accepted: transformers 5
writes `rope_parameters: {rope_theta, rope_type, ...}`, transformers 4 writes `rope_theta` beside
`rope_scaling: {rope_type | type, ...}`. The Gemma-specific reading is models/gemma_config.py's.

This module reads JSON only; which architectures we implement is models/registry.py's business and the
rope arithmetic is models/rope.py's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError, InputError, UnsupportedError
from inferlab.models.config_file import read_config
from inferlab.models.gemma_config import GEMMA_MODEL_TYPES, gemma_fields
from inferlab.models.registry import encoder_family_for
from inferlab.models.rope_spec import RopeSpec, rope_from_parameters


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to know about a checkpoint of the Llama or Gemma family."""

    architecture: str  # config.architectures[0], e.g. "LlamaForCausalLM"
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # may differ from hidden_size // num_heads (Qwen3)
    rms_norm_eps: float
    rope: RopeSpec
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool  # Qwen2 always; Llama when attention_bias
    o_bias: bool  # Llama with attention_bias
    qk_norm: bool  # Qwen3: RMSNorm over head_dim on q and k before rope
    sliding_window: int | None  # None when the model attends over the whole context
    # --- Gemma family (engine/forwards/gemma.py); the defaults are the Llama family's ---
    activation: str = "silu"  # the MLP's gate activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, tanh approximation)
    embedding_scale: float | None = None  # Gemma: sqrt(hidden), rounded to the model dtype, times the embeddings
    norm_unit_offset: bool = False  # Gemma: every RMSNorm scales by (1 + w), computed in fp32 and rounded once
    post_norms: bool = False  # Gemma 2/3: attention and MLP outputs normed before the residual add, MLP input too
    query_pre_attn_scalar: float | None = None  # Gemma 2/3: scores scaled by this ** -0.5 (None: head_dim)
    attn_logit_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap) before the softmax
    final_logit_softcap: float | None = None  # Gemma 2 (3 when set): logits -> cap * tanh(logits / cap)
    # Gemma 2/3: per layer, how many positions a query sees (itself included, the last ones), 0 = all of them;
    # () = no per-layer windows (the Llama family: `sliding_window` is then refused beyond its length).
    layer_windows: tuple[int, ...] = ()
    local_rope: RopeSpec | None = None  # Gemma 3: the rope of the sliding-window layers (`rope` is the global one)
    eos_token_ids: tuple[int, ...] = ()  # from config.json and generation_config.json, deduplicated
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    checkpoint_dtype: str | None = None  # "bfloat16", "float32", ... as written in config.json
    num_labels: int = 2  # a sequence classifier's outputs (its score head's rows): len(id2label), else num_labels
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_attention_heads={self.num_heads} is not a multiple of num_key_value_heads="
                f"{self.num_kv_heads}; the checkpoint's config.json is inconsistent"
            )
        if self.head_dim % 2:
            raise ConfigError(f"head_dim={self.head_dim} is odd; rotary embeddings need an even head_dim")
        if self.layer_windows and len(self.layer_windows) != self.num_layers:
            raise ConfigError(
                f"{len(self.layer_windows)} layer types for num_hidden_layers={self.num_layers}; the checkpoint's "
                "config.json is inconsistent (layer_types)"
            )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attention_scale(self) -> float:
        """What q . k is multiplied by before the softmax (transformers: `scaling`)."""
        return (self.query_pre_attn_scalar if self.query_pre_attn_scalar is not None else self.head_dim) ** -0.5

    def window(self, layer: int) -> int:
        """Positions a query of `layer` sees, itself included (0: every earlier position)."""
        return self.layer_windows[layer] if self.layer_windows else 0

    def rope_of(self, layer: int) -> RopeSpec:
        """The rope of `layer`: `local_rope` on Gemma 3's sliding-window layers, `rope` everywhere else."""
        return self.local_rope if self.local_rope is not None and self.window(layer) else self.rope


def _as_id_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path} is not valid JSON ({e}); the checkpoint is damaged") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} holds a JSON {type(data).__name__}, not an object; the checkpoint is damaged")
    return data


def _rope_from_config(cfg: dict[str, Any]) -> RopeSpec:
    params = dict(cfg.get("rope_parameters") or {})  # transformers 5
    if not params:  # transformers 4: rope_theta beside an optional rope_scaling dict
        params = dict(cfg.get("rope_scaling") or {})
        if "rope_theta" in cfg:
            params["rope_theta"] = cfg["rope_theta"]
    return rope_from_parameters(params, cfg, default_theta=10000.0)


def _sliding_window(cfg: dict[str, Any]) -> int | None:
    window = cfg.get("sliding_window")
    if window is None:
        return None
    # Qwen2/Qwen3 carry a sliding_window value that only applies when use_sliding_window is true.
    if "use_sliding_window" in cfg and not cfg["use_sliding_window"]:
        return None
    return int(window)


_REQUIRED_KEYS = ("num_attention_heads", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")


def read_model_spec(model_dir: str | Path) -> ModelSpec:
    """Parse `model_dir`/config.json (+ generation_config.json when present) into a ModelSpec."""
    root = Path(model_dir)
    config_path = root / "config.json"
    cfg = read_config(root)  # a JSON object whose sizes are whole numbers in range (config_file.py)
    try:
        return _spec_from_config(cfg, root, config_path)
    except (TypeError, ValueError, AttributeError, KeyError) as e:  # a field of the wrong JSON type
        raise InputError(f"{config_path} has a field of the wrong type ({type(e).__name__}: {e}); the checkpoint is "
                         "damaged or not a HuggingFace model: re-download or re-save it") from None


def _spec_from_config(cfg: dict[str, Any], root: Path, config_path: Path) -> ModelSpec:
    architectures = cfg.get("architectures") or []
    if not isinstance(architectures, list) or not architectures:
        raise InputError(f"{config_path} has no 'architectures' list; cannot tell which model this is")
    missing = [key for key in _REQUIRED_KEYS if key not in cfg]
    if missing:  # another family's config (GPT-2 names these n_head, n_layer...): say so before a KeyError
        encoder_family_for(str(architectures[0]))  # UnsupportedError for an architecture we do not implement
        raise InputError(f"{config_path} lacks {', '.join(missing)}; is this a complete HuggingFace config?")
    if cfg.get("mlp_bias"):
        raise UnsupportedError("mlp_bias=true is not supported by the inferlab engine")
    model_type = str(cfg.get("model_type", ""))
    if model_type in GEMMA_MODEL_TYPES:
        family = gemma_fields(cfg, model_type)  # activation, norms, soft-caps, windows, ropes (gemma_config.py)
    else:
        hidden_act = cfg.get("hidden_act", "silu")
        if hidden_act != "silu":
            raise UnsupportedError(f"hidden_act={hidden_act!r} is not supported by the inferlab engine (only silu)")
        family = {"sliding_window": _sliding_window(cfg), "rope": _rope_from_config(cfg)}
    gen_path = root / "generation_config.json"
    gen = _read_json(gen_path) if gen_path.exists() else {}
    eos = _as_id_tuple(cfg.get("eos_token_id")) + _as_id_tuple(gen.get("eos_token_id"))
    num_heads = int(cfg["num_attention_heads"])
    attention_bias = bool(cfg.get("attention_bias", False))
    common = dict(
        architecture=str(architectures[0]),
        model_type=model_type,
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=int(cfg["hidden_size"]),
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=num_heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
        head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // num_heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=attention_bias and model_type in ("llama", "qwen3"),
        qk_norm=model_type in ("qwen3", "gemma3_text"),
        eos_token_ids=tuple(dict.fromkeys(eos)),
        bos_token_id=cfg.get("bos_token_id", gen.get("bos_token_id")),
        pad_token_id=cfg.get("pad_token_id", gen.get("pad_token_id")),
        checkpoint_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
        num_labels=len(cfg.get("id2label") or {}) or int(cfg.get("num_labels", 2)),
        raw=cfg,
    )
    return ModelSpec(**(common | family))  # the family's reading wins (e.g. Gemma's own defaults)
