"""`inferlab hidden-states`: pooled activations of chosen layers for a JSONL file of prompts (resumable)."""

from __future__ import annotations

import argparse

from inferlab.cli.hf_workload_args import add_batch_args, add_model_args
from inferlab.cli.output_guard_args import add_input_bound_args, add_overwrite_arg, guarded
from inferlab.cli.scale_args import add_scale_args, wants_scale_out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hidden-states",
        help="collect pooled hidden states of chosen layers into a safetensors file (resumable)",
        description="Reads JSONL rows {id, prompt}; writes OUTPUT with one tensor layer_<i> [n, hidden] per layer "
        "in input order (ids in its metadata), built from shards in OUTPUT.d/ that a rerun resumes from. "
        "Layer numbers follow transformers' output_hidden_states: 0 = embeddings, L = final normed output, "
        "negative numbers count from the end. The engine (--backend auto or inferlab) packs prompts without padding "
        "into batches of --max-batch-tokens tokens.",
    )
    add_model_args(p)
    p.add_argument("--input", required=True, help="JSONL file, one {\"id\", \"prompt\"} object per line")
    p.add_argument("--output", required=True, help="output .safetensors file")
    p.add_argument("--layers", required=True, type=int, nargs="+", help="layer numbers, e.g. --layers 6 12 -1")
    p.add_argument("--pool", default="last", choices=["last", "mean", "all"],
                   help="last real token, mean over real tokens, or all real tokens (one vector each: layer_<i> holds "
                        "them row after row, `offsets` says where each row starts)")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--shard-rows", type=int, default=1024, help="input lines per shard (tokenised and sorted together)")
    add_batch_args(p, text_field="prompt")
    add_input_bound_args(p)
    add_overwrite_arg(p)
    add_scale_args(p)
    p.set_defaults(func=_run, resumes=True)


def _run(args: argparse.Namespace) -> int:
    from inferlab.cli.hf_workload_args import (
        hf_batch_size,
        load_config_from,
        max_batch_tokens,
        print_summary,
        progress_bar,
        require_paths,
        say_backend,
        workload_backend_from,
    )
    from inferlab.errors import ConfigError
    from inferlab.workloads.backend_choice import open_hidden_states
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states

    options = HiddenStatesOptions(
        layers=tuple(args.layers),
        pool=args.pool,
        batch_size=hf_batch_size(args),
        max_length=args.max_length,
        truncate=args.truncate,
        max_batch_tokens=max_batch_tokens(args),
        text_field=args.text_field,
        shard_rows=args.shard_rows,
        save_dtype=args.save_dtype,
        max_line_chars=args.max_line_chars,
    )
    backend = workload_backend_from(args)
    require_paths(args, (".safetensors",), "a safetensors file of pooled hidden states")
    from inferlab.scale.workloads.hidden_states import HIDDEN_STATES, hidden_states_params
    from inferlab.workloads.activation_store import store_folder

    if args.pool == "all" and wants_scale_out(args):
        raise ConfigError("--pool all is not merged across workers (one vector per row is); run it without "
                          "--gpus/--launcher")
    params = hidden_states_params(load_config_from(args), options, backend)
    with guarded(args, "hidden-states", HIDDEN_STATES.settings(params), {"--input": args.input},
                 [("--output", args.output, True), ("--output's shards", store_folder(args.output), True)]):
        if wants_scale_out(args):  # --gpus/--launcher: shards on several workers (inferlab.scale)
            from inferlab.cli.scale_args import run_scaled_command

            return run_scaled_command(args, "hidden-states", params)
        source, choice = open_hidden_states(load_config_from(args), backend, args.max_length)
        say_backend(choice)
        with progress_bar(args.input, unit="prompt") as progress:
            report = collect_hidden_states(source, args.input, args.output, options, progress=progress)
    print_summary(report.summary())
    print(f"wrote {args.output}")
    return 0
