"""Which checkpoint architectures the engine implements, and in which forward family.

`config.architectures[0]` is looked up here (names only: the forward classes are the engine's,
engine/forwards/registry.py). Anything not listed raises UnsupportedError naming the architecture, the
supported list and the fallback (`--backend hf`, the transformers path of the workloads).
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


def family_for(architecture: str) -> str:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        raise UnsupportedError(
            f"architecture {architecture!r} is not supported by the inferlab engine (supported: "
            f"{', '.join(ARCHITECTURES)}); run it with --backend hf (transformers) instead"
        ) from None
