"""What the `classify` and `hidden-states` scenarios share: the knobs of a synthetic text sample (count,
token-length range and spread), the model dtype, the check against transformers and the measured loop of
workloads/measure.py; the checks on them; the translation to a MeasureSpec; and transformers' GPU time
model (the engine's and vLLM's are in backends/estimates.py). Each backend's own knobs (transformers' batch
size, bucketing, attention and quantization; the engine's token budget; vLLM's calls) are its own
(backends/hf_encode.py, inferlab_encode.py, vllm_encode.py).

The measured loop itself is the workloads' (workloads/measure.py: the first call timed apart, warm-up
batches, whole passes until a minimum count and duration, cut at a maximum duration); the scenarios
only choose its settings, so the lab and `inferlab classify` / `hidden-states` run the same code.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.errors import ConfigError

LENGTH_DISTRIBUTIONS = ("uniform", "log-uniform")  # workloads/measure.py LENGTH_DISTRIBUTIONS


def sample_knobs(count_name: str, count: int, min_tokens: int, max_tokens: int, distribution: str) -> tuple[Knob, ...]:
    return (
        Knob(count_name, int, count, "synthetic texts in the sample (random prose of drawn token lengths)", minimum=1),
        Knob("min_tokens", int, min_tokens, "shortest text, in tokens", minimum=1),
        Knob("max_tokens", int, max_tokens, "longest text, in tokens", minimum=1),
        Knob("length_distribution", str, distribution, "how token lengths spread over [min_tokens, max_tokens]",
             choices=LENGTH_DISTRIBUTIONS),
        Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
        Knob("check_texts", int, 0, "texts whose outputs are compared with transformers' (the dtype, SDPA) after the "
             "timing: label agreement, probability / hidden-state differences (0: no check)", minimum=0),
    )


def measuring_knobs(min_batches: int, min_duration_s: float, max_duration_s: float, warmup: int) -> tuple[Knob, ...]:
    return (
        Knob("max_duration_s", float, max_duration_s, "stop timing batches after this long, even mid-pass (batches "
             "run in a seeded shuffled order, so a prefix is a fair mix of lengths)", minimum=0.01),
        *common_knobs(min_repeats=min_batches, min_duration_s=min_duration_s, warmup=warmup,
                      repeats_help="timed batches (at least; whole passes over the sample unless max_duration_s ends it)"),
    )


def validate_text_workload(cell: Cell, task: str) -> None:
    c = cell.config
    assert cell.model is not None
    if model_refs.model_task(cell.model) != task:
        raise ConfigError(f"model {cell.model} is not a {task} model; the {cell.scenario} scenario needs one "
                          f"(presets: {', '.join(n for n in model_refs.preset_names() if model_refs.model_task(n) == task)})")
    if c["min_tokens"] > c["max_tokens"]:
        raise ConfigError(f"min_tokens={c['min_tokens']} is above max_tokens={c['max_tokens']}; swap them")
    config = model_refs.model_config(cell.model)
    limit = config.get("text_config", config).get("max_position_embeddings")
    if limit and c["max_tokens"] > limit:
        raise ConfigError(f"max_tokens={c['max_tokens']} exceeds the model's max_position_embeddings={limit}; lower it")
    if c["max_duration_s"] < c["min_duration_s"]:
        raise ConfigError(f"max_duration_s={c['max_duration_s']:g} is below min_duration_s={c['min_duration_s']:g}")


def measure_spec(c: dict[str, Any]) -> Any:
    from inferlab.workloads.measure import MeasureSpec

    return MeasureSpec(c.get("batch_size", 1), warmup_batches=c["warmup"], min_batches=c["min_repeats"],
                       min_seconds=c["min_duration_s"], max_seconds=c["max_duration_s"], seed=c["seed"])


def estimate_text_s(c: dict[str, Any], accelerator: bool, count: int, params_b: float) -> float:
    """Rough seconds: process, imports and load (~10 s on a GPU host, +2 s for torchao), then the first
    call, warm-up and timed batches. A batch costs ~15 ms of launches plus ~2 GFLOP per padded token per
    billion parameters at ~200 TFLOP/s (int8 weight-only: twice that); unbucketed batches pad to the
    longest text. CPU: tiny models, ~5 ms + 2 us per padded token. Plus the check against transformers."""
    mean = (c["min_tokens"] + c["max_tokens"]) / 2
    rows = c.get("batch_size", 16)  # a backend without batch_size (the engine, vLLM on a CPU): like 16 sorted rows
    padded = c["max_tokens"] if not c.get("bucket_by_length", True) and rows > 1 else mean
    tokens = min(rows, count) * padded
    if accelerator:
        batch_s = 0.015 + tokens * params_b * 2e9 / 200e12 * (2 if c.get("quantization") == "int8" else 1)
        fixed = 10.0 + (2.0 if c.get("quantization", "none") != "none" else 0.0)
    else:
        batch_s = 0.005 + tokens * 2e-6
        fixed = 6.0
    timed = min(c["max_duration_s"], max(c["min_duration_s"], c["min_repeats"] * batch_s))
    return fixed + (1 + c["warmup"]) * batch_s + timed + check_s(c, accelerator)


def check_s(c: dict[str, Any], accelerator: bool) -> float:
    """The check against transformers: its load, then batches of 16 over check_texts texts."""
    if not c["check_texts"]:
        return 0.0
    return (4.0 + 0.01 * c["check_texts"]) if accelerator else (2.0 + 0.05 * c["check_texts"])


def approx_params_b(model: str) -> float:
    """Billions of parameters from the config (decoder layers + embedding), for time estimates only."""
    config = model_refs.model_config(model)
    config = config.get("text_config", config)
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads") or heads
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    mlp = 3 * hidden * config.get("intermediate_size", 4 * hidden)
    return (layers * (attention + mlp) + config["vocab_size"] * hidden) / 1e9
