"""`inferlab generate`: prompts JSONL -> completions JSONL with our engine, or transformers for
architectures the engine does not implement (workloads/text.py); `--gpus` shards it over workers.
Steering vectors and hidden states collected while generating: workloads/text_steering_collection.py."""

from __future__ import annotations

import argparse

from inferlab.cli.engine_args import add_engine_args, add_kv_dtype_arg, engine_config_from
from inferlab.cli.output_guard_args import add_input_bound_args, add_overwrite_arg, guarded
from inferlab.cli.scale_args import add_scale_args, wants_scale_out
from inferlab.cli.tuned_config_args import add_config_arg, apply_tuned_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate text for a JSONL file of prompts (resumable)")
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--input", required=True, help='JSONL: {"id", "prompt"} or {"id", "prompt_ids"} per line')
    p.add_argument("--output", required=True, help="JSONL of results; rows already there are skipped")
    p.add_argument("--retry-errors", action="store_true",
                   help="run the error rows of earlier runs again (each replaced by its new row)")
    p.add_argument("--backend", default="auto", choices=["auto", "inferlab", "hf"],
                   help="inferlab (our engine), hf (transformers generate, any causal LM), or auto (the engine "
                        "where it supports the architecture, else hf)")
    s = p.add_argument_group("sampling defaults (an input line may override any of them)")
    s.add_argument("--max-new-tokens", "--max-tokens", type=int, default=256, help="a row stops here, or at EOS")
    s.add_argument("--min-new-tokens", type=int, default=0, help="EOS is masked until a row has this many")
    s.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    s.add_argument("--top-p", type=float, default=1.0,
                   help="sample from the most likely tokens whose probabilities add up to this (1.0: off)")
    s.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: off)")
    s.add_argument("--min-p", type=float, default=0.0,
                   help="drop tokens below this fraction of the most likely one's probability (0: off)")
    s.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS (benchmarks)")
    s.add_argument("--seed", type=int, default=0, help="rows without a seed derive one from this and their id")
    e = add_engine_args(p, "prompt + output tokens per row (default: the model's positions, at most 4096)")
    e.add_argument("--batching", default="continuous", choices=["continuous", "static"],
                   help="continuous: finished rows are refilled at once; static: a full batch, then wait for all of it")
    e.add_argument("--kernels", default="auto", choices=["auto", "torch", "triton"],
                   help="auto: Triton on CUDA, torch elsewhere")
    e.add_argument(
        "--gemm", default="auto", choices=["auto", "cublas"], help="decode projections: auto = time cuBLAS vs Triton"
    )
    add_kv_dtype_arg(e)
    t = p.add_argument_group("steering and hidden states (both backends; docs/workloads.md)")
    t.add_argument("--steer", metavar="FILE", help="safetensors file of steering vectors, one tensor per name: "
                   "[hidden] or [layers, hidden]; every line is steered unless it says otherwise")
    t.add_argument("--steer-layer", type=int, default=None, help="decoder layer whose output gets scale x vector "
                   "(0-based, negative from the end); a line may set \"steer_layer\"")
    t.add_argument("--steer-scale", type=float, default=1.0, help="a line may set \"steer_scale\"")
    t.add_argument("--steer-vector", default=None, help="entry of --steer FILE (needed when it has several); a line "
                   "may set \"steer_vector\" (null: that line unsteered)")
    t.add_argument("--collect-layers", type=int, nargs="+", default=None, metavar="L",
                   help="decoder layers whose residual stream (after steering) is collected for the generated tokens")
    t.add_argument("--collect-pool", default="mean", choices=["last", "mean", "all"],
                   help="over the generated tokens: the last one's state, the mean, or all "
                        "(up to --collect-max-tokens)")
    t.add_argument("--collect-max-tokens", type=int, default=None, help="with --collect-pool all: keep the first N")
    t.add_argument("--collect-output", metavar="FILE", default=None,
                   help="activations .safetensors (resumable with the JSONL: a rerun skips ids done in both)")
    t.add_argument("--collect-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="dtype of the saved activations")
    add_input_bound_args(p)
    add_overwrite_arg(p)
    add_scale_args(p)
    add_config_arg(p, "generate")  # inferlab tune's max_slots and kv_dtype
    p.set_defaults(func=_generate, resumes=True)


def _steering_and_collection(args: argparse.Namespace, defaults):
    """(SteerSettings | None, CollectSettings | None, the activations' run settings) from the flags;
    ConfigError on misuse."""
    from dataclasses import asdict
    from pathlib import Path

    from inferlab.errors import ConfigError
    from inferlab.workloads.text_steering_collection import CollectSettings, SteerSettings, model_shape

    if args.steer is None and (args.steer_layer is not None or args.steer_vector is not None):
        raise ConfigError("--steer-layer / --steer-vector need --steer FILE (the vectors)")
    if (args.collect_layers is None) != (args.collect_output is None):
        raise ConfigError("--collect-layers and --collect-output go together: which layers, and where to write them")
    steer = collect = None
    if args.steer is not None:
        steer = SteerSettings.load(args.steer, args.steer_layer, args.steer_scale, args.steer_vector)
    if args.collect_layers is not None:
        num_layers, hidden = model_shape(args.model)
        collect = CollectSettings(Path(args.collect_output), tuple(args.collect_layers), num_layers, hidden,
                                  args.collect_pool, args.collect_max_tokens, args.collect_dtype)
    run_settings = {"model": str(Path(args.model).resolve()), "sampling": asdict(defaults), "seed": args.seed,
                    "dtype": args.dtype}
    return steer, collect, run_settings


def check_model(model: str, backend: str) -> None:
    """The checkpoint before any work: config.json checked, its safetensors weights whole (every backend reads
    safetensors only), and where the engine will run it (not --backend hf, nor an architecture the engine
    leaves to transformers) what the engine needs of them."""
    from pathlib import Path

    from inferlab.errors import UnsupportedError
    from inferlab.models.checkpoint_check import check_engine_checkpoint, weight_files
    from inferlab.models.config_file import read_config
    from inferlab.workloads.text import engine_architecture_problem

    read_config(model)
    weight_files(Path(model))
    if backend != "hf" and engine_architecture_problem(model) is None:
        try:
            check_engine_checkpoint(model)
        except UnsupportedError as e:
            if backend == "inferlab":
                from inferlab.workloads.hf_loading import hf_fallback_fix  # transformers and torch: only here

                raise UnsupportedError(f"{e}; {hf_fallback_fix(model)}") from None
            # auto: transformers runs what the engine does not (open_backend falls back, saying why)


def _generate(args: argparse.Namespace) -> int:
    import time

    from inferlab.cli.hf_workload_args import require_paths
    from inferlab.cli.row_outcome import existing, exit_code, print_error_groups
    from inferlab.cli.token_rate_bar import TokenRateBar
    from inferlab.types import SamplingParams
    from inferlab.workloads.text import model_positions, open_backend, result_settings, run_text_generation

    apply_tuned_config(args)
    require_paths(args, (".jsonl",), "JSONL completions")
    defaults = SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.min_new_tokens,
        ignore_eos=args.ignore_eos,
    )
    steer, collect, run_settings = _steering_and_collection(args, defaults)
    if wants_scale_out(args):
        from inferlab.errors import ConfigError

        if steer is not None or collect is not None:
            raise ConfigError("--steer and --collect-* do not run with --gpus / --launcher yet; run one inferlab "
                              "generate per GPU on a part of the input (CUDA_VISIBLE_DEVICES) instead")
        if args.retry_errors:
            raise ConfigError("--retry-errors runs without --gpus / --launcher for now: rerun the merged output's "
                              "error rows with one process (the same --output), or rerun into a new output")
    check_model(args.model, args.backend)
    engine = engine_config_from(args, seed=args.seed, batching=args.batching, kernels=args.kernels, gemm=args.gemm)
    settings = {**result_settings(args.model, args.backend, defaults, engine),
                "steering": steer.describe() if steer else None, "collect": collect.describe() if collect else None}
    outputs = [("--output", args.output, True)]
    if collect is not None:
        from inferlab.workloads.activation_store import store_folder  # torch's module: only with collection

        outputs += [("--collect-output", collect.output, True),
                    ("--collect-output's shards", store_folder(collect.output), True)]
    with guarded(args, "generate", settings, {"--input": args.input, "--steer": args.steer}, outputs):
        if wants_scale_out(args):  # --gpus/--launcher: prompts sharded over workers by estimated tokens
            from inferlab.cli.scale_args import run_scaled_command
            from inferlab.scale.workloads.generate import generate_params

            params = generate_params(args.model, defaults, backend=args.backend, engine=engine, text_workload=True,
                                     max_line_chars=args.max_line_chars)
            return run_scaled_command(args, "generate", params)
        progress = TokenRateBar("row")
        try:
            summary = run_text_generation(
                args.input, args.output,
                lambda: open_backend(args.backend, engine, steer and steer.vectors),
                defaults, progress.start, progress.row, steer, collect, run_settings,
                retry_errors=args.retry_errors, row_positions=args.max_seq_len or model_positions(args.model),
                max_line_chars=args.max_line_chars,
            )
        finally:
            progress.close()
    elapsed = time.perf_counter() - progress.started
    retried = f", {summary.retried} error rows of earlier runs run again" if summary.retried else ""
    print(f"rows: {summary.written - summary.errors} ok, {summary.errors} errors, {summary.skipped} already done"
          f"{retried}; {summary.output_tokens:,} tokens in {elapsed:.1f} s "
          f"({summary.output_tokens / max(elapsed, 1e-9):,.0f} tok/s)")
    print_error_groups(summary.error_groups.as_list(), args.output)
    if existing([args.output]):
        print(f"wrote {summary.written} rows to {args.output}" if summary.written else f"nothing new in {args.output}")
    else:
        print("nothing written: the input holds no line" if not summary.inputs else "nothing written")
    if collect is not None and existing([collect.output]):
        print(f"wrote activations of {summary.activation_rows} rows to {collect.output} "
              f"(layers {list(collect.resolved_layers)}, pool {collect.pool})")
    return exit_code(summary.written, summary.written - summary.errors, summary.inputs, summary.skipped)
