"""The local launcher without a model: which GPU each worker sees (and what it inherits), the refusals of
impossible GPU counts. Workers ending with a killed coordinator: tests/unit/test_child_processes.py (the
mechanism) and test_kill_resume.py (whole runs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scale_testkit import read_jsonl, write_jsonl

from inferlab.errors import ConfigError
from inferlab.scale import ScaleConfig, ScaleJob, run_scaled
from inferlab.scale.launchers.local import LocalLauncher, visible_gpus
from inferlab.scale.workdir import WorkDir

TESTS_DIR = str(Path(__file__).resolve().parent)


def test_each_worker_sees_its_own_gpu_and_inherits_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,GPU-7f3a")  # ids or UUIDs, as the parent names them
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]))
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}"} for i in range(6)])
    report = run_scaled(ScaleJob("scale_testkit:ENV_PROBE", str(inp), str(tmp_path / "out.jsonl"), {}),
                        ScaleConfig(workers="all", device="cuda", poll_s=0.1))
    assert report.complete and report.workers == 2
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(6)]
    by_worker = {r["pid"]: r["cuda"] for r in rows}
    assert sorted(by_worker.values()) == ["5", "GPU-7f3a"]  # two processes, one GPU each
    assert {r["nccl"] for r in rows} == {"0"} and {r["device"] for r in rows} == {"cuda"}
    assert {r["threads"] for r in rows} == {max(1, (os.cpu_count() or 1) // 2)}


@pytest.mark.parametrize(("names", "expected"), [("3,1", ["3", "1"]), ("", []), ("0,-1,2", ["0"]),
                                                  ("GPU-a, GPU-b", ["GPU-a", "GPU-b"])])
def test_visible_gpus(monkeypatch, names, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", names)
    assert visible_gpus() == expected


def test_impossible_worker_counts_are_refused(tmp_path, monkeypatch):
    work = WorkDir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match="--gpus 4, but 2 GPU"):
        LocalLauncher(ScaleConfig(workers=4), work)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match="no CUDA device is visible; pass --device cpu"):
        LocalLauncher(ScaleConfig(workers=1), work)
    with pytest.raises(ConfigError, match="give the number of worker processes"):
        LocalLauncher(ScaleConfig(workers="all", device="cpu"), work)
