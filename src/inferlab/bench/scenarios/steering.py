"""Scenario `steering`: the seed's job (seeds/003: Gemma-2B, 1,000+ prompts, 150 new tokens, a steering
vector, hidden states of what was generated) through a backend (backends of scenario `steering`: `inferlab`,
the engine; `hf`, transformers + forward hooks), measured the same way for both.

The scenario owns what a comparison depends on: `num_prompts` prompts of random non-special token ids,
their lengths drawn uniformly from [prompt_min_tokens, prompt_max_tokens] (seeded: the same prompts for
every cell), exactly `new_tokens` tokens per row, the sampling settings, and one steering vector (seeded,
unit norm, times `steer_scale`) added after decoder layer `steer_layer`; collection of `collect_layers`
pooled `collect_pool`. Modes (`modes`, run by one loaded backend, each over every prompt): plain, steer,
collect, steer+collect, each a set of requests carrying Steer(steer_layer, "steer", scale) (the vector the
backend was given by name) and/or Collect(collect_layers, pool). Protocol: load (timed), one short warm-up pass
per mode over one batch (capture of the mode's graphs, compile), then `min_repeats` rounds of timed passes, the
modes interleaved within a round, each timed between device synchronisations, tokens counted per row.
Figures: tok/s per mode (the headline: steer+collect, or the first mode), the engine's decode step time per
mode (its device clock) and from it the steering cost (steer vs plain), the collection cost and both; peak
memory; and, for the engine, an activation check (steering_check.py): `check_prompts` prompts generated with
steer+collect ("all" pool) and the same tokens fed through transformers with the same steering hook, whose
decoder-layer outputs at the positions that produced each token must match.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, common_knobs, dtype_knob, sampling_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario, completed
from inferlab.errors import ConfigError

MODES = ("plain", "steer", "collect", "steer+collect")
HEADLINE_MODE = "steer+collect"  # the seed's job
VECTOR = "steer"  # the name the scenario's vector is registered under

KNOBS = (
    Knob("batch_size", int, 64, "rows per batch: the engine's slots, HF's generate batch", minimum=1),
    Knob("num_prompts", int, 1000, "prompts per pass", minimum=1),
    Knob("prompt_min_tokens", int, 64, "shortest prompt (lengths drawn uniformly, seeded)", minimum=1),
    Knob("prompt_max_tokens", int, 256, "longest prompt", minimum=1),
    Knob("new_tokens", int, 150, "tokens generated per row (min == max)", minimum=1),
    dtype_knob(),
    *sampling_knobs(top_p=1.0, do_sample="sample (the seed's setting) or greedy", temperature_help="sampling temperature"),
    Knob("steer_layer", int, 6, "decoder layer whose output is steered (0-based, negative from the end)"),
    Knob("steer_scale", float, 8.0, "the vector is unit norm times this"),
    Knob("collect_layers", str, "6:-1", "decoder layers collected, separated by ':' or ',' (negative from the end)"),
    Knob("collect_pool", str, "mean", "pooling over the generated tokens", choices=("last", "mean", "all")),
    Knob("modes", str, ":".join(MODES), "modes separated by ':' or ',', each a timed pass over every prompt"),
    Knob("warmup_tokens", int, 16, "tokens of each mode's warm-up pass over one batch", minimum=1),
    Knob("check_prompts", int, 4, "engine only: prompts whose activations are checked against transformers "
         "(0 = no check)", minimum=0),
    Knob("check_tolerance", float, 0.0, "largest accepted |engine - hf| / |hf| per vector; 0 = by dtype (0.05 in "
         "bf16/fp16: different kernels round differently through every layer; 1e-4 in fp32)", minimum=0.0),
    TOKENIZER_KNOB,
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1, repeats_help="rounds of timed passes (every mode once)"),
)


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.replace(" ", "").replace(":", ",").split(",") if x)
    except ValueError:
        raise ConfigError(f"collect_layers={text!r} must be integers separated by ':' or ',', e.g. 6:-1") from None
    if not layers or len(set(layers)) != len(layers):
        raise ConfigError(f"collect_layers={text!r}: give at least one layer, each once")
    return layers


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(x for x in text.replace(" ", "").replace(":", ",").split(",") if x)
    bad = [m for m in modes if m not in MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise ConfigError(f"modes={text!r}: use each of {', '.join(MODES)} at most once, separated by ':' or ','")
    return modes


def num_layers(model: str) -> int:
    config = model_refs.model_config(model)
    return int(config.get("text_config", config)["num_hidden_layers"])


def validate(cell: Cell) -> None:
    c = cell.config
    assert cell.model is not None
    if model_refs.model_task(cell.model) != "causal-lm":
        raise ConfigError(f"model {cell.model} is not a causal LM; the steering scenario needs one")
    if c["prompt_min_tokens"] > c["prompt_max_tokens"]:
        raise ConfigError(f"prompt_min_tokens={c['prompt_min_tokens']} > prompt_max_tokens={c['prompt_max_tokens']}")
    if c["do_sample"] and c["temperature"] <= 0:
        raise ConfigError("temperature must be > 0 when do_sample=true; use do_sample=false for greedy")
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    parse_modes(c["modes"])
    layers = num_layers(cell.model)
    for layer in (c["steer_layer"], *parse_layers(c["collect_layers"])):
        if not -layers <= layer < layers:
            raise ConfigError(f"layer {layer} is out of range: model {cell.model} has decoder layers 0..{layers - 1}")
    model_refs.check_text_model(cell.model, c["tokenizer"], "steering", causal_lm=False)
    config = model_refs.model_config(cell.model)
    limit = config.get("text_config", config).get("max_position_embeddings")
    if limit and c["prompt_max_tokens"] + c["new_tokens"] > limit:
        raise ConfigError(f"prompt_max_tokens + new_tokens = {c['prompt_max_tokens'] + c['new_tokens']} exceeds the "
                          f"model's max_position_embeddings={limit}")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds. GPU, Gemma-2B-sized: process, load and start-up ~35 s (the engine: weights, GEMM choice,
    graph capture; transformers: load + the activation check's model for the engine), then per mode and
    round the decode steps: the engine ~prompts x tokens / batch steps at ~2.5 ms + 0.01 ms per row, HF
    batches x tokens steps at ~15 ms + 0.08 ms per row; prefill ~1 s per 100k prompt tokens. CPU (tiny
    models): ~4 ms + 0.2 ms per row per step."""
    c = cell.config
    modes = len(parse_modes(c["modes"]))
    rows, n, prompts = c["batch_size"], c["new_tokens"], c["num_prompts"]
    prompt_tokens = prompts * (c["prompt_min_tokens"] + c["prompt_max_tokens"]) / 2
    engine = cell.backend == "inferlab"
    steps = prompts * n / rows if engine else -(-prompts // rows) * n
    if accelerator:
        step_ms = (2.5 + 0.01 * rows) if engine else (15.0 + 0.08 * rows)
        fixed, prefill = 35.0, prompt_tokens / 1e5
    else:
        step_ms, fixed, prefill = 4.0 + 0.2 * rows, 8.0, prompt_tokens / 2e4
    per_pass = steps * step_ms / 1000 + prefill
    return fixed + modes * (c["min_repeats"] * per_pass + per_pass * c["warmup_tokens"] / n)


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


@dataclass(frozen=True)
class Pass:
    """One timed pass of a mode over every prompt."""

    seconds: float
    tokens: int  # generated tokens counted (every row: new_tokens)
    decode_s: float | None  # device time of the decode steps (the engine's clock), where the backend reports it
    decode_steps: int | None


def mode_requests(prompts: list[list[int]], mode: str, sampling: Any, layer: int, scale: float,
                  collect_layers: tuple[int, ...], pool: str) -> list[Any]:
    """One request per prompt (ids `p<i>` in every pass: the same per-request seeds), steered and/or collecting
    as `mode` says."""
    from inferlab.types import Collect, Request, Steer

    steering = (Steer(layer, VECTOR, scale),) if "steer" in mode else ()
    collect = Collect(collect_layers, pool) if "collect" in mode else None
    return [Request(id=f"p{i}", prompt_ids=tuple(p), sampling=sampling, steering=steering, collect=collect)
            for i, p in enumerate(prompts)]


def _engine_clock(backend: Any) -> tuple[float, int] | None:
    """(decode seconds, decode steps) so far on the engine's device clock, or None for a backend without one."""
    engine = backend.extra_metrics().get("engine")
    return (engine["decode_s"], engine["decode_steps"]) if engine else None


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import json

    import torch

    from inferlab.bench.backends import GenerateSpec, get_backend
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.timing import device_synchronizer, timed
    from inferlab.engine import SteeringVectors
    from inferlab.types import SamplingParams

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    modes = parse_modes(c["modes"])
    layers = num_layers(str(ctx.model_path))
    layer, collect_layers = c["steer_layer"] % layers, tuple(x % layers for x in parse_layers(c["collect_layers"]))
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    backend = get_backend(cell.backend, "steering").create(dict(c), GenerateSpec(c["new_tokens"], c["seed"]))
    prompts = ragged_prompts(ctx.model_path, c["num_prompts"], c["prompt_min_tokens"], c["prompt_max_tokens"],
                             c["seed"])
    config = json.loads((ctx.model_path / "config.json").read_text())
    vector = steering_vector(int(config.get("text_config", config)["hidden_size"]), c["seed"])
    sampling = SamplingParams(temperature=c["temperature"] if c["do_sample"] else 0.0, top_p=c["top_p"],
                              max_new_tokens=c["new_tokens"], min_new_tokens=c["new_tokens"])  # exactly new_tokens

    def requests(mode: str, rows: list[list[int]], pool: str = c["collect_pool"]) -> list[Any]:
        return mode_requests(rows, mode, sampling, layer, c["steer_scale"], collect_layers, pool)

    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
        backend.add_steering_vectors(SteeringVectors({VECTOR: vector}, source="the scenario's vector"))
    first: dict[str, float] = {}
    passes: dict[str, list[Pass]] = {mode: [] for mode in modes}
    with torch.no_grad():
        for mode in modes:  # each mode's first call: graph capture / compile, apart from the figures
            with timed(sync) as t:
                completed(backend.generate(requests(mode, prompts[: c["batch_size"]]),
                                           stop_after_steps=min(c["warmup_tokens"], c["new_tokens"])))
            first[mode] = t.seconds
        for _ in range(c["min_repeats"]):
            for mode in modes:  # interleaved: a drift of the device touches every mode alike
                sent = requests(mode, prompts)
                before = _engine_clock(backend)
                with timed(sync) as t:
                    results = completed(backend.generate(sent))
                after = _engine_clock(backend)
                steps = (after[0] - before[0], after[1] - before[1]) if before and after else (None, None)
                passes[mode].append(Pass(t.seconds, sum(len(r.token_ids) for r in results), *steps))
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
        from inferlab.bench.scenarios.steering_check import check_activations

        ctx.save_partial(metrics, "the activation check against transformers")
        tolerance = c["check_tolerance"] or (1e-4 if c["dtype"] == "float32" else 0.05)
        check_prompts = prompts[: c["check_prompts"]]
        results = {r.id: r for r in completed(backend.generate(requests("steer+collect", check_prompts, "all")))}
        check = check_activations([results[f"p{i}"] for i in range(len(check_prompts))], ctx.model_path,
                                  check_prompts, layer, c["steer_scale"], collect_layers, vector,
                                  torch_dtype(c["dtype"]), device, tolerance)
        metrics["activation_check"] = check
        if not check["match"]:
            ctx.warn(f"activation check failed: max relative error {check['max_rel_error']:.3g} > {tolerance:g}")
    backend.close()
    return metrics


def mode_figures(passes: dict[str, list[Pass]]) -> dict[str, Any]:
    """Per mode: tok/s over its timed passes, the engine's decode step time; costs relative to plain."""
    modes: dict[str, dict[str, Any]] = {}
    for mode, done in passes.items():
        seconds = sum(p.seconds for p in done)
        tokens = sum(p.tokens for p in done)
        steps = [p.decode_s / p.decode_steps * 1000 for p in done if p.decode_steps]
        modes[mode] = {"output_tokens": tokens, "seconds": seconds, "output_tokens_per_s": tokens / seconds,
                       "step_ms": statistics.median(steps) if steps else None,
                       "step_ms_passes": steps, "pass_s": [p.seconds for p in done]}
    figures: dict[str, Any] = {"modes": modes}
    plain = modes.get("plain", {}).get("step_ms")
    for mode, key in (("steer", "steering_cost"), ("collect", "collection_cost"), ("steer+collect", "steer_collect_cost")):
        step = modes.get(mode, {}).get("step_ms")
        figures[key] = step / plain - 1 if plain and step else None  # fraction of the plain step
        if mode in modes and "plain" in modes:
            figures[key + "_tok_s"] = 1 - modes[mode]["output_tokens_per_s"] / modes["plain"]["output_tokens_per_s"]
    return figures


SCENARIO = Scenario(
    "steering",
    "the seed's steering job: generation with a steering vector and hidden states collected, "
    "per mode (plain / steer / collect / both): tok/s, the step's cost of steering, activation check",
    KNOBS, run, validate, estimate_s, uses_backends=True,
    # the prompt count only sets how long a pass is (rates compare at equal prompt and output lengths), so
    # a cell that measures fewer prompts (transformers, slow) still ranks beside the engine's
    workload_knobs=("prompt_min_tokens", "prompt_max_tokens", "new_tokens", "do_sample", "temperature", "top_p",
                    "steer_layer", "steer_scale", "collect_layers", "collect_pool"),
)
