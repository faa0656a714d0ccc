"""Our engine against transformers on tiny random checkpoints (CPU, fp32).

Greedy tokens must be identical to `transformers.generate` run on each prompt alone, with more requests
than slots (so rows are refilled mid-run) and prompts of different lengths; stop tokens must end a row
exactly where transformers stops. Prefill and decode logits must match transformers' forward within
1e-4 absolute (fp32; the only differences are summation orders in fused matmuls).

The Gemma presets have sliding windows (8, 12) shorter than the longer prompts and than prompt + output,
so both the windowed prefill and the windowed decode are held to transformers; their norm weights are
randomised (tests/parity/conftest.py: transformers initialises Gemma's (1 + w) norms at w = 0, which would
hide how w enters).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from inferlab.engine import Engine, EngineConfig
from inferlab.types import Request, SamplingParams
from inferlab.workloads.hf_loading import from_pretrained_for_inference

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny tensors: intra-op threads only add waiting

PRESETS = ["tiny", "tiny-llama3-rope", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-gemma", "tiny-gemma2",
           "tiny-gemma3"]  # fmt: skip
PROMPT_LENGTHS = [3, 11, 1, 26, 7]
NEW_TOKENS = 12
LOGIT_ATOL = 1e-4


def _prompts(vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, min(vocab, 1300), (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def _hf_greedy(hf, prompt: list[int], new_tokens: int, eos: list[int] | None) -> list[int]:
    out = hf.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=eos,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def models(parity_checkpoint):
    cache = {}

    def get(preset: str):
        if preset not in cache:
            path = parity_checkpoint(preset)
            engine = Engine(EngineConfig(model=path, max_slots=2, max_seq_len=64, decode_steps_per_sync=4))
            # transformers' default attention; eager for Gemma 2 on every version (SDPA drops its soft-cap)
            hf = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, None, torch.device("cpu"))
            cache[preset] = (engine, hf)
        return cache[preset]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_greedy_tokens_match_transformers(models, preset):
    engine, hf = models(preset)
    prompts = _prompts(engine.spec.vocab_size)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    results = engine.generate([Request(id=str(i), prompt_ids=tuple(p), sampling=greedy) for i, p in enumerate(prompts)])
    eos = list(engine.spec.eos_token_ids)
    for prompt, result in zip(prompts, results):
        assert result.token_ids == _hf_greedy(hf, prompt, NEW_TOKENS, eos), (preset, len(prompt))
        assert result.prompt_tokens == len(prompt)


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen3", "tiny-gemma2"])
def test_stop_token_ends_the_row_where_transformers_stops(models, preset):
    engine, hf = models(preset)
    prompts = _prompts(engine.spec.vocab_size, seed=1)
    eos = list(engine.spec.eos_token_ids)
    free_run = _hf_greedy(hf, prompts[1], NEW_TOKENS, eos)
    stop = free_run[5]  # a token the model emits mid-way: make it a stop token
    expected = _hf_greedy(hf, prompts[1], NEW_TOKENS, eos + [stop])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS, stop_token_ids=(stop,))
    [result] = engine.generate([Request(id="s", prompt_ids=tuple(prompts[1]), sampling=sampling)])
    assert result.token_ids == expected
    assert result.finish_reason == "stop" and result.token_ids[-1] == stop


@pytest.mark.parametrize("preset", PRESETS)
def test_prefill_and_decode_logits_match_transformers(models, preset):
    engine, hf = models(preset)
    model, cache = engine.runner.model, engine.runner.cache
    prompts = [_prompts(engine.spec.vocab_size)[i] for i in (0, 1, 3)]  # 3, 11 and 26 tokens (> the windows)
    longest = max(len(p) for p in prompts)
    tokens = torch.zeros((len(prompts), longest), dtype=torch.long)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = torch.tensor(p)
    lengths = torch.tensor([len(p) for p in prompts])
    slots = torch.arange(len(prompts)) % cache.slots
    with torch.inference_mode():
        for i, p in enumerate(prompts):  # one prompt per call: the cache has 2 slots
            logits = model.prefill(tokens[i : i + 1, : len(p)], lengths[i : i + 1], slots[i : i + 1], cache)
            reference = hf(torch.tensor([p])).logits[0, -1]
            torch.testing.assert_close(logits[0], reference, atol=LOGIT_ATOL, rtol=0)
            sequence = list(p)
            for step in range(3):  # decode steps continue from the prefilled cache
                nxt = int(reference.argmax())
                sequence.append(nxt)
                position = torch.tensor([len(sequence) - 1])
                logits = model.decode(torch.tensor([nxt]), position, slots[i : i + 1], cache)
                reference = hf(torch.tensor([sequence])).logits[0, -1]
                torch.testing.assert_close(logits[0], reference, atol=LOGIT_ATOL, rtol=0)


def test_batched_prefill_matches_single_prompts(models):
    """Right padding must not change a prompt's logits (the causal mask keeps pads out of sight)."""
    engine, _ = models("tiny")
    model, cache = engine.runner.model, engine.runner.cache
    prompts = _prompts(engine.spec.vocab_size)[:2]
    longest = max(len(p) for p in prompts)
    tokens = torch.zeros((2, longest), dtype=torch.long)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = torch.tensor(p)
    lengths = torch.tensor([len(p) for p in prompts])
    with torch.inference_mode():
        batched = model.prefill(tokens, lengths, torch.tensor([0, 1]), cache)
        for i, p in enumerate(prompts):
            alone = model.prefill(torch.tensor([p]), lengths[i : i + 1], torch.tensor([i]), cache)
            torch.testing.assert_close(batched[i], alone[0], atol=1e-5, rtol=0)
