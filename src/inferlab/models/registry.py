"""Which checkpoint architectures the engine implements, and with which model code.

`config.architectures[0]` is looked up here; the implementation is imported lazily so that reading the
registry costs nothing. Anything not listed raises UnsupportedError naming the architecture, the supported
list and the fallback (`--backend hf`, the transformers path of the workloads).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from inferlab.errors import UnsupportedError


@dataclass(frozen=True)
class Implementation:
    module: str  # where the model class lives
    cls: str  # the class: built with (spec, weights, ops, max_positions)

    def load(self) -> type:
        return getattr(importlib.import_module(self.module), self.cls)


_LLAMA = Implementation("inferlab.models.llama", "LlamaModel")
_GEMMA = Implementation("inferlab.models.gemma", "GemmaModel")

# One compact forward per family; ModelSpec carries the differences within it (bias, q/k norm, post-norms,
# soft-caps, windows, ...). Gemma 3 means the text model (model_type gemma3_text), not the multimodal one.
ARCHITECTURES: dict[str, Implementation] = {
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": _LLAMA,
    "Qwen2ForCausalLM": _LLAMA,
    "Qwen3ForCausalLM": _LLAMA,
    "GemmaForCausalLM": _GEMMA,
    "Gemma2ForCausalLM": _GEMMA,
    "Gemma3ForCausalLM": _GEMMA,
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


def is_supported(architecture: str) -> bool:
    return architecture in ARCHITECTURES


def is_classifier(architecture: str) -> bool:
    return architecture in CLASSIFIERS


def encoder_implementation_for(architecture: str) -> Implementation:
    """The forward the packed prefill (engine/packed) runs for a causal LM or a sequence classifier."""
    if architecture in CLASSIFIERS:
        return ARCHITECTURES[CLASSIFIERS[architecture]]
    if architecture in ARCHITECTURES:
        return ARCHITECTURES[architecture]
    raise UnsupportedError(
        f"architecture {architecture!r} is not supported by the inferlab engine (supported: "
        f"{', '.join([*ARCHITECTURES, *CLASSIFIERS])}); run it with --backend hf (transformers) instead"
    )


def implementation_for(architecture: str) -> Implementation:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        raise UnsupportedError(
            f"architecture {architecture!r} is not supported by the inferlab engine (supported: "
            f"{', '.join(ARCHITECTURES)}); run it with --backend hf (transformers) instead"
        ) from None
