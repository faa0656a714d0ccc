"""A conformer run killed with SIGKILL (the CLI in its own process group, its judge process with it) loses nothing it wrote: the rerun resumes, and every row ends up written exactly once,
each ok row with exactly one SDF record (test_pipeline.py checks that a resumed run's rows equal an
uninterrupted run's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferlab.engine import EngineConfig
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

MOLECULES = ["CCO", "c1ccccc1", "CC(=O)O", "c1ccncc1", "C[C@H](N)CO"]
K = 4
SRC = Path(__file__).resolve().parents[3] / "src"


def rows_of(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.slow  # ~15-30 s: a CLI process and its judge process start, then the rerun
@pytest.mark.usefixtures("one_cpu_thread")
def test_a_killed_run_resumes_with_every_row_once(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    inp = tmp_path / "in.smi"
    inp.write_text("".join(f"{s} m{i}\n" for i, s in enumerate(MOLECULES)))
    out, rows_path = tmp_path / "out.sdf", tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "inferlab.cli", "conformers", "generate", "--model", str(model), "--input", str(inp),
            "--output", str(out), "--num-conformers", str(K), "--max-slots", "2", "--seed", "3",
            "--workers", "0", "--judge-workers", "1", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(rows_of(rows_path)) < 4 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)  # the CLI and its pools: nothing gets to clean up
        child.wait()
    written_before = len(rows_of(rows_path))
    assert written_before >= 4, "the run wrote too few rows before the kill to test anything"

    config = PipelineConfig(num_conformers=K, seed=3, workers=0, judge_workers=0)
    summary = generate_conformers(EngineConfig(model=model, max_slots=2, device="cpu"), inp, out, config)
    rows = rows_of(rows_path)
    assert summary.conformers_skipped == written_before and len(rows) == len(MOLECULES) * K
    assert len({r["id"] for r in rows}) == len(rows) and all(r["status"] == "ok" for r in rows)
    records = [r.prop("row_id") for r in read_sdf(out)]
    assert sorted(records) == sorted(r["id"] for r in rows)
