"""Scenario `classify`: sequence classification of a synthetic sample of long texts, timed per batch with
the workloads' own loop (workloads/measure.py `measure_classify`, the code `inferlab classify` runs).

Knobs: batch size, dtype, attention implementation, quantization (torchao int8 weight-only / fp8;
unavailable -> a row with the reason), the sample (count, token-length range and spread; by default
spread like seed 004's texts of 524-22,229 characters, i.e. about 131-5,557 tokens, log-uniformly:
the seed gives only the range), and length bucketing (off = the seeds' consecutive batches).
Figures: requests_per_s (samples/s), latency_ms p50/p90/p95/p99 per batch, input tokens/s, the
padding fraction, first call apart, load time, peak memory.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.text_workload import (approx_params_b, estimate_text_s, loading_knobs, measure_spec,
                                                    measuring_knobs, precheck_text_workload, sample_knobs,
                                                    validate_text_workload)

KNOBS = (
    Knob("batch_size", int, 8, "texts per forward", minimum=1),
    *sample_knobs("num_samples", 256, 131, 5557, "log-uniform"),
    *loading_knobs(with_quantization=True),
    *measuring_knobs(min_batches=10, min_duration_s=1.0, max_duration_s=3.0, warmup=2),
)


def validate(cell: Cell) -> None:
    validate_text_workload(cell, "sequence-classification")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    assert cell.model is not None
    return estimate_text_s(cell.config, accelerator, cell.config["num_samples"], approx_params_b(cell.model))


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.devices import peak_memory
    from inferlab.workloads.classify import load_classifier
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.measure import measure_classify, synthetic_texts

    c = cell.config
    assert ctx.model_path is not None
    classifier = load_classifier(ModelLoadConfig(str(ctx.model_path), c["dtype"], c["attn_implementation"],
                                                 c["quantization"], c["device"]))
    loaded = classifier.loaded
    texts = synthetic_texts(loaded.tokenizer, c["num_samples"], c["min_tokens"], c["max_tokens"], seed=c["seed"],
                            distribution=c["length_distribution"])
    metrics = measure_classify(classifier, texts, measure_spec(c))
    if not metrics["whole_passes"]:
        ctx.warn(f"max_duration_s={c['max_duration_s']:g} ended the timing within the first pass over the sample "
                 "(batches run in a shuffled order)")
    return {**metrics, "samples_per_s": metrics["requests_per_s"], "load_s": loaded.load_s,
            "quantized_layers": loaded.quantized_layers, "attn_loaded": loaded.attn, "device": str(loaded.device),
            **peak_memory(loaded.device)}


SCENARIO = Scenario(
    name="classify",
    description="sequence classification of long texts: samples/s, per-batch latency percentiles, memory",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="requests_per_s",
    higher_is_better=True,
    uses_backends=False,
    uses_model=True,
    default_timeout_s=240.0,
    workload_knobs=("batch_size", "num_samples", "min_tokens", "max_tokens", "length_distribution"),
    precheck=precheck_text_workload,
)
