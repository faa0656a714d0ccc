"""The sampling kernels on CUDA at a real vocabulary (qwen3-0.6b's 151,936 tokens): the tokens they draw and
the distribution of those draws.

- Agreement: the race (with and without a threshold, several token indices, greedy rows among the rows) and
  top-p by rejection (top-p 0.9 and off, min-p 0.05 on some rows) against the torch reference on the same
  logits: >= 99.9% and >= 99% of rows take the reference's token (the GPU's lg2.approx may differ from the
  exact logarithm where two race values lie within ~1e-5: a few draws per million), greedy rows always.
- Distribution: many draws from one row in which every token competes (token i has logit level[i % 64]), so a
  winner's noise comes from the far tail of 150k uniforms, where a coarse logarithm would bias it; the draws
  counted per level against the softmax the filters keep: no draw outside the kept set, no level's frequency
  more than 5 standard deviations off, chi-square per degree of freedom < 3 (plain race, top-p 0.9, top-p 0.8
  with min-p 0.05). Quick: 64 rows and 50,000 draws; full: 256 rows and 200,000 draws.
Their speed: the lab's engine-kernels plan, group sampling (docs/lab.md); the race's agreement at other
vocabularies and the radix thresholds: test_kernels_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from gpu_testkit import CUDA_ONLY

pytestmark = CUDA_ONLY
CUDA = torch.device("cuda")
VOCAB = 151936
LEVELS = 64  # logit levels of the distribution's row


def test_race_and_top_p_by_rejection_take_the_reference_tokens(size):
    from inferlab.engine.kernels import triton_sampling, triton_top_p
    from inferlab.engine.sampler import float_key, race_argmax_torch, top_p_by_rejection

    rows = size.pick(64, 256)
    g = torch.Generator(device=CUDA).manual_seed(1)
    logits = (torch.randn(rows, VOCAB, generator=g, device=CUDA) * 2).bfloat16()
    seeds = torch.randint(0, 2**62, (rows,), generator=g, device=CUDA)
    index = torch.randint(0, 1000, (rows,), generator=g, device=CUDA)
    arange = torch.arange(rows, device=CUDA)
    greedy = arange % 8 == 3
    t = torch.where(greedy, 0.0, torch.rand(rows, generator=g, device=CUDA) + 0.5)
    tau = float_key(torch.where(arange % 3 == 0, float("-inf"), torch.randn(rows, generator=g, device=CUDA) + 2.0))
    same = total = 0
    for shift in range(4):
        for threshold in (None, tau):
            ours = triton_sampling.race_argmax(logits, t, threshold, seeds, index + shift)
            ref = race_argmax_torch(logits, t, threshold, seeds, index + shift)
            assert torch.equal(ours[greedy], ref[greedy]), "greedy rows take the reference's argmax"
            same, total = same + int((ours == ref).sum()), total + rows
    top_p = torch.where(arange % 4 == 0, 1.0, 0.9)
    min_p = torch.where(arange % 5 == 0, 0.05, 0.0)
    ours = triton_top_p.top_p_by_rejection(logits, t, top_p, min_p, seeds, index)
    ref = top_p_by_rejection(logits, t, top_p, min_p, seeds, index)
    top_p_agreement = (ours == ref).float().mean().item()
    print(f"race agreement {same / total:.5f}, top-p by rejection {top_p_agreement:.4f}")
    assert same / total >= 0.999 and top_p_agreement >= 0.99


@pytest.mark.parametrize("top_p, min_p", [(1.0, 0.0), (0.9, 0.0), (0.8, 0.05)])
def test_draws_follow_the_softmax_the_filters_keep(top_p, min_p, size):
    from inferlab.engine.kernels import triton_sampling, triton_top_p
    from inferlab.engine.sampler import FILTER_TOP_P, filter_threshold, float_key

    n = size.pick(50_000, 200_000)
    g = torch.Generator(device=CUDA).manual_seed(7)
    group = torch.arange(VOCAB, device=CUDA) % LEVELS
    row = (torch.randn(LEVELS, generator=g, device=CUDA) * 1.5)[group].bfloat16()
    logits = row[None, :].expand(n, VOCAB)  # every draw reads the same row (a stride-0 view)
    t, seeds = torch.ones(n, device=CUDA), torch.arange(n, device=CUDA) * 7919 + 11
    index = torch.zeros(n, dtype=torch.long, device=CUDA)
    if top_p < 1.0 or min_p > 0:
        p, m = torch.full((n,), top_p, device=CUDA), torch.full((n,), min_p, device=CUDA)
        tokens = triton_top_p.top_p_by_rejection(logits, t, p, m, seeds, index)
        kept = float_key(row.float()) >= filter_threshold(row.float()[None], t[:1], index[:1], p[:1], m[:1],
                                                          FILTER_TOP_P)[0]  # fmt: skip
    else:
        tokens = triton_sampling.race_argmax(logits, t, None, seeds, index)
        kept = torch.ones(VOCAB, dtype=torch.bool, device=CUDA)
    expected = torch.zeros(LEVELS, dtype=torch.float64, device=CUDA).index_add_(
        0, group, torch.where(kept, row.float(), float("-inf")).softmax(-1).double())
    freq = torch.bincount(group[tokens], minlength=LEVELS).double() / n
    present = expected > 0
    z = ((freq - expected).abs() / (expected * (1 - expected) / n).sqrt().clamp_min(1e-12))[present]
    chi2_per_dof = float(((freq - expected) ** 2 / expected.clamp_min(1e-30))[present].sum() * n) / max(
        int(present.sum()) - 1, 1)
    outside = int((~kept[tokens]).sum())
    print(f"top_p {top_p} min_p {min_p}: {n} draws, max z {z.max().item():.2f}, chi2/dof {chi2_per_dof:.2f}, "
          f"outside the kept set {outside}")
    assert outside == 0 and z.max().item() < 5.0 and chi2_per_dof < 3.0
