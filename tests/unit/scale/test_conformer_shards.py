"""Conformer outputs (SDF + JSONL, K conformers per molecule) through shards, with the ETKDG workload on two
local CPU workers: a worker that dies mid-molecule is retried and resumes, a killed run takes its workers
with it and a rerun completes it, and the merged SDF and JSONL are byte-identical to a single-process run
(input order, conformer order, each conformer once)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from scale_testkit import read_jsonl, run_single_etkdg, write_molecules

from inferlab.scale import ScaleConfig, ScaleJob, run_scaled
from inferlab.scale.faults import FAULT_ENV
from inferlab.scale.workloads.etkdg import etkdg_params
from inferlab.workloads.conformers.chemistry.sdf import read_sdf


def test_retried_worker_resumes_and_merge_equals_single_process(tmp_path, monkeypatch):
    inp = write_molecules(tmp_path / "mols.smi", 10)
    params = etkdg_params(num_confs=3, seed=7)
    single = tmp_path / "single.sdf"
    run_single_etkdg(inp, single, params)

    monkeypatch.setenv(FAULT_ENV, "shard=0,after_rows=4,attempts=1")  # dies after 1 1/3 molecules
    out = tmp_path / "out.sdf"
    report = run_scaled(ScaleJob("etkdg-conformers", str(inp), str(out), params),
                        ScaleConfig(workers=2, device="cpu", poll_s=0.2, retries=1))
    assert report.complete and [s.attempts_this_run for s in report.shards] == [2, 1]
    assert report.shards[0].stats["summary"]["rows_ok"] < report.shards[0].rows  # the retry resumed

    assert out.read_bytes() == single.read_bytes()
    assert out.with_suffix(".jsonl").read_bytes() == single.with_suffix(".jsonl").read_bytes()
    rows = read_jsonl(out.with_suffix(".jsonl"))
    # 10 molecules, the bad one and the repeated id (filed under its own line), 3 rows each
    assert len(rows) == len({r["id"] for r in rows}) == 12 * 3
    assert {r["status"] for r in rows if r["input_id"] in ("bad-ring", "line-6")} == {"error"}
    assert [r["input_id"] for r in rows][15:18] == ["line-6"] * 3  # in input order (line 6)
    records = list(read_sdf(out))
    assert [(r.prop("input_id"), r.prop("conformer_index")) for r in records] == \
        [(r["input_id"], str(r["conformer_index"])) for r in rows if r["status"] == "ok"]


@pytest.mark.slow
def test_killed_run_is_completed_by_a_rerun(tmp_path):
    """SIGKILL of the whole run (coordinator and, with it, its workers) mid-way; a rerun finishes the job."""
    inp = write_molecules(tmp_path / "mols.smi", 24)
    params = etkdg_params(num_confs=4, seed=1)
    out = tmp_path / "out.sdf"
    code = ("import sys, json; from inferlab.scale import ScaleConfig, ScaleJob, run_scaled; "
            f"run_scaled(ScaleJob('etkdg-conformers', {str(inp)!r}, {str(out)!r}, json.loads(sys.argv[1])), "
            "ScaleConfig(workers=2, device='cpu', poll_s=0.1))")
    coordinator = subprocess.Popen([sys.executable, "-c", code, json.dumps(params)])
    rows = tmp_path / "out.sdf.scale" / "outputs" / "shard-000.jsonl"
    deadline = time.monotonic() + 60
    while not (rows.exists() and rows.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline and coordinator.poll() is None, "no rows were written"
        time.sleep(0.05)
    coordinator.kill()
    coordinator.wait()
    manifest = json.loads((tmp_path / "out.sdf.scale" / "manifest.json").read_text())
    assert "running" in [s["status"] for s in manifest["shards"]]  # what a killed run leaves behind

    report = run_scaled(ScaleJob("etkdg-conformers", str(inp), str(out), params),
                        ScaleConfig(workers=2, device="cpu", poll_s=0.2))
    assert report.complete and report.rows_before >= 2
    single = tmp_path / "single.sdf"
    run_single_etkdg(inp, single, params)
    assert out.with_suffix(".jsonl").read_bytes() == single.with_suffix(".jsonl").read_bytes()
    assert out.read_bytes() == single.read_bytes()
