"""`inferlab generate`: prompts JSONL -> completions JSONL with our engine, or transformers for
architectures the engine does not implement (workloads/text.py); `--gpus` shards it over workers."""

from __future__ import annotations

import argparse

from inferlab.cli.scale_args import add_scale_args, wants_scale_out
from inferlab.cli.tuned_config_args import add_config_arg, apply_tuned_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate text for a JSONL file of prompts (resumable)")
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--input", required=True, help='JSONL: {"id", "prompt"} or {"id", "prompt_ids"} per line')
    p.add_argument("--output", required=True, help="JSONL of results; rows already there are skipped")
    p.add_argument("--backend", default="auto", choices=["auto", "inferlab", "hf"],
                   help="inferlab (our engine), hf (transformers generate, any causal LM), or auto (the engine "
                        "where it supports the architecture, else hf)")
    s = p.add_argument_group("sampling defaults (an input line may override any of them)")
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--min-new-tokens", type=int, default=0)
    s.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--top-k", type=int, default=0)
    s.add_argument("--min-p", type=float, default=0.0)
    s.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS (benchmarks)")
    s.add_argument("--seed", type=int, default=0, help="rows without a seed derive one from this and their id")
    e = p.add_argument_group("engine")
    e.add_argument("--max-slots", type=int, default=None, help="concurrent rows (default: as memory allows)")
    e.add_argument("--max-seq-len", type=int, default=None, help="prompt + output tokens per row")
    e.add_argument("--gpu-memory-fraction", type=float, default=0.9)
    e.add_argument("--device", default="auto")
    e.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    e.add_argument("--batching", default="continuous", choices=["continuous", "static"])
    e.add_argument("--kernels", default="auto", choices=["auto", "torch", "triton"])
    e.add_argument(
        "--gemm", default="auto", choices=["auto", "cublas"], help="decode projections: auto = time cuBLAS vs Triton"
    )
    add_scale_args(p)
    add_config_arg(p, "generate")  # inferlab tune's max_slots
    p.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    import time

    from inferlab.cli.hf_workload_args import require_paths
    from inferlab.cli.token_rate_bar import TokenRateBar
    from inferlab.types import SamplingParams
    from inferlab.workloads.text import open_backend, run_text_generation

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
    options = dict(
        device=args.device,
        dtype=args.dtype,
        max_slots=args.max_slots,
        max_seq_len=args.max_seq_len,
        gpu_memory_fraction=args.gpu_memory_fraction,
        seed=args.seed,
        batching=args.batching,
        kernels=args.kernels,
        gemm=args.gemm,
    )
    if wants_scale_out(args):  # --gpus/--launcher: prompts sharded over workers by estimated tokens
        from inferlab.cli.scale_args import run_scaled_command
        from inferlab.scale.workloads.generate import generate_params

        engine_options = {k: v for k, v in options.items() if k != "device"}  # each worker has its own device
        params = generate_params(args.model, defaults, backend=args.backend, engine_options=engine_options,
                                 text_workload=True)
        return run_scaled_command(args, "generate", params)
    progress = TokenRateBar("row", smoothing=0.1)
    try:
        summary = run_text_generation(
            args.input, args.output, lambda: open_backend(args.backend, args.model, options), defaults, progress.start,
            progress.row,
        )
    finally:
        progress.close()
    elapsed = time.perf_counter() - progress.started
    print(
        f"wrote {summary.written} rows to {args.output} ({summary.errors} errors, {summary.skipped} already done), "
        f"{summary.output_tokens:,} tokens in {elapsed:.1f} s ({summary.output_tokens / max(elapsed, 1e-9):,.0f} tok/s)"
    )
    return 0
