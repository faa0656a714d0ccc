"""Helpers for the workload tests: JSONL files, and a model wrapper that simulates CUDA OOM."""

from __future__ import annotations

import json
from pathlib import Path

import torch

OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

# Texts of clearly different token lengths (the built-in tokenizer is about one token per character).
TEXTS = {
    "short": "hi",
    "mid": "the quick brown fox jumps over the lazy dog",
    "long": "numbers 1234567 and words " * 6,
    "tiny": "ok",
    "medium": "a sentence with some more words in it",
}


def write_jsonl(path: Path, lines: list) -> Path:
    """Write dicts as JSON lines and strings verbatim (for broken lines)."""
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class OomAboveRows(torch.nn.Module):
    """Wraps a model: forward (and generate) raise a CUDA-style OOM when the batch has more than
    `max_rows` rows or a row is longer than `max_len` tokens, as a real device would."""

    def __init__(self, inner, max_rows: int, max_len: int | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.max_rows = max_rows
        self.max_len = max_len
        self.batch_rows: list[int] = []
        self.config = inner.config
        self.generation_config = getattr(inner, "generation_config", None)

    def _check(self, input_ids):
        self.batch_rows.append(input_ids.shape[0])
        if input_ids.shape[0] > self.max_rows or (self.max_len is not None and input_ids.shape[1] > self.max_len):
            raise OOM(f"CUDA out of memory. Tried to allocate {input_ids.numel()} bytes (simulated)")

    def forward(self, input_ids=None, **kwargs):
        self._check(input_ids)
        return self.inner(input_ids=input_ids, **kwargs)

    def generate(self, input_ids=None, **kwargs):
        self._check(input_ids)
        return self.inner.generate(input_ids=input_ids, **kwargs)
