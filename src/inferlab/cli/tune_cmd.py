"""`inferlab tune`: a short measured sweep of a workload's speed knobs on a sample of its inputs
(inferlab.workloads.tune), with a progress bar over the candidates, a table of their figures (median and
spread over the timed passes), the verdict per knob, and the recommendation written as JSON for `--config`
of generate, classify and conformers generate. Exit 3: --budget-s ended the sweep early (rerun it)."""

from __future__ import annotations

import argparse

from inferlab.cli.device_arg import add_device_arg

WORKLOADS = ("generate", "classify", "conformers")
INCOMPLETE_EXIT = 3


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be >= 1")
    return sizes


def _kv_dtypes(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    if not values or set(values) - {"auto", "fp8"}:
        raise argparse.ArgumentTypeError(f"{text!r}: give auto (the model dtype), fp8, or auto,fp8")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, PROFILES
    from inferlab.workloads.tune.candidates import FORCED_RUN_TOKENS
    from inferlab.workloads.winner import MIN_REPEATS

    p = sub.add_parser(
        "tune",
        help="measure a few settings of a workload on a sample and write the clear winner as a --config file",
        description="Runs the workload's own code on the first rows of --sample once per candidate (generate, "
        "conformers on the engine: --max-slots doubling up to what its memory plan fits, x the KV dtypes the "
        "device runs, conformers also with forced tokens in bulk at each KV dtype's best size; classify: --batch-size x "
        "--dtype x --attn), each from a warm start (one untimed pass), "
        "timed in --passes passes. A setting is recommended only when it wins by more than the measured spread; "
        "the file, with every candidate's figures and the environment, goes to --out.",
    )
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--workload", required=True, choices=WORKLOADS)
    p.add_argument("--sample", required=True,
                   help="inputs in the workload's format: prompts JSONL (generate), texts JSONL (classify), "
                        ".smi/.csv molecules (conformers)")
    p.add_argument("--out", "--output", dest="out", default="tuned.json", help="the JSON to write (default tuned.json)")
    p.add_argument("--sample-rows", type=int, default=None,
                   help="rows of the sample each candidate runs (default: generate 256, classify 512, conformers 32); "
                        "the engine's grid stops at the rows they run at once")
    p.add_argument("--sizes", type=_sizes, default=None, metavar="N,N,...",
                   help="the sizes to try (max slots or batch sizes; default: the engine's memory plan, or a grid)")
    p.add_argument("--kv-dtypes", type=_kv_dtypes, default=None, metavar="auto,fp8",
                   help="generate/conformers: the engine's KV caches to try (default: the model dtype, and fp8 where "
                        "the GPU has FP8; never on CPU)")
    p.add_argument("--min-seconds", type=float, default=2.0,
                   help="timed seconds per pass: the sample runs until then (default 2)")
    p.add_argument("--passes", type=int, default=MIN_REPEATS,
                   help=f"timed passes per candidate, >= {MIN_REPEATS} (their spread judges the margins)")
    add_device_arg(p)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="generate/conformers: the engine's dtype; classify: try only this one (auto: the device's)")
    p.add_argument("--backend", default="auto", choices=["auto", "inferlab", "hf"], help="generate's backend")
    p.add_argument("--max-seq-len", type=int, default=None,
                   help="generate/conformers: prompt + output tokens per row (default: what the sample needs)")
    p.add_argument("--gpu-memory-fraction", type=float, default=0.9,
                   help="generate/conformers: the engine's share of the free device memory (as the commands')")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generate: tokens per prompt (a line may override)")
    p.add_argument("--num-conformers", type=int, default=2, metavar="K", help="conformers: K per molecule")
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES), help="conformers: the text format")
    p.add_argument("--forced-run-tokens", type=int, default=FORCED_RUN_TOKENS, metavar="N",
                   help=f"conformers: the forced-run width tried at each KV dtype's best --max-slots (default "
                        f"{FORCED_RUN_TOKENS}; 0: not tried)")
    p.add_argument("--work-dir", default=None,
                   help="keep the candidates' outputs and figures here: a rerun measures only the ones not done")
    p.add_argument("--budget-s", type=float, default=None,
                   help="stop before a candidate that would pass this many seconds (needs --work-dir; exit 3: rerun)")
    p.set_defaults(func=_tune)


def _tune(args: argparse.Namespace) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.cli.paths import output_file, output_folder
    from inferlab.workloads.tune.sweep import TuneIncomplete, TuneSettings, run_sweep
    from inferlab.workloads.tune.tuned_file import write_tuned_config

    output_file("--out", args.out, (".json",), "the tuned settings as JSON (read back by --config)",
                {"--sample": args.sample})
    if args.work_dir:
        output_folder("--work-dir", args.work_dir)
    settings = TuneSettings(
        workload=args.workload, model=args.model, sample=args.sample, sample_rows=args.sample_rows, sizes=args.sizes,
        device=args.device, dtype=args.dtype, kv_dtypes=args.kv_dtypes, backend=args.backend,
        max_new_tokens=args.max_new_tokens, num_conformers=args.num_conformers, profile=args.profile,
        min_seconds=args.min_seconds, passes=args.passes, max_seq_len=args.max_seq_len,
        gpu_memory_fraction=args.gpu_memory_fraction, work_dir=args.work_dir, budget_s=args.budget_s,
        forced_run_tokens=args.forced_run_tokens,
    )
    bar = None

    def on_plan(candidates: list[dict], limits: list) -> None:
        nonlocal bar
        for limit in limits if args.sizes is None else ():
            print(f"grid: {limit.describe()}")
        bar = tqdm(total=len(candidates), unit="candidate", dynamic_ncols=True, desc=f"tune {args.workload}")

    def on_candidate(index: int, candidate: dict, outcome, earlier: bool) -> None:
        if index >= bar.total:  # a candidate the sweep added (the forced-runs one of a KV dtype)
            bar.total = index + 1
        bar.set_postfix_str(_describe(candidate) + (" (measured by an earlier run)" if earlier else ""), refresh=False)
        bar.update(1)

    try:
        with logging_redirect_tqdm():
            tuned = run_sweep(settings, on_plan, on_candidate)
    except TuneIncomplete as e:
        print(f"not finished: {e}")
        return INCOMPLETE_EXIT
    finally:
        if bar is not None:
            bar.close()
    for entry in tuned.candidates:
        print(f"  {_describe(entry['settings']):<36} {_figures(entry, tuned.metric)}")
    for verdict in tuned.verdicts:
        print(f"  {verdict['text']}")
    if tuned.recommended:
        print(f"recommended: {_describe(tuned.recommended)}")
    else:
        print(f"no clear winner: the file sets nothing, the commands' defaults apply (best measured: "
              f"{_describe(tuned.best)}; the figures above)")
    out = write_tuned_config(tuned, args.out)
    print(f"wrote {out}; use it with: inferlab {'conformers generate' if args.workload == 'conformers' else args.workload}"
          f" --model {args.model} --config {out} ...")
    return 0


def _figures(entry: dict, metric: str) -> str:
    if "error" in entry:
        return f"failed: {entry['error']}"
    if "skipped" in entry:
        return entry["skipped"]
    f = entry["figures"]
    spread = "-" if f.get("spread") is None else f"{100 * f['spread']:.1f}%"
    return (f"{_number(f.get(metric))} {metric} (median of {f['passes']} passes, spread {spread}, "
            f"{f['seconds']:.2f} s timed)")


def _describe(settings: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in settings.items())


def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
