"""`inferlab classify`: sequence classification of a JSONL file of texts (labels, probabilities, latency)."""

from __future__ import annotations

import argparse

from inferlab.cli import hf_workload_args as workload_args
from inferlab.cli.tuned_config_args import add_config_arg, apply_tuned_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "classify",
        help="classify texts with a ...ForSequenceClassification checkpoint (resumable)",
        description="Reads JSONL rows {id, text}; writes {id, label, label_id, probabilities, latency_ms, ...} or an "
        "error record per row. A rerun with the same --output skips ids already written. The engine (--backend "
        "auto or inferlab) packs texts without padding into batches of --max-batch-tokens tokens.",
    )
    workload_args.add_model_args(p)
    p.add_argument("--input", required=True, help="JSONL file, one {\"id\", \"text\"} object per line")
    p.add_argument("--output", required=True, help="JSONL predictions (appended to on resume)")
    workload_args.add_run_args(p, text_field="text")
    add_config_arg(p, "classify")  # inferlab tune's batch size, dtype, attention
    p.set_defaults(func=_run, resumes=True)


def _run(args: argparse.Namespace) -> int:
    from inferlab.scale.workloads.classify import CLASSIFY, classify_params
    from inferlab.workloads.backend_choice import open_classifier
    from inferlab.workloads.classify import ClassifyOptions, classify_file

    tuned = apply_tuned_config(args)
    options = ClassifyOptions(**workload_args.batch_options_from(args))
    backend = workload_args.workload_backend_from(args, tuned)
    workload_args.require_paths(args, (".jsonl",), "JSONL predictions")
    params = classify_params(workload_args.load_config_from(args), options, backend)
    return workload_args.run_file_workload(
        args, "classify", params, CLASSIFY.settings(params), [("--output", args.output, True)],
        lambda: open_classifier(workload_args.load_config_from(args), backend, args.max_length),
        lambda classifier, progress: classify_file(classifier, args.input, args.output, options, progress=progress),
        unit="text", rate_name="samples_per_s", errors_in=args.output,
    )
