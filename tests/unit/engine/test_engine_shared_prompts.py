"""Shared prompts: rows admitted together with equal prompts are prefilled once and get the prompt's K/V by
KVCache.copy_prefix; their tokens equal those of each request run alone (greedy and seeded)."""

from __future__ import annotations

import pytest
import torch

from inferlab.engine import Engine, EngineConfig
from inferlab.engine.kv_cache import KVCache
from inferlab.types import Request, SamplingParams
from tests.unit.engine.eager_capturer import EagerCapturer


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=8, max_seq_len=64, decode_steps_per_sync=4))


def _req(rid, prompt, **sampling):
    return Request(id=rid, prompt_ids=tuple(prompt), sampling=SamplingParams(**sampling))


def test_rows_with_one_prompt_equal_each_run_alone(engine):
    prompt, other = [5, 17, 9, 33, 2, 8, 40], [7, 7, 1]
    requests = [_req(f"k{k}", prompt, temperature=1.0, top_p=0.9, seed=100 + k, max_new_tokens=12) for k in range(5)]
    requests += [_req("greedy-a", prompt, temperature=0, max_new_tokens=9),
                 _req("other", other, temperature=0.8, seed=3, max_new_tokens=7),
                 _req("greedy-b", prompt, temperature=0, max_new_tokens=9)]  # fmt: skip
    before = engine.stats.as_dict()
    together = engine.generate(requests)
    after = engine.stats.as_dict()
    assert after["shared_prompt_rows"] - before["shared_prompt_rows"] == 6  # 7 rows of one prompt: 1 prefill
    assert after["prefill_lanes"] - before["prefill_lanes"] == 2
    assert after["prefill_tokens"] - before["prefill_tokens"] == len(prompt) + len(other)
    assert after["prompt_tokens"] - before["prompt_tokens"] == 7 * len(prompt) + len(other)
    alone = [engine.generate([r])[0] for r in requests]
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    sampled = {tuple(r.token_ids) for r in together[:5]}
    assert len(sampled) > 1  # each row drew with its own seed from the shared logits
    assert together[5].token_ids == together[7].token_ids


def test_sharing_off_gives_the_same_tokens(tiny_checkpoint, engine):
    off = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=8, max_seq_len=64, decode_steps_per_sync=4,
                              share_prompts=False))
    requests = [_req(f"k{k}", [3, 1, 4, 1, 5], temperature=1.0, seed=k, max_new_tokens=10) for k in range(6)]
    assert [r.token_ids for r in off.generate(requests)] == [r.token_ids for r in engine.generate(requests)]
    assert off.stats.shared_prompt_rows == 0 and off.stats.prefill_lanes == 6


def test_more_rows_than_slots_share_within_each_admission(engine):
    prompt = [11, 12, 13, 14]
    requests = [_req(f"r{i}", prompt, temperature=1.0, seed=i, max_new_tokens=3 + i % 5) for i in range(11)]
    results = engine.generate(requests)
    alone = [engine.generate([r])[0].token_ids for r in requests]
    assert [r.token_ids for r in results] == alone


def test_copy_prefix_copies_only_the_prefix_of_the_pairs():
    g = torch.Generator().manual_seed(0)
    shape = (3, 6, 2, 10, 4)  # [layers, slots, kv_heads, max_len, head_dim]
    k, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    cache = KVCache(k, v, torch.zeros(12, dtype=torch.int32))
    k0, v0 = cache.k.clone(), cache.v.clone()
    cache.copy_prefix(torch.tensor([1, 1, 4]), torch.tensor([0, 3, 5]), 7)
    for src, dst in ((1, 0), (1, 3), (4, 5)):
        assert torch.equal(cache.k[:, dst, :, :7], k0[:, src, :, :7])
        assert torch.equal(cache.v[:, dst, :, :7], v0[:, src, :, :7])
        assert torch.equal(cache.k[:, dst, :, 7:], k0[:, dst, :, 7:])  # past the prefix: untouched
    for slot in (1, 2, 4):
        assert torch.equal(cache.k[:, slot], k0[:, slot]) and torch.equal(cache.v[:, slot], v0[:, slot])


def test_bucketed_prefill_inputs_give_the_same_tokens(tiny_checkpoint, engine):
    """The prefill graphs' padded static inputs (extra lanes repeating lane 0, pad positions, the static
    logits buffer), run eagerly on CPU: the tokens of an unpadded prefill."""
    from inferlab.engine.prefill_graphs import PrefillGraphs

    padded = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=8, max_seq_len=64, decode_steps_per_sync=4,
                                 max_prefill_tokens=128))
    runner = padded.runner
    runner.prefill_graphs = PrefillGraphs(runner.model, runner.cache, runner.slots, 8, runner.cache.max_len,
                                          padded.max_prefill_tokens, EagerCapturer(), runner.hook_tables)
    requests = [_req(f"a{k}", [9, 8, 7, 6, 5], temperature=1.0, seed=k, max_new_tokens=8) for k in range(3)]
    requests += [_req(f"b{k}", list(range(2, 2 + 3 * k + 1)), temperature=0, max_new_tokens=6) for k in range(4)]
    requests += [_req("long", list(range(3, 60)), temperature=0, max_new_tokens=4)]  # 57 tokens: bucket 64
    assert runner.prefill_graphs.bucket(3, 20) == (4, 32) and runner.prefill_graphs.bucket(3, 57) is None
    ours = padded.generate(requests)
    assert runner.prefill_graphs.graphs  # buckets were used
    assert [r.token_ids for r in ours] == [r.token_ids for r in engine.generate(requests)]


def test_copy_prefix_copies_fp8_values_and_their_scales():
    g = torch.Generator().manual_seed(1)
    shape = (2, 4, 2, 9, 8)
    k = torch.randn(shape, generator=g).to(torch.float8_e4m3fn)
    v = torch.randn(shape, generator=g).to(torch.float8_e4m3fn)
    cache = KVCache(k, v, torch.zeros(8, dtype=torch.int32), torch.rand(shape[:-1], generator=g),
                    torch.rand(shape[:-1], generator=g))
    before = {name: getattr(cache, name).clone() for name in ("k", "v", "k_scale", "v_scale")}
    cache.copy_prefix(torch.tensor([2]), torch.tensor([0]), 5)
    for name, old in before.items():
        new = getattr(cache, name)
        assert torch.equal(new[:, 0, :, :5].view(torch.uint8) if new.element_size() == 1 else new[:, 0, :, :5],
                           old[:, 2, :, :5].view(torch.uint8) if old.element_size() == 1 else old[:, 2, :, :5]), name
        assert torch.equal(new[:, 1:].float(), old[:, 1:].float()), name  # other slots untouched


def test_fp8_engine_rows_with_one_prompt_equal_each_run_alone(tiny_checkpoint):
    fp8 = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=4, max_seq_len=48, kv_dtype="fp8"))
    requests = [_req(f"k{k}", [5, 17, 9, 33], temperature=1.0, seed=k, max_new_tokens=8) for k in range(4)]
    together = fp8.generate(requests)
    assert fp8.stats.shared_prompt_rows == 3
    assert [r.token_ids for r in together] == [fp8.generate([r])[0].token_ids for r in requests]


@pytest.mark.parametrize("preset,kv_dtype", [("tiny-gemma2", "auto"), ("tiny-gemma3", "auto"), ("tiny-gemma2", "fp8")])
def test_gemma_rows_sharing_a_prompt_longer_than_the_window_equal_each_run_alone(tiny_checkpoint, preset, kv_dtype):
    """Gemma 2/3 with windows (8 / 12) shorter than the shared 21-token prompt and than prompt + output: the
    copied prefix is every position of every layer (the cache keeps them all), so each row's tokens are its
    own alone (greedy and seeded; with an fp8 cache the scales travel too)."""
    gemma = Engine(EngineConfig(model=tiny_checkpoint(preset), max_slots=4, max_seq_len=48, decode_steps_per_sync=3,
                                kv_dtype=kv_dtype))
    prompt = list(range(4, 25))
    requests = [_req(f"k{k}", prompt, temperature=1.0, seed=50 + k, max_new_tokens=14) for k in range(3)]
    requests += [_req("greedy", prompt, temperature=0, max_new_tokens=14)]
    together = gemma.generate(requests)
    assert gemma.stats.shared_prompt_rows == 3 and gemma.stats.prefill_lanes == 1
    assert [r.token_ids for r in together] == [gemma.generate([r])[0].token_ids for r in requests]
    assert len({tuple(r.token_ids) for r in together[:3]}) > 1
