"""Scenario `steering`: the seed's job (seeds/003: Gemma-2B, 1,000+ prompts, 150 new tokens, a steering
vector, hidden states of what was generated) through a backend (backends of scenario `steering`: `inferlab`,
the engine; `hf`, transformers + forward hooks), measured the same way for both.

The scenario owns what a comparison depends on: `num_prompts` prompts of random non-special token ids,
their lengths drawn uniformly from [prompt_min_tokens, prompt_max_tokens] (seeded: the same prompts for
every cell), exactly `new_tokens` tokens per row, the sampling settings, and one steering vector (seeded,
unit norm, times `steer_scale`) added after decoder layer `steer_layer`; collection of `collect_layers`
pooled `collect_pool`. Modes (`modes`, run by one loaded backend, each over every prompt): plain, steer,
collect, steer+collect. Protocol (steering_run.py): load (timed), one short warm-up pass per mode over
one batch (capture of the mode's graphs, compile), then `min_repeats` rounds of timed passes, the modes
interleaved within a round, each timed between device synchronisations, tokens counted per row.
Figures: tok/s per mode (the headline: steer+collect, or the first mode), the engine's decode step time
per mode (its device clock) and from it the steering cost (steer vs plain), the collection cost and
both; peak memory; and, for the engine, an activation check: `check_prompts` prompts generated with
steer+collect ("all" pool) and the same tokens fed through transformers with the same steering hook,
whose decoder-layer outputs at the positions that produced each token must match.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.backends.steering_base import MODES
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 64, "rows per batch: the engine's slots, HF's generate batch", minimum=1),
    Knob("num_prompts", int, 1000, "prompts per pass", minimum=1),
    Knob("prompt_min_tokens", int, 64, "shortest prompt (lengths drawn uniformly, seeded)", minimum=1),
    Knob("prompt_max_tokens", int, 256, "longest prompt", minimum=1),
    Knob("new_tokens", int, 150, "tokens generated per row (min == max)", minimum=1),
    Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
    Knob("do_sample", bool, True, "sample (the seed's setting) or greedy"),
    Knob("temperature", float, 1.0, "sampling temperature", minimum=0.0),
    Knob("top_p", float, 1.0, "nucleus threshold (1.0 disables)", minimum=0.0),
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
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
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


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.scenarios.steering_run import measure_steering

    return measure_steering(cell, ctx, parse_modes(cell.config["modes"]), parse_layers(cell.config["collect_layers"]),
                            num_layers(str(ctx.model_path)))


SCENARIO = Scenario(
    name="steering",
    description="the seed's steering job: generation with a steering vector and hidden states collected, "
                "per mode (plain / steer / collect / both): tok/s, the step's cost of steering, activation check",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="output_tokens_per_s",
    higher_is_better=True,
    uses_backends=True,
    uses_model=True,
    default_timeout_s=600.0,
    # the prompt count only sets how long a pass is (rates compare at equal prompt and output lengths), so
    # a cell that measures fewer prompts (transformers, slow) still ranks beside the engine's
    workload_knobs=("prompt_min_tokens", "prompt_max_tokens", "new_tokens", "do_sample", "temperature", "top_p",
                    "steer_layer", "steer_scale", "collect_layers", "collect_pool"),
)
