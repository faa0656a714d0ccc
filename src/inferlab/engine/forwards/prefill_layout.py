"""Tensor layouts of a right-padded prefill (decoder.py): the projections work
on [batch * padded, heads * head_dim] token rows, the prefill attention on [batch, heads, padded, head_dim]."""

from __future__ import annotations

import torch


def heads_first(x: torch.Tensor, batch: int, padded: int, heads: int, head_dim: int) -> torch.Tensor:
    """[batch * padded, heads * head_dim] -> [batch, heads, padded, head_dim] (a view)."""
    return x.view(batch, padded, heads, head_dim).transpose(1, 2)


def tokens_first(a: torch.Tensor) -> torch.Tensor:
    """[batch, heads, padded, head_dim] -> [batch * padded, heads * head_dim]."""
    batch, heads, padded, head_dim = a.shape
    return a.transpose(1, 2).reshape(batch * padded, heads * head_dim)


def last_positions(h: torch.Tensor, batch: int, padded: int, lengths: torch.Tensor) -> torch.Tensor:
    """[batch * padded, hidden] -> [batch, hidden]: each prompt's last real position (lengths: [batch] int64)."""
    return h.view(batch, padded, -1)[torch.arange(batch, device=h.device), lengths - 1]
