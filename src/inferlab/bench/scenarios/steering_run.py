"""The measurement of one `steering` cell (child process): prompts, the vector, warm-up and timed passes
per mode, the figures, and the engine's activation check against transformers (see steering.py)."""

from __future__ import annotations

import statistics
from typing import Any

from inferlab.bench.backends.steering_base import PassOutput, SteeringSpec
from inferlab.bench.cells import Cell
from inferlab.bench.scenarios.base import CellContext

HEADLINE_MODE = "steer+collect"  # the seed's job


def ragged_prompts(model_dir: Any, num: int, shortest: int, longest: int, seed: int) -> list[list[int]]:
    """`num` prompts of non-special token ids, lengths uniform in [shortest, longest] (seeded)."""
    import torch

    from inferlab.bench.scenarios.generate import make_prompts

    ids = make_prompts(model_dir, num, longest, seed)  # [num, longest]
    lengths = torch.randint(shortest, longest + 1, (num,), generator=torch.Generator().manual_seed(seed + 1))
    return [ids[i, : int(lengths[i])].tolist() for i in range(num)]


def steering_vector(hidden: int, seed: int) -> Any:
    """A seeded unit vector [hidden] fp32 (the backends scale it by steer_scale)."""
    import torch

    v = torch.randn(hidden, generator=torch.Generator().manual_seed(seed + 2))
    return v / v.norm()


def measure_steering(cell: Cell, ctx: CellContext, modes: tuple[str, ...], collect_layers: tuple[int, ...],
                     num_layers: int) -> dict[str, Any]:
    import json

    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.timing import device_synchronizer, timed

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    spec = SteeringSpec(new_tokens=c["new_tokens"], do_sample=c["do_sample"], temperature=c["temperature"],
                        top_p=c["top_p"], seed=c["seed"], layer=c["steer_layer"] % num_layers, scale=c["steer_scale"],
                        collect_layers=tuple(x % num_layers for x in collect_layers), collect_pool=c["collect_pool"])
    backend = get_backend(cell.backend, "steering").create(dict(c), spec)
    prompts = ragged_prompts(ctx.model_path, c["num_prompts"], c["prompt_min_tokens"], c["prompt_max_tokens"], c["seed"])
    config = json.loads((ctx.model_path / "config.json").read_text())
    vector = steering_vector(int(config.get("text_config", config)["hidden_size"]), c["seed"])
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]), vector)
    first: dict[str, float] = {}
    passes: dict[str, list[tuple[float, PassOutput]]] = {mode: [] for mode in modes}
    with torch.no_grad():
        for mode in modes:  # each mode's first call: graph capture / compile, apart from the figures
            with timed(sync) as t:
                backend.run(prompts[: c["batch_size"]], mode, new_tokens=min(c["warmup_tokens"], c["new_tokens"]))
            first[mode] = t.seconds
        for _ in range(c["min_repeats"]):
            for mode in modes:  # interleaved: a drift of the device touches every mode alike
                with timed(sync) as t:
                    out = backend.run(prompts, mode)
                passes[mode].append((t.seconds, out))
    metrics: dict[str, Any] = {"load_s": load.seconds, "first_call_s_per_mode": first, "prompts": len(prompts),
                               "prompt_tokens": sum(map(len, prompts)), "device": str(device), **peak_memory(device)}
    metrics.update(mode_figures(passes))
    headline = HEADLINE_MODE if HEADLINE_MODE in modes else modes[0]
    metrics["headline_mode"] = headline
    metrics["output_tokens_per_s"] = metrics["modes"][headline]["output_tokens_per_s"]
    metrics["output_tokens"] = metrics["modes"][headline]["output_tokens"]
    metrics["first_call_s"] = first[headline]  # its warm-up pass over one batch (capture, compile)
    ctx.add_backend_metrics(metrics, backend)
    if cell.backend == "inferlab" and c["check_prompts"]:
        ctx.save_partial(metrics, "the activation check against transformers")
        tolerance = c["check_tolerance"] or (1e-4 if c["dtype"] == "float32" else 0.05)
        metrics["activation_check"] = check_activations(backend, ctx.model_path, prompts[: c["check_prompts"]], spec,
                                                        vector, torch_dtype(c["dtype"]), device, tolerance)
        if not metrics["activation_check"]["match"]:
            ctx.warn(f"activation check failed: max relative error {metrics['activation_check']['max_rel_error']:.3g}"
                     f" > {tolerance:g}")
    return metrics


def mode_figures(passes: dict[str, list[tuple[float, PassOutput]]]) -> dict[str, Any]:
    """Per mode: tok/s over its timed passes, the engine's decode step time; costs relative to plain."""
    modes: dict[str, dict[str, Any]] = {}
    for mode, done in passes.items():
        seconds = sum(s for s, _ in done)
        tokens = sum(out.tokens for _, out in done)
        steps = [out.decode_s / out.decode_steps * 1000 for _, out in done if out.decode_steps]
        modes[mode] = {"output_tokens": tokens, "seconds": seconds, "output_tokens_per_s": tokens / seconds,
                       "step_ms": statistics.median(steps) if steps else None,
                       "step_ms_passes": steps, "pass_s": [s for s, _ in done]}
    figures: dict[str, Any] = {"modes": modes}
    plain = modes.get("plain", {}).get("step_ms")
    for mode, key in (("steer", "steering_cost"), ("collect", "collection_cost"), ("steer+collect", "steer_collect_cost")):
        step = modes.get(mode, {}).get("step_ms")
        figures[key] = step / plain - 1 if plain and step else None  # fraction of the plain step
        if mode in modes and "plain" in modes:
            figures[key + "_tok_s"] = 1 - modes[mode]["output_tokens_per_s"] / modes["plain"]["output_tokens_per_s"]
    return figures


def check_activations(backend: Any, model_dir: Any, prompts: list[list[int]], spec: SteeringSpec, vector: Any,
                      dtype: Any, device: Any, tolerance: float) -> dict[str, Any]:
    """The engine's collected states ("all") against a transformers forward over prompt + the engine's tokens
    (teacher-forced, the same steering hook) at the positions that produced each token."""
    import torch
    from transformers import AutoModelForCausalLM

    from inferlab.engine import SteerEntry
    from inferlab.workloads.hf_loading import from_pretrained_for_inference
    from inferlab.workloads.hf_steering import HFTaps

    out = backend.run(prompts, "steer+collect", pool="all")
    # transformers' default attention for the model: sdpa where it has it, eager for Gemma 2's soft-capped
    # scores (hf_loading.attention_for: transformers 5.17 would run SDPA and drop the cap)
    hf = from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype, None, device)
    taps = HFTaps(hf)
    entry = SteerEntry(spec.layer, vector, spec.scale, b"")
    rel, cos = [], []
    for prompt, tokens, ours in zip(prompts, out.token_ids, out.activations):
        sequence = torch.tensor([prompt + tokens[:-1]], device=device)
        with torch.inference_mode(), taps.attached([[entry]], spec.collect_layers, keep_all=True) as recording:
            hf(input_ids=sequence)
        start = len(prompt) - 1
        for layer in spec.collect_layers:
            reference = recording.steps[layer][0][0, start : start + len(tokens)].float().cpu()  # [n, hidden]
            got = ours[layer]
            rel.append(((got - reference).norm(dim=-1) / reference.norm(dim=-1).clamp(min=1e-12)).max().item())
            cos.append(torch.nn.functional.cosine_similarity(got, reference, dim=-1).min().item())
    del hf
    worst = max(rel)
    return {"prompts": len(prompts), "layers": list(spec.collect_layers), "max_rel_error": worst,
            "median_rel_error": statistics.median(rel), "min_cosine": min(cos), "tolerance": tolerance,
            "match": worst <= tolerance}
