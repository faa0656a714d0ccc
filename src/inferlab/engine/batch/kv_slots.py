"""Each row's KV slot as a row feature, and its intake check: the prompt that fills the slot (tokenized,
within the vocabulary) and the output it leaves room for (prompt + max_new_tokens within max_seq_len).

A row is a place in the batch; a slot is a place in the KV cache. Every row owns exactly one slot at all
times (`slots` is a permutation of 0..R-1), so an idle row still writes its dummy K/V into storage nobody
else reads, and compaction (moving a live request to a lower row so the tail runs a smaller graph) swaps
slots instead of copying K/V. No step writes the map: nothing to save around a preserved step.
"""

from __future__ import annotations

from typing import Any

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves
from inferlab.engine.batch.setup import BatchSetup


class KVSlots(RowFeature):
    def __init__(self, setup: BatchSetup) -> None:
        self.slots = torch.arange(setup.rows, device=setup.device)  # [R] int64: row -> KV slot
        self.vocab_size = setup.spec.vocab_size
        self.max_seq_len = setup.max_len

    def check(self, item, tokenizer: Any) -> str | None:
        request, s = item.request, item.sampling
        if request.prompt_ids is not None:
            item.prompt_ids = [int(t) for t in request.prompt_ids]
        elif tokenizer is None:
            return ("a text prompt needs a tokenizer, but this engine has none (the model folder has no tokenizer "
                    "files, or EngineConfig.load_tokenizer=False); send prompt_ids or add the tokenizer files")
        elif not request.prompt.strip():
            return "the prompt is empty; give at least one token of text"
        else:
            item.prompt_ids = list(tokenizer(request.prompt).input_ids)
        n, vocab, max_len = item.prompt_len, self.vocab_size, self.max_seq_len
        if n == 0:
            return "the prompt is empty (0 tokens); give at least one token"
        bad = [t for t in item.prompt_ids if not 0 <= t < vocab]
        if bad:
            return f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab})"
        total = n + s.max_new_tokens
        if item.constraint is not None and total > max_len:
            return (f"prompt of {n} tokens + the constraint's longest output of {s.max_new_tokens} tokens = {total} "
                    f"exceeds max_seq_len={max_len}; start the engine with max_seq_len >= {total} (the program "
                    "bounds the output exactly)")
        if total > max_len:
            room = max_len - n  # new tokens a row still holds beside this prompt
            lower = f"lower max_new_tokens to {room}, " if room >= 1 else ""
            return (f"prompt of {n} tokens + max_new_tokens={s.max_new_tokens} = {total} exceeds "
                    f"max_seq_len={max_len}; shorten the prompt, {lower}or start the engine with a larger max_seq_len")
        return None

    def move(self, moves: RowMoves) -> None:
        src_slots, dst_slots = self.slots[moves.src].clone(), self.slots[moves.dst].clone()
        self.slots[moves.dst] = src_slots
        self.slots[moves.src] = dst_slots

    def close(self) -> None:
        self.slots = None
