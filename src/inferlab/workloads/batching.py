"""Shared batching for the transformers-backed workloads (classify, hidden states, HF text generation).

Owns: chunked pre-tokenisation (one tokenizer call per chunk of rows, never the whole set), length-sorted
batch planning under a row limit and a token budget, dynamic padding of one batch, and restoring input
order in a finished JSONL file. Does not own: running batches or reacting to OOM (oom.py), reading input
lines (inferlab.jsonl_io), what a row means (the workloads).

Why a token budget: memory grows with rows x padded length, so a batch is padded only to its own longest
row and rows x padded length is bounded (docs/decisions.md).
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypeVar

import torch

from inferlab.errors import ConfigError
from inferlab.inputs.fingerprints import FingerprintMap
from inferlab.outputs.atomic import replace_atomically

T = TypeVar("T")


@dataclass(frozen=True)
class BatchLimits:
    """How large one batch may be: at most `max_rows` rows and at most `max_tokens` padded tokens
    (rows x longest row). A single row longer than `max_tokens` still runs, alone."""

    max_rows: int
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_rows < 1:
            raise ConfigError(f"batch_size={self.max_rows} must be >= 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"max batch tokens {self.max_tokens} must be >= 1, or None for no token budget")


def iter_chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items (the last may be shorter); reads `items` lazily."""
    if size < 1:
        raise ConfigError(f"chunk size {size} must be >= 1")
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def tokenize_chunk(tokenizer, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
    """Token ids of one chunk of texts in one (parallel, Rust-side) tokenizer call: no padding and no
    truncation; the caller decides what is too long."""
    if not texts:
        return []
    encoded = tokenizer(
        list(texts), add_special_tokens=add_special_tokens, padding=False, truncation=False, verbose=False
    )
    return [list(ids) for ids in encoded["input_ids"]]


def plan_batches(lengths: Sequence[int], limits: BatchLimits) -> list[list[int]]:
    """Group row positions into batches of similar length.

    Rows are sorted longest first (stable), so the most memory-hungry batch runs first: an OOM back-off
    happens at the start, and the cost cap it learns then fits every later (shorter) batch. Neighbours in
    that order are batched while the row limit and the token budget hold. Returns lists of positions into
    `lengths`; every position appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current:
            longest = lengths[current[0]]  # sorted longest first: the first row sets the padded length
            rows = len(current) + 1
            over_rows = rows > limits.max_rows
            over_tokens = limits.max_tokens is not None and rows * longest > limits.max_tokens
            if over_rows or over_tokens:
                batches.append(current)
                current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def padded_tokens(lengths: Sequence[int]) -> int:
    """Rows x longest row: the token count of a dynamically padded batch."""
    return len(lengths) * max(lengths, default=0)


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token id lists to their longest (dynamic padding).

    Returns input_ids [rows, longest] int64 and attention_mask [rows, longest] int64 (1 = real token).
    `side="right"` for a plain forward (positions stay 0..n-1), `"left"` for generate.
    """
    if side not in ("left", "right"):
        raise ConfigError(f"padding side {side!r} must be 'left' or 'right'")
    longest = max((len(s) for s in seqs), default=0)
    input_ids = torch.full((len(seqs), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), longest), dtype=torch.long)
    for row, seq in enumerate(seqs):
        n = len(seq)
        if n == 0:
            continue
        cols = slice(0, n) if side == "right" else slice(longest - n, longest)
        input_ids[row, cols] = torch.as_tensor(seq, dtype=torch.long)
        attention_mask[row, cols] = 1
    return input_ids, attention_mask


def reorder_jsonl(path: str | Path, ids_in_order: Iterable[str], id_field: str = "id") -> None:
    """Rewrite a finished JSONL file so rows follow `ids_in_order` (read once: it may be a stream); rows whose id
    is not listed keep their relative order at the end, so nothing is dropped. Reads line offsets, not the
    whole file, kept compact (fingerprints of the ids, arrays of offsets, a byte per line), and replaces the
    file atomically."""
    p = Path(path)
    if not p.exists():
        return
    first_line = FingerprintMap()  # id -> the index of its first line
    starts, lengths = array("q"), array("q")
    with p.open("rb") as f:
        pos = 0
        for index, line in enumerate(f):
            starts.append(pos)
            lengths.append(len(line))
            pos += len(line)
            try:
                row_id = str(json.loads(line)[id_field])
            except (ValueError, KeyError, TypeError):  # a line that is not a JSON row, a row without an id
                continue
            if first_line.get(row_id) is None:
                first_line.set_new(row_id, index)
    written = bytearray(len(starts))

    def copy_in_order(dst) -> None:
        with p.open("rb") as src:

            def copy(index: int) -> None:
                src.seek(starts[index])
                dst.write(src.read(lengths[index]))
                written[index] = 1

            for row_id in ids_in_order:
                index = first_line.get(row_id)
                if index is not None and not written[index]:
                    copy(index)
            for index in range(len(starts)):
                if not written[index]:
                    copy(index)

    replace_atomically(p, copy_in_order)