"""The start-up cache (engine/startup_cache.py) and the GEMM plan kept in it: hit, miss, stale, corrupt,
disabled, unwritable; the plan's JSON round trip; the engine reading its plan from the cache."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from inferlab.engine import gemm_plan as gp
from inferlab.engine import gemm_plans
from inferlab.cache_dir import CACHE_DIR_ENV, default_cache_dir
from inferlab.engine.startup_cache import StartupCache, code_fingerprint, source_fingerprint

KEY = {"gpu": "NVIDIA H100 80GB HBM3", "shapes": {"qkv": [4096, 1024]}, "torch": "2.11.0", "code": "abc"}
VALUE = {"choices": {"qkv@16": {"kind": "linear", "block_n": 16}}, "timings": {"qkv@16": {"cublas": 5.0}}}


def test_a_stored_entry_is_read_back_and_another_key_misses(tmp_path):
    cache = StartupCache.at(True, tmp_path)
    assert cache.load("gemm_plan", KEY) is None  # miss
    path = cache.store("gemm_plan", KEY, VALUE)
    assert path is not None and path.parent == tmp_path / "gemm_plan" and path.exists()
    assert cache.load("gemm_plan", KEY) == VALUE  # hit
    assert cache.load("gemm_plan", {**KEY, "torch": "2.12.0"}) is None  # any part of the key changes the entry
    assert not list(path.parent.glob("*.tmp"))  # the temporary file was renamed into place


def test_corrupt_and_stale_entries_are_ignored_with_a_warning(tmp_path, caplog):
    cache = StartupCache.at(True, tmp_path)
    path = cache.store("gemm_plan", KEY, VALUE)
    path.write_text('{"format": 1, "key": ')  # a crash mid-write
    with caplog.at_level(logging.WARNING):
        assert cache.load("gemm_plan", KEY) is None
    assert "unreadable" in caplog.text
    entry = {"format": 1, "key": {**KEY, "gpu": "another"}, "value": VALUE}  # a file under the wrong name
    path.write_text(json.dumps(entry))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cache.load("gemm_plan", KEY) is None
    assert "stale" in caplog.text
    path.write_text(json.dumps({**entry, "key": KEY, "format": 0}))  # an older layout
    assert cache.load("gemm_plan", KEY) is None
    cache.store("gemm_plan", KEY, VALUE)  # the next store replaces it
    assert cache.load("gemm_plan", KEY) == VALUE


def test_a_disabled_cache_reads_and_writes_nothing(tmp_path):
    cache = StartupCache.at(False, tmp_path)
    assert cache.root is None
    assert cache.store("gemm_plan", KEY, VALUE) is None and cache.load("gemm_plan", KEY) is None
    assert not any(tmp_path.iterdir())


def test_an_unwritable_folder_costs_a_warning_not_the_start_up(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = StartupCache.at(True, blocker / "sub")  # a file where the folder should be
    with caplog.at_level(logging.WARNING):
        assert cache.store("gemm_plan", KEY, VALUE) is None
    assert "could not write" in caplog.text and CACHE_DIR_ENV in caplog.text


def test_the_default_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "inferlab"
    assert StartupCache.at(True, None).root == tmp_path / "xdg" / "inferlab"


def test_the_code_fingerprint_changes_with_the_source(tmp_path):
    import importlib.util

    module = tmp_path / "chooser.py"
    module.write_text("MARGIN = 0.95\n")
    spec = importlib.util.spec_from_file_location("chooser", module)
    loaded = importlib.util.module_from_spec(spec)
    before = source_fingerprint(loaded)
    module.write_text("MARGIN = 0.9\n")
    assert source_fingerprint(loaded) != before


def test_the_code_fingerprint_ignores_comments_and_docstrings_but_not_code(tmp_path):
    """What the shipped GEMM plans are keyed by (gemm_plans/): prose edits keep the key, code edits change it."""
    from types import SimpleNamespace

    def fingerprint(text: str) -> str:
        (tmp_path / "kernel.py").write_text(text)
        return code_fingerprint(SimpleNamespace(__file__=str(tmp_path / "kernel.py")))

    code = '"""A kernel."""\nimport x\n\n\ndef f(a):\n    """Add one."""\n    return a + 1  # why\n'
    prose = ('"""A kernel, described\nat length."""\n# a new comment\nimport x\n\n\ndef f(a):\n'
             '    """Another word."""\n\n    return a + 1\n')
    assert fingerprint(code) == fingerprint(prose)
    assert fingerprint(code) != fingerprint(code.replace("a + 1", "a + 2"))
    assert fingerprint(code) != fingerprint(code.replace('"""Add one."""', 'name = "Add one."'))  # code, not prose
    assert fingerprint('x = f"{1}"  # c\n') == fingerprint('x = f"{1}"\n')  # an f-string (tokenised apart in 3.12)


class _Layer:
    def __init__(self) -> None:
        self.qkv, self.o = torch.zeros(96, 32), torch.zeros(32, 64)
        self.gate_up, self.down = torch.zeros(128, 32), torch.zeros(32, 64)
        self.qkv_bias = None


class _Weights:
    layers = [_Layer(), _Layer()]


def _a_plan(activation: str = "silu") -> gp.GemmPlan:
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig

    plan = gp.GemmPlan(act_mul=lambda x: x, activation=activation)
    plan.choices = {("qkv", 16): SkinnyConfig(16, 256, 1), ("o", 16): SkinnyConfig(32, 128, 2, num_stages=3),
                    ("mlp", 8): gp.MlpChoice("gated", SkinnyConfig(64, 128, 1)),
                    ("mlp", 16): gp.MlpChoice("swiglu_down", SkinnyConfig(32, 128, 4))}
    return plan


def test_a_gemm_plan_survives_its_json_round_trip():
    plan, timings = _a_plan(), {"qkv@16": {"cublas": 5.0, "triton n16 k256 split1": 4.1}}
    value = json.loads(json.dumps(gp.plan_to_json(plan, timings)))
    back, back_timings = gp.plan_from_json(value, plan.act_mul, _Weights(), torch.device("cpu"))
    assert back.choices == plan.choices and back_timings == timings and back.activation == "silu"
    assert back.describe([8, 16]) == plan.describe([8, 16])
    assert back.counters is not None and back.counters.dtype == torch.int32
    broken = json.loads(json.dumps(value))
    broken["choices"]["qkv@16"]["kind"] = "gated"  # an MLP kind on a projection
    with pytest.raises(ValueError):
        gp.plan_from_json(broken, plan.act_mul, _Weights(), torch.device("cpu"))
    with pytest.raises(ValueError):
        gp.plan_from_json({"choices": {"qkv@999": value["choices"]["qkv@16"]}, "timings": {}}, plan.act_mul,
                          _Weights(), torch.device("cpu"))


def test_a_plan_keeps_its_activation_and_is_refused_for_another():
    """Gemma's GeGLU plan (the Triton MLP forms fuse GELU-tanh) reads back as GeGLU; a SwiGLU plan is no plan
    for a GeGLU model, nor the reverse, even where an entry came under the wrong key."""
    gelu = _a_plan("gelu_tanh")
    value = json.loads(json.dumps(gp.plan_to_json(gelu, {})))
    back, _ = gp.plan_from_json(value, gelu.act_mul, _Weights(), torch.device("cpu"), "gelu_tanh")
    assert back.activation == "gelu_tanh" and back.choices == gelu.choices
    with pytest.raises(ValueError, match="activation"):
        gp.plan_from_json(value, gelu.act_mul, _Weights(), torch.device("cpu"), "silu")
    silu = json.loads(json.dumps(gp.plan_to_json(_a_plan(), {})))
    with pytest.raises(ValueError, match="activation"):
        gp.plan_from_json(silu, gelu.act_mul, _Weights(), torch.device("cpu"), "gelu_tanh")


def test_the_plan_key_holds_the_activation(monkeypatch):
    """plan_key (CUDA-only: the device's name, capability and SM count) with the device queries faked: equal
    shapes with another activation make another key."""
    from types import SimpleNamespace

    pytest.importorskip("triton")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    silu = gp.plan_key(_Weights(), [1, 2, 4, 8, 16, 96], torch.device("cpu"))
    gelu = gp.plan_key(_Weights(), [1, 2, 4, 8, 16, 96], torch.device("cpu"), "gelu_tanh")
    assert silu["activation"] == "silu" and gelu["activation"] == "gelu_tanh"
    assert {k: v for k, v in silu.items() if k != "activation"} == {k: v for k, v in gelu.items() if k != "activation"}
    assert silu["buckets"] == [1, 2, 4, 8, 16]


def test_the_engine_times_its_plan_once_and_then_reads_it_from_the_cache(tiny_checkpoint, tmp_path, monkeypatch):
    """The engine's own lookup (Engine._gemm_plan, CUDA-only at start-up) on a CPU engine, with the timing
    and the device-dependent keys replaced (the fake keys keep the activation) and no shipped plan for the
    fake GPU: timed and stored on a miss,
    read back on a hit, timed again when the entry is corrupt; a Gemma engine of the same fake shapes key
    times its own GELU plan, with its own act_mul, and reads that back."""
    from inferlab.engine import Engine, EngineConfig
    from inferlab.engine import engine as engine_module

    timed = []

    def fake_tune(weights, buckets, act_mul, device, activation):
        timed.append(activation)
        plan = _a_plan(activation)
        plan.act_mul = act_mul
        return plan, {"qkv@16": {"cublas": 5.0}}

    monkeypatch.setattr(engine_module, "tune_gemm_plan", fake_tune)
    monkeypatch.setattr(gp, "plan_key", lambda weights, buckets, device, activation: {**KEY, "activation": activation})
    monkeypatch.setattr(gemm_plans, "shipped_key", lambda weights, device, activation: {**KEY, "activation": activation})
    monkeypatch.setattr(gemm_plans, "PLANS_FOLDER", tmp_path / "no-shipped-plans")
    config = EngineConfig(model=tiny_checkpoint("tiny"), max_slots=2, max_seq_len=32, cache_dir=tmp_path)
    first = Engine(config)
    first._gemm_plan()
    assert timed == ["silu"] and first.stats.gemm_plan_source == "timed"
    second = Engine(config)
    second._gemm_plan()
    assert timed == ["silu"] and second.stats.gemm_plan_source == "cache"
    assert second.runner.model.gemm.choices == _a_plan().choices
    assert second.stats.gemm_choices == first.stats.gemm_choices and second.stats.startup_cache_dir == str(tmp_path)
    gemma_config = EngineConfig(model=tiny_checkpoint("tiny-gemma2"), max_slots=2, max_seq_len=32, cache_dir=tmp_path)
    gemma = Engine(gemma_config)
    gemma._gemm_plan()  # the SwiGLU entry is not its entry
    assert timed == ["silu", "gelu_tanh"] and gemma.stats.gemm_plan_source == "timed"
    again = Engine(gemma_config)
    again._gemm_plan()
    plan = again.runner.model.gemm
    assert timed == ["silu", "gelu_tanh"] and again.stats.gemm_plan_source == "cache"
    assert plan.activation == "gelu_tanh" and plan.act_mul == again.ops.gelu_tanh_mul
    for entry in (tmp_path / "gemm_plan").glob("*.json"):
        entry.write_text("not json")
    third = Engine(config)
    third._gemm_plan()
    assert timed == ["silu", "gelu_tanh", "silu"] and third.stats.gemm_plan_source == "timed"
    off = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=2, max_seq_len=32, startup_cache=False))
    off._gemm_plan()
    assert timed == ["silu", "gelu_tanh", "silu", "silu"] and off.stats.startup_cache_dir == ""
