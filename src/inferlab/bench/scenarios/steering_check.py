"""The steering scenario's activation check (the engine's cells): the engine's collected states ("all" pool) for a
few prompts against a transformers forward over prompt + the engine's tokens (teacher-forced, the same steering
hook), at the positions that produced each token."""

from __future__ import annotations

import statistics
from typing import Any


def check_activations(results: list[Any], model_dir: Any, prompts: list[list[int]], steered_layer: int, scale: float,
                      layers: tuple[int, ...], vector: Any, dtype: Any, device: Any,
                      tolerance: float) -> dict[str, Any]:
    """results[i]: the engine's Result for prompts[i], steered by scale x vector after `steered_layer` and collecting
    `layers` ("all" pool)."""
    import torch
    from transformers import AutoModelForCausalLM

    from inferlab.engine import SteerEntry
    from inferlab.workloads.hf_loading import from_pretrained_for_inference
    from inferlab.workloads.hf_steering import HFTaps

    # transformers' default attention for the model: sdpa where it has it, eager for Gemma 2's soft-capped
    # scores (hf_loading.attention_for: transformers 5.17 would run SDPA and drop the cap)
    hf = from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype, None, device)
    hooks = HFTaps(hf)
    entry = SteerEntry(steered_layer, vector, scale, b"")
    rel, cos = [], []
    for prompt, result in zip(prompts, results):
        tokens = result.token_ids
        sequence = torch.tensor([prompt + tokens[:-1]], device=device)
        with torch.inference_mode(), hooks.attached([[entry]], layers, keep_all=True) as recording:
            hf(input_ids=sequence)
        start = len(prompt) - 1
        for layer in layers:
            reference = recording.steps[layer][0][0, start : start + len(tokens)].float().cpu()  # [n, hidden]
            got = result.activations[layer]
            rel.append(((got - reference).norm(dim=-1) / reference.norm(dim=-1).clamp(min=1e-12)).max().item())
            cos.append(torch.nn.functional.cosine_similarity(got, reference, dim=-1).min().item())
    del hf
    worst = max(rel)
    return {"prompts": len(prompts), "layers": list(layers), "max_rel_error": worst,
            "median_rel_error": statistics.median(rel), "min_cosine": min(cos), "tolerance": tolerance,
            "match": worst <= tolerance}
