"""The measured part of the `conformer-pipeline` scenario (child process): the molecules -> a .smi file ->
`inferlab conformers generate` in a subprocess, timed by its wall clock -> the row's figures. See
conformer_pipeline.py for the protocol.

Files live in RUN_DIR/conformer-pipeline/<cell key>/ (emptied when the cell starts, so every run writes a
fresh output): molecules.smi, and per run run-N/out.sdf, out.jsonl, summary.json and cli.log (the
command's output, whose tail an error row quotes); a scaled-out run (knob gpus) writes out.sdf.scale/
(its shards and report.json) instead of summary.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.scenarios.base import CellContext
from inferlab.bench.scenarios.conformer_pipeline_scale import figures_from_scale_report
from inferlab.errors import UnsupportedError

LOG_TAIL_LINES = 8
MIN_RERUN_S = 30
RERUN_FIGURES = ("wall_s", "engine_start_s", "output_tokens_per_s", "molecules_per_s", "generation_output_tokens_per_s",
                 "prefill_share", "consumer_s", "valid_fraction")


def _max_positions(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["max_position_embeddings"])


def cli_argv(c: dict[str, Any], model: Path, smi: Path, out: Path) -> list[str]:
    """The command a user would type for this cell (with --summary-json for the figures)."""
    argv = [sys.executable, "-m", "inferlab.cli", "conformers", "generate", "--model", str(model), "--input", str(smi),
            "--output", str(out / "out.sdf"), "--num-conformers", str(c["num_conformers"]), "--profile", c["profile"],
            "--seed", str(c["seed"]), "--dtype", c["dtype"], "--device", c["device"]]
    argv += ["--gpus", str(c["gpus"])] if c["gpus"] else ["--summary-json", str(out / "summary.json")]
    if c["temperature"] == 0:
        argv += ["--sampling", "greedy"]
    else:
        argv += ["--sampling", "top-p", "--temperature", str(c["temperature"]), "--top-p", str(c["top_p"])]
    if c["max_slots"]:
        argv += ["--max-slots", str(c["max_slots"])]
    if c["stereo_retries"]:
        argv += ["--stereo-retries", str(c["stereo_retries"])]
    if c["kv_dtype"] != "auto":
        argv += ["--kv-dtype", c["kv_dtype"]]
    return argv


def run_cli(c: dict[str, Any], model: Path, smi: Path, out: Path, timeout_s: float) -> dict[str, Any]:
    """One run of the command into `out`; its figures (wall clock from here, the rest from its summary)."""
    out.mkdir(parents=True)
    env = dict(os.environ)
    if c["cpu_threads"]:
        env["OMP_NUM_THREADS"] = str(c["cpu_threads"])
    log = out / "cli.log"
    started = time.perf_counter()
    with log.open("w") as sink:
        code = subprocess.run(cli_argv(c, model, smi, out), stdout=sink, stderr=subprocess.STDOUT, env=env,
                              timeout=timeout_s).returncode
    wall = time.perf_counter() - started
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL_LINES:])
        if "unrecognized arguments: --kv-dtype" in tail:
            raise UnsupportedError(f"this build of inferlab has no --kv-dtype (the fp8 KV cache): {tail}")
        raise RuntimeError(f"`inferlab conformers generate` exited {code} (log {log}): {tail}")
    if c["gpus"]:
        return figures_from_scale_report(json.loads((out / "out.sdf.scale" / "report.json").read_text()), wall)
    return figures_from_summary(json.loads((out / "summary.json").read_text()), wall)


def figures_from_summary(s: dict[str, Any], wall: float) -> dict[str, Any]:
    engine = s.get("engine") or {}
    ok = s["conformers_ok"]
    return {
        "wall_s": wall,  # the command, process start to exit
        "pipeline_wall_s": s["wall_s"],  # inside generate_conformers
        "cli_start_s": wall - s["wall_s"],  # interpreter, imports, argument parsing, exit
        "output_tokens": s["output_tokens"],
        "output_tokens_per_s": s["output_tokens"] / wall,
        "molecules_per_s": s["molecules_run"] / wall,
        "conformers_per_s": (ok + s["conformers_error"]) / wall,
        "engine_start_s": s["engine_start_s"],
        "generate_s": s["generate_s"],
        "generation_output_tokens_per_s": s["generate_output_tokens_per_s"],
        "prefill_share": s["prefill_share"],
        "engine_prefill_s": engine.get("prefill_s"),
        "engine_decode_s": engine.get("decode_s"),
        "engine_stats": engine,
        "consumer_s": s["consumer_s"],
        "judge_wait_s": s["judge_wait_s"],
        "drain_s": s["drain_s"],
        "other_s": s["other_s"],
        "judge_cpu_s": s["decode_s"],
        "write_s": s["write_s"],
        "template_wait_s": s["template_wait_s"],
        "template_cpu_s": s["template_cpu_s"],
        "stream_calls": s["stream_calls"],
        "slots": s["slots"],
        "max_seq_len": s["max_seq_len"],
        "conformers_ok": ok,
        "conformers_error": s["conformers_error"],
        "conformers_generated": s["conformers_generated"],
        "conformers_rejected": s["conformers_rejected"],
        "valid_fraction": s["valid_fraction"],
        "graph_match_fraction": s["graph_matches"] / ok if ok else None,
        "stereo_agreement": s["stereo_agreement"],
        "stereo_checked": s["stereo_checked"],
        "stereo_matches": s["stereo_matches"],
        "stereo_retries": s["stereo_retries"],
        "retry_output_tokens": s["retry_output_tokens"],
    }


def measure_pipeline(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.models.tokenizer_loading import load_hf_tokenizer

    from inferlab.bench.scenarios.conformer_output_check import check_outputs
    from inferlab.bench.scenarios.constrained import molecule_selection
    from inferlab.bench.scenarios.constrained_inputs import load_molecules, molecule_file, write_smi
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    c = cell.config
    assert ctx.model_path is not None
    deadline = time.monotonic() + cell.timeout_s - 15  # leave the row time to be written
    work = ctx.run_dir / "conformer-pipeline" / cell.key
    shutil.rmtree(work, ignore_errors=True)
    tokenizer = load_hf_tokenizer(ctx.model_path)
    molecules = load_molecules(molecule_file(c["molecules_file"]), c["num_molecules"], get_profile(c["profile"]),
                               tokenizer, min(c["context"], _max_positions(ctx.model_path)), molecule_selection(c))
    smi = write_smi(molecules, work / "molecules.smi")
    metrics: dict[str, Any] = {
        "molecules": len(molecules.molecules),
        "molecules_with_stereo": sum(any(ch in m.smiles for ch in "@/\\") for m in molecules.molecules),
        "mean_heavy_atoms": sum(m.template.num_atoms for m in molecules.molecules) / len(molecules.molecules),
        "molecules_selection": molecules.selection.describe(),
        "molecules_source": molecules.source,
        "command": " ".join(cli_argv(c, ctx.model_path, smi, work / "run-1")[1:]),
    }
    metrics.update(run_cli(c, ctx.model_path, smi, work / "run-1", deadline - time.monotonic()))
    ctx.save_partial(metrics, "the second run or the independent check")
    if c["runs"] == 2 and deadline - time.monotonic() < MIN_RERUN_S:
        ctx.warn(f"the second run was not started: under {MIN_RERUN_S} s of the cell's timeout were left")
    elif c["runs"] == 2:
        rerun = run_cli(c, ctx.model_path, smi, work / "run-2", deadline - time.monotonic())
        metrics.update({f"rerun_{key}": rerun.get(key) for key in RERUN_FIGURES})
    if c["verify_sdf"]:
        t = time.perf_counter()
        inputs = {m.id: m.smiles for m in molecules.molecules}
        metrics.update(check_outputs(work / "run-1" / "out.sdf", work / "run-1" / "out.jsonl", inputs,
                                     c["num_conformers"]))
        metrics["verify_s"] = time.perf_counter() - t
        if metrics["invalid_total"]:
            ctx.warn(f"{metrics['invalid_total']} invalid outputs found by the independent reading of the SDF/JSONL")
    return metrics
