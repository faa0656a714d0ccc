"""The lab's inferlab backends with knob kv_dtype=fp8 (the engine's FP8 KV cache), run in-process on CPU:
the knob reaches the engine and the row, and the generate scenario prices K/V at the cache's own bytes."""

from __future__ import annotations

import dataclasses

import pytest

from inferlab.bench.scenarios.decode_traffic import ModelTraffic


@pytest.mark.slow
def test_generate_with_an_fp8_cache_counts_its_bytes(tiny_checkpoint, run_cell):
    path = tiny_checkpoint()
    data = {"sweep": [{"scenario": "generate", "model": str(path), "backend": "inferlab",
                       "set": {"batch_size": 2, "num_prompts": 2, "prompt_tokens": 5, "new_tokens": 6, "dtype": "float32",
                               "device": "cpu", "min_repeats": 1, "kv_dtype": "fp8"}}]}  # fmt: skip
    cell, out = run_cell(data, path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert cell.config["kv_dtype"] == "fp8" and m["engine"]["kv_dtype"] == "float8_e4m3fn"
    spec = m["engine"]
    per_position = 2 * 2 * 2 * (16 + 4)  # K and V x 2 layers x 2 kv heads x (16 e4m3 bytes + an fp32 scale)
    assert m["kv_bytes_per_position"] == per_position
    traffic = ModelTraffic.from_checkpoint(path, "float32")
    assert traffic.kv_bytes_per_position == 2 * 2 * 2 * 16 * 4  # what the scenario would have counted
    fp8_traffic = dataclasses.replace(traffic, kv_bytes_per_position=per_position)
    expected = m["steady_calls"] * fp8_traffic.decode_bytes(5, [6, 6])
    assert m["achieved_gb_per_s"] == pytest.approx(expected / m["steady_s"] / 1e9)
    assert spec["kv_cache_bytes"] == 2 * 2 * 2 * 2 * 11 * (16 + 4)  # 2 slots x (5 + 6) positions


def test_the_constrained_backend_builds_its_engine_with_the_kv_dtype(tiny_checkpoint):
    """The knob reaches the engine (validity with fp8 is held in tests/unit/engine/test_engine_fp8_kv.py;
    a whole constrained cell on the qwen3-chem vocabulary takes ~25 s on CPU)."""
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import ConstrainedSpec
    from inferlab.bench.scenarios.constrained import ConformerRequests
    from inferlab.bench.scenarios.molecules import load_molecules, nci_molecules_path
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.types import SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    backend = get_backend("inferlab", "constrained").create(
        {"slots": 2, "batch_size": 2, "constraint": "on", "decode_steps_per_sync": 8, "kv_dtype": "fp8", "forced_run_tokens": 0, "forced_run_budget": 0.25},
        ConstrainedSpec(seed=0, profile="v3-fixed4"))
    backend.load(tiny_checkpoint("tiny"), torch.device("cpu"), torch.float32)
    found = load_molecules(nci_molecules_path(), 1, get_profile("v3-fixed4"), build_builtin_tokenizer(), 512)
    backend.prepare(ConformerRequests(found, 2, SamplingParams(temperature=0.0)).requests([0, 1]))
    assert backend.extra_metrics()["engine"]["kv_dtype"] == "float8_e4m3fn"
