"""The transformers model of an HF lab backend (child only: transformers is imported inside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends.base import require_attention_package
from inferlab.workloads.backend import Backend


class HFModelBackend(Backend):
    """A lab backend around one transformers model: the cell's backend knobs, the scenario's spec, and the
    model once load has run."""

    def __init__(self, config: dict[str, Any], spec: Any) -> None:
        self.config = config
        self.spec = spec
        self.model: Any = None


def load_causal_lm(attn_implementation: str, model_dir: Path, device: Any, dtype: Any) -> Any:
    """AutoModelForCausalLM ready for inference on `device`, after checking that flash-attn imports when
    `attn_implementation` asks for it."""
    from transformers import AutoModelForCausalLM

    from inferlab.workloads.hf_loading import from_pretrained_for_inference

    require_attention_package(attn_implementation)
    return from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype, attn_implementation, device)


def load_with_tokenizer(attn_implementation: str, model_dir: Path, device: Any,
                        dtype: Any) -> tuple[Any, Any, frozenset[int]]:
    """(model, its tokenizer, the tokenizer's EOS as the stop ids) for the constrained backends."""
    from transformers import AutoTokenizer

    model = load_causal_lm(attn_implementation, model_dir, device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return model, tokenizer, frozenset([tokenizer.eos_token_id])


def eos_and_pad(model: Any) -> tuple[frozenset[int], int]:
    """The model's EOS ids (its generation config's, else its config's) and pad id (the generation config's,
    else the smallest EOS id, else 0)."""
    gen = model.generation_config
    eos = gen.eos_token_id if gen.eos_token_id is not None else model.config.eos_token_id
    eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
    return eos_ids, gen.pad_token_id if gen.pad_token_id is not None else min(eos_ids, default=0)


def padded_length(longest_prompt: int, multiple: int) -> int:
    return -(-longest_prompt // multiple) * multiple
