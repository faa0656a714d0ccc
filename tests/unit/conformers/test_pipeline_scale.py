"""The conformer pipeline scaled out on two local CPU worker processes (the tiny preset, built-in
tokenizer: sharding, merging and resuming do not depend on the tokenizer, while qwen3-chem's 152k-token
vocabulary costs every worker process seconds; test_demo.py and bench/test_conformer_pipeline.py run the
pipeline on qwen3-chem): the merged rows equal a single-process run, each conformer once, in input order
(conformers of a molecule in index order); a worker killed mid-shard leaves the run unmerged, and a rerun
completes only that shard, with every row exactly once."""

from __future__ import annotations

import json

import pytest
import torch

from inferlab.cli import main
from inferlab.cli.scale_args import EXIT_INCOMPLETE
from inferlab.scale.faults import FAULT_ENV
from inferlab.engine import EngineConfig
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

# Tiny molecules: the rows only need to be short.
LINES = ["C methane", "CO methanol", "C1CC broken", "CN methylamine", "O water", "CC ethane", "CO methanol",
         "N ammonia", "CCO ethanol"]
K = 2


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("tiny")


@pytest.fixture(scope="module")
def single(model, tmp_path_factory):
    """The single-process run: rows by id, and the expected ids in input order."""
    root = tmp_path_factory.mktemp("single")
    inp = root / "in.smi"
    inp.write_text("\n".join(LINES) + "\n")
    torch.set_num_threads(1)
    generate_conformers(EngineConfig(model=model, max_slots=8), inp, root / "out.sdf",
                        PipelineConfig(num_conformers=K, seed=2))
    rows = {r["id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}
    return inp, rows


def expected_order() -> list[str]:
    ids = []
    for line_no, line in enumerate(LINES, start=1):
        name = line.split()[1]
        ids += [f"{name if line_no != 7 else 'line-7'}#{k}" for k in range(K)]  # line 7 repeats methanol
    return ids


def generate(model, inp, out, *extra) -> int:
    return main(["conformers", "generate", "--model", str(model), "--input", str(inp), "--output", str(out),
                 "--num-conformers", str(K), "--seed", "2", "--max-slots", "8", "--device", "cpu", *extra])


def check_merged(out, single_rows) -> None:
    rows = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == expected_order()  # input order, each once
    assert {r["id"]: r for r in rows} == single_rows  # token for token the single-process rows
    records = list(read_sdf(out))
    assert [r.prop("row_id") for r in records] == [r["id"] for r in rows if r["status"] == "ok"]
    assert len(records) == 7 * K


@pytest.mark.slow
def test_a_killed_worker_then_a_rerun_equal_one_process(tmp_path, model, single, monkeypatch, capsys):
    """One run of two workers: shard 0 finishes while shard 1 dies after 3 rows, nothing is merged; the rerun
    completes shard 1 alone, and the merge equals the single-process run. (This used to be two tests, one
    without the fault; the fault-free shard 0 and the merge are the same code, so the clean run was cut.)"""
    inp, single_rows = single
    out = tmp_path / "out.sdf"
    monkeypatch.setenv(FAULT_ENV, "shard=1,after_rows=3")
    assert generate(model, inp, out, "--gpus", "2", "--retries", "0") == EXIT_INCOMPLETE
    assert "shard 1 failed" in capsys.readouterr().out and not out.exists()
    monkeypatch.delenv(FAULT_ENV)
    assert generate(model, inp, out, "--gpus", "2") == 0
    manifest = json.loads((tmp_path / "out.sdf.scale" / "manifest.json").read_text())
    assert [s["attempts"] for s in manifest["shards"]] == [1, 2]  # the finished shard was not rerun
    assert all(s["rows"] for s in manifest["shards"])  # both workers had molecules
    check_merged(out, single_rows)
