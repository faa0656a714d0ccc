"""`inferlab hidden-states`: pooled activations of chosen layers for a JSONL file of prompts (resumable)."""

from __future__ import annotations

import argparse

from inferlab.cli import hf_workload_args as workload_args
from inferlab.cli.scale_args import wants_scale_out


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
    workload_args.add_model_args(p)
    p.add_argument("--input", required=True, help="JSONL file, one {\"id\", \"prompt\"} object per line")
    p.add_argument("--output", required=True, help="output .safetensors file")
    p.add_argument("--layers", required=True, type=int, nargs="+", help="layer numbers, e.g. --layers 6 12 -1")
    p.add_argument("--pool", default="last", choices=["last", "mean", "all"],
                   help="last real token, mean over real tokens, or all real tokens (one vector each: layer_<i> holds "
                        "them row after row, `offsets` says where each row starts)")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--shard-rows", type=int, default=1024, help="input lines per shard (tokenised and sorted together)")
    workload_args.add_run_args(p, text_field="prompt")
    p.set_defaults(func=_run, resumes=True)


def _run(args: argparse.Namespace) -> int:
    from inferlab.errors import ConfigError
    from inferlab.scale.workloads.hidden_states import HIDDEN_STATES, hidden_states_params
    from inferlab.workloads.activation_store import store_folder
    from inferlab.workloads.backend_choice import open_hidden_states
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states

    options = HiddenStatesOptions(layers=tuple(args.layers), pool=args.pool, shard_rows=args.shard_rows,
                                  save_dtype=args.save_dtype, **workload_args.batch_options_from(args))
    backend = workload_args.workload_backend_from(args)
    workload_args.require_paths(args, (".safetensors",), "a safetensors file of pooled hidden states")
    if args.pool == "all" and wants_scale_out(args):
        raise ConfigError("--pool all is not merged across workers (one vector per row is); run it without "
                          "--gpus/--launcher")
    params = hidden_states_params(workload_args.load_config_from(args), options, backend)
    outputs = [("--output", args.output, True), ("--output's shards", store_folder(args.output), True)]
    return workload_args.run_file_workload(
        args, "hidden-states", params, HIDDEN_STATES.settings(params), outputs,
        lambda: open_hidden_states(workload_args.load_config_from(args), backend, options),
        lambda source, progress: collect_hidden_states(source, args.input, args.output, options, progress=progress),
        unit="prompt", rate_name="prompts_per_s", errors_in=str(store_folder(args.output) / "index.jsonl"),
    )
