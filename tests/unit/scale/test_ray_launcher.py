"""The Ray launcher on a local Ray (CPU tasks): the same shards, a worker process that crashes inside a Ray
task is retried by the coordinator, and the merged output equals a single-process run."""

from __future__ import annotations

import pytest
from scale_testkit import run_single_etkdg, write_molecules

from inferlab.scale import ScaleConfig, ScaleJob, run_scaled
from inferlab.scale.faults import FAULT_ENV
from inferlab.scale.workloads.etkdg import etkdg_params

pytest.importorskip("ray", reason="ray is not installed (pip install 'inferlab[scale]')")


@pytest.mark.slow
def test_ray_tasks_retry_a_crashed_worker_and_merge(tmp_path, monkeypatch):
    inp = write_molecules(tmp_path / "mols.smi", 8)
    params = etkdg_params(num_confs=2, seed=3)
    single = tmp_path / "single.sdf"
    run_single_etkdg(inp, single, params)
    monkeypatch.setenv(FAULT_ENV, "shard=1,after_rows=3,attempts=1")
    out = tmp_path / "out.sdf"
    report = run_scaled(ScaleJob("etkdg-conformers", str(inp), str(out), params),
                        ScaleConfig(workers=2, launcher="ray", device="cpu", poll_s=0.2))
    assert report.complete and report.launcher == "ray"
    assert [s.attempts_this_run for s in report.shards] == [1, 2]
    assert out.read_bytes() == single.read_bytes()
    assert out.with_suffix(".jsonl").read_bytes() == single.with_suffix(".jsonl").read_bytes()
    log = (tmp_path / "out.sdf.scale" / "logs" / "shard-001.attempt-1.log").read_text()
    assert "fault hook: ending this worker" in log  # the Ray task's log went to the shard's log file
