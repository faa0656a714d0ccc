"""Fixtures for the lab tests: the test-behaviour plugin file and synthetic result rows."""

from __future__ import annotations

from pathlib import Path

import pytest

PLUGIN = Path(__file__).with_name("plugin_behaviours.py")


@pytest.fixture(scope="session")
def behaviour_plugin() -> str:
    from inferlab.bench.plugins import load_plugin_files

    load_plugin_files([str(PLUGIN)])
    return str(PLUGIN)


@pytest.fixture
def run_cell(tmp_path):
    """run_cell(plan_dict, model_path) -> (cell, Outcome): the first cell of the plan, run in this process
    (the child's code path without the subprocess), with one torch thread as the quick preset uses."""
    import torch

    from inferlab.bench.cell_main import execute
    from inferlab.bench.plan import build_plan

    torch.set_num_threads(1)

    def run(data, model_path=None):
        cell = build_plan(data).cells[0]
        (tmp_path / "cache").mkdir(exist_ok=True)
        spec = {"cell": cell.to_json(), "model_path": str(model_path) if model_path else None,
                "run_dir": str(tmp_path), "cache_dir": str(tmp_path / "cache")}
        return cell, execute(spec)

    return run
