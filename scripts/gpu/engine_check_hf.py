"""engine_check parts: the bf16 engine against transformers (logits and greedy tokens).

Tolerance: against transformers in fp32, our bf16 error must be <= 2x transformers' own bf16 error
(+ 1e-3 x max|logit|), i.e. we lose no more precision than the reference implementation does. Measured
over the prefill and 8 decode steps of 4 prompts of 48 tokens (36 logit rows); then 64 greedy tokens of
the engine (its normal generate path) against transformers' bf16 generate: reported as how many leading
tokens agree per prompt, and where they first differ, how far apart the two tokens' logits are in fp32
(a bf16 near-tie, a gap within the rounding, may legitimately flip a token; a wrong kernel diverges at
once and by a wide gap). The error is also reported apart for the prefills and the decode steps. transformers
runs its default attention, except Gemma 2, which runs eager (hf_loading.attention_for: transformers <= 5.17
ran SDPA by default and dropped Gemma 2's attention soft-cap); the row names the implementation used.

hf_logits: tiny and llama-380m (tiny only with --quick).
hf_gemma: the Gemma family (engine/forwards/gemma.py). On the GPU: gemma-2b (the issue's shape: MQA, head_dim 256,
GeGLU, vocab 256k), then tiny-gemma2 and tiny-gemma3 (windows 8 / 12 shorter than the 48-token prompts,
soft-caps, q/k norms, two ropes: the bf16 Triton kernels of Gemma 2/3 against transformers), then their
graph replay against eager steps (identical tokens; 64-token prompts, so the prefill graph captures the
windowed / soft-capped attention with the windows cutting into the prompt), then a speed cell on gemma-2b (batch 64, 48-token
prompts, exactly 150 new tokens, greedy and top-p 0.9; CUDA graphs, the engine's own start-up). With
--quick (CPU): tiny-gemma, tiny-gemma2, tiny-gemma3 and a tiny speed cell.
"""

from __future__ import annotations

from typing import Any

import torch
from engine_check_correctness import PROMPT_LEN, _err, _requests, graph_vs_eager


def _check_preset(ctx, part: str, preset: str) -> dict[str, Any]:
    """Logits of prefill + 8 decode steps vs transformers fp32 and bf16, then 64 greedy tokens vs hf bf16."""
    from transformers import AutoModelForCausalLM

    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.hf_loading import from_pretrained_for_inference

    path = ctx.checkpoint(preset)
    # transformers' default attention, but eager for Gemma 2 (attention_for): its SDPA default before 5.24
    # dropped the soft-cap, so the reference itself was another model (tiny-gemma2's 0.48 "FAIL" of 2026-11-25)
    hf32 = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, None, ctx.device)
    hf16 = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.bfloat16, None, ctx.device)
    config = EngineConfig(model=path, dtype="bfloat16", device=str(ctx.device), max_slots=4, max_seq_len=192,
                          cuda_graphs=False)  # fmt: skip
    engine = Engine(config)
    model, cache = engine.runner.model, engine.runner.cache
    requests = _requests(4, 64, engine.spec.vocab_size)
    ours_err, hf_err, scale, top1 = 0.0, 0.0, 0.0, []
    phase_err = {"prefill": 0.0, "decode": 0.0}  # ours vs hf fp32: where an error comes from
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
                phase = "decode" if step else "prefill"
                phase_err[phase] = max(phase_err[phase], _err(logits, ref32))
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
            for r in engine.generate([Request(id=r.id, prompt_ids=r.prompt_ids, sampling=as_greedy) for r in requests])
        ]
        matched, gaps = [], []
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
            j = next((j for j, (a, b) in enumerate(zip(ours, ref)) if a != b), len(ref))
            matched.append(j)
            if j < len(ref):  # how close the two choices were in fp32: a near-tie flips on any rounding
                ids = torch.tensor([list(request.prompt_ids) + ref[:j]], device=ctx.device)
                at = hf32(ids).logits[0, -1].float()
                gaps.append(abs(at[ours[j]] - at[ref[j]]).item())
    bound = 2 * hf_err + 1e-3 * scale
    attention = hf32.config._attn_implementation  # what the reference really ran (eager for Gemma 2)
    result = {
        "ours_bf16_vs_fp32_max_abs": ours_err,
        "ours_prefill_vs_fp32_max_abs": phase_err["prefill"],
        "ours_decode_vs_fp32_max_abs": phase_err["decode"],
        "hf_attn_implementation": attention,
        "hf_bf16_vs_fp32_max_abs": hf_err,
        "max_abs_logit": scale,
        "bound": bound,
        "within_bound": ours_err <= bound,
        "top1_agreement_with_hf_bf16": sum(top1) / len(top1),
        "greedy_matched_prefix": matched,
        "divergence_fp32_logit_gaps": gaps,  # |fp32 logit of our token - of hf's| where the two first differ
    }
    verdict = "ok" if ours_err <= bound else f"FAIL > {bound:.4f}"
    ctx.row(part, f"{preset}: max|ours-hf32| vs max|hf16-hf32|", f"{ours_err:.4f} vs {hf_err:.4f}", verdict)
    phases = f"{phase_err['prefill']:.4f} / {phase_err['decode']:.4f}"
    ctx.row(part, f"{preset}: max|ours-hf32| prefill / decode", phases, f"hf attention: {attention}")
    ctx.row(part, f"{preset}: top-1 agreement with hf bf16 (36 steps)", sum(top1) / len(top1))
    ctx.row(part, f"{preset}: greedy tokens equal to hf bf16 before divergence (of 64)", " ".join(map(str, matched)),
            "fp32 gaps at the divergences: " + (" ".join(f"{g:.4f}" for g in gaps) or "none"))  # fmt: skip
    engine.close()
    del hf32, hf16, engine, model, cache
    ctx.free()
    return result


def part_hf_logits(ctx) -> dict[str, Any]:
    presets = ["tiny"] if ctx.quick else ["tiny", "llama-380m"]
    return {preset: _check_preset(ctx, "hf_logits", preset) for preset in presets}


def part_hf_gemma(ctx) -> dict[str, Any]:
    """The Gemma family against transformers (each preset in its own try: one failure keeps the others),
    then the engine's speed on gemma-2b."""
    import traceback

    from engine_check_speed import _engine, _speed_verdict, _startup_row, timed
    from engine_check_speed import _requests as speed_requests

    res: dict[str, Any] = {}
    presets = ["tiny-gemma", "tiny-gemma2", "tiny-gemma3"] if ctx.quick else ["gemma-2b", "tiny-gemma2", "tiny-gemma3"]
    for preset in presets:
        if ctx.elapsed() > ctx.budget_s:  # the run's budget is spent: say so instead of running on
            ctx.row("hf_gemma", f"{preset}: skipped", f"{ctx.elapsed():.0f} s used of {ctx.budget_s:.0f} s")
            continue
        try:
            res[preset] = _check_preset(ctx, "hf_gemma", preset)
        except Exception:
            res[preset] = {"error": traceback.format_exc()}
            ctx.row("hf_gemma", f"{preset}: ERROR", res[preset]["error"].strip().splitlines()[-1][:90], "FAIL")
            ctx.free()
    if ctx.cuda:  # windows, soft-caps and q/k norms inside captured decode steps: graph replay == eager
        for preset in ("tiny-gemma2", "tiny-gemma3"):
            try:
                res[f"{preset}_graphs"] = graph_vs_eager(ctx, "hf_gemma", preset)
            except Exception:
                error = traceback.format_exc()
                res[f"{preset}_graphs"] = {"error": error}
                ctx.row("hf_gemma", f"{preset} graphs: ERROR", error.strip().splitlines()[-1][:90], "FAIL")
                ctx.free()
    preset, batch, new_tokens = ("tiny-gemma2", 4, 24) if ctx.quick else ("gemma-2b", 64, 150)
    if ctx.elapsed() > ctx.budget_s:
        ctx.row("hf_gemma", f"{preset} speed: skipped", f"{ctx.elapsed():.0f} s used of {ctx.budget_s:.0f} s")
        return res
    engine = _engine(ctx, preset, batch, new_tokens)
    res["speed_startup"] = _startup_row(ctx, "hf_gemma", preset, engine)
    vocab = engine.spec.vocab_size
    for mode, sampling in {"greedy": dict(temperature=0.0), "top_p0.9_t1": dict(temperature=1.0, top_p=0.9)}.items():
        timed(ctx, engine, speed_requests(batch, 16, vocab, seed=7, **sampling))  # warm-up
        cell = timed(ctx, engine, speed_requests(batch, new_tokens, vocab, **sampling))
        res[f"{preset} B={batch} {mode}"] = cell
        ctx.row("hf_gemma", f"{preset} B={batch} {new_tokens} new {mode} tok/s", cell["tok_per_s"],
                _speed_verdict(ctx, cell))  # fmt: skip
    engine.close()
    del engine
    ctx.free()
    return res
