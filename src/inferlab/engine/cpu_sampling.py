"""The sampler's race on the CPU: race_argmax_torch's tokens, at a fraction of its cost.

The race (sampler.py) hashes a noise value for every (row, vocabulary id), the largest cost of a CPU step
at a 150k vocabulary. Two savings, neither changing a value:
- the hash itself runs in numpy's uint32, whose multiply wraps mod 2^32 and whose shifts are logical: the
  reference's arithmetic exactly, in one pass per step at half the bytes, where torch's int64 emulation
  of it (sampler._mul32) takes six;
- noise only where it can win. A greedy or skipped row (a constraint's copy op) takes none, and a token
  whose logit is -inf (masked by a constraint or a stop rule) or below the filter's threshold cannot win.
  On the CPU a host read costs nothing (no device to wait for, no graph to capture), so this path looks:
  noise for the drawing rows only, and where few tokens are still in the race (constraints' holes), the
  race over those (row, token) pairs alone, each row's first maximum found by scatter_reduce.
The race's values are the reference's, element by element, so the argmax (first index on ties) is too.
"""

from __future__ import annotations

import numpy as np
import torch

from inferlab.engine.sampler import (
    GOLDEN,
    INDEX_SALT,
    LOG2E,
    MIX_MULTIPLIERS,
    ROUND_SALT,
    SEED_SALT,
    UNIFORM_BITS,
    UNIFORM_SCALE,
    float_key,
)

SPARSE_BELOW = 0.25  # fraction of the batch's (row, token) pairs still in the race under which it races the pairs
_U32 = np.uint32


def _mix32(h: np.ndarray) -> np.ndarray:
    """sampler.mix32 on a uint32 array, in place."""
    for shift, multiplier in ((16, MIX_MULTIPLIERS[0]), (15, MIX_MULTIPLIERS[1])):
        h ^= h >> _U32(shift)
        h *= _U32(multiplier)
    h ^= h >> _U32(16)
    return h


def row_keys_cpu(seeds: torch.Tensor, token_index: torch.Tensor, round_index: int = 0) -> np.ndarray:
    """sampler.row_keys's keys as uint32 ([rows]): some forty passes over a handful of values, which cost
    torch's dispatch more than their arithmetic."""
    s = seeds.numpy().astype(np.uint64)
    lo, hi = (s & np.uint64(0xFFFFFFFF)).astype(_U32), (s >> np.uint64(32)).astype(_U32)
    seed_key = _mix32(lo ^ _mix32(hi ^ _U32(SEED_SALT)))
    key = _mix32(seed_key + _mix32(token_index.numpy().astype(_U32) ^ _U32(INDEX_SALT)))  # the add wraps
    if round_index:
        key = _mix32(key ^ _mix32(np.full_like(key, round_index ^ ROUND_SALT)))
    return key


def noise_cpu(keys: np.ndarray, token_ids: torch.Tensor) -> torch.Tensor:
    """sampler.noise_at's fp32 values for uint32 keys (row_keys_cpu) and int64 vocabulary ids of
    broadcastable shapes, the hash in numpy uint32 (module docstring), the logarithms torch's as the
    reference's."""
    h = _mix32(keys ^ (token_ids.numpy().astype(_U32) * _U32(GOLDEN)))  # broadcast
    u = torch.from_numpy((h >> _U32(32 - UNIFORM_BITS)).astype(np.float32))  # exact: below 2^23
    u.add_(0.5).mul_(UNIFORM_SCALE)  # sampler.uniform_from_hash
    return u.log2_().neg_().log2_().neg_()  # -log2(-log2(u))


def race_argmax_cpu(
    logits: torch.Tensor,  # [rows, vocab] fp32 (or bf16/fp16: compared exactly as fp32)
    temperature: torch.Tensor,  # [rows] fp32; <= 0: greedy
    tau: torch.Tensor | None,  # [rows] int32 threshold key, or None: keep all
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    round_index: int = 0,
    skip: torch.Tensor | None = None,  # [rows] bool: rows left out (token 0 comes back)
) -> torch.Tensor:  # [rows] int64, equal to race_argmax_torch's
    logits = logits.float()
    greedy = temperature <= 0
    scale = LOG2E / torch.where(greedy, 1.0, temperature)  # [rows]: logit / T in base 2
    in_race = logits > float("-inf")  # [rows, vocab]: a masked token never wins
    if tau is not None:
        in_race &= float_key(logits) >= tau[:, None]
    if skip is not None:
        in_race &= ~skip[:, None]
    drawing = ~greedy if skip is None else ~greedy & ~skip
    if in_race.sum() < SPARSE_BELOW * in_race.numel():
        tokens = _sparse_race(logits, in_race, scale, greedy, row_keys_cpu(seeds, token_index, round_index))
    else:
        tokens = _dense_race(logits, in_race, scale, drawing, seeds, token_index, round_index)
    return tokens if skip is None else torch.where(skip, 0, tokens)


def _dense_race(logits, in_race, scale, drawing, seeds, token_index, round_index) -> torch.Tensor:
    """The reference's race over [rows, vocab], the noise added to the drawing rows only."""
    race = torch.where(in_race, logits * scale[:, None], float("-inf"))  # -inf + noise is -inf: masked first
    rows = drawing.nonzero().squeeze(1)  # [n]
    if rows.numel() == race.shape[0]:
        race += noise_cpu(row_keys_cpu(seeds, token_index, round_index)[:, None], torch.arange(race.shape[1])[None, :])
    elif rows.numel():
        keys = row_keys_cpu(seeds[rows], token_index[rows], round_index)
        race[rows] += noise_cpu(keys[:, None], torch.arange(race.shape[1])[None, :])
    return race.argmax(dim=-1)


def _sparse_race(logits, in_race, scale, greedy, keys: np.ndarray) -> torch.Tensor:
    """The race over the (row, token) pairs still in it: each row's first largest value, as argmax picks it;
    0 for a row with none (the reference's argmax over a row of -inf)."""
    rows, vocab = logits.shape
    r, c = in_race.nonzero(as_tuple=True)  # [m] pairs
    values = logits[r, c] * scale[r]
    noisy = (~greedy)[r]
    values[noisy] += noise_cpu(keys[r[noisy].numpy()], c[noisy])
    best = torch.full((rows,), float("-inf")).scatter_reduce_(0, r, values, "amax")
    first = values == best[r]
    token = torch.full((rows,), vocab).scatter_reduce_(0, r[first], c[first], "amin")
    return torch.where(token == vocab, 0, token)
