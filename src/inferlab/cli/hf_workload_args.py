"""Flags and helpers shared by the transformers-backed workload commands (classify, hidden-states): model
loading knobs, batching knobs, and a progress bar over the input's lines."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator

from inferlab.cli.device_arg import add_device_arg


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local HuggingFace checkpoint folder")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights and activations (auto: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager", "flash_attention_2"])
    p.add_argument("--quantization", default="none", choices=["none", "int8", "fp8"],
                   help="torchao weight quantization: int8 weight-only, or fp8 (compute capability >= 8.9)")
    add_device_arg(p)


def add_batch_args(p: argparse.ArgumentParser, text_field: str) -> None:
    p.add_argument("--batch-size", type=int, default=16, help="most rows in one batch (backs off on OOM)")
    p.add_argument("--max-batch-tokens", type=int, default=131072,
                   help="most padded tokens (rows x longest row) in one batch; 0 for no budget")
    p.add_argument("--max-length", type=int, default=None, help="most tokens per text (default: the model's)")
    p.add_argument("--truncate", action="store_true",
                   help="keep the first --max-length tokens of longer texts instead of writing an error record")
    p.add_argument("--text-field", default=text_field, help=f"JSON field holding the text (default: {text_field})")


def load_config_from(args: argparse.Namespace):
    from transformers.utils import logging as hf_logging

    from inferlab.workloads.hf_loading import ModelLoadConfig

    hf_logging.disable_progress_bar()  # we draw our own bar
    return ModelLoadConfig(args.model, args.dtype, args.attn, args.quantization, args.device)


def max_batch_tokens(args: argparse.Namespace) -> int | None:
    return args.max_batch_tokens or None


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


def print_summary(summary: dict[str, Any]) -> None:
    print(json.dumps(summary, indent=1, default=str))
