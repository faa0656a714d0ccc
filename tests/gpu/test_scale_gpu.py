"""The conformer pipeline scaled out over two GPUs (`--gpus 2`, one local worker process per GPU): worker 1
killed a third of the way into its shard leaves the run unmerged; a rerun resumes that shard alone and
merges every (molecule, k) exactly once. Needs two GPUs (the nvidia-h100-x2 / h200-x2 machines), skipped
on one. Quick: tiny-qwen3, 24 NCI molecules x 2; full: qwen3-0.6b, 96 x 8. On CPU workers:
tests/unit/conformers/test_pipeline_scale.py; the throughput of 1 vs 2 GPUs: the lab's scale-out preset.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from gpu_testkit import CUDA_ONLY

pytestmark = [*CUDA_ONLY, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]


def test_a_killed_gpu_worker_then_a_rerun_write_every_row_once(size, checkpoint, tmp_path, monkeypatch):
    from rdkit import RDConfig

    from inferlab.cli import main
    from inferlab.cli.scale_args import EXIT_INCOMPLETE
    from inferlab.scale.faults import FAULT_ENV

    molecules, k = size.pick((24, 2), (96, 8))
    model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
    source = tmp_path / "molecules.smi"
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        source.write_text("".join(f"{line.split()[0]} nci{i}\n" for i, line in zip(range(molecules), f)))
    out = tmp_path / "out.sdf"
    argv = ["conformers", "generate", "--model", str(model), "--input", str(source), "--output", str(out),
            "--num-conformers", str(k), "--device", "cuda", "--gpus", "2"]
    monkeypatch.setenv(FAULT_ENV, f"shard=1,after_rows={max(1, molecules * k // 6)}")
    assert main([*argv, "--retries", "0"]) == EXIT_INCOMPLETE
    assert not out.exists()
    monkeypatch.delenv(FAULT_ENV)
    assert main(argv) == 0
    manifest = json.loads((tmp_path / "out.sdf.scale" / "manifest.json").read_text())
    assert [s["attempts"] for s in manifest["shards"]] == [1, 2]  # the finished shard was not rerun
    rows = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    ids = [f"nci{i}#{j}" for i in range(molecules) for j in range(k)]
    assert sorted(r["id"] for r in rows) == sorted(ids)
