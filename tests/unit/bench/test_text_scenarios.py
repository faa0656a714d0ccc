"""The classify and hidden-states scenarios on tiny random checkpoints (CPU): they measure with the
workloads' own loop through each backend (transformers by default, the engine), report the shared figures
consistently, check the engine against transformers, refuse impossible plans, and turn an unavailable
quantization into an `unavailable` row."""

from __future__ import annotations

import importlib.util

import pytest

from inferlab.bench.plan import build_plan
from inferlab.errors import ConfigError

TEXT = {"min_tokens": 8, "max_tokens": 60, "dtype": "float32", "device": "cpu", "min_repeats": 6,
        "min_duration_s": 0.05, "max_duration_s": 5.0, "warmup": 1}
HF = {"batch_size": 4}


def _plan(scenario, model, backend=None, **knobs):
    sweep = {"scenario": scenario, "model": str(model), "set": {**TEXT, **(HF if backend in (None, "hf") else {}), **knobs}}
    return {"sweep": [{**sweep, **({"backend": backend} if backend else {})}]}


def _check_shared_figures(m, count):
    assert m["requests_per_s"] == pytest.approx(m["rows_timed"] / m["steady_s"], rel=1e-3)  # steady_s is rounded
    assert m["input_tokens_per_s"] > m["requests_per_s"] * 8 * 0.9  # every text has at least ~8 tokens
    assert m["batch_latency_ms"]["n"] == m["batches_timed"] >= 6
    assert m["latency_ms"]["n"] == m["rows_timed"]  # per request: each row waits for its whole batch
    lat = m["latency_ms"]
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert m["first_call_s"] > 0 and m["load_s"] > 0 and m["whole_passes"]
    assert m["rows_timed"] >= count  # at least one whole pass over the sample
    assert m["tflops_per_s"] > 0 and m["matmul_peak_tflops"] is None and m["pct_of_matmul_peak"] is None  # CPU


def test_classify_measures_samples_per_second_and_latency_percentiles(tiny_checkpoint, run_cell):
    path = tiny_checkpoint("tiny-qwen2-cls")
    cell, out = run_cell(_plan("classify", path, num_samples=12), path)
    assert out.status == "ok", out.message
    m = out.metrics
    _check_shared_figures(m, 12)
    assert m["samples_per_s"] == m["requests_per_s"] and m["quantized_layers"] == 0 and m["attn_loaded"] == "sdpa"
    assert 0 <= m["padding_fraction"] < 1 and "peak_host_rss_gb" in m


def test_the_engine_backend_packs_the_sample_and_agrees_with_transformers(tiny_checkpoint, run_cell):
    path = tiny_checkpoint("tiny-qwen2-cls")
    cell, out = run_cell(_plan("classify", path, "inferlab", num_samples=12, max_batch_tokens=200, check_texts=12),
                         path)
    assert out.status == "ok", out.message
    m = out.metrics
    _check_shared_figures(m, 12)
    assert m["padding_fraction"] == 0 and m["batches_per_pass"] >= 2  # packed, no padding, by the token budget
    assert m["labels_agree_with_hf"] == 1.0 and m["max_prob_diff_vs_hf"] < 1e-5 and m["check_texts"] == 12
    # float32 cell: float64 transformers sizes the tolerance; float32 rounding decides every label here
    assert m["label_tolerance_dtype"] == "float64" and 0 < m["label_margin_tolerance"] < 1e-4
    assert m["labels_decidable"] == 12 and m["labels_agree_with_hf_decidable"] == 1.0
    assert m["engine"]["batches"] >= m["batches_timed"] and m["attention_chosen"] == {}  # CPU: the torch reference
    assert "prefill_profile" not in m  # profile off by default
    hidden = tiny_checkpoint("tiny")
    _, out = run_cell(_plan("hidden-states", hidden, "inferlab", num_prompts=8, layers="1:-1", pool="mean",
                            check_texts=8, profile=True), hidden)
    assert out.status == "ok", out.message
    assert out.metrics["states_min_cosine_vs_hf"] > 0.9999 and out.metrics["states_max_rel_diff_vs_hf"] < 1e-4
    profile = out.metrics["prefill_profile"]  # the CPU's aten ops by family
    families = {row["family"]: row for row in profile["families"]}
    assert {"gemm", "attention"} <= set(families) and profile["batches"] >= 1
    assert sum(row["share"] for row in families.values()) == pytest.approx(1.0, abs=1e-3)
    assert families["gemm"]["tflops"] > 0 and families["gemm"]["pct_of_matmul_peak"] is None  # no peak on a CPU
    assert 0 < profile["busy"] <= 1.05 and profile["top_kernels"][0]["us"] > 0


def test_the_trained_classifier_on_held_out_molecules_reports_both_agreements_and_accuracy(tiny_checkpoint, run_cell):
    """A seed-classify-like cell in bf16: the tolerance from bf16 vs float32 transformers, the trained margins
    past it, the labels scored against the set's, the shipped weights' digest on the row."""
    from inferlab.models.trained import file_sha256, weights_path

    path = tiny_checkpoint("qwen2-cls-aromatic", "bfloat16")
    _, out = run_cell(_plan("classify", path, "inferlab", texts="nci-aromatic-rings", num_samples=24, min_tokens=1,
                            max_tokens=200, dtype="bfloat16", check_texts=24), path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert m["check_texts"] == 24 and m["label_tolerance_dtype"] == "float32" and m["label_margin_tolerance"] > 0
    assert m["labels_decidable"] >= 20 and m["labels_agree_with_hf_decidable"] == 1.0 and m["labels_agree_with_hf"] > 0.9
    assert m["accuracy"] >= 0.9 and m["hf_accuracy"] >= 0.9
    assert m["trained_weights"] == {"name": "qwen2-cls-aromatic", "sha256": file_sha256(weights_path("qwen2-cls-aromatic"))}


def test_a_sweep_without_a_backend_runs_transformers_and_vllm_takes_the_final_layer_only():
    from inferlab.bench.backends import backends_for

    assert sorted(backends_for("classify")) == sorted(backends_for("hidden-states")) == ["hf", "inferlab", "vllm"]
    (cell,) = build_plan(_plan("classify", "tiny-qwen2-cls", num_samples=4)).cells
    assert cell.backend == "hf" and cell.config["batch_size"] == 4
    with pytest.raises(ConfigError, match="final hidden state only: set layers=-1"):
        build_plan(_plan("hidden-states", "tiny", "vllm", layers="1:-1"))
    assert build_plan(_plan("hidden-states", "tiny", "vllm", layers="-1")).cells[0].backend == "vllm"


def test_consecutive_batches_pad_more_than_length_buckets(tiny_checkpoint, run_cell):
    path = tiny_checkpoint("tiny-qwen2-cls")
    knobs = {"num_samples": 16, "min_tokens": 4, "max_tokens": 120}
    _, bucketed = run_cell(_plan("classify", path, **knobs), path)
    _, consecutive = run_cell(_plan("classify", path, bucket_by_length=False, **knobs), path)
    assert consecutive.metrics["padding_fraction"] > bucketed.metrics["padding_fraction"]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is not None, reason="torchao is installed here")
def test_a_quantization_that_cannot_run_is_an_unavailable_row(tiny_checkpoint, run_cell):
    path = tiny_checkpoint("tiny-qwen2-cls")
    _, out = run_cell(_plan("classify", path, num_samples=8, quantization="int8"), path)
    assert out.status == "unavailable" and "torchao" in out.message


def test_hidden_states_measures_prompts_and_tokens_per_second(tiny_checkpoint, run_cell):
    path = tiny_checkpoint("tiny")
    _, out = run_cell(_plan("hidden-states", path, num_prompts=12, layers="1:-1", pool="mean"), path)
    assert out.status == "ok", out.message
    m = out.metrics
    _check_shared_figures(m, 12)
    assert m["layers_resolved"] == [1, 2] and m["tokens_per_s"] == m["input_tokens_per_s"]
    assert m["prompts_per_s"] == m["requests_per_s"]


@pytest.mark.parametrize("scenario, model, knobs, message", [
    ("classify", "tiny", {}, "is not a sequence-classification model"),
    ("hidden-states", "tiny-qwen2-cls", {}, "is not a causal-lm model"),
    ("classify", "tiny-qwen2-cls", {"min_tokens": 50, "max_tokens": 10}, "swap them"),
    ("classify", "tiny-qwen2-cls", {"max_tokens": 100000}, "max_position_embeddings=512"),
    ("classify", "tiny-qwen2-cls", {"attn_implementation": "flash_attention_2"}, "only bfloat16/float16"),
    ("classify", "qwen2-cls", {"texts": "nci-aromatic-rings", "max_tokens": 512}, "has 3 labels .* but model qwen2-cls has 2"),
    ("hidden-states", "tiny", {"layers": "1,x"}, "separated by ',' or ':'"),
    ("hidden-states", "tiny", {"layers": "3"}, "out of range"),
    ("hidden-states", "tiny", {"max_duration_s": 0.01}, "below min_duration_s"),
])
def test_impossible_text_plans_are_refused_before_anything_runs(scenario, model, knobs, message):
    with pytest.raises(ConfigError, match=message):
        build_plan({"sweep": [{"scenario": scenario, "model": model, "set": {**TEXT, **knobs}}]})
