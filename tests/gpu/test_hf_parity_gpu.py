"""The bf16 engine on CUDA against transformers: we lose no more precision than transformers' own bf16 does.

Logits of the prefill and 8 teacher-forced decode steps of 4 prompts of 48 tokens (36 rows) against
transformers in fp32: our max |error| <= 2 x transformers-bf16's own + 1e-3 x max |logit|. Then 64 greedy
tokens through the engine's generate path against transformers' bf16 generate: where the two first differ,
the two tokens' fp32 logits must be a near-tie (gap <= twice that bound; a wrong kernel diverges at once
and by a wide gap). transformers runs its default attention, eager for Gemma 2 (hf_loading.attention_for:
its SDPA dropped the attention soft-cap). Quick: tiny and the tiny Gemma 1/2/3 presets (windows 8 / 12
shorter than the prompts, soft-caps, q/k norms, two ropes); full: + llama-380m and gemma-2b (MQA,
head_dim 256, GeGLU, vocabulary 256k). On CPU: tests/parity/.
"""

from __future__ import annotations

import pytest
import torch
from gpu_testkit import CUDA_ONLY, free_device_memory, max_abs, random_requests

pytestmark = CUDA_ONLY
CUDA = torch.device("cuda")
PROMPT_LEN, STEPS, NEW_TOKENS = 48, 8, 64
FULL_ONLY = ("llama-380m", "gemma-2b")


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma", "tiny-gemma2", "tiny-gemma3", *FULL_ONLY])
def test_bf16_engine_is_as_close_to_fp32_as_transformers_bf16(preset, size, checkpoint):
    from transformers import AutoModelForCausalLM

    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.hf_loading import from_pretrained_for_inference

    if preset in FULL_ONLY and not size.full:
        pytest.skip("full size only (--gpu-size full)")
    path = checkpoint(preset)
    hf32 = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, None, CUDA)
    hf16 = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.bfloat16, None, CUDA)
    engine = Engine(EngineConfig(model=path, dtype="bfloat16", max_slots=4, max_seq_len=192, cuda_graphs=False))
    model, cache = engine.runner.model, engine.runner.cache
    requests = random_requests(4, NEW_TOKENS, engine.spec.vocab_size, prompt_len=PROMPT_LEN)
    ours_err = hf_err = scale = 0.0
    with torch.inference_mode():
        for i, request in enumerate(requests):
            seq, slot = list(request.prompt_ids), torch.tensor([i], device=CUDA)
            logits = model.prefill(torch.tensor([seq], device=CUDA), torch.tensor([len(seq)], device=CUDA), slot,
                                   cache)[0]  # fmt: skip
            for _ in range(STEPS + 1):
                ids = torch.tensor([seq], device=CUDA)
                ref32, ref16 = hf32(ids).logits[0, -1].float(), hf16(ids).logits[0, -1].float()
                ours_err, hf_err = max(ours_err, max_abs(logits, ref32)), max(hf_err, max_abs(ref16, ref32))
                scale = max(scale, ref32.abs().max().item())
                seq.append(int(ref32.argmax()))
                logits = model.decode(torch.tensor([seq[-1]], device=CUDA), torch.tensor([len(seq) - 1], device=CUDA),
                                      slot, cache)[0]  # fmt: skip
        bound = 2 * hf_err + 1e-3 * scale
        assert ours_err <= bound, f"max|ours - hf32| {ours_err:.4f} vs max|hf16 - hf32| {hf_err:.4f}"
        greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
        ours = engine.generate([Request(id=r.id, prompt_ids=r.prompt_ids, sampling=greedy) for r in requests])
        for request, result in zip(requests, ours):
            prompt = torch.tensor([request.prompt_ids], device=CUDA)
            ref = hf16.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                pad_token_id=0)[0, PROMPT_LEN:].tolist()  # fmt: skip
            j = next((j for j, (a, b) in enumerate(zip(result.token_ids, ref)) if a != b), None)
            if j is not None:  # the fp32 logits of the two choices where they first differ
                at = hf32(torch.tensor([list(request.prompt_ids) + ref[:j]], device=CUDA)).logits[0, -1].float()
                gap = abs(at[result.token_ids[j]] - at[ref[j]]).item()
                assert gap <= 2 * bound, f"{request.id}: diverged at token {j} by an fp32 logit gap of {gap:.4f}"
    engine.close()
    del hf32, hf16
    free_device_memory()
