"""A StoppingCriteria that ends every row at a fixed length without changing any shape (the static
cache keeps its size), so a short profiled call needs no recompilation. Child process only."""

from __future__ import annotations

from typing import Any

import torch
from transformers import StoppingCriteria


class StopAtLength(StoppingCriteria):
    def __init__(self, length: int) -> None:
        self.length = length  # prompt + generated tokens

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = input_ids.shape[1] >= self.length
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
