"""The engine flags of the commands that generate with it (generate, conformers generate): rows at once,
tokens per row, the memory share, device, dtype and the KV cache's dtype, and the EngineConfig they make."""

from __future__ import annotations

import argparse
from typing import Any

from inferlab.cli.device_arg import add_device_arg
from inferlab.cli.tuned_config_args import add_tunable
from inferlab.engine import EngineConfig


def add_engine_args(p: argparse.ArgumentParser, max_seq_len_help: str) -> argparse._ArgumentGroup:
    """The "engine" group with the memory and precision flags; the command adds its own to the group returned
    and then `add_kv_dtype_arg`."""
    e = p.add_argument_group("engine")
    add_tunable(e, "--max-slots", "--max-num-seqs", type=int, default=None,
                help="concurrent rows (default: as memory allows)")
    e.add_argument("--max-seq-len", "--max-model-len", type=int, default=None, help=max_seq_len_help)
    e.add_argument("--gpu-memory-fraction", "--gpu-memory-utilization", type=float, default=0.9,
                   help="share of the device memory free at start-up the engine plans for (weights, KV cache, "
                        "workspace)")
    add_device_arg(e)
    e.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    return e


def add_kv_dtype_arg(e: argparse._ArgumentGroup) -> None:
    add_tunable(e, "--kv-dtype", "--kv-cache-dtype", default="auto", choices=["auto", "fp8"],
                help="KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales: half the bytes; CUDA "
                     "capability >= 8.9; on a CPU the torch reference path, a check, slower than auto)")


def engine_config_from(args: argparse.Namespace, **more: Any) -> EngineConfig:
    """The engine of `--model` with add_engine_args' and add_kv_dtype_arg's flags (`more`: the command's other
    EngineConfig fields), as the workloads and the scale workers take it; ConfigError for a bad value."""
    return EngineConfig(model=args.model, device=args.device, dtype=args.dtype, max_slots=args.max_slots,
                        max_seq_len=args.max_seq_len, gpu_memory_fraction=args.gpu_memory_fraction,
                        kv_dtype=args.kv_dtype, **more)
