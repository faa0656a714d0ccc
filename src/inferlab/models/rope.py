"""Rotary position embeddings: inverse frequencies per rope type, and the cos/sin tables the forward reads.

The tables are computed once for every position up to the engine's max_seq_len, in float32, the way
transformers computes them (positions x inv_freq, then cos/sin), so our forward indexes a table instead of
recomputing trigonometry each step. Rope types live in a registry; an unknown type is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from inferlab.errors import UnsupportedError
from inferlab.models.rope_spec import RopeSpec


def _default_inv_freq(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    return 1.0 / (rope.theta**exponents)  # [head_dim // 2] fp32


def _linear_inv_freq(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    return _default_inv_freq(rope, head_dim) / float(rope.param("factor"))


def _llama3_inv_freq(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by `factor`, short ones kept, a smooth ramp between."""
    inv_freq = _default_inv_freq(rope, head_dim)
    factor = float(rope.param("factor"))
    low_freq_factor = float(rope.param("low_freq_factor"))
    high_freq_factor = float(rope.param("high_freq_factor"))
    old_context_len = float(rope.param("original_max_position_embeddings"))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


INV_FREQ_RULES: dict[str, Callable[[RopeSpec, int], torch.Tensor]] = {
    "default": _default_inv_freq,
    "linear": _linear_inv_freq,
    "llama3": _llama3_inv_freq,
}


def inverse_frequencies(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    """[head_dim // 2] fp32 inverse frequencies for `rope` (raises UnsupportedError for unknown types)."""
    try:
        rule = INV_FREQ_RULES[rope.rope_type]
    except KeyError:
        raise UnsupportedError(
            f"rope_type {rope.rope_type!r} is not supported by the inferlab engine (supported: "
            f"{', '.join(INV_FREQ_RULES)})"
        ) from None
    return rule(rope, head_dim)


@dataclass(frozen=True)
class RotaryTables:
    """cos and sin for every position: [max_positions, head_dim] fp32, halves repeated as in transformers."""

    cos: torch.Tensor  # [max_positions, head_dim] fp32
    sin: torch.Tensor  # [max_positions, head_dim] fp32

    @classmethod
    def build(cls, rope: RopeSpec, head_dim: int, max_positions: int, device: torch.device) -> "RotaryTables":
        inv_freq = inverse_frequencies(rope, head_dim)  # [head_dim // 2]
        positions = torch.arange(max_positions, dtype=torch.int64).to(torch.float32)
        freqs = positions[:, None] * inv_freq[None, :]  # [max_positions, head_dim // 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [max_positions, head_dim]
        return cls(cos=emb.cos().to(device), sin=emb.sin().to(device))
