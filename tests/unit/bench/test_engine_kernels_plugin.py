"""The engine-kernels lab plugin (benchmarks/plugins/engine_kernels.py) through its plan file: the plugin path
resolves against the plan file, the cells validate, the constraint step runs on CPU (its torch mask over
three table layouts, which must agree), and the Triton / cuBLAS groups are `unavailable` without a GPU."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from inferlab.bench.cell_main import execute
from inferlab.bench.plan import build_plan, load_toml
from inferlab.errors import ConfigError

PLAN = Path(__file__).parents[3] / "benchmarks" / "plans" / "engine-kernels.toml"
PLUGINS = PLAN.parents[1] / "plugins"


def test_the_plugins_import_no_private_engine_name():
    """A plugin runs on what the engine names publicly (its kernels' wrappers), never on a private kernel."""
    private = [f"{path.name}: {node.module}.{alias.name}" for path in PLUGINS.glob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("inferlab.engine") for alias in node.names
               if alias.name.startswith("_")]
    assert private == []


def run(tmp_path, plugins, settings: dict):
    cell = build_plan({"plugins": plugins, "sweep": [{"scenario": "engine-kernels", "set": settings}]}).cells[0]
    (tmp_path / "cache").mkdir(exist_ok=True)
    return execute({"cell": cell.to_json(), "plugins": plugins, "run_dir": str(tmp_path),
                    "cache_dir": str(tmp_path / "cache")})


def test_the_plan_loads_its_plugin_and_every_group_has_cells():
    data = load_toml(PLAN)
    assert Path(data["plugins"][0]).resolve() == PLAN.parents[1] / "plugins" / "engine_kernels.py"
    cells = build_plan(data).cells
    assert {c.config["group"] for c in cells} == {"attention", "sampling", "skinny-gemm", "cublas-gemm",
                                                  "constraint-step"}
    assert {c.config["kv_dtype"] for c in cells if c.config["group"] == "attention"} == {"auto", "fp8"}
    with pytest.raises(ConfigError, match="vocab=100"):
        build_plan({**data, "sweep": [{"scenario": "engine-kernels", "set": {"group": "constraint-step",
                                                                              "vocab": 100}}]})


def test_constraint_step_runs_on_cpu_and_the_gpu_groups_are_unavailable(tmp_path):
    plugins = load_toml(PLAN)["plugins"]
    out = run(tmp_path, plugins, {"group": "constraint-step", "rows": 4, "vocab": 2048, "tokenizer": "builtin",
                                  "layers": 2, "device": "cpu", "cpu_threads": 1})
    assert out.status == "ok", out.message
    us = out.metrics["us"]
    assert {"greedy", "t1 + constraint", "mask (torch)", "choose + advance", "torch mask, bit-packed layout"} <= set(us)
    assert all(isinstance(v, float) and v > 0 for v in us.values()), us
    assert out.metrics["default_us"] == us["t1 + constraint"] and out.metrics["best_us"] == min(us.values())
    out = run(tmp_path, plugins, {"group": "attention", "device": "cpu"})
    assert out.status == "unavailable" and "needs a GPU" in out.message


def _plugin():
    import importlib.util

    path = PLAN.parents[1] / "plugins" / "engine_kernels.py"
    spec = importlib.util.spec_from_file_location("engine_kernels_plugin_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the scenario again: the same object, a no-op
    return module


def test_the_fp8_attention_cells_time_the_candidates_beside_the_bf16_default():
    from inferlab.engine.kernels.triton_attention import FP8_ATTENTION_CONFIG, AttentionConfig

    plugin = _plugin()
    configs = [AttentionConfig(*fields) for fields in plugin.FP8_CANDIDATES]
    labels = [plugin.config_label(c) for c in configs]
    assert len(set(labels)) == len(labels) and "n32 w1 s3 p4 r168" in labels
    assert plugin.config_label(FP8_ATTENTION_CONFIG) == "n32 w1 s3 p4"
    cells = [c for c in build_plan(load_toml(PLAN)).cells if c.config["shape"] == "qwen3-0.6b"
             and c.config["group"] == "attention"]  # fmt: skip
    assert {(c.config["rows"], c.config["length"], c.config["kv_dtype"]) for c in cells} == {
        (rows, length, kv) for rows in (256, 1024) for length in (330, 629) for kv in ("auto", "fp8")}


def test_of_bound_divides_each_labels_projection_bound_by_its_time():
    plugin = _plugin()
    us = {"qkv one program m256 n64": 20.0, "down linear [N,K] cublas": 10.0, "o broken": "RuntimeError: x"}
    assert plugin.of_bound(us, {"qkv": 10.0, "down": None, "o": 5.0}) == {"qkv one program m256 n64": 0.5}
