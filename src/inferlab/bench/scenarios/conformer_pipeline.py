"""Scenario `conformer-pipeline`: `inferlab conformers generate` end to end, run as a user runs it.

The cell picks its molecules exactly as the `constrained` scenario does (molecules.py: the
first `num_molecules` of the file that pass the selection and fit the context, e.g. NCI's drug-sized
molecules with stereo assigned), writes them as a .smi file, and runs the CLI on it in a subprocess
(`python -m inferlab.cli conformers generate ... --summary-json`): the command's wall clock gives the
end-to-end figures (tok/s, molecules/s), its summary the engine's own (start-up, prefill share of the
generation, generation-phase tok/s, validity, graph match, stereo agreement, time the engine waited for
the pipeline). With `runs=2` the same job runs again into a fresh output: its engine start-up
(`rerun_engine_start_s`) shows what the start-up cache saves. With `verify_sdf` the first run's files
are read back independently (conformer_output_check.py): K rows per molecule, strict-invalid rows, SDF
records readable and of the input's graph, stereo of the written coordinates; `invalid_total` must be 0.
With `gpus` N the command scales out (`--gpus N`, one worker per GPU, inferlab.scale): the figures then
come from the run's scale report (conformer_pipeline_scale.py): end to end and steady (the slowest
worker's run) rates; the `scale-out` preset compares 1 and 2 GPUs.

The engine alone on the same molecules is the `constrained` scenario with backend `inferlab` (the
`conformer-pipeline` preset puts both in one run).

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

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, dtype_knob, sampling_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.conformer_pipeline_scale import figures_from_scale_report
from inferlab.bench.scenarios.molecules import SELECTION_KNOBS, validate_selection
from inferlab.errors import ConfigError, UnsupportedError

TOKENS_PER_HEAVY_ATOM = 24  # a fixed4 conformer with the qwen3-chem tokenizer (CONFORMERS.md: ~640 for drug-sized)
GPU_TOKENS_PER_S = 38_000.0  # the engine's rate on this job with qwen3-0.6b, for estimates
LOG_TAIL_LINES = 8
MIN_RERUN_S = 30
RERUN_FIGURES = ("wall_s", "engine_start_s", "output_tokens_per_s", "molecules_per_s", "generation_output_tokens_per_s",
                 "prefill_share", "consumer_s", "valid_fraction", "cli_start_s", "cli_entered_s", "cli_exit_s",
                 "before_engine_s", "before_engine_parts", "generate_s", "teardown_s")

KNOBS = (
    Knob("num_molecules", int, 400, "the first N molecules of the file that pass the selection and fit", minimum=1),
    Knob("num_conformers", int, 8, "conformers per molecule, K (--num-conformers)", minimum=1),
    Knob("context", int, 2048, "positions a molecule's prompt + longest conformer may use (selection)", minimum=16),
    Knob("molecules_file", str, "", "a .smi/.csv of molecules ('' = RDKit's NCI first_5K.smi)"),
    *SELECTION_KNOBS,
    *sampling_knobs(top_p=1.0, temperature_help="sampling temperature (--temperature); 0 = greedy",
                    top_p_help="nucleus sampling (--top-p)"),
    Knob("profile", str, "v3-fixed4", "conformer format profile",
         choices=("v3-fixed4", "v3-stripped", "v2-fixed4", "v2-stripped")),
    dtype_knob("weights and activations (--dtype)"),
    Knob("kv_dtype", str, "auto", "KV cache (--kv-dtype; auto: the CLI's default, its quality gate; model: the model "
         "dtype; fp8 needs a build and GPU with the fp8 cache)", choices=("auto", "model", "fp8")),
    Knob("max_slots", int, 0, "engine rows (--max-slots); 0 = the CLI's default (auto: as memory holds, up to "
         "where a step saturates)", minimum=0),
    Knob("gpus", int, 0, "--gpus N: workers with one GPU each (inferlab.scale); 0 = one process, no scale-out",
         minimum=0),
    Knob("stereo_mirror", bool, True, "--stereo-mirror (the CLI's default) or --no-stereo-mirror"),
    Knob("stereo_retries", int, 0, "--stereo-retries", minimum=0),
    Knob("config", str, "", "--config FILE: settings an `inferlab tune --workload conformers` wrote ('' = none); "
         "max_slots and kv_dtype given here win over it, as flags do"),
    Knob("runs", int, 2, "1, or 2: the same job again into a fresh output (start-up with the cache)", choices=(1, 2)),
    Knob("verify_sdf", bool, True, "read the first run's SDF and JSONL back independently (validity, graph, stereo)"),
    TOKENIZER_KNOB,
    Knob("device", str, "auto", "--device", choices=("auto", "cuda", "cpu")),
    Knob("seed", int, 0, "--seed", minimum=0),
    Knob("cpu_threads", int, 0, "torch threads of the CLI process (OMP_NUM_THREADS; 0 = torch's default)", minimum=0),
)


def validate(cell: Cell) -> None:
    c = cell.config
    validate_selection(c)
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable top-p")
    if c["stereo_retries"] and c["temperature"] == 0:
        raise ConfigError("stereo_retries with temperature=0 (greedy) would redraw the same conformer; "
                          "set a temperature > 0 or stereo_retries=0")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "conformer-pipeline")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds. GPU: ~10 s for the cell and its molecule selection, per run ~8 s of CLI start and
    ~20 s of engine start-up (less with a start-up cache) plus the tokens at ~38k tok/s (drug-sized
    molecules, ~27 heavy atoms, ~24 tokens each; qwen3-chem-mini, 4 narrow layers, ~10x that, where judging
    by two processes at ~2 ms per conformer sets the pace); the independent check ~2 ms per conformer. CPU
    (tiny models): ~250 tokens/s."""
    c = cell.config
    atoms = 27 if c["min_heavy_atoms"] >= 20 else 12
    tokens = c["num_molecules"] * c["num_conformers"] * atoms * TOKENS_PER_HEAVY_ATOM * (1 + 0.5 * bool(c["stereo_retries"]))
    conformers = c["num_molecules"] * c["num_conformers"]
    rate, start = (GPU_TOKENS_PER_S * (10 if cell.model == "qwen3-chem-mini" else 1), 28.0) if accelerator else (250.0, 15.0)
    check = 0.002 * conformers if c["verify_sdf"] else 0.0
    return 10.0 + c["runs"] * (start + max(tokens / rate, conformers * 0.001)) + check


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
    if not c["stereo_mirror"]:
        argv += ["--no-stereo-mirror"]
    if c["stereo_retries"]:
        argv += ["--stereo-retries", str(c["stereo_retries"])]
    if c["config"]:
        argv += ["--config", c["config"]]
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
        "cli_entered_s": s.get("cli_entered_s"),  # of it: from the process's start to the pipeline's (Linux)
        # the rest of it: from the pipeline's return to the process's end (the summary, the interpreter's exit)
        "cli_exit_s": wall - s["wall_s"] - s["cli_entered_s"] if s.get("cli_entered_s") is not None else None,
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
        "sizing": s.get("sizing"),  # the rows, row length and KV cache the CLI took, and why
        "before_engine_s": s.get("before_engine_s"),
        "length_wait_s": s.get("length_wait_s"),
        "before_engine_parts": s.get("before_engine_parts"),  # stage -> seconds (pipeline/stats.py)
        "teardown_s": s.get("teardown_s"),
        "conformers_ok": ok,
        "conformers_error": s["conformers_error"],
        "conformers_generated": s["conformers_generated"],
        "conformers_rejected": s["conformers_rejected"],
        "valid_fraction": s["valid_fraction"],
        "graph_match_fraction": s["graph_matches"] / ok if ok else None,
        "stereo_agreement": s["stereo_agreement"],
        "stereo_checked": s["stereo_checked"],
        "stereo_matches": s["stereo_matches"],
        "stereo_mirrored": s["stereo_mirrored"],
        "stereo_retries": s["stereo_retries"],
        "retry_output_tokens": s["retry_output_tokens"],
    }


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.scenarios.conformer_output_check import check_outputs
    from inferlab.bench.scenarios.molecules import (load_molecules, model_positions, molecule_file,
                                                    molecule_selection, write_smi)
    from inferlab.models.tokenizer_loading import load_hf_tokenizer
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    c = cell.config
    assert ctx.model_path is not None
    deadline = time.monotonic() + cell.timeout_s - 15  # leave the row time to be written
    work = ctx.run_dir / "conformer-pipeline" / cell.key
    shutil.rmtree(work, ignore_errors=True)
    tokenizer = load_hf_tokenizer(ctx.model_path)
    molecules = load_molecules(molecule_file(c["molecules_file"]), c["num_molecules"], get_profile(c["profile"]),
                               tokenizer, min(c["context"], model_positions(ctx.model_path)), molecule_selection(c))
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


SCENARIO = Scenario(
    "conformer-pipeline",
    "`inferlab conformers generate` end to end (a subprocess, wall clock): tok/s, molecules/s, start-up, "
    "validity, stereo agreement, and an independent reading of the SDF",
    KNOBS, run, validate, estimate_s, default_timeout_s=540.0,
    workload_knobs=("num_molecules", "num_conformers", "molecules_file", "min_heavy_atoms", "max_heavy_atoms",
                    "assign_stereo", "temperature", "top_p", "profile", "stereo_mirror", "stereo_retries"),
)
