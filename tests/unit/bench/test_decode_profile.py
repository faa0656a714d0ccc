"""Scenario decode-profile in-process on CPU (the child's code path): the profiled ops per decode step come
from the long call minus the short one, so the prefill cancels out and the step count is exact."""

from __future__ import annotations

import pytest

from inferlab.bench.cell_main import execute
from inferlab.bench.plan import build_plan


@pytest.mark.slow  # torch.profiler parses ~1,000 CPU op events per step of the eager engine: seconds here
def test_decode_profile_lists_ops_per_decode_step(tmp_path, tiny_checkpoint):
    path = tiny_checkpoint()
    cell = build_plan({"sweep": [{"scenario": "decode-profile", "model": str(path),
                                  "set": {"batch_size": 1, "prompt_tokens": 6, "new_tokens": 2, "dtype": "float32",
                                          "device": "cpu", "cpu_threads": 1, "top": 4}}]}).cells[0]
    (tmp_path / "cache").mkdir()
    out = execute({"cell": cell.to_json(), "model_path": str(path), "run_dir": str(tmp_path),
                   "cache_dir": str(tmp_path / "cache")})
    assert out.status == "ok", out.message
    m = out.metrics
    assert m["profiled_steps"] == 2 and m["profiled"] == "cpu aten ops"
    assert 0 < len(m["kernels"]) <= 4 and all(k["us_per_step"] > 0 for k in m["kernels"])
    assert m["kernels"] == sorted(m["kernels"], key=lambda k: -k["us_per_step"])
    assert m["kernel_us_per_step"] >= sum(k["us_per_step"] for k in m["kernels"])
    assert m["graph_step_us"] > 0 and m["eager_step_us"] > 0 and m["launches_per_step"] > 0
