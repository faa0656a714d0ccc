"""Flags and helpers shared by the classify and hidden-states commands: the backend (the engine or
transformers) and its knobs, model loading knobs, batching knobs, a progress bar over the input's lines, and
`run_file_workload`, the guarded run (in this process, or scaled out) both end with."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

from inferlab.cli.device_arg import add_device_arg
from inferlab.cli.output_guard_args import add_input_bound_args, add_overwrite_arg, guarded
from inferlab.cli.row_outcome import existing, exit_code, print_error_groups
from inferlab.cli.scale_args import add_scale_args, run_scaled_command, wants_scale_out
from inferlab.cli.tuned_config_args import add_tunable


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--backend", default="auto", choices=["auto", "inferlab", "hf"],
                   help="inferlab: the engine's packed prefill; hf: transformers; auto (default): the engine where it "
                        "runs the architecture, transformers otherwise (the choice is printed)")
    add_tunable(p, "--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                help="weights and activations (auto: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--weights", default="auto", choices=["auto", "fp8"],
                   help="engine only: fp8 stores the projections as e4m3 with per-channel scales (CUDA compute "
                        "capability >= 8.9, bfloat16)")
    add_tunable(p, "--attn", default="sdpa", choices=["sdpa", "eager", "flash_attention_2"],
                help="transformers only: its attention implementation")
    p.add_argument("--quantization", default="none", choices=["none", "int8", "fp8"],
                   help="transformers only (torchao): int8 weight-only, or fp8 (compute capability >= 8.9); "
                        "with --backend auto it selects transformers")
    add_device_arg(p)


def add_batch_args(p: argparse.ArgumentParser, text_field: str) -> None:
    add_tunable(p, "--batch-size", type=int, default=None,
                help="most rows in one batch (backs off on OOM); default: 16 on transformers, none on the engine "
                     "(its token budget decides)")
    p.add_argument("--max-batch-tokens", type=int, default=None,
                   help=f"tokens of one batch: the engine packs rows without padding (default {ENGINE_BATCH_TOKENS}; a "
                        f"longer row runs alone); transformers counts rows x longest row (default {HF_BATCH_TOKENS}; 0: "
                        "no budget)")
    p.add_argument("--max-batch-latency-ms", type=float, default=None,
                   help="engine only: cut batches whose expected device time (from the measured rate) is over this, "
                        "trading samples/s for a lower p95 latency")
    p.add_argument("--max-length", type=int, default=None, help="most tokens per text (default: the model's)")
    p.add_argument("--truncate", action="store_true",
                   help="keep the first --max-length tokens of longer texts instead of writing an error record")
    p.add_argument("--text-field", default=text_field, help=f"JSON field holding the text (default: {text_field})")
    p.add_argument("--summary-json", default=None, metavar="PATH",
                   help="also write the closing summary's figures (rows, errors by reason, rates, latency "
                        "percentiles, the engine's) as JSON to PATH")


def add_run_args(p: argparse.ArgumentParser, text_field: str) -> None:
    """The flags after a command's own: batching (add_batch_args), input bounds, --overwrite, scale-out."""
    add_batch_args(p, text_field)
    add_input_bound_args(p)
    add_overwrite_arg(p)
    add_scale_args(p)


HF_BATCH_TOKENS = 131072  # transformers: rows x longest row of one batch
HF_BATCH_ROWS = 16
ENGINE_BATCH_TOKENS = 32768  # workloads/backend_choice.ENGINE_MAX_BATCH_TOKENS (not imported: keeps --help light)


def workload_backend_from(args: argparse.Namespace, tuned: dict | None = None):
    """The backend request; a batch size taken from a tuned.json (`tuned`: apply_tuned_config's values, tuned on
    transformers by `inferlab tune`) is transformers' and does not cap the engine's rows."""
    from inferlab.workloads.backend_choice import WorkloadBackend

    max_rows = None if tuned and "batch_size" in tuned else args.batch_size
    return WorkloadBackend(args.backend, args.weights, args.max_batch_tokens, max_rows, args.max_batch_latency_ms)


def hf_batch_size(args: argparse.Namespace) -> int:
    return args.batch_size if args.batch_size is not None else HF_BATCH_ROWS


def say_backend(choice) -> None:
    print(f"backend: {choice.name} ({choice.reason})", flush=True)


def load_config_from(args: argparse.Namespace):
    from transformers.utils import logging as hf_logging

    from inferlab.workloads.hf_loading import ModelLoadConfig

    hf_logging.disable_progress_bar()  # we draw our own bar
    return ModelLoadConfig(args.model, args.dtype, args.attn, args.quantization, args.device)


def max_batch_tokens(args: argparse.Namespace) -> int | None:
    """transformers' padded-token budget: the flag, its default, or None for 0 (no budget)."""
    return HF_BATCH_TOKENS if args.max_batch_tokens is None else (args.max_batch_tokens or None)


def batch_options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The workload options of add_run_args' flags (ClassifyOptions', HiddenStatesOptions' shared fields)."""
    return dict(batch_size=hf_batch_size(args), max_length=args.max_length, truncate=args.truncate,
                max_batch_tokens=max_batch_tokens(args), text_field=args.text_field,
                max_line_chars=args.max_line_chars)


def require_paths(args, output_kinds: tuple[str, ...], output_what: str) -> None:
    """Fail before the model loads on a missing or mistyped --input, or an --output that cannot be written."""
    from inferlab.cli.paths import JSONL_KINDS, input_file, output_file

    input_file("--input", args.input, JSONL_KINDS, "a JSONL file, one object per line")
    output_file("--output", args.output, output_kinds, output_what, {"--input": args.input})


def count_lines(path: str | Path) -> int | None:
    p = Path(path)
    if not p.exists():
        return None
    with p.open("rb") as f:
        return sum(1 for line in f if line.strip())


@contextlib.contextmanager
def progress_bar(input_path: str, unit: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar (rate and ETA) over the input's lines; yields the callback the workload calls."""
    from tqdm import tqdm

    with tqdm(total=count_lines(input_path), unit=unit, dynamic_ncols=True) as bar:
        yield bar.update


def print_summary(s: dict[str, Any], unit: str, rate_name: str, errors_in: str) -> None:
    """The closing summary of a run's report (RowReport.summary(): `rate_name` is its rows per busy second)."""
    print(f"rows: {s['rows_ok']:,} ok, {s['rows_error']:,} errors, {s['rows_skipped']:,} done by earlier runs")
    if s.get(rate_name) is not None:
        print(f"speed: {s[rate_name]:,.1f} {unit}s/s, {s['tokens_per_s']:,.0f} tokens/s over the batches' time; "
              f"whole run {s['wall_s']:.1f} s")
    latency = s.get("latency_ms") or {}
    if latency.get("n"):
        print(f"latency per {unit} (its batch's time): p50 {latency['p50']:,.1f} ms, p95 {latency['p95']:,.1f} ms, "
              f"p99 {latency['p99']:,.1f} ms")
    if s.get("oom_events"):
        print(f"out of memory {s['oom_events']} times: batches backed off (largest that ran: "
              f"{s['largest_ok_batch_rows']} rows)")
    print_error_groups(s.get("errors_by_reason") or [], errors_in)


def run_file_workload(args: argparse.Namespace, command: str, params: dict[str, Any], settings: dict[str, Any],
                      outputs: list[tuple[str, Any, bool]], open_source: Callable[[], tuple[Any, Any]],
                      run_file: Callable[[Any, Callable[[int], None]], Any], unit: str, rate_name: str,
                      errors_in: str) -> int:
    """Run `command` on --input under its output guard (`settings`, `outputs`: guarded's): scaled out with
    `params` on --gpus/--launcher, else here: `open_source()` -> (source, backend choice), then
    `run_file(source, progress)` -> a report whose summary() is printed (and written to --summary-json);
    `errors_in`: the file holding the error rows. Exit 1 when no row of the run succeeded (and no earlier run's row stands)."""
    outputs = [*outputs, ("--summary-json", args.summary_json, False)]
    with guarded(args, command, settings, {"--input": args.input}, outputs):
        if wants_scale_out(args):  # --gpus/--launcher: shards on several workers (inferlab.scale)
            return run_scaled_command(args, command, params)
        source, choice = open_source()
        say_backend(choice)
        with progress_bar(args.input, unit=unit) as progress:
            report = run_file(source, progress)
        summary = report.summary()
        if args.summary_json:
            from inferlab.outputs.atomic import write_json_atomic

            write_json_atomic(args.summary_json, summary)
    print_summary(summary, unit, rate_name, errors_in)
    rows = summary["rows_ok"] + summary["rows_error"]
    if existing([args.output]):
        print(f"wrote {args.output}")
    else:
        print("nothing written: the input holds no line" if not rows + summary["rows_skipped"] else
              f"nothing written to {args.output}")
    return exit_code(rows, summary["rows_ok"], rows + summary["rows_skipped"], summary["rows_skipped"])
