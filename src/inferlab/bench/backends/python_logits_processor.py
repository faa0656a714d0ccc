"""A per-token Python LogitsProcessor in the seeds' style, as the realistic baseline cost of constraining
generation from Python (the seeds' conformer processor, reduced to its cost structure):

- a Python loop over the rows of the batch on every step, with per-row Python state (a position
  counter and a small template of allowed-token slots, different per row);
- the last token of every row read to the host (`.tolist()`), and a device scalar read in a Python `if`
  (`.item()`) to check whether the row followed its template;
- row-wise masking with a boolean mask over the whole vocabulary, built fresh per row and step.

It never ends a row early: EOS is never in an allowed set (and min_new_tokens masks it anyway), so every
row still produces exactly new_tokens tokens and systems stay comparable. Child process only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessor

# Template slot kinds and their share: one forced token, a small set (like digits), a large set (atoms).
_SLOT_SIZES = (1, 1, 12, 12, 12, 12, 512, 512)


@dataclass
class _RowState:
    template: list[torch.Tensor]  # allowed token ids per slot, each [n_allowed] int64 on the device
    forced: list[int | None]  # the single allowed id of a one-token slot, else None
    position: int = 0  # tokens this row has generated so far
    followed: int = 0  # how often the last token matched a forced slot
    history: list[int] = field(default_factory=list)


class SeedStylePythonProcessor(LogitsProcessor):
    def __init__(self, vocab_size: int, eos_token_ids: frozenset[int], seed: int, template_len: int = 24) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.seed = seed
        self.template_len = template_len
        self.rows: list[_RowState] | None = None  # built on the first call, when the batch size is known

    def _new_row(self, row: int, device: torch.device) -> _RowState:
        rng = random.Random(self.seed * 1_000_003 + row)
        candidates = [i for i in range(min(self.vocab_size, 4096)) if i not in self.eos_token_ids]
        template, forced = [], []
        for _ in range(self.template_len):
            ids = rng.sample(candidates, rng.choice(_SLOT_SIZES))
            template.append(torch.tensor(ids, dtype=torch.long, device=device))
            forced.append(ids[0] if len(ids) == 1 else None)
        return _RowState(template=template, forced=forced)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids  # [batch, length so far]; scores  # [batch, vocab] fp32
        if self.rows is None:
            self.rows = [self._new_row(r, scores.device) for r in range(input_ids.shape[0])]
        last_tokens = input_ids[:, -1].tolist()  # host read of every row's last token
        for r, state in enumerate(self.rows):
            state.history.append(last_tokens[r])
            previous = state.forced[(state.position - 1) % self.template_len] if state.position else None
            if previous is not None and (input_ids[r, -1] == previous).item():  # device scalar in a Python if
                state.followed += 1
            slot = state.position % self.template_len
            banned = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
            banned[state.template[slot]] = False
            scores[r] = scores[r].masked_fill(banned, float("-inf"))
            state.position += 1
        return scores


def make_processor(vocab_size: int, eos_token_ids: frozenset[int], seed: int) -> Any:
    """A fresh processor (fresh per-row state) for one generate call."""
    return SeedStylePythonProcessor(vocab_size, eos_token_ids, seed)
