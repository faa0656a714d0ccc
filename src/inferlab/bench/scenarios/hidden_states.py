"""Scenario `hidden-states`: pooled activations of chosen layers for a synthetic sample of prompts through a
backend (`hf`: transformers with hooks on the layers asked for, the forward stopped after the deepest, the
default and the baseline; `inferlab`: the engine's packed prefill; `vllm`: vLLM's pooling runner, the final
layer only), measured the same way for each (scenarios/encode_measurement.py).

Knobs: layers (transformers' hidden-state numbers, e.g. "8,-1"), pool (last / mean), the sample (count,
token-length range and spread), the dtype, the check against transformers, and each backend's own.
Figures: requests_per_s (prompts/s), input_tokens_per_s (tokens/s, real tokens only), per-request latency
percentiles, achieved TFLOP/s and % of the measured bf16 matmul rate, the padding fraction (transformers),
first call apart, load time, peak memory; with check_texts, the states' agreement with transformers.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.encode_measurement import (estimate_cell_s, measure_encode, measuring_knobs,
                                                         sample_knobs, validate_text_workload)
from inferlab.errors import ConfigError
from inferlab.workloads.encode_backends import EncodeSpec

KNOBS = (
    Knob("layers", str, "-1", "hidden-state numbers separated by ',' or ':' (0 = embeddings, L = final normed, "
         "negative from the end; in --set, commas make an axis, so write 8:-1 there); the forward stops after the "
         "deepest"),
    Knob("pool", str, "last", "pool over each prompt's real tokens: its last token or the mean", choices=("last", "mean")),
    *sample_knobs("num_prompts", 512, 100, 1000, "uniform"),
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


def _num_layers(model: str) -> int:
    config = model_refs.model_config(model)
    return int(config.get("text_config", config)["num_hidden_layers"])


def validate(cell: Cell) -> None:
    validate_text_workload(cell, "causal-lm")
    assert cell.model is not None
    num_layers = _num_layers(cell.model)
    for layer in parse_layers(cell.config["layers"]):
        if not -(num_layers + 1) <= layer <= num_layers:
            raise ConfigError(f"layers: {layer} is out of range for {cell.model}, which has hidden states "
                              f"0..{num_layers} (negative numbers count from the end)")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    return estimate_cell_s(cell, accelerator, "num_prompts")


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.workloads.activations import resolve_layers

    c = cell.config
    layers = resolve_layers(parse_layers(c["layers"]), _num_layers(str(ctx.model_path)))
    metrics = measure_encode(cell, ctx, EncodeSpec("hidden-states", layers, c["pool"]), c["num_prompts"])
    return {**metrics, "prompts_per_s": metrics["requests_per_s"], "tokens_per_s": metrics["input_tokens_per_s"],
            "layers_resolved": list(layers)}


SCENARIO = Scenario(
    "hidden-states", "pooled activations of chosen layers: prompts/s, tokens/s, per-request latency, TFLOP/s, memory",
    KNOBS, run, validate, estimate_s,
    headline_metric="input_tokens_per_s", uses_backends=True, default_backend="hf", default_timeout_s=240.0,
    workload_knobs=("min_tokens", "max_tokens", "length_distribution", "layers", "pool"),
)
