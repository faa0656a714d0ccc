"""Scenario `classify`: sequence classification of a synthetic sample of long texts through a backend
(`hf`: transformers, padded batches, the default and the baseline; `inferlab`: the engine's packed prefill;
`vllm`: vLLM's pooling runner), measured the same way for each (scenarios/encode_measurement.py).

Knobs: the sample (count, token-length range and spread; by default spread like seed 004's texts of
524-22,229 characters, i.e. about 131-5,557 tokens, log-uniformly: the seed gives only the range), the dtype,
the check against transformers, and each backend's own (backends/hf_encode.py: batch size, bucketing,
attention, torchao quantization; inferlab_encode.py: token budget, latency cap, FP8 weights; vllm_encode.py:
requests per call). Figures: requests_per_s (samples/s), latency_ms p50/p90/p95/p99 per request, input
tokens/s, achieved TFLOP/s and % of the measured bf16 matmul rate, the padding fraction (transformers),
first call apart, load time, peak memory; with check_texts, label agreement with transformers on every checked
row and where the cell's precision decides the label (label_agreement.py). Knob `texts` (classify_texts.py): the
synthetic sample, or the held-out split of a labelled set for a classifier trained on it (preset
qwen2-cls-aromatic), whose true labels add both backends' accuracy to the check.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.classify_texts import SYNTHETIC, TEXT_SOURCES, check_labels_fit
from inferlab.bench.scenarios.encode_measurement import (estimate_cell_s, measure_encode, measuring_knobs,
                                                         sample_knobs, validate_text_workload)
from inferlab.workloads.encode_backends import EncodeSpec

KNOBS = (
    *sample_knobs("num_samples", 256, 131, 5557, "log-uniform"),
    Knob("texts", str, SYNTHETIC, "synthetic: random prose of drawn token lengths; or a labelled set's held-out rows "
         "(those of min_tokens-max_tokens tokens, in order; length_distribution unused) for a classifier trained on it: "
         "the check adds accuracy against the true labels", choices=TEXT_SOURCES),
    *measuring_knobs(min_batches=10, min_duration_s=1.0, max_duration_s=3.0, warmup=2),
)


def validate(cell: Cell) -> None:
    validate_text_workload(cell, "sequence-classification")
    assert cell.model is not None
    check_labels_fit(cell.config["texts"], model_refs.model_config(cell.model), cell.model)


def estimate_s(cell: Cell, accelerator: bool) -> float:
    return estimate_cell_s(cell, accelerator, "num_samples")


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    metrics = measure_encode(cell, ctx, EncodeSpec("classify"), cell.config["num_samples"], cell.config["texts"])
    return {**metrics, "samples_per_s": metrics["requests_per_s"]}


SCENARIO = Scenario(
    "classify", "sequence classification of long texts: samples/s, per-request latency percentiles, TFLOP/s, memory",
    KNOBS, run, validate, estimate_s,
    headline_metric="requests_per_s", uses_backends=True, default_backend="hf", default_timeout_s=240.0,
    # the sample's count only sets how long a pass is: a backend measured on fewer texts (transformers, slow)
    # still ranks beside the others on the same lengths
    workload_knobs=("texts", "min_tokens", "max_tokens", "length_distribution"),
)
