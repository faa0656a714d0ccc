"""`inferlab conformers generate` (also `inferlab conformers --model ...`): the flags, the progress bar and
the closing summary of the conformer pipeline (inferlab.workloads.conformers.pipeline.generate). Registered by
conformers_cmd.py beside `evaluate` and `reference`."""

from __future__ import annotations

import argparse
from typing import Any

from inferlab.cli.engine_args import AUTO, add_engine_args, add_kv_dtype_arg, engine_config_from
from inferlab.cli.row_outcome import existing
from inferlab.cli.output_guard_args import add_input_bound_args, add_overwrite_arg, guarded, molecule_bounds
from inferlab.cli.scale_args import add_scale_args, wants_scale_out
from inferlab.cli.tuned_config_args import add_config_arg, add_tunable, apply_tuned_config

GENERATE_HELP = "generate K 3D conformers per molecule with the engine, constrained on the GPU (SDF + JSONL)"
GENERATE_DESCRIPTION = (
    "Generate K 3D conformers per input molecule as enriched SMILES with the engine, the conformer constraint "
    "applied on the GPU inside each decode step: every output is valid by construction. Writes the valid "
    "conformers to OUTPUT (SDF) and one row per conformer (valid or not, with its error) to OUTPUT with .jsonl; "
    "a rerun resumes. The progress bar shows conformers done, tok/s, validity and the ETA; the closing summary "
    "validity, graph and stereo agreement read back by RDKit, the constraint pressure (how much of the model's "
    "probability the constraint took away, with a warning when the profile may not fit the checkpoint), and speed. Try it first with `inferlab demo`; a checkpoint of a real shape: `inferlab model "
    "init --preset qwen3-0.6b --out DIR --tokenizer PATH/qwen3-chem`. docs/conformers.md explains the format.")
REQUIRED = ("model", "input", "output")


def add_generation_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The generation flags; `required=False` for the `inferlab conformers --model ...` form, whose handler
    checks them itself (the same parser also leads to evaluate and reference)."""
    from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, PROFILES
    from inferlab.workloads.conformers.pipeline.config import SAMPLING_MODES

    g = p.add_argument_group("conformer generation")
    g.add_argument("--model", required=required, help="local checkpoint folder (with its tokenizer)")
    g.add_argument("--input", required=required, help=".smi (SMILES [id]) or .csv/.tsv with a SMILES column")
    g.add_argument("--output", required=required,
                   help="SDF of the valid conformers; OUTPUT with .jsonl holds one row per conformer; a rerun resumes")
    g.add_argument("--num-conformers", type=int, default=1, metavar="K", help="conformers per molecule (default 1)")
    g.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES), help="the checkpoint's text format")
    g.add_argument("--sampling", default="top-p", choices=list(SAMPLING_MODES),
                   help="top-p: sample with --temperature and --top-p (each conformer its own seed); greedy: the most "
                        "likely token each step (the K conformers of a molecule are then the same)")
    g.add_argument("--temperature", type=float, default=1.0, help="top-p sampling's temperature, > 0")
    g.add_argument("--top-p", type=float, default=1.0,
                   help="sample from the most likely tokens whose probabilities add up to this (1.0: all of them)")
    g.add_argument("--seed", type=int, default=0, help="conformer <id>#<k> samples with a seed from this and its id")
    g.add_argument("--workers", type=int, default=None,
                   help="processes building templates and constraints ahead of the GPU (default min(8, cores); "
                        "0: in this process)")
    g.add_argument("--judge-workers", type=int, default=None,
                   help="processes checking finished conformers (strict and plain decoding, stereo, SDF records) off "
                        "the engine's path (default 2; small jobs and 0: in this process)")
    g.add_argument("--retry-errors", action="store_true",
                   help="generate the error rows of earlier runs again (each replaced by its new row)")
    g.add_argument("--stereo-mirror", action=argparse.BooleanOptionalAction, default=True,
                   help="write a conformer whose coordinates have the other hand of the input's stereo as its mirror "
                        "image, which has the input's stereo and the same distances (rows say mirrored=true; "
                        "default: on)")
    g.add_argument("--stereo-retries", type=int, default=0, metavar="N",
                   help="generate a conformer again, up to N times, while its coordinates (mirrored or not) "
                        "contradict the input's specified stereo (default 0: keep it, marked stereo_ok=false)")
    g.add_argument("--summary-json", default=None, metavar="PATH",
                   help="also write the closing summary's figures (and the engine's) as JSON to PATH")
    g.add_argument("--smiles-column", default=None, help="CSV column holding SMILES (default: detected)")
    g.add_argument("--id-column", default=None, help="CSV column holding ids (default: detected)")
    e = add_engine_args(p, "prompt + conformer tokens per row (default: the longest row of the input's largest "
                           "molecules)",
                        auto_slots_help="concurrent rows: auto (default: as many as memory holds, up to where a step "
                                        "saturates, 1024 on a GPU and 16 on a CPU, and at most the job's requests) or "
                                        "a number")
    add_kv_dtype_arg(e, ("auto", "model", "fp8"),
                     "KV cache: auto (default: the model dtype unless the reference model's quality gate shows FP8 "
                     "within the spread, on GPUs of CUDA capability >= 8.9; the summary says which and why), model "
                     "(the model dtype) or fp8 (e4m3 + per-position scales: half the bytes; on a CPU a slower check)")
    add_tunable(e, "--forced-run-tokens", type=int, default=0, metavar="N",
                   help="feed each row up to N of the template's forced tokens per decode step as extra positions "
                        "(0-7; default 0: one token per step): the same conformers in fewer steps")
    add_input_bound_args(p, molecules=True)
    add_overwrite_arg(p)
    add_scale_args(p)
    add_config_arg(p, "conformers")  # inferlab tune's max_slots, kv_dtype and forced_run_tokens


def pipeline_config_from(args: argparse.Namespace, row_ceiling: int | None = None):
    from inferlab.workloads.conformers.pipeline.config import ConformerSampling, PipelineConfig

    return PipelineConfig(
        num_conformers=args.num_conformers,
        profile=args.profile,
        sampling=ConformerSampling(args.sampling, args.temperature, args.top_p),
        seed=args.seed,
        workers=args.workers,
        judge_workers=args.judge_workers,
        stereo_mirror=args.stereo_mirror,
        stereo_retries=args.stereo_retries,
        retry_errors=args.retry_errors,
        row_ceiling=row_ceiling,
        smiles_column=args.smiles_column,
        id_column=args.id_column,
        input_bounds=molecule_bounds(args),
    )


def run_generate(args: argparse.Namespace) -> int:
    from inferlab.errors import ConfigError

    if not wants_scale_out(args):  # this process runs the engine: its import and CUDA context overlap what is before it
        from inferlab.cli.background_import import start_engine_in_background

        start_engine_in_background(args.device)
    tuned = apply_tuned_config(args)
    if "max_slots" in tuned:  # measured on the tune's sample: a ceiling, so that a job of longer rows still fits
        args.max_slots, row_ceiling = AUTO, tuned["max_slots"]
    else:
        row_ceiling = None
    missing = [f"--{name}" for name in REQUIRED if getattr(args, name, None) is None]
    if missing:
        raise ConfigError(f"conformer generation needs {', '.join(missing)} "
                          "(or an action: inferlab conformers generate|evaluate|reference --help)")
    check_paths(args)
    config = pipeline_config_from(args, row_ceiling)
    check_model(args.model)
    if wants_scale_out(args) and args.retry_errors:
        raise ConfigError("--retry-errors runs without --gpus / --launcher for now: rerun the merged output's "
                          "error rows with one process (the same --output), or rerun into a new output")
    from inferlab.workloads.conformers.pipeline.config import result_settings
    from inferlab.workloads.conformers.pipeline.output import default_jsonl_path

    engine = engine_config_from(args)
    outputs = [("--output", args.output, True), ("--output's rows", default_jsonl_path(args.output), True),
               ("--summary-json", args.summary_json, False)]
    with guarded(args, "conformers generate", result_settings(engine, config), {"--input": args.input}, outputs):
        if wants_scale_out(args):  # --gpus/--launcher: molecules sharded over workers (inferlab.scale)
            from inferlab.cli.scale_args import run_scaled_command
            from inferlab.scale.workloads.conformer_pipeline import pipeline_params

            return run_scaled_command(args, "conformers", pipeline_params(engine, config))
        return _run_here(args, config, engine)


def check_paths(args: argparse.Namespace) -> None:
    from inferlab.cli.paths import input_file, output_file

    input_file("--input", args.input, None, "a molecule file (.smi, .csv or .tsv)")  # the reader checks the kind
    output_file("--output", args.output, (".sdf",), "an SDF of conformers (and its .jsonl rows beside it)",
                {"--input": args.input})


def check_model(model: str) -> None:
    """The checkpoint's config.json and weight files before any work starts (a missing folder is named as
    such, a damaged config or pickle-only weights are refused), here and before a scale-out launches its
    workers."""
    from inferlab.errors import UnsupportedError
    from inferlab.models.checkpoint_check import check_engine_checkpoint
    from inferlab.workloads.conformers.pipeline.generate import ENGINE_ONLY

    try:
        check_engine_checkpoint(model)
    except UnsupportedError as e:
        raise UnsupportedError(f"{e}; {ENGINE_ONLY}") from None


def _run_here(args: argparse.Namespace, config, engine) -> int:
    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.cli.process_age import process_age_s
    from inferlab.cli.row_outcome import exit_code
    from inferlab.cli.token_rate_bar import TokenRateBar
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers
    from inferlab.workloads.conformers.pipeline.output import default_jsonl_path

    progress = TokenRateBar("conf", validity=True, desc="conformers")

    def on_start(todo: int, done_before: int) -> None:
        if done_before:
            print(f"resuming: {done_before} conformer rows already in {default_jsonl_path(args.output)}")
        progress.start(todo)

    entered_s = process_age_s()  # the interpreter's start, imports and argument parsing, before the pipeline
    try:
        with logging_redirect_tqdm():
            summary = generate_conformers(engine, args.input, args.output, config, on_start, progress.row,
                                          progress.phase, progress.engine_tokens)
    finally:
        progress.close()
    print_summary(summary, args.output)
    if args.summary_json:
        write_summary_json(summary, args.summary_json, entered_s)
    return exit_code(progress.figures.total, summary.conformers_ok, summary.molecules, summary.conformers_skipped)


def write_summary_json(summary, path: str, entered_s: float | None = None) -> None:
    """The summary's figures, with `cli_entered_s`: seconds from the process's start to the pipeline's."""
    from inferlab.outputs.atomic import write_json_atomic

    write_json_atomic(path, {**summary.as_dict(), "cli_entered_s": entered_s})


def print_summary(summary, output: str) -> None:
    from inferlab.cli.row_outcome import print_error_groups
    from inferlab.workloads.conformers.pipeline.output import default_jsonl_path

    s = summary.as_dict()
    valid = s["valid_fraction"]
    print(f"molecules: {s['molecules']} in the input, {s['molecules_run']} generated in this run")
    retried = (f" ({s['conformers_retried']} error rows of earlier runs generated again)"
               if s["conformers_retried"] else "")
    print(f"conformers: {s['conformers_ok']} valid, {s['conformers_error']} error rows, "
          f"{s['conformers_skipped']} written by earlier runs{retried}")
    if s["conformers_generated"]:
        print(f"validity: {s['conformers_generated'] - s['conformers_rejected']} of {s['conformers_generated']} "
              f"generated conformers are valid ({100 * valid:.1f}%); the plain decoder gives the input's graph for "
              f"{s['graph_matches']}")
    if s["stereo_checked"] or s["stereo_retries"]:
        retried = (f"; {s['stereo_retries']} attempts generated again ({s['retry_output_tokens']:,} tokens)"
                   if s["stereo_retries"] else "")
        mirrored = (f" ({s['stereo_mirrored']} of them mirrored: generated with the other hand)"
                    if s["stereo_mirrored"] else "")
        print(f"stereo: {s['stereo_matches']} of {s['stereo_checked']} conformers with specified stereo match their "
              f"input{mirrored}{retried}")
    elif s["conformers_ok"]:
        print("stereo: no input molecule specifies stereo (tetrahedral centres or double bonds)")
    print_pressure(s["constraint_pressure"])
    if s["sizing"]:
        print(f"engine: {s['sizing']['slots']}; max_seq_len {s['sizing']['max_seq_len']}; kv cache "
              f"{s['sizing']['kv_cache']}")
    if s["engine_start_s"] or s["output_tokens"]:  # the engine ran
        print(f"tokens: {s['output_tokens']:,} generated in {s['wall_s']:.1f} s: {_rate(s['output_tokens_per_s'])} "
              f"tok/s, {_rate(s['conformers_per_s'], 2)} conformers/s, {_rate(s['molecules_per_s'], 2)} molecules/s "
              f"(inside the engine: {_rate(s['generate_output_tokens_per_s'])} tok/s{_bucket_fill(s)})")
        judges = {0: "this process", 1: "1 process"}.get(s["judge_workers"], f"{s['judge_workers']} processes")
        print(f"time: before the engine {s['before_engine_s']:.1f} s ({_before_engine_parts(s)}), engine start "
              f"{s['engine_start_s']:.1f} s, generation {s['generate_s']:.1f} s, engine waiting for the pipeline "
              f"{s['consumer_s']:.1f} s, closing {s['teardown_s']:.1f} s; judging {s['decode_s']:.1f} s of CPU in "
              f"{judges}, writing {s['write_s']:.1f} s; templates {s['template_cpu_s']:.1f} s of CPU in the pool, "
              f"{s['template_wait_s']:.1f} s waited for")
    rows = default_jsonl_path(output)
    print_error_groups(s["errors_by_reason"], str(rows))
    print(_written(s, output, str(rows)))


def _bucket_fill(s: dict[str, Any]) -> str:
    """`, its decode steps' rows 91% live`: how full the engine's decode buckets ran (engine.stats)."""
    engine = s.get("engine") or {}
    rows, live = engine.get("row_steps") or 0, engine.get("live_row_steps") or 0
    return f", its decode steps' rows {live / rows:.0%} live" if rows else ""


def _before_engine_parts(s: dict[str, Any]) -> str:
    """`inputs 0.2 s, pools 0.1 s, torch 1.9 s, sizing 0.4 s (0.3 s of it waiting for the row length)`."""
    parts = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in s["before_engine_parts"].items())
    if s["length_wait_s"] >= 0.05:
        parts += f" ({s['length_wait_s']:.1f} s of it waiting for the row length)"
    return parts


def _written(s: dict[str, Any], sdf: str, rows: str) -> str:
    """What the run left on disk, naming only files that exist."""
    if not s["molecules"]:
        return "nothing written: the input holds no molecule"
    files = existing([sdf, rows])
    if sdf not in files:
        return f"no valid conformer, so no SDF; the error rows are in {rows}" if rows in files else "nothing written"
    return f"wrote {' and '.join(files)}"


def print_pressure(pressure: dict | None) -> None:
    """The run's constraint pressure (workloads/conformers/pipeline/pressure.py) and its warning, if any."""
    if pressure is None:
        return
    print(f"constraint pressure (the model's probability the constraint took away, per token): mean "
          f"{pressure['mean']:.3f}, p95 of the conformers' means {pressure['p95_request_mean']:.3f}, max "
          f"{pressure['max']:.3f} at {pressure['max_at']}")
    if pressure["warning"]:
        print(f"warning: {pressure['warning']}")


def _rate(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"
