"""Both built-in scenarios run in-process on CPU (the child's code path, without the subprocess)."""

from __future__ import annotations

import torch

from inferlab.bench.cell_main import execute
from inferlab.bench.plan import build_plan
from inferlab.bench.scenarios.attention_kernels import build_call, flops_per_call, math_reference
from inferlab.bench.scenarios.decode_traffic import ModelTraffic

SHARED_METRICS = ("output_tokens", "output_tokens_per_s", "requests_per_s", "first_call_s", "steady_s",
                  "peak_memory_gb", "achieved_gb_per_s", "latency_ms")


def _run(data, tmp_path, model_path=None):
    cell = build_plan(data).cells[0]
    (tmp_path / "cache").mkdir(exist_ok=True)
    spec = {"cell": cell.to_json(), "model_path": str(model_path) if model_path else None,
            "run_dir": str(tmp_path), "cache_dir": str(tmp_path / "cache")}
    return cell, execute(spec)


def test_attention_kernels_times_counts_flops_and_checks_against_math(tmp_path):
    shape = {"batch_size": 2, "q_heads": 4, "kv_heads": 2, "q_len": 32, "kv_len": 32, "head_dim": 16, "dtype": "bfloat16",
             "min_repeats": 3, "min_duration_s": 0.0, "warmup": 1, "device": "cpu"}
    cell, out = _run({"sweep": [{"scenario": "attention-kernels", "set": {**shape, "kernel": "auto"}}]}, tmp_path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert m["flops_per_call"] == 4 * 2 * 4 * 32 * 32 * 16 / 2  # causal self-attention: half the pairs
    assert abs(m["tflops_per_s"] - m["flops_per_call"] / (m["ms_per_iter"] / 1000) / 1e12) < 1e-12
    assert 0 < m["max_abs_error"] < 0.05  # bf16 against float32 math
    assert m["attention_kernel_observed"].startswith("cpu:") and m["ms_per_iter_stats"]["n"] >= 3
    assert set(m["latency_ms"]) == {"p50", "p90", "p95", "p99"}


def test_forced_sdpa_backend_that_cannot_run_is_unavailable(tmp_path):
    _, out = _run({"sweep": [{"scenario": "attention-kernels",
                              "set": {"kernel": "cudnn", "q_len": 8, "kv_len": 8, "device": "cpu"}}]}, tmp_path)
    assert out.status == "unavailable" and ("No viable backend" in out.message or "No available kernel" in out.message)


def test_gqa_native_and_expanded_agree_with_the_reference():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 8, 1, 16, generator=g), torch.randn(2, 2, 40, 16, generator=g), torch.randn(2, 2, 40, 16, generator=g)
    reference = math_reference(q, k, v, causal=False)
    for gqa in ("native", "expand"):
        out = build_call("auto", q, k, v, causal=False, gqa=gqa)(2)
        assert torch.allclose(out, reference, atol=1e-5), gqa
    assert flops_per_call({"batch_size": 2, "q_heads": 8, "q_len": 1, "kv_len": 40, "head_dim": 16, "causal": False}) == 4 * 2 * 8 * 40 * 16


def test_generate_reports_the_shared_metrics_from_counted_tokens(tmp_path, tiny_checkpoint):
    path = tiny_checkpoint()
    data = {"sweep": [{"scenario": "generate", "model": str(path), "backend": "hf",
                       "set": {"batch_size": 2, "num_prompts": 4, "prompt_tokens": 5, "new_tokens": 6, "dtype": "float32",
                               "device": "cpu", "min_repeats": 2, "processor": "python"}}]}
    cell, out = _run(data, tmp_path, path)
    assert out.status == "ok", out.message
    m = out.metrics
    for name in SHARED_METRICS:
        assert name in m, name
    assert m["output_tokens"] == 2 * 4 * 6 and m["steady_calls"] == 4  # two passes over two batches
    assert abs(m["output_tokens_per_s"] - m["output_tokens"] / m["steady_s"]) < 1e-9
    traffic = ModelTraffic.from_checkpoint(path, "float32")
    expected_bytes = 4 * traffic.decode_bytes(5, [6, 6])
    assert abs(m["achieved_gb_per_s"] - expected_bytes / m["steady_s"] / 1e9) < 1e-9
    assert m["first_call_s"] > 0 and m["load_s"] > 0 and len(m["warmup_s"]) == 1
    assert m["attention_kernel_observed"].startswith("cpu:") and m["device_bandwidth_gb_per_s"] > 0
    assert (tmp_path / "cache" / "device_bandwidth.json").is_file()
