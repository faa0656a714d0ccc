"""Which checkpoint architectures the engine implements, and in which forward family; which sequence
classifiers its encoder (engine/packed) runs, and on which causal LM's decoder.

`config.architectures[0]` is looked up here (names only: the forward classes are the engine's,
engine/forwards/registry.py). Anything not listed raises UnsupportedError naming the architecture and the
supported list; the command that meets it names its own fix (`--backend hf` where it has one).
"""

from __future__ import annotations

from inferlab.errors import UnsupportedError

LLAMA, GEMMA = "llama", "gemma"

# One compact forward per family; ModelSpec carries the differences within it (bias, q/k norm, post-norms,
# soft-caps, windows, ...). Gemma 3 means the text model (model_type gemma3_text), not the multimodal one.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": LLAMA,
    "MistralForCausalLM": LLAMA,
    "Qwen2ForCausalLM": LLAMA,
    "Qwen3ForCausalLM": LLAMA,
    "GemmaForCausalLM": GEMMA,
    "Gemma2ForCausalLM": GEMMA,
    "Gemma3ForCausalLM": GEMMA,
}


# Sequence classifiers: the same decoder as the causal LM of their family, a score head instead of lm_head
# (transformers' GenericForSequenceClassification). Gemma 3's text classifier is Gemma3TextFor...; the
# multimodal Gemma3ForSequenceClassification (weights under model.language_model) is not listed.
CLASSIFIERS: dict[str, str] = {
    "LlamaForSequenceClassification": "LlamaForCausalLM",
    "MistralForSequenceClassification": "MistralForCausalLM",
    "Qwen2ForSequenceClassification": "Qwen2ForCausalLM",
    "Qwen3ForSequenceClassification": "Qwen3ForCausalLM",
    "GemmaForSequenceClassification": "GemmaForCausalLM",
    "Gemma2ForSequenceClassification": "Gemma2ForCausalLM",
    "Gemma3TextForSequenceClassification": "Gemma3ForCausalLM",
}


def is_classifier(architecture: str) -> bool:
    return architecture in CLASSIFIERS


def encoder_family_for(architecture: str) -> str:
    """The forward family the packed prefill (engine/packed) runs for a causal LM or a sequence classifier."""
    if architecture in CLASSIFIERS:
        return ARCHITECTURES[CLASSIFIERS[architecture]]
    if architecture in ARCHITECTURES:
        return ARCHITECTURES[architecture]
    raise UnsupportedError(
        f"architecture {architecture!r} is not supported by the inferlab engine (supported: "
        f"{', '.join([*ARCHITECTURES, *CLASSIFIERS])})"
    )


def family_for(architecture: str) -> str:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        raise UnsupportedError(
            f"architecture {architecture!r} is not supported by the inferlab engine (supported: "
            f"{', '.join(ARCHITECTURES)})"
        ) from None
