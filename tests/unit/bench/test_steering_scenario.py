"""Scenario `steering` in-process on CPU: both backends, every mode, exact token counts, the engine's
activation check against transformers, plan-time refusals, and the preset's shape and budget."""

from __future__ import annotations

import pytest

from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.errors import ConfigError

TINY = {"num_prompts": 5, "prompt_min_tokens": 3, "prompt_max_tokens": 9, "new_tokens": 5, "batch_size": 2,
        "steer_layer": -1, "collect_layers": "0:1", "dtype": "float32", "device": "cpu", "warmup_tokens": 2,
        "check_prompts": 2}


@pytest.mark.parametrize("backend", ["inferlab", "hf"])
def test_every_mode_is_timed_and_tokens_counted_exactly(run_cell, tiny_checkpoint, backend):
    path = tiny_checkpoint()
    _, out = run_cell({"sweep": [{"scenario": "steering", "model": str(path), "backend": backend, "set": TINY}]}, path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert set(m["modes"]) == {"plain", "steer", "collect", "steer+collect"} and m["headline_mode"] == "steer+collect"
    assert all(mode["output_tokens"] == 5 * 5 for mode in m["modes"].values())
    assert m["output_tokens_per_s"] == m["modes"]["steer+collect"]["output_tokens_per_s"] > 0
    if backend == "inferlab":  # the engine's own step clock gives the costs; its activations match transformers
        assert m["modes"]["plain"]["step_ms"] > 0 and m["steering_cost"] is not None
        check = m["activation_check"]
        assert check["match"] and check["max_rel_error"] < 1e-4 and check["layers"] == [0, 1]
    else:
        assert m["steering_cost"] is None and "activation_check" not in m


def test_impossible_settings_are_refused_before_running(tiny_checkpoint):
    path = str(tiny_checkpoint())

    def plan(**changes):
        return build_plan({"sweep": [{"scenario": "steering", "model": path, "backend": "inferlab",
                                      "set": {**TINY, **changes}}]})

    with pytest.raises(ConfigError, match="out of range"):
        plan(steer_layer=2)
    with pytest.raises(ConfigError, match="out of range"):
        plan(collect_layers="0:-3")
    with pytest.raises(ConfigError, match="modes="):
        plan(modes="plain:fast")
    with pytest.raises(ConfigError, match="prompt_min_tokens=9 > prompt_max_tokens=3"):
        plan(prompt_min_tokens=9, prompt_max_tokens=3)


def test_the_preset_is_the_seeds_job_and_fits_one_device_call():
    from inferlab.bench.launcher import estimate_seconds

    cells = build_plan(get_plan_preset("steering")).cells
    engine = [c for c in cells if c.backend == "inferlab"]
    hf = [c for c in cells if c.backend == "hf"]
    assert {c.config["batch_size"] for c in engine} == {c.config["batch_size"] for c in hf} == {64, 256}
    assert all(c.model == "gemma-2b" and c.config["new_tokens"] == 150 for c in cells)
    assert all(c.config["num_prompts"] == 1000 for c in engine)
    typical, _ = estimate_seconds(cells, accelerator=True)
    assert typical < 8 * 60  # one <= 9-minute device call, with the gemma-2b checkpoint built first
