"""The device sampler against transformers' own warpers and against the distribution it should draw from."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from inferlab.engine.ops import select_ops
from inferlab.engine.sampler import (
    FILTER_MIN_P,
    FILTER_NONE,
    FILTER_TOP_K,
    FILTER_TOP_P,
    filter_level,
    filter_threshold,
    float_key,
    race_noise,
    row_keys,
    sample,
    top_p_by_rejection,
)

OPS = select_ops("torch", torch.device("cpu"))

TEMPERATURES = [0.5, 1.0, 1.7]
TOP_K = [0, 1, 5, 40]
TOP_P = [1.0, 0.9, 0.5, 0.05]
MIN_P = [0.0, 0.05, 0.3]


def _hf_allowed(logits: torch.Tensor, t: float, k: int, p: float, m: float) -> torch.Tensor:
    """The tokens transformers' warpers keep (temperature, top-k, top-p, min-p in its order)."""
    scores = logits[None].clone()
    scores = TemperatureLogitsWarper(t)(None, scores)
    if k > 0:
        scores = TopKLogitsWarper(k)(None, scores)
    if p < 1.0:
        scores = TopPLogitsWarper(p)(None, scores)
    if m > 0:
        scores = MinPLogitsWarper(m)(None, scores)
    return torch.isfinite(scores[0])


def _combos():
    return list(itertools.product(TEMPERATURES, TOP_K, TOP_P, MIN_P))


def test_allowed_sets_equal_transformers_warpers():
    combos = _combos()
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(len(combos), 300, generator=g) * 3  # distinct values: no ties at a threshold
    t = torch.tensor([c[0] for c in combos])
    tau = filter_threshold(
        logits,
        t,
        torch.tensor([c[1] for c in combos]),
        torch.tensor([c[2] for c in combos]),
        torch.tensor([c[3] for c in combos]),
        FILTER_TOP_K,
    )
    ours = float_key(logits) >= tau[:, None]
    for row, combo in enumerate(combos):
        assert torch.equal(ours[row], _hf_allowed(logits[row], *combo)), combo


def test_lower_filter_levels_equal_the_full_one_for_the_rows_they_serve():
    combos = [c for c in _combos() if c[1] == 0 and c[2] == 1.0]
    logits = torch.randn(len(combos), 500) * 2
    args = (
        torch.tensor([c[0] for c in combos]),
        torch.zeros(len(combos), dtype=torch.long),
        torch.ones(len(combos)),
        torch.tensor([c[3] for c in combos]),
    )
    assert all(filter_level(*c) in (FILTER_NONE, FILTER_MIN_P) for c in combos)
    assert torch.equal(filter_threshold(logits, *args, FILTER_MIN_P), filter_threshold(logits, *args, FILTER_TOP_K))
    plain = [i for i, c in enumerate(combos) if c[3] == 0]
    assert filter_threshold(logits, *args, FILTER_NONE) is None
    assert torch.all(filter_threshold(logits, *args, FILTER_TOP_K)[plain] == float_key(torch.tensor(float("-inf"))))
    no_top_k = [c for c in _combos() if c[1] == 0]
    logits = torch.randn(len(no_top_k), 500) * 2
    args = [torch.tensor([c[i] for c in no_top_k]) for i in range(4)]
    assert all(filter_level(*c) <= FILTER_TOP_P for c in no_top_k)
    assert torch.equal(filter_threshold(logits, *args, FILTER_TOP_P), filter_threshold(logits, *args, FILTER_TOP_K))


def test_float_key_preserves_order():
    values = torch.tensor([float("-inf"), -3e38, -2.5, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1.0, 2.5, 3e38, float("inf")])
    keys = float_key(values)
    assert torch.all(keys[1:] >= keys[:-1]) and keys[4] < keys[7]


def test_samples_follow_the_filtered_distribution():
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -3.0, 0.9])
    t, k, p, m = 0.8, 5, 0.9, 0.02
    allowed = _hf_allowed(logits, t, k, p, m)
    scores = torch.where(allowed, logits / t, float("-inf"))
    expected = scores.softmax(-1)
    n = 40000
    rows = logits.repeat(n, 1)
    tokens = sample(
        rows,
        torch.full((n,), t),
        torch.full((n,), k),
        torch.full((n,), p),
        torch.full((n,), m),
        torch.arange(n),
        torch.zeros(n, dtype=torch.long),
        OPS,
        FILTER_TOP_K,
    )
    freq = torch.bincount(tokens, minlength=logits.numel()).float() / n
    assert torch.all(freq[~allowed] == 0)
    assert (freq - expected).abs().max() < 0.012  # about 5 standard errors at n = 40000


@pytest.mark.parametrize("rounds", [0, 1, 3])  # 0: every row through the exact fallback
@pytest.mark.parametrize("t, p, m", [(0.8, 0.9, 0.02), (1.3, 0.3, 0.0), (0.7, 0.6, 0.3), (0.9, 1.0, 0.3)])
def test_top_p_by_rejection_follows_the_filtered_distribution(rounds, t, p, m):
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -3.0, 0.9, 0.1, -1.0])
    allowed = _hf_allowed(logits, t, 0, p, m)
    expected = torch.where(allowed, logits / t, float("-inf")).softmax(-1)
    n = 40000
    tokens = top_p_by_rejection(
        logits.repeat(n, 1), torch.full((n,), t), torch.full((n,), p), torch.full((n,), m), torch.arange(n),
        torch.zeros(n, dtype=torch.long), rounds,
    )  # fmt: skip
    freq = torch.bincount(tokens, minlength=logits.numel()).float() / n
    assert torch.all(freq[~allowed] == 0)
    assert (freq - expected).abs().max() < 0.012  # about 5 standard errors at n = 40000


def test_top_p_by_rejection_is_the_sample_path_and_per_row():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 2000, generator=g) * 2
    args = (torch.tensor([1.0, 0.0, 0.7, 1.0, 1.2, 1.0]), torch.zeros(6, dtype=torch.long),
            torch.tensor([0.9, 0.5, 0.2, 1.0, 0.95, 0.5]), torch.tensor([0.0, 0.0, 0.0, 0.1, 0.0, 0.0]))
    seeds, index = torch.arange(6) * 7, torch.arange(6) + 3
    tokens = sample(logits, *args, seeds, index, OPS, FILTER_TOP_P)
    assert torch.equal(tokens, top_p_by_rejection(logits, args[0], args[2], args[3], seeds, index))
    assert tokens[1] == logits[1].argmax()  # greedy rows take the argmax
    alone = sample(logits[4:5], *(a[4:5] for a in args), seeds[4:5], index[4:5], OPS, FILTER_TOP_P)
    assert alone[0] == tokens[4]  # a row's draw does not depend on its batch


def test_greedy_rows_take_the_first_argmax_whatever_the_filters():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 5.0, 2.0]])
    tokens = sample(
        logits,
        torch.zeros(2),
        torch.tensor([1, 2]),
        torch.tensor([0.1, 0.5]),
        torch.tensor([0.5, 0.0]),
        torch.tensor([1, 2]),
        torch.tensor([0, 0]),
        OPS,
        FILTER_TOP_K,
    )
    assert tokens.tolist() == [1, 0]


def test_noise_depends_on_seed_and_index_only():
    keys_a = row_keys(torch.tensor([7, 7, 8, 2**40 + 7]), torch.tensor([3, 4, 3, 3]))
    assert len(set(keys_a.tolist())) == 4  # seed high bits count too
    batch = race_noise(keys_a, 1000)
    alone = race_noise(row_keys(torch.tensor([8]), torch.tensor([3])), 1000)
    assert torch.equal(batch[2], alone[0])  # same (seed, index): same noise in any batch and row


def test_noise_is_standard_gumbel_in_base_2():
    base2 = race_noise(row_keys(torch.arange(64), torch.zeros(64, dtype=torch.long)), 4096).flatten()
    noise = math.log(2) * (base2 - math.log2(math.log(2)))  # back to natural-log Gumbel noise
    uniform = torch.exp(-torch.exp(-noise))  # the Gumbel CDF maps the noise back to U(0, 1)
    hist = torch.histc(uniform, bins=10, min=0, max=1) / uniform.numel()
    assert (hist - 0.1).abs().max() < 0.005
    assert abs(noise.mean().item() - 0.5772) < 0.01  # Euler-Mascheroni constant


@pytest.mark.parametrize("level", [FILTER_NONE, FILTER_MIN_P, FILTER_TOP_K])
def test_different_seeds_draw_different_tokens(level):
    logits = torch.zeros(2, 50_000)  # uniform: any two independent draws collide with probability 2e-5
    tokens = sample(
        logits,
        torch.ones(2),
        torch.zeros(2, dtype=torch.long),
        torch.ones(2),
        torch.zeros(2),
        torch.tensor([1, 2]),
        torch.tensor([0, 0]),
        OPS,
        level,
    )
    assert tokens[0] != tokens[1]


def test_the_uniform_draw_never_reaches_0_or_1():
    """A 24-bit draw (h >> 8) + 0.5 rounds to 1.0 in fp32 at the top hash: noise +inf, a token winning
    whatever its logit (NaN over a masked -inf logit). Every hash must give finite noise."""
    from inferlab.engine.sampler import uniform_from_hash

    extremes = torch.tensor([0, 1, 2**31, 2**32 - 512, 2**32 - 2, 2**32 - 1])
    u = uniform_from_hash(extremes)
    assert bool(((u > 0) & (u < 1)).all()), u.tolist()
    assert bool(torch.isfinite(-torch.log(-torch.log(u))).all())
