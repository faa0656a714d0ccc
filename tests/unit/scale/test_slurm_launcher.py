"""The Slurm launcher through submitit's LocalExecutor (the same job-array path, no Slurm): a job that
dies is reported with its log tail and the output is not merged; a rerun submits only the unfinished
shard, resumes it and merges an output equal to a single-process run."""

from __future__ import annotations

import pytest
from scale_testkit import run_single_etkdg, write_molecules

from inferlab.scale import ScaleConfig, ScaleJob, SlurmOptions, run_scaled
from inferlab.scale.faults import FAULT_ENV
from inferlab.scale.workloads.etkdg import etkdg_params

pytest.importorskip("submitit", reason="submitit is not installed (pip install 'inferlab[scale]')")


@pytest.mark.slow
def test_job_array_failure_then_rerun(tmp_path, monkeypatch):
    inp = write_molecules(tmp_path / "mols.smi", 8)
    params = etkdg_params(num_confs=2, seed=5)
    single = tmp_path / "single.sdf"
    run_single_etkdg(inp, single, params)
    out = tmp_path / "out.sdf"
    job = ScaleJob("etkdg-conformers", str(inp), str(out), params)
    config = ScaleConfig(workers=2, launcher="slurm", device="cpu", poll_s=0.2, retries=0,
                         slurm=SlurmOptions(cluster="local", time_min=5, cpus_per_task=1, result_wait_s=1.0))

    monkeypatch.setenv(FAULT_ENV, "shard=0,after_rows=3")
    first = run_scaled(job, config)
    assert not first.complete and not out.exists()
    assert [s.status for s in first.shards] == ["failed", "done"]
    assert "fault hook: ending this worker" in first.shards[0].log_tail
    assert 3 <= first.shards[0].rows_done < first.shards[0].rows
    assert list((tmp_path / "out.sdf.scale" / "slurm").glob("*_log.err"))  # submitit's own logs

    monkeypatch.delenv(FAULT_ENV)
    second = run_scaled(job, config)
    assert second.complete and [s.attempts_this_run for s in second.shards] == [1, 0]
    assert out.read_bytes() == single.read_bytes()
    assert out.with_suffix(".jsonl").read_bytes() == single.with_suffix(".jsonl").read_bytes()


def test_without_slurm_the_launcher_refuses_instead_of_running_locally(tmp_path, monkeypatch, capsys, tiny_checkpoint):
    """submitit's AutoExecutor falls back to its local executor when it finds no Slurm; the launcher refuses
    with the fix instead, before any file is made."""
    import submitit

    from inferlab.cli import main

    monkeypatch.setattr(submitit.AutoExecutor, "which", staticmethod(lambda: "local"))
    inp = write_molecules(tmp_path / "mols.smi", 2)
    out = tmp_path / "out.sdf"
    code = main(["conformers", "generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp),
                 "--output", str(out), "--launcher", "slurm", "--gpus", "2", "--device", "cpu"])
    assert code == 2 and "there is no Slurm here" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mols.smi"]
