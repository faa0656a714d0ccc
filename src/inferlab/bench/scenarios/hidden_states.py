"""Scenario `hidden-states`: pooled activations of chosen layers for a synthetic sample of prompts,
timed per batch with the workloads' own loop (workloads/measure.py `measure_hidden_states`, the code
`inferlab hidden-states` runs: hooks on the layers asked for, the forward stopped after the deepest one,
pooling over real tokens).

Knobs: batch size, layers (transformers' hidden-state numbers, e.g. "8,-1"), pool (last / mean), dtype,
attention implementation, the sample (count, token-length range and spread) and length bucketing.
Figures: requests_per_s (prompts/s), input_tokens_per_s (tokens/s, real tokens only), per-batch
latency percentiles, the padding fraction, first call apart, load time, peak memory.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.text_workload import (approx_params_b, estimate_text_s, loading_knobs, measure_spec,
                                                    measuring_knobs, precheck_text_workload, sample_knobs,
                                                    validate_text_workload)
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 16, "prompts per forward", minimum=1),
    Knob("layers", str, "-1", "hidden-state numbers separated by ',' or ':' (0 = embeddings, L = final normed, "
         "negative from the end; in --set, commas make an axis, so write 8:-1 there); the forward stops after the "
         "deepest"),
    Knob("pool", str, "last", "pool over each prompt's real tokens: its last token or the mean", choices=("last", "mean")),
    *sample_knobs("num_prompts", 512, 100, 1000, "uniform"),
    *loading_knobs(with_quantization=False),
    *measuring_knobs(min_batches=10, min_duration_s=1.0, max_duration_s=3.0, warmup=2),
)


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(part) for part in text.replace(":", ",").split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"layers={text!r}: write hidden-state numbers separated by ',' or ':', e.g. layers=8:-1") from None
    if not layers:
        raise ConfigError("layers is empty; give at least one hidden-state number, e.g. layers=-1")
    return layers


def validate(cell: Cell) -> None:
    validate_text_workload(cell, "causal-lm")
    assert cell.model is not None
    config = model_refs.model_config(cell.model)
    num_layers = config.get("text_config", config)["num_hidden_layers"]
    for layer in parse_layers(cell.config["layers"]):
        if not -(num_layers + 1) <= layer <= num_layers:
            raise ConfigError(f"layers: {layer} is out of range for {cell.model}, which has hidden states "
                              f"0..{num_layers} (negative numbers count from the end)")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    assert cell.model is not None
    return estimate_text_s(cell.config, accelerator, cell.config["num_prompts"], approx_params_b(cell.model))


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.devices import peak_memory
    from inferlab.workloads.activations import HiddenStateCollector
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hidden_states import load_base_model
    from inferlab.workloads.measure import measure_hidden_states, synthetic_texts

    c = cell.config
    assert ctx.model_path is not None
    loaded = load_base_model(ModelLoadConfig(str(ctx.model_path), c["dtype"], c["attn_implementation"], "none",
                                             c["device"]))
    collector = HiddenStateCollector(loaded, parse_layers(c["layers"]), c["pool"])
    texts = synthetic_texts(loaded.tokenizer, c["num_prompts"], c["min_tokens"], c["max_tokens"], seed=c["seed"],
                            distribution=c["length_distribution"])
    metrics = measure_hidden_states(collector, texts, measure_spec(c))
    if not metrics["whole_passes"]:
        ctx.warn(f"max_duration_s={c['max_duration_s']:g} ended the timing within the first pass over the sample "
                 "(batches run in a shuffled order)")
    return {**metrics, "prompts_per_s": metrics["requests_per_s"], "tokens_per_s": metrics["input_tokens_per_s"],
            "layers_resolved": list(collector.layers), "load_s": loaded.load_s, "attn_loaded": loaded.attn,
            "device": str(loaded.device), **peak_memory(loaded.device)}


SCENARIO = Scenario(
    name="hidden-states",
    description="pooled activations of chosen layers: prompts/s, tokens/s, per-batch latency, memory",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="input_tokens_per_s",
    higher_is_better=True,
    uses_backends=False,
    uses_model=True,
    default_timeout_s=240.0,
    workload_knobs=("batch_size", "num_prompts", "min_tokens", "max_tokens", "length_distribution", "layers", "pool"),
    precheck=precheck_text_workload,
)
