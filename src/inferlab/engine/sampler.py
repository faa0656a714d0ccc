"""Token selection on the device: greedy, temperature, top-k, top-p, min-p, per row, seeded, no host sync.

Filters (in transformers' order: temperature, top-k, top-p, min-p) each keep the tokens whose logit is >= a
per-row threshold, so together they are one threshold per row, the largest of:
  top-k: the k-th largest logit;   min-p: max + T * log(min_p)  (p_i >= min_p * p_max at temperature T);
  top-p: the smallest logit kept by transformers' rule (softmax at temperature T over the top-k survivors,
         sort ascending, drop the prefix whose cumulative probability is <= 1 - top_p; keep at least one).
Thresholds are compared in *key* space (float_key: fp32 -> int32, order kept), so they are exact and the
Triton kernel (kernels/triton_filter.py) finds them by radix selection; ties at a threshold are kept.
`filter_threshold` here is the sort-based reference. The host picks a filter level per batch
(FILTER_NONE < MIN_P < TOP_P < TOP_K) so a batch never pays for a filter none of its rows uses.

Top-p without top-k skips the threshold search (its radix passes read the logits many times):
`top_p_by_rejection` races over the tokens above a pivot and accepts the draw when it is at or above the
min-p floor and the mass strictly above its logit is < top_p x the total, which is exactly membership of
the kept set. A rejected draw and everything at or below its key are outside the kept set: the pivot moves
past it. Each round accepts with probability >= the kept mass; after TOP_P_ROUNDS the rows still open take
the exact threshold and one last race. Conditioned on acceptance a draw follows the kept distribution, so
tokens are distributed exactly as with the threshold (other draws for the same seed: noise per round).

Sampling is the exponential race: token = argmax_i logit_i / T - log(E_i), E_i ~ Exp(1), in base 2
(race_noise). E_i comes from a counter-based hash of (request seed, token index, vocab index), so a
request's tokens depend on its seed only, never on its batch, row or neighbours, and no generator state
exists. Greedy rows take the plain argmax (first index on ties, as torch.argmax).
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # spreads consecutive vocabulary ids before mixing
# 23 random bits: ((h >> 9) + 0.5) / 2^23 lies in [2^-24, 1 - 2^-24], exactly representable in fp32. With 24
# bits the largest value rounds to 1.0 in fp32: its noise -log(-log(1)) is +inf, so that token would win
# the race whatever its logit (NaN over a masked -inf logit), a masked token included.
UNIFORM_BITS = 23
UNIFORM_SCALE = 1.0 / (1 << UNIFORM_BITS)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32) held in int64, without int64 overflow (c split in 16-bit halves)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32


MIX_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)  # lowbias32's, between its shifts by 16, 15 and 16


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The lowbias32 integer finaliser (C. Wellons) on values in [0, 2^32) held in int64."""
    x = x ^ (x >> 16)
    x = _mul32(x, MIX_MULTIPLIERS[0])
    x = x ^ (x >> 15)
    x = _mul32(x, MIX_MULTIPLIERS[1])
    return x ^ (x >> 16)


ROUND_SALT = 0x68E31DA4  # keys of the rejection rounds after the first (see top_p_by_rejection)
SEED_SALT, INDEX_SALT = 0x5BD1E995, 0x27D4EB2F  # mixed into a seed's high half and into the token index


def row_keys(seeds: torch.Tensor, token_index: torch.Tensor, round_index: int = 0) -> torch.Tensor:
    """[rows] int64 seeds (>= 0) and token indices -> [rows] int64 keys in [0, 2^32), one per sampled token
    (and per rejection round: round 0 is the plain race's key)."""
    lo, hi = seeds & MASK32, (seeds >> 32) & MASK32
    seed_key = mix32(lo ^ mix32(hi ^ SEED_SALT))
    key = mix32((seed_key + mix32((token_index & MASK32) ^ INDEX_SALT)) & MASK32)
    if round_index:
        key = mix32(key ^ mix32(torch.full_like(key, round_index ^ ROUND_SALT)))
    return key


def uniform_from_hash(h: torch.Tensor) -> torch.Tensor:
    """int64 hashes in [0, 2^32) -> fp32 uniforms in [2^-24, 1 - 2^-24] (never 0 or 1)."""
    return ((h >> (32 - UNIFORM_BITS)).to(torch.float32) + 0.5) * UNIFORM_SCALE


def race_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows] keys -> [rows, vocab] fp32 noise -log2(-log2(U)), U from the hash of (key, vocabulary id).

    Gumbel noise in base 2: -log2(-log2 U) = g / ln 2 + log2(ln 2) with g = -ln(-ln U) standard Gumbel, so
    argmax_i (logit_i * log2(e) / T + noise_i) is the race argmax_i (logit_i / T + g_i) scaled by 1 / ln 2:
    the same token, with base-2 logarithms (cheaper on a GPU) and one multiply per logit."""
    return noise_at(keys[:, None], torch.arange(vocab, device=keys.device, dtype=torch.int64)[None, :])


def noise_at(keys: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """race_noise's value for each (key, vocabulary id) pair, keys and ids int64 of broadcastable shapes."""
    h = mix32(keys ^ _mul32(token_ids, GOLDEN))  # in [0, 2^32)
    return -torch.log2(-torch.log2(uniform_from_hash(h)))


def float_key(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> int32 with the same order (-inf lowest; NaN aside): flip the magnitude bits of negatives."""
    bits = x.contiguous().view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


KEEP_ALL = -(2**31)  # a threshold key below every float's key


LOG2E = 1.4426950408889634


def race_argmax_torch(
    logits: torch.Tensor,  # [rows, vocab] fp32 (or bf16/fp16: compared exactly as fp32)
    temperature: torch.Tensor,  # [rows] fp32; <= 0: greedy (the plain argmax, first index on ties)
    tau: torch.Tensor | None,  # [rows] int32 threshold key: keep float_key(logit) >= tau; None: keep all
    seeds: torch.Tensor,  # [rows] int64 request seeds
    token_index: torch.Tensor,  # [rows] int64: which of the request's tokens is being drawn
    round_index: int = 0,  # rejection round (top_p_by_rejection): fresh noise per round
    skip: torch.Tensor | None = None,  # [rows] bool: rows left out (token 0 comes back), as the Triton race
) -> torch.Tensor:  # [rows] int64
    logits = logits.float()
    greedy = temperature <= 0
    scaled = logits * (LOG2E / torch.where(greedy, 1.0, temperature))[:, None]  # logit / T in base 2
    noise = race_noise(row_keys(seeds, token_index, round_index), logits.shape[1])
    race = scaled + torch.where(greedy[:, None], 0.0, noise)
    if tau is not None:
        race = torch.where(float_key(logits) >= tau[:, None], race, float("-inf"))
    tokens = race.argmax(dim=-1)
    return tokens if skip is None else torch.where(skip, 0, tokens)


def mass_above_torch(
    logits: torch.Tensor,  # [rows, vocab] fp32 (or bf16/fp16, compared and summed as fp32)
    temperature: torch.Tensor,  # [rows] fp32 (<= 0 counts as 1)
    drawn: torch.Tensor,  # [rows] int64 token per row
    skip: torch.Tensor,  # [rows] bool: rows not checked (zeros come back)
) -> tuple[torch.Tensor, torch.Tensor]:  # ([rows] mass strictly above the drawn logit, [rows] total), fp32
    """Softmax masses at temperature T, unnormalised (shifted by the row maximum)."""
    x = logits.float()
    t = torch.where(temperature > 0, temperature, 1.0)[:, None]
    w = torch.exp((x - x.max(dim=-1, keepdim=True).values) / t)  # [rows, vocab]
    pivot = float_key(x.gather(1, drawn[:, None]))  # [rows, 1]
    above = torch.where(float_key(x) > pivot, w, 0.0).sum(dim=-1)
    keep = ~skip
    return torch.where(keep, above, 0.0), torch.where(keep, w.sum(dim=-1), 0.0)


TOP_P_ROUNDS = 3  # rejection rounds before the exact fallback (each accepts a row with probability >= top_p, min-p apart)


def top_p_by_rejection(
    logits: torch.Tensor,  # [rows, vocab] fp32, bf16 or fp16, masks applied
    temperature: torch.Tensor,  # [rows] fp32, 0 = greedy
    top_p: torch.Tensor,  # [rows] fp32, 1.0 = off
    min_p: torch.Tensor,  # [rows] fp32, 0.0 = off
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    rounds: int = TOP_P_ROUNDS,
    skip: torch.Tensor | None = None,  # [rows] bool: rows whose token is forced anyway (token 0 comes back)
) -> torch.Tensor:  # [rows] int64
    """Top-p (and min-p) sampling without the threshold search, the torch reference (see the module
    docstring; kernels/triton_top_p.py is the same in fused kernels). Fixed launches, no host sync:
    graph-capturable. Rows without top-p (greedy, top_p = 1) take the first draw at or above their min-p
    floor; `skip` rows count as settled from the start, so no round races or sums for them."""
    no_top_k = torch.zeros_like(token_index)
    floor = filter_threshold(logits.float(), temperature, no_top_k, top_p, min_p, FILTER_MIN_P)  # min-p key
    plain = (temperature <= 0) | (top_p >= 1)  # [rows] bool: no top-p to check, only the floor
    done = torch.zeros_like(plain) if skip is None else skip.clone()  # [rows] bool: token chosen
    tokens = torch.zeros_like(token_index)
    pivot, total = torch.full_like(floor, KEEP_ALL), None
    for r in range(rounds):
        drawn = race_argmax_torch(logits, temperature, pivot if r else None, seeds, token_index, r, done)
        above, mass = mass_above_torch(logits, temperature, drawn, plain | done)
        total = mass if total is None else total  # the same every round: kept from round 0
        drawn_key = float_key(logits.float().gather(1, drawn[:, None]).squeeze(1))
        accept = ~done & (drawn_key >= floor) & (plain | (above < top_p * total))
        tokens = torch.where(accept, drawn, tokens)
        done = done | accept
        pivot = torch.where(done, pivot, torch.maximum(torch.maximum(pivot, floor), drawn_key + 1))  # past the draw
    # the rows still open (probability <= (1 - top_p)^rounds each): the exact threshold, for them alone
    open_p = torch.where(done | plain, 1.0, top_p)
    tau = filter_threshold(logits.float(), temperature, no_top_k, open_p, min_p, FILTER_TOP_P)
    last = race_argmax_torch(logits, temperature, tau, seeds, token_index, rounds, done)
    return torch.where(done, tokens, last)


# How much filtering a batch needs; the host picks the level (and so the graph variant) from the live
# requests, so a batch never pays for a filter none of its rows uses. Each level includes the ones below.
FILTER_NONE, FILTER_MIN_P, FILTER_TOP_P, FILTER_TOP_K = 0, 1, 2, 3
FILTER_LEVELS = (FILTER_NONE, FILTER_MIN_P, FILTER_TOP_P, FILTER_TOP_K)


def filter_level(temperature: float, top_k: int, top_p: float, min_p: float) -> int:
    """The level one request needs (greedy needs none: every filter keeps the argmax)."""
    if temperature <= 0:
        return FILTER_NONE
    if top_k > 0:
        return FILTER_TOP_K
    if top_p < 1.0:
        return FILTER_TOP_P
    return FILTER_MIN_P if min_p > 0 else FILTER_NONE


def filter_threshold(
    logits: torch.Tensor,  # [rows, vocab] fp32
    temperature: torch.Tensor,  # [rows] fp32 (<= 0, greedy, counts as 1: every threshold keeps the argmax)
    top_k: torch.Tensor,  # [rows] int64, 0 = off
    top_p: torch.Tensor,  # [rows] fp32, 1.0 = off
    min_p: torch.Tensor,  # [rows] fp32, 0.0 = off
    level: int,
) -> torch.Tensor | None:  # [rows] int32 key: keep tokens with float_key(logit) >= tau; None: keep all
    """The sort-based reference: transformers' arithmetic on the sorted logits, read back as thresholds."""
    if level == FILTER_NONE:
        return None
    # Python scalars in torch.where, never torch.tensor(...): a host->device copy cannot be graph-captured.
    temperature = torch.where(temperature > 0, temperature, 1.0)
    top = logits.max(dim=-1).values
    tau = torch.where(min_p > 0, top + temperature * torch.log(min_p), float("-inf"))
    if level >= FILTER_TOP_P:
        vocab = logits.shape[1]
        ascending = logits.sort(dim=-1).values  # [rows, vocab]
        k = top_k.clamp(0, vocab) if level >= FILTER_TOP_K else torch.zeros_like(top_k)
        kth_largest = ascending.gather(1, (vocab - k).clamp(max=vocab - 1)[:, None]).squeeze(1)
        tau_k = torch.where(k > 0, kth_largest, float("-inf"))
        kept = torch.where(ascending < tau_k[:, None], float("-inf"), ascending)  # top-k applied, still ascending
        cumulative = (kept / temperature[:, None]).softmax(dim=-1).cumsum(dim=-1)
        dropped = (cumulative <= (1 - top_p)[:, None]).sum(dim=-1).clamp(max=vocab - 1)  # a prefix: monotone
        tau_p = torch.where(top_p < 1, kept.gather(1, dropped[:, None]).squeeze(1), float("-inf"))
        tau = torch.maximum(torch.maximum(tau, tau_k), tau_p)
    return float_key(tau)


def sample(
    logits: torch.Tensor,  # [rows, vocab] fp32, masks already applied
    temperature: torch.Tensor,  # [rows] fp32, 0 = greedy
    top_k: torch.Tensor,  # [rows] int64
    top_p: torch.Tensor,  # [rows] fp32
    min_p: torch.Tensor,  # [rows] fp32
    seeds: torch.Tensor,  # [rows] int64
    token_index: torch.Tensor,  # [rows] int64
    ops,  # engine.ops.Ops: filter_threshold, race_argmax, top_p_draw (torch above, or Triton kernels)
    level: int,  # FILTER_*: at least the highest level any row needs
    skip: torch.Tensor | None = None,  # [rows] bool: rows whose token is forced (a constraint's copy op):
    # no race for them, token 0 comes back (the constraint's emit replaces it)
) -> torch.Tensor:  # [rows] int64 token ids
    if level == FILTER_TOP_P:
        return ops.top_p_draw(logits, temperature, top_p, min_p, seeds, token_index, skip=skip)
    tau = ops.filter_threshold(logits, temperature, top_k, top_p, min_p, level)
    return ops.race_argmax(logits, temperature, tau, seeds, token_index, 0, skip)
