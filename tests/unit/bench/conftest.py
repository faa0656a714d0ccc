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


NCI_HEAD_LINES = 500  # the tests here read at most the first 169 lines (40 drug-sized molecules with stereo)


@pytest.fixture(scope="session")
def nci_head(tmp_path_factory) -> Path:
    """The first NCI_HEAD_LINES lines of RDKit's NCI first_5K.smi, the scenarios' default molecules file. A test
    takes the first few molecules of the file that pass its selection: the head holds the same ones (one it
    cannot fill is an error, never other molecules), and a cell reads it in a tenth of the ~1 s that parsing the
    5,000 lines takes. The default file itself stays in use where a test runs the default (the xgrammar peer
    cell, the conformer-pipeline cell, the constrained backend's fp8 check)."""
    from inferlab.bench.scenarios.molecules import nci_molecules_path

    lines = nci_molecules_path().read_text().splitlines(keepends=True)[:NCI_HEAD_LINES]
    path = tmp_path_factory.mktemp("nci") / "first_500.smi"
    path.write_text("".join(lines))
    return path
