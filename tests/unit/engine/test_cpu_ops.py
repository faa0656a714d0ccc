"""The CPU's own decode attention and sampler race (cpu_attention.py, cpu_sampling.py) against the torch
references they stand in for: the same outputs whatever the slots, windows, caps, masks and skipped rows."""

from __future__ import annotations

import pytest
import torch

import inferlab.engine.cpu_sampling as cpu_sampling
from inferlab.engine.attention import decode_attention_torch, decode_rope_attention_torch
from inferlab.engine.cpu_attention import decode_attention_cpu, decode_rope_attention_cpu
from inferlab.engine.cpu_sampling import noise_cpu, race_argmax_cpu, row_keys_cpu
from inferlab.engine.ops import select_ops
from inferlab.engine.sampler import float_key, noise_at, race_argmax_torch, row_keys

ROWS, KV_HEADS, GROUP, HEAD_DIM, MAX_LEN = 6, 2, 2, 16, 40


def _cache(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (ROWS + 2, KV_HEADS, MAX_LEN, HEAD_DIM)  # more slots than rows, as after compaction
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


@pytest.mark.parametrize("slots", [list(range(ROWS)), [0, 1, 7, 3, 6, 5], [5, 4, 3, 2, 1, 0]])
@pytest.mark.parametrize("window, softcap", [(0, None), (7, None), (0, 2.0)])
@pytest.mark.parametrize("hint", [None, 31, MAX_LEN])
def test_decode_attention_equals_the_reference(slots, window, softcap, hint):
    g = torch.Generator().manual_seed(len(slots) + window)
    k_cache, v_cache = _cache(g)
    q = torch.randn(ROWS, KV_HEADS * GROUP, HEAD_DIM, generator=g)
    lengths = torch.tensor([1, 31, 12, 30, 2, 25])
    slot_ids = torch.tensor(slots)
    ref = decode_attention_torch(q, k_cache, v_cache, slot_ids, lengths, 0.3, hint, window, softcap)
    ours = decode_attention_cpu(q, k_cache, v_cache, slot_ids, lengths, 0.3, hint, window, softcap)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)


def test_decode_rope_attention_writes_the_cache_as_the_reference():
    g = torch.Generator().manual_seed(1)
    heads = KV_HEADS * GROUP
    qkv = torch.randn(ROWS, (heads + 2 * KV_HEADS) * HEAD_DIM, generator=g)
    positions = torch.tensor([0, 9, 3, 17, 1, 30])
    cos, sin = torch.randn(MAX_LEN, HEAD_DIM, generator=g), torch.randn(MAX_LEN, HEAD_DIM, generator=g)
    norms = torch.rand(HEAD_DIM, generator=g) + 0.5, torch.rand(HEAD_DIM, generator=g) + 0.5
    caches = _cache(g)
    ref_caches = tuple(c.clone() for c in caches)
    args = (qkv, positions, cos, sin, *norms, 1e-6)
    slots = torch.arange(ROWS)
    ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, 0.25, None, 31)
    ours = decode_rope_attention_cpu(*args, *caches, slots, heads, 0.25, None, 31)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    for c, r in zip(caches, ref_caches):
        assert torch.equal(c, r)


def test_keys_and_noise_equal_the_reference_bit_for_bit():
    g = torch.Generator().manual_seed(2)
    seeds = torch.cat([torch.randint(0, 2**62, (30,), generator=g), torch.tensor([0, 1, 2**32 - 1, 2**32, 2**62])])
    index = torch.cat([torch.randint(0, 2**31, (30,), generator=g), torch.tensor([0, 1, 2**31 - 1, 2**32 - 1, 5])])
    ids = torch.cat([torch.arange(300), torch.tensor([151935, 2**20, 2**31 - 1])])
    for round_index in (0, 1, 3):
        keys = row_keys(seeds, index, round_index)
        ours = row_keys_cpu(seeds, index, round_index)
        assert torch.equal(torch.from_numpy(ours.astype("int64")), keys)
        assert torch.equal(noise_cpu(ours[:, None], ids[None, :]), noise_at(keys[:, None], ids[None, :]))


def _race_inputs(rows: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 2
    temperature = torch.tensor([0.0, 1.0, 0.7, 1.5] * rows)[:rows]
    seeds = torch.randint(0, 2**40, (rows,), generator=g)
    index = torch.randint(0, 500, (rows,), generator=g)
    return logits, temperature, seeds, index


@pytest.mark.parametrize("allowed", [None, 3, 400])  # all tokens, a constraint's few (sparse noise), many (dense)
@pytest.mark.parametrize("with_skip", [False, True])
@pytest.mark.parametrize("with_tau", [False, True])
def test_race_equals_the_reference(allowed, with_skip, with_tau):
    rows, vocab = 8, 1000
    logits, temperature, seeds, index = _race_inputs(rows, vocab, 3)
    if allowed is not None:  # each row keeps `allowed` random tokens, as a constraint's mask leaves them
        g = torch.Generator().manual_seed(4)
        keep = torch.rand(rows, vocab, generator=g).argsort(dim=1)[:, :allowed]
        masked = torch.full_like(logits, float("-inf"))
        logits = masked.scatter(1, keep, logits.gather(1, keep))
    skip = torch.tensor([False, True, False, False, True, False, False, False]) if with_skip else None
    tau = float_key(logits.sort(dim=1).values[:, -5]) if with_tau else None  # a top-5 threshold
    for round_index in (0, 2):
        ref = race_argmax_torch(logits, temperature, tau, seeds, index, round_index, skip)
        ours = race_argmax_cpu(logits, temperature, tau, seeds, index, round_index, skip)
        assert torch.equal(ours, ref)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sparse_below", [0.0, 2.0])  # every batch dense, every batch sparse
def test_race_equals_the_reference_on_random_masks_ties_and_rows(seed, sparse_below, monkeypatch):
    monkeypatch.setattr(cpu_sampling, "SPARSE_BELOW", sparse_below)
    g = torch.Generator().manual_seed(seed)
    rows, vocab = 9, 700
    logits = (torch.randn(rows, vocab, generator=g) * 4).round() / 4  # coarse values: ties, greedy rows included
    density = torch.rand(rows, 1, generator=g) ** 3  # rows from nearly all masked to nearly open
    logits = logits.masked_fill(torch.rand(rows, vocab, generator=g) > density, float("-inf"))
    logits[seed % rows] = float("-inf")  # a row with nothing left
    temperature = torch.where(torch.rand(rows, generator=g) < 0.3, 0.0, torch.rand(rows, generator=g) + 0.5)
    skip = torch.rand(rows, generator=g) < 0.2
    tau = float_key(torch.where(torch.rand(rows, generator=g) < 0.5, -1.0, float("-inf")))
    seeds, index = torch.randint(0, 2**40, (rows,), generator=g), torch.randint(0, 900, (rows,), generator=g)
    for t, k in ((None, None), (tau, None), (None, skip), (tau, skip)):
        ref = race_argmax_torch(logits, temperature, t, seeds, index, seed % 3, k)
        assert torch.equal(race_argmax_cpu(logits, temperature, t, seeds, index, seed % 3, k), ref)


def test_race_keeps_the_first_index_on_ties_and_all_masked_rows():
    logits = torch.full((3, 50), float("-inf"))
    logits[0, [7, 20, 33]] = 1.0  # a tie among the allowed tokens (greedy row: first index)
    logits[1, [4, 9]] = 2.0  # sampled row
    # row 2: everything masked: the reference's argmax of -inf is index 0
    temperature = torch.tensor([0.0, 1.0, 1.0])
    seeds, index = torch.tensor([1, 2, 3]), torch.tensor([0, 5, 9])
    ref = race_argmax_torch(logits, temperature, None, seeds, index)
    ours = race_argmax_cpu(logits, temperature, None, seeds, index)
    assert torch.equal(ours, ref) and ours[0] == 7 and ours[2] == 0


def test_the_cpu_engine_takes_the_cpu_ops_and_other_devices_the_reference():
    cpu = select_ops("torch", torch.device("cpu"))
    assert cpu.decode_rope_attention is decode_rope_attention_cpu and cpu.race_argmax is race_argmax_cpu
    meta = select_ops("torch", torch.device("meta"))  # what a CUDA device gets: nothing reads values
    assert meta.decode_rope_attention is decode_rope_attention_torch and meta.race_argmax is race_argmax_torch
