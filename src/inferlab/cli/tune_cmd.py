"""`inferlab tune`: a short measured sweep of a workload's speed knobs on a sample of its inputs
(inferlab.workloads.tune), with a progress bar over the candidates, a table of their figures, and the
recommended configuration written as JSON for `--config` of generate, classify and conformers generate."""

from __future__ import annotations

import argparse

from inferlab.cli.device_arg import add_device_arg

WORKLOADS = ("generate", "classify", "conformers")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be >= 1")
    return sizes


def register(sub: argparse._SubParsersAction) -> None:
    from inferlab.workloads.conformers.profiles import DEFAULT_PROFILE, PROFILES

    p = sub.add_parser(
        "tune",
        help="measure a few settings of a workload on a sample and write the fastest as a --config file",
        description="Runs the workload's own code on the first rows of --sample once per candidate (generate, "
        "conformers: the engine's --max-slots; classify: --batch-size x --dtype x --attn) and writes the "
        "best by throughput, with every candidate's figures and the environment, to --out.",
    )
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--workload", required=True, choices=WORKLOADS)
    p.add_argument("--sample", required=True,
                   help="inputs in the workload's format: prompts JSONL (generate), texts JSONL (classify), "
                        ".smi/.csv molecules (conformers)")
    p.add_argument("--out", "--output", dest="out", default="tuned.json", help="the JSON to write (default tuned.json)")
    p.add_argument("--sample-rows", type=int, default=None,
                   help="rows of the sample each candidate runs (default: generate 256, classify 512, conformers 32)")
    p.add_argument("--sizes", type=_sizes, default=None, metavar="N,N,...",
                   help="the sizes to try (max slots or batch sizes; default: a grid for the device)")
    p.add_argument("--min-seconds", type=float, default=2.0,
                   help="timed seconds per candidate: the sample runs in passes until then (default 2)")
    add_device_arg(p)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="generate/conformers: the engine's dtype; classify: try only this one (auto: the device's)")
    p.add_argument("--backend", default="auto", choices=["auto", "inferlab", "hf"], help="generate's backend")
    p.add_argument("--kv-dtype", default="auto", choices=["auto", "fp8"],
                   help="generate/conformers: the engine's KV cache, auto (the model dtype) or fp8 (e4m3 + scales)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generate: tokens per prompt (a line may override)")
    p.add_argument("--num-conformers", type=int, default=2, metavar="K", help="conformers: K per molecule")
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES), help="conformers: the text format")
    p.add_argument("--work-dir", default=None, help="keep the candidates' outputs here (default: a temporary folder)")
    p.set_defaults(func=_tune)


def _tune(args: argparse.Namespace) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.cli.paths import output_file, output_folder
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep
    from inferlab.workloads.tune.tuned_file import write_tuned_config

    output_file("--out", args.out, (".json",), "the tuned settings as JSON (read back by --config)",
                {"--sample": args.sample})
    if args.work_dir:
        output_folder("--work-dir", args.work_dir)
    settings = TuneSettings(
        workload=args.workload, model=args.model, sample=args.sample, sample_rows=args.sample_rows, sizes=args.sizes,
        device=args.device, dtype=args.dtype, kv_dtype=args.kv_dtype, backend=args.backend,
        max_new_tokens=args.max_new_tokens,
        num_conformers=args.num_conformers, profile=args.profile, min_seconds=args.min_seconds,
        work_dir=args.work_dir,
    )
    bar = None

    def on_plan(candidates: list[dict]) -> None:
        nonlocal bar
        bar = tqdm(total=len(candidates), unit="candidate", dynamic_ncols=True, desc=f"tune {args.workload}")

    def on_candidate(index: int, candidate: dict, outcome) -> None:
        bar.set_postfix_str(_describe(candidate), refresh=False)
        bar.update(1)

    try:
        with logging_redirect_tqdm():
            tuned = run_sweep(settings, on_plan, on_candidate)
    finally:
        if bar is not None:
            bar.close()
    for entry in tuned.candidates:
        if "error" in entry:
            print(f"  {_describe(entry['settings']):<40} failed: {entry['error']}")
        else:
            figures = entry["figures"]
            print(f"  {_describe(entry['settings']):<40} {_number(figures.get(tuned.metric))} {tuned.metric} "
                  f"({figures['passes']} passes, {figures['seconds']:.2f} s)")
    margin = "" if tuned.runner_up_margin is None else f", {100 * tuned.runner_up_margin:.1f}% ahead of the next"
    print(f"recommended: {_describe(tuned.recommended)}{margin}")
    out = write_tuned_config(tuned, args.out)
    print(f"wrote {out}; use it with: inferlab {'conformers generate' if args.workload == 'conformers' else args.workload}"
          f" --model {args.model} --config {out} ...")
    return 0


def _describe(settings: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in settings.items())


def _number(value) -> str:
    return "-" if value is None else f"{value:,.1f}"
