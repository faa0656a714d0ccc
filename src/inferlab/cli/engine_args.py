"""The engine flags of the commands that generate with it (generate, conformers generate): rows at once,
tokens per row, the memory share, device, dtype and the KV cache's dtype, and the EngineConfig they make.
`conformers generate` sizes rows and the KV cache for its job ("auto", its defaults: the pipeline's
engine_sizing.py and kv_dtype_choice.py); `generate` keeps rows as memory allows and the model dtype."""

from __future__ import annotations

import argparse
from typing import Any

from inferlab.cli.arg_types import positive_int
from inferlab.cli.device_arg import add_device_arg
from inferlab.cli.tuned_config_args import add_tunable
from inferlab.engine import EngineConfig

AUTO = "auto"
KV_DTYPE_HELP = ("KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales: half the bytes; CUDA "
                 "capability >= 8.9; on a CPU the torch reference path, a check, slower than auto)")


def slots_value(text: str) -> int | str:
    """--max-num-seqs of conformers generate: "auto" or a whole number >= 1."""
    return AUTO if text == AUTO else positive_int(text, "a whole number or auto")


def add_engine_args(p: argparse.ArgumentParser, max_seq_len_help: str,
                    auto_slots_help: str | None = None) -> argparse._ArgumentGroup:
    """The "engine" group with the memory and precision flags; the command adds its own to the group returned
    and then `add_kv_dtype_arg`. `auto_slots_help`: --max-slots takes "auto" (its default), which the
    command's workload resolves."""
    e = p.add_argument_group("engine")
    if auto_slots_help is None:
        add_tunable(e, "--max-slots", "--max-num-seqs", type=int, default=None,
                    help="concurrent rows (default: as memory allows)")
    else:
        add_tunable(e, "--max-slots", "--max-num-seqs", type=slots_value, default=AUTO, help=auto_slots_help)
    e.add_argument("--max-seq-len", "--max-model-len", type=int, default=None, help=max_seq_len_help)
    e.add_argument("--gpu-memory-fraction", "--gpu-memory-utilization", type=float, default=0.9,
                   help="share of the device memory free at start-up the engine plans for (weights, KV cache, "
                        "workspace)")
    add_device_arg(e)
    e.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    return e


def add_kv_dtype_arg(e: argparse._ArgumentGroup, choices: tuple[str, ...] = ("auto", "fp8"),
                     help: str = KV_DTYPE_HELP) -> None:
    add_tunable(e, "--kv-dtype", "--kv-cache-dtype", default="auto", choices=list(choices), help=help)


def engine_config_from(args: argparse.Namespace, **more: Any) -> EngineConfig:
    """The engine of `--model` with add_engine_args' and add_kv_dtype_arg's flags, and --forced-run-tokens where
    the command has it (`more`: the command's other EngineConfig fields), as the workloads and the scale workers
    take it (--max-slots auto: max_slots None, for the workload to size); ConfigError for a bad value."""
    slots = None if args.max_slots == AUTO else args.max_slots
    if hasattr(args, "forced_run_tokens"):  # the constrained commands' flag (conformers generate)
        more.setdefault("forced_run_tokens", args.forced_run_tokens)
    return EngineConfig(model=args.model, device=args.device, dtype=args.dtype, max_slots=slots,
                        max_seq_len=args.max_seq_len, gpu_memory_fraction=args.gpu_memory_fraction,
                        kv_dtype=args.kv_dtype, **more)
