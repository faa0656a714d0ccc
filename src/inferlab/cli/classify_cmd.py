"""`inferlab classify`: sequence classification of a JSONL file of texts (labels, probabilities, latency)."""

from __future__ import annotations

import argparse

from inferlab.cli.hf_workload_args import add_batch_args, add_model_args
from inferlab.cli.output_guard_args import add_input_bound_args, add_overwrite_arg, guarded
from inferlab.cli.scale_args import add_scale_args, wants_scale_out
from inferlab.cli.tuned_config_args import add_config_arg, apply_tuned_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "classify",
        help="classify texts with a ...ForSequenceClassification checkpoint (resumable)",
        description="Reads JSONL rows {id, text}; writes {id, label, label_id, probabilities, latency_ms, ...} or an "
        "error record per row. A rerun with the same --output skips ids already written. The engine (--backend "
        "auto or inferlab) packs texts without padding into batches of --max-batch-tokens tokens.",
    )
    add_model_args(p)
    p.add_argument("--input", required=True, help="JSONL file, one {\"id\", \"text\"} object per line")
    p.add_argument("--output", required=True, help="JSONL predictions (appended to on resume)")
    add_batch_args(p, text_field="text")
    add_input_bound_args(p)
    add_overwrite_arg(p)
    add_scale_args(p)
    add_config_arg(p, "classify")  # inferlab tune's batch size, dtype, attention
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
    from inferlab.workloads.backend_choice import open_classifier
    from inferlab.workloads.classify import ClassifyOptions, classify_file

    tuned = apply_tuned_config(args)
    options = ClassifyOptions(
        batch_size=hf_batch_size(args),
        max_length=args.max_length,
        truncate=args.truncate,
        max_batch_tokens=max_batch_tokens(args),
        text_field=args.text_field,
        max_line_chars=args.max_line_chars,
    )
    backend = workload_backend_from(args, tuned)
    require_paths(args, (".jsonl",), "JSONL predictions")
    from inferlab.scale.workloads.classify import CLASSIFY, classify_params

    params = classify_params(load_config_from(args), options, backend)
    with guarded(args, "classify", CLASSIFY.settings(params), {"--input": args.input},
                 [("--output", args.output, True)]):
        if wants_scale_out(args):  # --gpus/--launcher: shards on several workers (inferlab.scale)
            from inferlab.cli.scale_args import run_scaled_command

            return run_scaled_command(args, "classify", params)
        classifier, choice = open_classifier(load_config_from(args), backend, args.max_length)
        say_backend(choice)
        with progress_bar(args.input, unit="text") as progress:
            report = classify_file(classifier, args.input, args.output, options, progress=progress)
    print_summary(report.summary())
    print(f"wrote {args.output}")
    return 0
