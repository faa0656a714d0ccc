"""Scenario `generate`: batched text generation through a backend (backends.BACKENDS), measured the same
way for every backend.

The scenario owns the protocol; backends only load and run batches:
1. prompts: `num_prompts` rows of exactly `prompt_tokens` random non-special token ids (seeded), so no
   padding is needed; every backend gets the same ids, `new_tokens` (min == max) and sampling settings;
2. load (timed), then the first call on one batch (timed: includes compile / graph capture), then the
   remaining warm-up calls; the first call never enters steady-state figures;
3. one short profiled call (the same shapes, stopped after `profile_steps`) says which attention kernel
   ran;
4. steady state: batches in order, repeated until `min_repeats` passes over all prompts AND
   `min_duration_s` are met; every call is timed (device-synchronised) and its tokens counted per row
   up to the first EOS, never padding.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 16, "prompts per generate call", minimum=1),
    Knob("num_prompts", int, 64, "prompts per pass (a multiple of batch_size)", minimum=1),
    Knob("prompt_tokens", int, 48, "tokens per prompt (random ids, all rows equally long)", minimum=1),
    Knob("new_tokens", int, 128, "tokens generated per row (min_new_tokens == max_new_tokens)", minimum=1),
    Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
    Knob("do_sample", bool, True, "sample (true) or greedy (false)"),
    Knob("temperature", float, 1.0, "sampling temperature", minimum=0.0),
    Knob("top_p", float, 0.9, "nucleus sampling threshold (1.0 disables)", minimum=0.0),
    Knob("top_k", int, 0, "top-k filter (0 disables)", minimum=0),
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
    Knob("profile_kernels", bool, True, "profile one short call to see which attention kernel ran"),
    Knob("profile_steps", int, 4, "decode steps of the profiled call", minimum=1),
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1,
                  repeats_help="timed passes over all prompts (at least; more if min_duration_s needs them)"),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if c["num_prompts"] % c["batch_size"]:
        raise ConfigError(
            f"num_prompts={c['num_prompts']} is not a multiple of batch_size={c['batch_size']}: a short last batch "
            "would change shapes (and recompile a static cache) inside the timed loop; set num_prompts to a multiple"
        )
    if c["warmup"] < 1:
        raise ConfigError("warmup=0: the first call carries compile and lazy initialisation; use warmup >= 1")
    if c["do_sample"] and c["temperature"] <= 0:
        raise ConfigError("temperature must be > 0 when do_sample=true; use do_sample=false for greedy")
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    assert cell.model is not None
    if model_refs.model_task(cell.model) != "causal-lm":
        raise ConfigError(f"model {cell.model} is not a causal LM; the generate scenario needs one")
    config = model_refs.model_config(cell.model)
    config = config.get("text_config", config)
    limit = config.get("max_position_embeddings")
    if limit and c["prompt_tokens"] + c["new_tokens"] > limit:
        raise ConfigError(
            f"prompt_tokens + new_tokens = {c['prompt_tokens'] + c['new_tokens']} exceeds the model's "
            f"max_position_embeddings={limit}; lower new_tokens or prompt_tokens"
        )


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough: process start + load, then (first call + warm-ups + steady calls) x steps x a guessed step
    time; static caches add a compile guess on an accelerator."""
    c = cell.config
    calls = c["warmup"] + c["min_repeats"] * c["num_prompts"] // c["batch_size"]
    if accelerator:
        step = 0.004 if c.get("kv_cache") == "static" else 0.010
        fixed = 20.0 + (30.0 if c.get("compile") else 0.0)
    else:
        step = 0.004 + 0.00002 * c["batch_size"]
        fixed = 5.0
    return fixed + calls * c["new_tokens"] * step + max(c["min_duration_s"], 0.0)


def make_prompts(model_dir: Any, num_prompts: int, prompt_tokens: int, seed: int) -> Any:
    """[num_prompts, prompt_tokens] int64 of ids drawn from the tokenizer's non-special vocabulary
    (the model's vocabulary when the checkpoint has no tokenizer)."""
    import json

    import torch

    vocab = json.loads((model_dir / "config.json").read_text()).get("vocab_size")
    special: set[int] = set()
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir))
        vocab = min(vocab or len(tok), len(tok))
        special = set(tok.all_special_ids)
    except (OSError, ValueError):
        pass
    allowed = torch.tensor([i for i in range(vocab) if i not in special], dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(allowed), (num_prompts, prompt_tokens), generator=gen)
    return allowed[picks]


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends import GenerateSpec, get_backend
    from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.profiling import observe_attention
    from inferlab.bench.scenarios.generate_traffic import ModelTraffic, count_generated
    from inferlab.bench.timing import device_synchronizer, measure, timed

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    spec = GenerateSpec(new_tokens=c["new_tokens"], do_sample=c["do_sample"], temperature=c["temperature"],
                        top_p=c["top_p"], top_k=c["top_k"], seed=c["seed"])
    backend = get_backend(cell.backend).create(dict(c), spec)
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    prompts = make_prompts(ctx.model_path, c["num_prompts"], c["prompt_tokens"], c["seed"]).to(device)
    batches = list(torch.split(prompts, c["batch_size"]))  # each [batch_size, prompt_tokens]
    traffic = ModelTraffic.from_checkpoint(ctx.model_path, c["dtype"])

    with torch.no_grad():
        with timed(sync) as first:
            first_out = backend.generate(batches[0])
        first_counts = count_generated(first_out, backend.eos_token_ids)
        warmups = [first.seconds]
        for _ in range(c["warmup"] - 1):
            with timed(sync) as t:
                backend.generate(batches[0])
            warmups.append(t.seconds)
        kernels = None
        if c["profile_kernels"]:
            kernels = observe_attention(lambda: backend.generate(batches[0], stop_after_steps=c["profile_steps"]), device)

        order = iter(range(10**9))
        tokens_per_call: list[int] = []
        bytes_per_call: list[float] = []

        def one_call() -> Any:
            return backend.generate(batches[next(order) % len(batches)])

        def count(out: Any) -> None:
            rows = count_generated(out, backend.eos_token_ids)
            tokens_per_call.append(sum(rows))
            bytes_per_call.append(traffic.decode_bytes(c["prompt_tokens"], rows))

        m = measure(one_call, warmup=0, min_repeats=c["min_repeats"] * len(batches),
                    min_duration_s=c["min_duration_s"], sync=sync, on_result=count)

    steady_s = m.total_s
    output_tokens = sum(tokens_per_call)
    call_stats = m.stats
    short_rows = sum(1 for n in first_counts if n < c["new_tokens"])
    if short_rows:
        ctx.warn(f"{short_rows} of {len(first_counts)} rows of the first call ended before new_tokens (EOS)")
    bandwidth = device_bandwidth_gb_per_s(device, ctx.cache_dir)
    achieved = sum(bytes_per_call) / steady_s / 1e9
    metrics: dict[str, Any] = {
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / steady_s,
        "requests_per_s": len(tokens_per_call) * c["batch_size"] / steady_s,
        "load_s": load.seconds,
        "first_call_s": first.seconds,
        "first_call_extra_s": first.seconds - call_stats.median,  # compile / capture / lazy init beyond a steady call
        "warmup_s": warmups,
        "steady_s": steady_s,
        "steady_calls": call_stats.n,
        "call_s_stats": call_stats.to_dict(),
        "latency_ms": call_stats.scaled(1000.0).latency_dict(),  # a request's latency = its batch call's
        "spread": call_stats.spread,
        "tokens_per_row": c["new_tokens"],
        "achieved_gb_per_s": achieved,
        "device_bandwidth_gb_per_s": bandwidth,
        "bandwidth_fraction": (achieved / bandwidth) if bandwidth else None,
        "weight_bytes": traffic.weight_bytes,
        "kv_bytes_per_position": traffic.kv_bytes_per_position,
        "attention_kernel_observed": kernels.observed if kernels else None,
        "attention_kernels_profile": kernels.to_json() if kernels else None,
        "device": str(device),
        **peak_memory(device),
    }
    for key, value in backend.extra_metrics().items():
        metrics.setdefault(key, value)
    return metrics


SCENARIO = Scenario(
    name="generate",
    description="batched generation of equal-length outputs through a backend: tok/s, first call, memory, kernel",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="output_tokens_per_s",
    higher_is_better=True,
    uses_backends=True,
    uses_model=True,
    default_timeout_s=600.0,
    workload_knobs=("batch_size", "num_prompts", "prompt_tokens", "new_tokens", "do_sample", "temperature", "top_p",
                    "top_k"),
)
