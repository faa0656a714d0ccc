"""The Gemma family's config.json -> the ModelSpec fields that differ from the Llama reading (config.py).

Gemma ("gemma"), Gemma 2 ("gemma2") and Gemma 3 text ("gemma3_text") share: GeGLU with the tanh GELU,
embeddings times sqrt(hidden), RMSNorm by (1 + w), tied embeddings, head_dim 256 by default. Gemma 2 and 3
add pre/post norms around attention and MLP, `query_pre_attn_scalar`, and sliding-window layers
(`layer_types`, or older configs' rule: Gemma 2 even layers, Gemma 3 every `sliding_window_pattern`-th layer
global). Gemma 2 soft-caps attention scores and logits; Gemma 3 has q/k norms and two ropes
(`rope_local_base_freq` on sliding layers, `rope_theta` + `rope_scaling` on global ones, or
`rope_parameters` per layer type). A key config.json leaves out takes transformers' class default.

As transformers reads them: Gemma 3 ignores `attn_logit_softcapping`; Gemma 1's legacy `hidden_act: "gelu"`
means the tanh approximation; a window of W lets a query see its own position and the W - 1 before it.
"""

from __future__ import annotations

from typing import Any

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.models.rope_spec import RopeSpec, rope_from_parameters

GEMMA_MODEL_TYPES = ("gemma", "gemma2", "gemma3_text")
SLIDING, GLOBAL = "sliding_attention", "full_attention"

# transformers' class defaults for keys a config.json may leave out
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": dict(max_position_embeddings=8192, rope_theta=10000.0),
    "gemma2": dict(max_position_embeddings=8192, rope_theta=10000.0, sliding_window=4096, query_pre_attn_scalar=256,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0, pattern=2),  # fmt: skip
    "gemma3_text": dict(max_position_embeddings=131072, sliding_window=4096, query_pre_attn_scalar=256,
                        final_logit_softcapping=None, pattern=6, global_theta=1e6, local_theta=1e4),  # fmt: skip
}


def gemma_fields(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """ModelSpec keyword arguments for a Gemma-family config (they override config.py's Llama reading)."""
    d = _DEFAULTS[model_type]
    if cfg.get("attention_bias"):
        raise UnsupportedError(
            f"attention_bias=true on {model_type} is not supported by the inferlab engine"
        )
    if cfg.get("use_bidirectional_attention"):
        raise UnsupportedError("use_bidirectional_attention=true (an encoder-style Gemma) is not supported by the "
                               "inferlab engine")  # fmt: skip
    layers = int(cfg["num_hidden_layers"])
    fields: dict[str, Any] = dict(
        activation=_activation(cfg, model_type),
        embedding_scale=float(cfg["hidden_size"]) ** 0.5,
        norm_unit_offset=True,
        head_dim=int(cfg.get("head_dim") or 256),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or d["max_position_embeddings"]),
        sliding_window=None,
    )
    if model_type == "gemma":
        return fields | dict(rope=_flat_rope(cfg, d["rope_theta"]))
    window = cfg.get("sliding_window", d["sliding_window"])
    types = _layer_types(cfg, layers, d["pattern"])
    fields |= dict(
        post_norms=True,
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", d["query_pre_attn_scalar"])),
        final_logit_softcap=_optional_float(cfg.get("final_logit_softcapping", d["final_logit_softcapping"])),
        sliding_window=None if window is None else int(window),
        layer_windows=tuple(int(window or 0) if t == SLIDING else 0 for t in types),
    )
    if model_type == "gemma2":
        cap = _optional_float(cfg.get("attn_logit_softcapping", d["attn_logit_softcapping"]))
        return fields | dict(rope=_flat_rope(cfg, d["rope_theta"]), attn_logit_softcap=cap)
    global_rope, local_rope = _gemma3_ropes(cfg, d)
    return fields | dict(rope=global_rope, local_rope=local_rope)


def _activation(cfg: dict[str, Any], model_type: str) -> str:
    # transformers reads hidden_act for Gemma 1 and hidden_activation for Gemma 2/3
    key = "hidden_act" if model_type == "gemma" else "hidden_activation"
    name = cfg.get(key) or "gelu_pytorch_tanh"
    if model_type == "gemma" and name == "gelu":  # the official configs' legacy value for the tanh GELU
        name = "gelu_pytorch_tanh"
    if name != "gelu_pytorch_tanh":
        raise UnsupportedError(f"{key}={name!r} is not supported by the inferlab engine for {model_type} "
                               "(only gelu_pytorch_tanh)")  # fmt: skip
    return "gelu_tanh"


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _layer_types(cfg: dict[str, Any], layers: int, default_pattern: int) -> list[str]:
    types = cfg.get("layer_types")
    if types is None:  # older configs: every pattern-th layer is global (Gemma 2: odd layers; Gemma 3: 1 of 6)
        pattern = int(cfg.get("sliding_window_pattern") or default_pattern)
        return [SLIDING if (i + 1) % pattern else GLOBAL for i in range(layers)]
    unknown = sorted(set(types) - {SLIDING, GLOBAL})
    if unknown:
        raise UnsupportedError(f"layer_types {unknown} are not supported by the inferlab engine (only {SLIDING}, "
                               f"{GLOBAL})")  # fmt: skip
    if len(types) != layers:
        raise ConfigError(
            f"config.json lists {len(types)} layer_types for num_hidden_layers={layers}; it is inconsistent"
        )
    return list(types)


def _flat_rope(cfg: dict[str, Any], default_theta: float) -> RopeSpec:
    params = dict(cfg.get("rope_parameters") or {})  # transformers 5
    if not params:  # transformers 4
        params = dict(cfg.get("rope_scaling") or {})
        params["rope_theta"] = cfg.get("rope_theta", default_theta)
    return rope_from_parameters(params, cfg, default_theta)


def _gemma3_ropes(cfg: dict[str, Any], d: dict[str, Any]) -> tuple[RopeSpec, RopeSpec]:
    """(global rope, local rope). transformers 5: rope_parameters {full_attention: {...}, sliding_attention:
    {...}}; transformers 4: rope_theta + rope_scaling (global), rope_local_base_freq (local, unscaled)."""
    params = cfg.get("rope_parameters") or {}
    if GLOBAL in params or SLIDING in params:
        full, local = dict(params.get(GLOBAL) or {}), dict(params.get(SLIDING) or {})
        full.setdefault("rope_theta", cfg.get("rope_theta", d["global_theta"]))
        local.setdefault("rope_theta", cfg.get("rope_local_base_freq", d["local_theta"]))
    else:
        full = dict(cfg.get("rope_scaling") or {})
        full["rope_theta"] = cfg.get("rope_theta", d["global_theta"])
        local = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", d["local_theta"])}
    return rope_from_parameters(full, {}, d["global_theta"]), rope_from_parameters(local, {}, d["local_theta"])
