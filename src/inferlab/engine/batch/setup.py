"""BatchSetup: what the row features are sized and checked by (ModelRunner.build fills it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inferlab.models.config import ModelSpec


@dataclass(frozen=True)
class BatchSetup:
    spec: ModelSpec
    ops: Any  # engine.ops.Ops: its name picks the constraint mask's implementation
    dtype: torch.dtype  # the model's
    device: torch.device  # the engine's, or "meta" for the kernel precompile's dry run
    rows: int
    max_len: int  # a row's KV positions (max_seq_len)
    max_stop_ids: int
    max_steered_layers: int = 8
    seed: int = 0  # the engine's: requests without a seed derive theirs from it
    grammar_set: Any = None  # constrained requests run with it (a GrammarSet or a Future); None: the tokenizer's
    constraint_pressure: bool = True  # constrained rows measure how much probability their constraint takes away
    runtime_job: Any = None  # a Future of constrained_rows.build_runtime's answer, started by the engine, or None
