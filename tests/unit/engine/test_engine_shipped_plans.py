"""The GEMM plans shipped with the package (engine/gemm_plans/): the file store, the key a plan must match,
the engine's lookup order (start-up cache, shipped, timed), and the measuring command's file writing."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch

from inferlab.engine import gemm_plan as gp
from inferlab.engine import gemm_plans
from inferlab.engine.gemm_plans import measure
from inferlab.engine.startup_cache import StartupCache

GPU = "NVIDIA H100 80GB HBM3"
KEY = {"gpu": GPU, "capability": [9, 0], "sm_count": 132, "torch": "2.11", "cuda": "13.0", "triton": "3.6",
       "kernel_code": "abc", "dtype": "bfloat16", "shapes": {"qkv": [96, 32]}, "qkv_bias": False, "activation": "silu"}
BUCKETS = [1, 2, 4, 8, 16, 24, 32, 48, 64]
VALUE = {"choices": {"qkv@16": {"kind": "linear", "block_n": 16, "block_k": 256, "split_k": 1, "num_warps": 4,
                                "num_stages": 4},
                     "mlp@1": {"kind": "gated", "block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4,
                               "num_stages": 4}},
         "timings": {f"{name}@{b}": {"cublas": 5.0} for b in BUCKETS for name in gp.PROJECTIONS},
         "activation": "silu", "buckets": BUCKETS}


def _ship(folder, *entries) -> None:
    gemm_plans.write_entries(gemm_plans.plan_file(GPU, folder), GPU, [{"models": ["m"], "key": k, "value": v}
                                                                      for k, v in entries])


def test_file_names_and_versions():
    assert gemm_plans.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gemm_plans.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert gemm_plans.major_minor("2.11.0+cu130") == "2.11" and gemm_plans.major_minor("3.6.0") == "3.6"
    assert gemm_plans.major_minor(None) == ""


def test_a_shipped_plan_is_found_for_its_key_and_cut_to_the_engines_buckets(tmp_path):
    _ship(tmp_path, (KEY, VALUE))
    found = gemm_plans.shipped_plan(KEY, [1, 2, 4, 8, 16, 24], tmp_path)
    assert found["choices"] == VALUE["choices"] and found["buckets"] == [1, 2, 4, 8, 16, 24]
    assert set(found["timings"]) == {f"{name}@{b}" for b in (1, 2, 4, 8, 16, 24) for name in gp.PROJECTIONS}
    only_small = gemm_plans.shipped_plan(KEY, [1, 2, 4, 8], tmp_path)
    assert list(only_small["choices"]) == ["mlp@1"]  # qkv@16 is not a bucket of that engine
    assert gemm_plans.shipped_plan(KEY, [1, 2, 4, 8, 16, 24, 32, 40, 96], tmp_path) is None  # 40 was not measured
    plan, _ = gp.plan_from_json(found, torch.nn.functional.silu, _Weights(), torch.device("cpu"))
    assert set(plan.choices) == {("qkv", 16), ("mlp", 1)}


def test_a_plan_of_other_software_or_another_gpu_is_ignored_with_a_debug_log(tmp_path, caplog):
    _ship(tmp_path, (KEY, VALUE))
    with caplog.at_level(logging.DEBUG, logger="inferlab.engine.gemm_plans"):
        assert gemm_plans.shipped_plan({**KEY, "triton": "3.7"}, BUCKETS, tmp_path) is None
    assert "triton '3.7', the closest shipped '3.6'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="inferlab.engine.gemm_plans"):
        assert gemm_plans.shipped_plan({**KEY, "gpu": "NVIDIA H200"}, BUCKETS, tmp_path) is None
    assert "no shipped GEMM plans for NVIDIA H200" in caplog.text


def test_an_unreadable_shipped_file_costs_a_warning_and_a_timing(tmp_path, caplog):
    gemm_plans.plan_file(GPU, tmp_path).write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert gemm_plans.shipped_plan(KEY, BUCKETS, tmp_path) is None
    assert "ignoring the shipped GEMM plans" in caplog.text


def test_writing_merges_entries_by_key(tmp_path):
    _ship(tmp_path, (KEY, VALUE), ({**KEY, "triton": "3.5"}, VALUE))
    newer = {**VALUE, "choices": {}}
    _ship(tmp_path, (KEY, newer))
    entries = gemm_plans.read_entries(gemm_plans.plan_file(GPU, tmp_path))
    assert len(entries) == 2
    assert [e["value"]["choices"] for e in entries if e["key"] == KEY] == [{}]  # replaced, the 3.5 entry kept


class _Layer:
    def __init__(self) -> None:
        self.qkv, self.o = torch.zeros(96, 32, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16)
        self.gate_up, self.down = torch.zeros(128, 32, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16)
        self.qkv_bias = None


class _Weights:
    layers = [_Layer(), _Layer()]


def test_the_shipped_key_is_the_gpu_shapes_and_software_major_minor_not_the_layer_count(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(
        name=GPU, multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    key = gemm_plans.shipped_key(_Weights(), torch.device("cpu"), "gelu_tanh")
    assert key["gpu"] == GPU and key["sm_count"] == 132 and key["capability"] == [9, 0]
    assert key["torch"] == gemm_plans.major_minor(torch.__version__) and key["triton"].count(".") == 1
    assert key["activation"] == "gelu_tanh" and key["shapes"]["qkv"] == [96, 32] and key["dtype"] == "bfloat16"
    assert "layers" not in key and "buckets" not in key and len(key["kernel_code"]) == 16
    local = gp.plan_key(_Weights(), BUCKETS, torch.device("cpu"), "gelu_tanh")
    assert local["layers"] == 2 and local["torch"] == torch.__version__  # the local cache stays exact


def test_known_plan_asks_the_start_up_cache_then_the_shipped_plans(tmp_path, monkeypatch):
    monkeypatch.setattr(gp, "plan_key", lambda weights, buckets, device, activation: {"local": 1})
    monkeypatch.setattr(gemm_plans, "shipped_key", lambda weights, device, activation: KEY)
    monkeypatch.setattr(gemm_plans, "PLANS_FOLDER", tmp_path / "shipped")
    (tmp_path / "shipped").mkdir()
    cache = StartupCache.at(True, tmp_path / "cache")
    args = (cache, _Weights(), BUCKETS, torch.device("cpu"), "silu")
    assert gemm_plans.known_plan(*args) == (None, "", {"local": 1})
    _ship(tmp_path / "shipped", (KEY, VALUE))
    value, source, _ = gemm_plans.known_plan(*args)
    assert source == "shipped" and value["choices"] == VALUE["choices"]
    cache.store("gemm_plan", {"local": 1}, {**VALUE, "choices": {}})
    value, source, _ = gemm_plans.known_plan(*args)
    assert source == "cache" and value["choices"] == {}


def test_the_engine_takes_a_shipped_plan_before_timing(tiny_checkpoint, tmp_path, monkeypatch):
    """Engine._gemm_plan (CUDA-only at start-up) on a CPU engine, the device-dependent keys faked: a fresh
    start-up cache and a shipped plan for the key -> "shipped", nothing timed, nothing stored."""
    from inferlab.engine import Engine, EngineConfig
    from inferlab.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "tune_gemm_plan", lambda *a: pytest.fail("timed despite a shipped plan"))
    monkeypatch.setattr(gp, "plan_key", lambda weights, buckets, device, activation: {"local": activation})
    monkeypatch.setattr(gemm_plans, "shipped_key", lambda weights, device, activation: {**KEY, "activation": activation})
    monkeypatch.setattr(gemm_plans, "PLANS_FOLDER", tmp_path)
    _ship(tmp_path, (KEY, VALUE))
    engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=16, max_seq_len=32, cache_dir=tmp_path / "c"))
    engine._gemm_plan()
    assert engine.stats.gemm_plan_source == "shipped"
    assert set(engine.runner.model.gemm.choices) == {("qkv", 16), ("mlp", 1)}
    assert engine.stats.gemm_choices["qkv@16"].startswith("triton") and engine.stats.gemm_choices["o@16"] == "cublas"
    assert not (tmp_path / "c" / "gemm_plan").exists()  # a shipped plan is not copied into the cache


def test_the_measuring_command_needs_a_gpu_and_shares_entries_between_equal_shapes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert measure.main(["--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: GPU)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def fake_measure(name, dtype, device):
        shapes = {"qkv": [64 if name.startswith("tiny") else 1024, 8]}
        return {"models": [name], "key": {**KEY, "shapes": shapes}, "value": VALUE}

    monkeypatch.setattr(measure, "measure", fake_measure)
    assert measure.main(["--out", str(tmp_path), "--models", "tiny,tiny-mistral,qwen3-0.6b"]) == 0
    data = json.loads(gemm_plans.plan_file(GPU, tmp_path).read_text())
    assert sorted(sorted(e["models"]) for e in data["entries"]) == [["qwen3-0.6b"], ["tiny", "tiny-mistral"]]


def test_every_causal_preset_has_a_spec_the_engine_runs():
    from inferlab.models.presets import PRESETS
    from inferlab.engine.forwards.registry import forward_class

    for preset in PRESETS.values():
        if preset.task == "causal-lm":
            spec = measure.preset_spec(preset.name)
            forward_class(spec.architecture)
            assert spec.num_layers >= 2


def test_the_plan_files_are_package_data():
    """A wheel carries the files only if pyproject names them."""
    from pathlib import Path

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    assert "*.json" in pyproject["tool"]["setuptools"]["package-data"]["inferlab.engine.gemm_plans"]
    assert gemm_plans.PLANS_FOLDER == Path(gemm_plans.__file__).parent


def test_the_shipped_plans_were_measured_with_todays_gemm_kernels():
    """A change to the skinny GEMM's code (not its prose) makes every shipped plan miss: measure them again
    (`python -m inferlab.engine.gemm_plans.measure` on each GPU model) when this fails."""
    from pathlib import Path

    from inferlab.engine.kernels import triton_gemm, triton_math
    from inferlab.engine.startup_cache import code_fingerprint

    current = code_fingerprint(triton_gemm, triton_math)
    files = sorted(Path(gemm_plans.__file__).parent.glob("*.json"))
    assert files, "no shipped plan files"
    for path in files:
        stale = {e["key"]["kernel_code"] for e in json.loads(path.read_text())["entries"]} - {current}
        assert not stale, f"{path.name}: plans of GEMM code {sorted(stale)}, today's is {current}"
