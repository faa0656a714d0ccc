"""A packed batch: rows of token ids concatenated with no padding, and what the packed forward reads of it.

Rows are laid end to end: row i holds tokens [cu_seqlens[i], cu_seqlens[i + 1]) of the flat token vector,
each row's positions restart at 0, and attention never crosses from one row into another (packed/attention.py).
Packing happens on the host from numpy arrays (a workload's tokenizer thread can do it), in pinned memory on
a CUDA host, so `on_device` copies it without making the host wait for the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True)
class PackedBatch:
    """Host side of one batch."""

    tokens: torch.Tensor  # [T] int64: row after row
    positions: torch.Tensor  # [T] int64: 0 .. n_i - 1 within each row
    cu_seqlens: torch.Tensor  # [B + 1] int32: row i is tokens[cu[i]:cu[i + 1]]
    pooled: torch.Tensor  # [B] int64: the flat index of each row's pooled token (its last non-pad token)
    lengths: tuple[int, ...]  # n_i (>= 1)

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def max_len(self) -> int:
        return max(self.lengths)

    @property
    def starts(self) -> list[int]:
        return self.cu_seqlens[:-1].tolist()


@dataclass(frozen=True)
class DeviceBatch:
    """Device side of one batch, as the forward reads it."""

    tokens: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    cu_seqlens: torch.Tensor  # [B + 1] int32
    pooled: torch.Tensor  # [B] int64
    row_of_token: torch.Tensor  # [T] int64: the row each token belongs to (mean pooling)
    host: PackedBatch  # lengths and offsets for what the host decides (kernel grids, the CPU reference)


def pack_rows(rows: Sequence[Sequence[int] | np.ndarray], pad_id: int | None = None, pin: bool = False) -> PackedBatch:
    """Concatenate `rows` (each >= 1 token). `pad_id`: a row's pooled token is its last token that is not
    pad_id (transformers' sequence classifiers read the rightmost non-pad token; a row of pads only reads
    its first token, as they do); None: its last token."""
    arrays = [np.asarray(r, dtype=np.int64) for r in rows]
    lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    if len(arrays) == 0 or (lengths < 1).any():
        raise ValueError("every packed row needs at least one token")
    cu = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu[1:])
    tokens = np.concatenate(arrays)
    positions = np.arange(tokens.shape[0], dtype=np.int64) - np.repeat(cu[:-1], lengths)
    pooled = cu[1:] - 1
    if pad_id is not None:
        pooled = np.array([_last_non_pad(a, pad_id) for a in arrays], dtype=np.int64) + cu[:-1]
    out = [torch.from_numpy(tokens), torch.from_numpy(positions), torch.from_numpy(cu.astype(np.int32)),
           torch.from_numpy(pooled)]
    if pin:
        out = [t.pin_memory() for t in out]
    return PackedBatch(*out, lengths=tuple(int(n) for n in lengths))


def _last_non_pad(ids: np.ndarray, pad_id: int) -> int:
    real = np.flatnonzero(ids != pad_id)
    return int(real[-1]) if real.size else 0


def on_device(batch: PackedBatch, device: torch.device) -> DeviceBatch:
    """The batch on `device`; from pinned memory the copies do not block the host."""
    def move(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=t.is_pinned())

    rows = torch.arange(batch.rows, device=device)
    lengths = torch.tensor(batch.lengths, dtype=torch.int64)
    lengths = move(lengths.pin_memory() if device.type == "cuda" else lengths)
    return DeviceBatch(move(batch.tokens), move(batch.positions), move(batch.cu_seqlens), move(batch.pooled),
                       rows.repeat_interleave(lengths, output_size=batch.num_tokens), batch)
