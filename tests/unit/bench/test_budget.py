"""What keeps the GPU session short without changing what is measured: a short warm-up compiles the very
graph the timed calls use (shown on CPU with dynamo's eager backend, and the counter shown to see a
recompilation when a shape does change), the timed run stops once long enough, a missing package costs no
process, and the seed presets fit their budget by the lab's own estimates."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from inferlab.bench.compile_watch import compiled_graphs
from inferlab.bench.launcher import LaunchOptions, estimate_seconds, launch
from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.bench import timing
from inferlab.bench.timing import measure

GEN = {"batch_size": 2, "num_prompts": 4, "prompt_tokens": 6, "new_tokens": 24, "dtype": "float32", "device": "cpu",
       "do_sample": False, "profile_kernels": False}


def _generate(path, **knobs):
    return {"sweep": [{"scenario": "generate", "model": str(path), "backend": "hf", "set": {**GEN, **knobs}}]}


@pytest.mark.slow
def test_a_short_warm_up_compiles_the_graph_the_timed_calls_use(tiny_checkpoint, run_cell):
    torch._dynamo.reset()
    path = tiny_checkpoint()
    before = compiled_graphs()
    _, out = run_cell(_generate(path, kv_cache="static", compile=True, compile_backend="eager", warmup_steps=3), path)
    assert out.status == "ok", out.message
    assert compiled_graphs() > before  # the warm-up compiled...
    m = out.metrics
    assert m["compile_observed"] is True and m["first_call_steps"] == 3 and m["warm_short_call_s"] > 0
    assert m["graphs_compiled_while_timed"] == 0 and m["output_tokens"] == 2 * 2 * 24  # ...and nothing after it


@pytest.mark.slow
def test_the_compile_counter_sees_a_recompilation_when_the_cache_shape_changes(tiny_checkpoint):
    """The negative control of the test above: a warm-up with fewer max_new_tokens sizes the static cache
    smaller, and the full-length call then compiles again."""
    from transformers import CompileConfig

    torch._dynamo.reset()
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint()).eval()
    config = CompileConfig(backend="eager", mode=None)
    config._compile_all_devices = True
    ids = torch.randint(5, 1000, (2, 6))

    def generate(new_tokens):
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, cache_implementation="static", compile_config=config, pad_token_id=0)

    generate(4)
    before = compiled_graphs()
    generate(24)
    assert compiled_graphs() > before


def test_the_timed_run_stops_once_long_enough_and_says_so(tiny_checkpoint, run_cell):
    path = tiny_checkpoint()
    _, out = run_cell(_generate(path, num_prompts=8, max_duration_s=1e-6, warmup_steps=2), path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert m["steady_calls"] == 1 and m["prompts_timed"] == 2 and m["output_tokens"] == 2 * 24
    assert any("timed 1 of the 4 calls" in w for w in out.warnings)
    _, full = run_cell(_generate(path, num_prompts=8, warmup_steps=0), path)
    assert full.metrics["steady_calls"] == 4 and full.metrics["first_call_steps"] == 24
    assert full.metrics["warm_short_call_s"] is None


def test_measure_caps_the_duration_after_at_least_one_call(monkeypatch):
    clock = SimpleNamespace(now=0.0)  # the timing module's clock, advanced only by the calls: counts hold on any load
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    def slow():
        clock.now += 0.02

    assert len(measure(slow, warmup=0, min_repeats=10, min_duration_s=0.0, max_duration_s=0.05).samples_s) == 3
    assert len(measure(slow, warmup=0, min_repeats=10, min_duration_s=0.0).samples_s) == 10
    assert len(measure(slow, warmup=0, min_repeats=3, min_duration_s=0.0, max_duration_s=1e-9).samples_s) == 1


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_a_missing_package_is_an_unavailable_row_without_a_process(tmp_path):
    plan = build_plan({"name": "pre", "sweep": [{"scenario": "attention-kernels",
                                                 "set": {"kernel": "flash_attn", "q_len": 8, "kv_len": 8}}]})
    assert estimate_seconds(plan.cells) == (0.0, 0.0)  # costs nothing here
    assert estimate_seconds(plan.cells, accelerator=True)[0] > 0  # another machine may have flash-attn
    rows = launch(plan, LaunchOptions(run_dir=tmp_path / "run")).rows
    assert [r["status"] for r in rows] == ["unavailable"]
    assert "flash_attn package" in rows[0]["message"] and "no process was run" in rows[0]["message"]
    assert rows[0]["log"] is None and not list((tmp_path / "run" / "logs").glob(f"{plan.cells[0].key}*"))


def _gpu_minutes(*presets: str) -> float:
    cells = {c.key: c for name in presets for c in build_plan(get_plan_preset(name)).cells}  # shared cells once
    return estimate_seconds(list(cells.values()), accelerator=True)[0] / 60


def test_the_seed_presets_fit_the_session_budget_by_the_labs_own_estimates():
    # ~25 minutes before the cuts; the device session has ~30 minutes for everything. Dynamic-cache cells
    # warm up over the full length (a first pass meets every KV length: cuDNN builds a plan per shape).
    assert _gpu_minutes("seed-attention", "seed-generate", "seed-static-cache") <= 17.0
    for preset in ("seed-attention", "seed-generate", "seed-classify", "seed-classify-matrix", "seed-hidden-states",
                   "conformer-baseline"):
        assert _gpu_minutes(preset) < 9.0, preset  # every part fits one device command of under 9 minutes
    # seed-static-cache runs into seed-generate's run directory, after it: their shared cells are done then
    beyond_generate = _gpu_minutes("seed-generate", "seed-static-cache") - _gpu_minutes("seed-generate")
    assert beyond_generate < 9.0


def test_a_cap_below_the_minimum_duration_is_refused():
    from inferlab.errors import ConfigError

    with pytest.raises(ConfigError, match="max_duration_s=1 is below min_duration_s=2"):
        build_plan(_generate("tiny", max_duration_s=1.0, min_duration_s=2.0))
