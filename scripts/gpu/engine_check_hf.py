"""engine_check part: the bf16 engine against transformers (logits and greedy tokens).

Tolerance: against transformers in fp32, our bf16 error must be <= 2x transformers' own bf16 error
(+ 1e-3 x max|logit|), i.e. we lose no more precision than the reference implementation does.
"""

from __future__ import annotations

from typing import Any

import torch
from engine_check_correctness import PROMPT_LEN, _err, _requests, hf_dtype


def part_hf_logits(ctx) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    res = {}
    presets = ["tiny"] if ctx.quick else ["tiny", "llama-380m"]
    for preset in presets:
        path = ctx.checkpoint(preset)
        hf32 = AutoModelForCausalLM.from_pretrained(path, **hf_dtype(torch.float32)).to(ctx.device).eval()
        hf16 = AutoModelForCausalLM.from_pretrained(path, **hf_dtype(torch.bfloat16)).to(ctx.device).eval()
        engine = Engine(
            EngineConfig(
                model=path, dtype="bfloat16", device=str(ctx.device), max_slots=4, max_seq_len=192, cuda_graphs=False
            )
        )
        model, cache = engine.runner.model, engine.runner.cache
        requests = _requests(4, 64, engine.spec.vocab_size)
        ours_err, hf_err, scale, top1 = 0.0, 0.0, 0.0, []
        with torch.inference_mode():
            for i, request in enumerate(requests):
                seq = list(request.prompt_ids)
                slot = torch.tensor([i], device=ctx.device)
                logits = model.prefill(
                    torch.tensor([seq], device=ctx.device), torch.tensor([len(seq)], device=ctx.device), slot, cache
                )[0]
                for step in range(9):
                    ids = torch.tensor([seq], device=ctx.device)
                    ref32, ref16 = hf32(ids).logits[0, -1].float(), hf16(ids).logits[0, -1].float()
                    ours_err = max(ours_err, _err(logits, ref32))
                    hf_err = max(hf_err, _err(ref16, ref32))
                    scale = max(scale, ref32.abs().max().item())
                    top1.append(int(logits.argmax()) == int(ref16.argmax()))
                    seq.append(int(ref32.argmax()))
                    logits = model.decode(
                        torch.tensor([seq[-1]], device=ctx.device),
                        torch.tensor([len(seq) - 1], device=ctx.device),
                        slot,
                        cache,
                    )[0]
            as_greedy = SamplingParams(temperature=0.0, max_new_tokens=64, min_new_tokens=64)  # as hf below
            greedy = [
                r.token_ids
                for r in engine.generate(
                    [Request(id=r.id, prompt_ids=r.prompt_ids, sampling=as_greedy) for r in requests]
                )
            ]
            matched = []
            for request, ours in zip(requests, greedy):
                prompt = torch.tensor([request.prompt_ids], device=ctx.device)
                ref = hf16.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    do_sample=False,
                    max_new_tokens=64,
                    min_new_tokens=64,
                    pad_token_id=0,
                )[0, PROMPT_LEN:].tolist()
                matched.append(next((j for j, (a, b) in enumerate(zip(ours, ref)) if a != b), len(ref)))
        bound = 2 * hf_err + 1e-3 * scale
        res[preset] = {
            "ours_bf16_vs_fp32_max_abs": ours_err,
            "hf_bf16_vs_fp32_max_abs": hf_err,
            "max_abs_logit": scale,
            "top1_agreement_with_hf_bf16": sum(top1) / len(top1),
            "greedy_matched_prefix": matched,
        }
        ctx.row(
            "hf_logits",
            f"{preset}: max|ours-hf32| vs max|hf16-hf32|",
            f"{ours_err:.4f} vs {hf_err:.4f}",
            "ok" if ours_err <= bound else f"FAIL > {bound:.4f}",
        )
        ctx.row("hf_logits", f"{preset}: top-1 agreement with hf bf16 (36 steps)", sum(top1) / len(top1))
        ctx.row(
            "hf_logits",
            f"{preset}: greedy tokens equal to hf bf16 before divergence (of 64)",
            " ".join(str(m) for m in matched),
        )
        engine.close()
        del hf32, hf16, engine, model, cache
        ctx.free()
    return res
