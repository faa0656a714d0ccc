"""One batch of the 3DMolGen-style baseline through transformers `generate`, as its users run it.

Prompts are tokenised with left padding (HF generate needs it; the processor's position arithmetic
assumes it), the processor is built for the batch, `generate` runs with `max_new_tokens` = the longest
skeleton + 1 (for EOS), and each row's new tokens are cut at its first EOS. Sampling, cache and attention
settings are the caller's `generate` keyword arguments. Not here: timing (the lab's HF backend) and
validation (ConformerTemplate.check).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList

from inferlab.errors import ConfigError
from inferlab.workloads.conformers.evaluation.hf_baseline_processor import (
    BaselineTemplate,
    SeedsStyleConformerProcessor,
    SeedsVocabMasks,
)


@dataclass(frozen=True)
class BaselineRow:
    token_ids: tuple[int, ...]  # generated tokens up to and including the first EOS
    text: str  # those tokens decoded, EOS left out
    ended_with_eos: bool


def run_baseline_batch(
    model,
    tokenizer,
    templates: list[BaselineTemplate],
    masks: SeedsVocabMasks,
    max_new_tokens: int | None = None,
    pad_to_multiple_of: int | None = None,
    processors_before: list | None = None,
    **generate_kwargs,
) -> list[BaselineRow]:
    """`max_new_tokens` (default: longest skeleton + 1) and `pad_to_multiple_of` (prompt padding) let a
    static cache keep one shape across batches, as 3DMolGen's static runs pad prompts to 64.
    `processors_before` run ahead of the constraint (as user processors ahead of 3DMolGen's one)."""
    eos = tokenizer.eos_token_id
    needed = max(len(t) for t in templates) + 1
    if max_new_tokens is not None and max_new_tokens < needed:
        raise ConfigError(f"max_new_tokens={max_new_tokens} is below the longest template + EOS ({needed})")
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(
            [t.prompt for t in templates],
            return_tensors="pt",
            padding=True,
            pad_to_multiple_of=pad_to_multiple_of,
            add_special_tokens=True,
        )
    finally:
        tokenizer.padding_side = padding_side
    device = next(model.parameters()).device
    processor = SeedsStyleConformerProcessor(templates, masks, eos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    with torch.inference_mode():
        output = model.generate(
            input_ids=batch["input_ids"].to(device),
            attention_mask=batch["attention_mask"].to(device),
            logits_processor=LogitsProcessorList([*(processors_before or []), processor]),
            max_new_tokens=max_new_tokens or needed,
            eos_token_id=eos,
            pad_token_id=pad,
            **generate_kwargs,
        )
    new_tokens = output[:, batch["input_ids"].shape[1] :].tolist()  # [rows, steps]
    rows = []
    for ids in new_tokens:
        end = ids.index(eos) + 1 if eos in ids else len(ids)
        kept = tuple(ids[:end])
        text_ids = kept[:-1] if kept and kept[-1] == eos else kept
        rows.append(BaselineRow(kept, tokenizer.decode(list(text_ids), skip_special_tokens=False), eos in kept))
    return rows
