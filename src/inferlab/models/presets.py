"""Named model shapes. Each preset is a HuggingFace config of a real architecture; `inferlab model init`
(checkpoint_init.py) turns one into a random-weight checkpoint for tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from transformers import (
    Gemma2Config,
    Gemma3TextConfig,
    GemmaConfig,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

from inferlab.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    task: str  # "causal-lm" or "sequence-classification"
    make_config: Callable[[], PretrainedConfig]
    tokenizer: str = "builtin"  # "builtin" (our small BPE) or "qwen3-chem" (needs --tokenizer DIR)
    trained: str = ""  # "": random weights; else the shipped weights of models/trained/ its checkpoint carries


def _shape(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, **rest) -> dict:
    """A transformers config's size fields (hidden, MLP width, layers, attention heads, KV heads) and `rest`."""
    return dict(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, **rest)


def _tiny_common() -> dict:
    # Small enough for CPU tests in seconds; larger init range so greedy argmax is not a near-tie.
    return _shape(64, 128, 2, 4, 2, max_position_embeddings=512, initializer_range=0.1, vocab_size=2048)


def _llama_tiny() -> PretrainedConfig:
    return LlamaConfig(**_tiny_common(), tie_word_embeddings=True, rope_theta=10000.0)


def _llama_tiny_rope_scaled() -> PretrainedConfig:
    c = _tiny_common()
    return LlamaConfig(
        **c,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )


def _mistral_tiny() -> PretrainedConfig:
    return MistralConfig(**_tiny_common(), tie_word_embeddings=False, sliding_window=None)


def _qwen2_tiny() -> PretrainedConfig:
    return Qwen2Config(**_tiny_common(), tie_word_embeddings=True, use_sliding_window=False)


def _qwen3_tiny() -> PretrainedConfig:
    c = _tiny_common()
    c["vocab_size"] = 151936  # room for the qwen3-chem tokenizer (used by conformer tests and the demo)
    return Qwen3Config(**c, head_dim=32, tie_word_embeddings=True, use_sliding_window=False)


def _gemma_tiny_common(**overrides) -> dict:
    # head_dim 32 != hidden / heads; initializer_range as _tiny_common; Gemma's norms are (1 + w) with w = 0
    return dict(_tiny_common(), head_dim=32, **overrides)


def _gemma_tiny() -> PretrainedConfig:
    return GemmaConfig(**_gemma_tiny_common(num_key_value_heads=1), rope_theta=10000.0)  # MQA, as gemma-2b


def _gemma2_tiny() -> PretrainedConfig:
    # GQA; 3 layers: sliding, global, sliding (the even/odd rule); a window of 8 < the test prompts and outputs;
    # caps near the tiny model's own score / logit magnitudes, so tanh bends them; query scalar != head_dim
    return Gemma2Config(
        **_gemma_tiny_common(num_hidden_layers=3), sliding_window=8, attn_logit_softcapping=2.0,
        final_logit_softcapping=5.0, query_pre_attn_scalar=24, rope_theta=10000.0,
    )  # fmt: skip


def _gemma3_tiny() -> PretrainedConfig:
    # GQA; 6 layers = 5 sliding : 1 global (sliding_window_pattern 6); window 12; two rope bases, the global
    # one linearly scaled (as Gemma 3 4B+); no soft-caps (as released)
    return Gemma3TextConfig(
        **_gemma_tiny_common(num_hidden_layers=6), sliding_window=12, query_pre_attn_scalar=24,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
    )  # fmt: skip


def _qwen2_cls_tiny() -> PretrainedConfig:
    c = Qwen2Config(**_tiny_common(), tie_word_embeddings=False, use_sliding_window=False, num_labels=3)
    c.architectures = ["Qwen2ForSequenceClassification"]
    return c


def _qwen2_cls_aromatic() -> PretrainedConfig:
    # The shape models/trained/recipe.py trains on RDKit's NCI molecules (1.05M parameters, CPU minutes): SMILES in,
    # the count of aromatic rings out (models/trained/aromatic_rings.py)
    from inferlab.models.trained.aromatic_rings import LABELS

    c = Qwen2Config(**_shape(128, 384, 4, 4, 2, max_position_embeddings=512, vocab_size=2048),
                    tie_word_embeddings=False, use_sliding_window=False, num_labels=len(LABELS),
                    id2label=dict(enumerate(LABELS)), problem_type="single_label_classification")
    c.architectures = ["Qwen2ForSequenceClassification"]
    return c


# Qwen3-0.6B's vocabulary, context, rope and stop token: what the qwen3-chem tokenizer and its programs expect
_QWEN3_06B_TEXT = dict(head_dim=128, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, eos_token_id=151643)


def _llama_380m() -> PretrainedConfig:
    return LlamaConfig(**_shape(1024, 4096, 16, 16, 8, head_dim=64, vocab_size=128256, max_position_embeddings=2048,
                                rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5))


def _qwen3_06b() -> PretrainedConfig:
    return Qwen3Config(**_shape(1024, 3072, 28, 16, 8, **_QWEN3_06B_TEXT))


def _qwen3_chem_mini() -> PretrainedConfig:
    """qwen3-0.6b's vocabulary, head_dim and q/k norm in 4 narrow layers: the constraint sees the same
    tokenizer, programs and logits width, for soaks where the model only supplies random logits."""
    return Qwen3Config(**_shape(256, 768, 4, 4, 2, **_QWEN3_06B_TEXT))


def _conformer_ref_shape() -> PretrainedConfig:
    """The trained reference conformer model's shape (~9M parameters: 8 narrow Qwen3 layers, a vocabulary
    reduced to a few thousand tokens), random: what the CPU path's speed is measured on."""
    return Qwen3Config(**_shape(256, 1024, 8, 4, 2, head_dim=64, vocab_size=4096, max_position_embeddings=2048,
                                rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                use_sliding_window=False, initializer_range=0.1))


def _gemma_2b() -> PretrainedConfig:
    return GemmaConfig(**_shape(2048, 16384, 18, 8, 1, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
                                rope_theta=10000.0, tie_word_embeddings=True))


def _qwen2_cls() -> PretrainedConfig:
    # The Qwen2-0.5B shape with a classification head (the classify benchmark's model).
    c = Qwen2Config(**_shape(896, 4864, 24, 14, 2, vocab_size=151936, max_position_embeddings=32768,
                             rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, num_labels=2))
    c.architectures = ["Qwen2ForSequenceClassification"]
    return c


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("tiny", "Llama-family toy (2 layers, hidden 64) for CPU tests", "causal-lm", _llama_tiny),
        Preset("tiny-llama3-rope", "tiny Llama with llama3 rope scaling, untied", "causal-lm", _llama_tiny_rope_scaled),
        Preset("tiny-mistral", "tiny Mistral", "causal-lm", _mistral_tiny),
        Preset("tiny-qwen2", "tiny Qwen2 (qkv bias)", "causal-lm", _qwen2_tiny),
        Preset("tiny-qwen3", "tiny Qwen3 (q/k norm) with the qwen3-chem tokenizer's vocabulary; 512 positions: "
               "conformers of molecules up to ~15 heavy atoms (qwen3-chem-mini: any size)", "causal-lm", _qwen3_tiny,
               "qwen3-chem"),
        Preset("tiny-gemma", "tiny Gemma (GeGLU, MQA, head_dim 32)", "causal-lm", _gemma_tiny),
        Preset("tiny-gemma2", "tiny Gemma 2 (soft-caps, window 8, alternating)", "causal-lm", _gemma2_tiny),
        Preset("tiny-gemma3", "tiny Gemma 3 text (q/k norm, 5 local : 1 global)", "causal-lm", _gemma3_tiny),
        Preset("tiny-qwen2-cls", "tiny Qwen2 sequence classifier (3 labels)", "sequence-classification", _qwen2_cls_tiny),
        Preset("llama-380m", "Llama-3.2-380M shape (16 layers, hidden 1024)", "causal-lm", _llama_380m),
        Preset("qwen3-0.6b", "Qwen3-0.6B shape (28 layers, head_dim 128, q/k norm)", "causal-lm", _qwen3_06b, "qwen3-chem"),
        Preset("qwen3-chem-mini", "qwen3-0.6b's vocabulary, heads and 40960 positions in 4 layers of hidden 256 "
               "(constraint soaks; conformers of any molecule on a CPU)", "causal-lm", _qwen3_chem_mini, "qwen3-chem"),
        Preset("conformer-ref-shape", "the reference conformer model's shape (8 layers, hidden 256, vocab 4096), "
               "random: CPU speed", "causal-lm", _conformer_ref_shape),
        Preset("gemma-2b", "Gemma-2B shape (18 layers, hidden 2048, MQA)", "causal-lm", _gemma_2b),
        Preset("qwen2-cls", "Qwen2-0.5B shape with a 2-label classification head", "sequence-classification", _qwen2_cls),
        Preset("qwen2-cls-aromatic", "a trained Qwen2 classifier (1M parameters): SMILES -> its aromatic rings "
               "(none / one / two or more), 98% on held-out NCI molecules", "sequence-classification",
               _qwen2_cls_aromatic, trained="qwen2-cls-aromatic"),
    ]
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
