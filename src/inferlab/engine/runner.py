"""The device side of the loop: admit rows, prefill them, run decode steps (graph replays or eager), release.

ModelRunner owns the model, the KV cache, the per-row state and the decode graphs. It knows rows, not
requests: the engine (engine.py) decides which request goes to which row (scheduler.py) and turns rows
back into Results. Host-side input preparation (padding prompts, building per-row parameter tensors)
happens here, apart from the device calls, and only between decode chunks.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from inferlab.engine.graphs import DecodeGraphs, bucket_sizes
from inferlab.engine.hooks import ConstraintHooks
from inferlab.engine.intake import Prepared
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.rows import RowState
from inferlab.engine.sampler import FILTER_LEVELS
from inferlab.engine.step import finish_step
from inferlab.models.llama import LlamaModel

log = logging.getLogger(__name__)


class ModelRunner:
    def __init__(
        self,
        model: LlamaModel,
        cache: KVCache,
        rows: RowState,
        ops: Ops,
        hooks: ConstraintHooks,
        compile_step: bool = False,
    ) -> None:
        self.model = model
        self.cache = cache
        self.rows = rows
        self.ops = ops
        self.hooks = hooks
        self.device = cache.k.device
        self.num_rows = rows.tokens.shape[0]
        self.sizes = bucket_sizes(self.num_rows)
        self.graphs: DecodeGraphs | None = None
        # compile_step compiles the forward (the sampler and bookkeeping are already fused kernels): one
        # dynamic-batch compile plus the size-1 specialisation, instead of one per bucket and filter level
        self._forward = torch.compile(model.decode, dynamic=True) if compile_step else model.decode

    # ---- decode -------------------------------------------------------------------------------------
    def decode_step(self, b: int, level: int, len_hint: int | None = None) -> None:
        """One eager decode step over rows [0, b) (what each graph captured; also used to profile)."""
        r = self.rows
        logits = self._forward(r.tokens[:b], r.positions[:b], r.slots[:b], self.cache, len_hint)  # [b, V]
        finish_step(logits, r.view(b), self.hooks, self.ops, level)

    def capture_graphs(self) -> DecodeGraphs:
        self.graphs = DecodeGraphs(lambda b, level: self.decode_step(b, level, None), self.sizes, FILTER_LEVELS)
        self.graphs.capture()
        return self.graphs

    def decode(self, b: int, level: int, steps: int, len_hint: int | None) -> None:
        """`steps` decode steps over rows [0, b) with sampler filter `level`; len_hint bounds positions + 1
        at the first step (used by the eager torch attention only)."""
        for i in range(steps):
            if self.graphs is not None:
                self.graphs.replay(b, level)
            else:
                hint = None if len_hint is None or not self.ops.needs_len_hint else len_hint + i
                self.decode_step(b, level, hint)

    # ---- admission and prefill ----------------------------------------------------------------------
    def admit(self, row_ids: Sequence[int], items: Sequence[Prepared]) -> None:
        """Write the admitted requests' parameters into their rows (host -> device, between replays)."""
        n, width = len(items), self.rows.stop_ids.shape[1]
        stop_table = torch.zeros((n, width), dtype=torch.int64)
        for i, item in enumerate(items):
            ids = item.stop_ids or [0]
            stop_table[i] = torch.tensor((ids + [ids[0]] * width)[:width])  # pad by repeating entry 0
            self.hooks.assign(row_ids[i], item.request.constraint)

        def col(values, dtype):
            return torch.tensor(values, dtype=dtype)

        i64, f32 = torch.int64, torch.float32
        s = [item.sampling for item in items]
        self.rows.write_(
            torch.tensor(list(row_ids), dtype=i64, device=self.device),
            {
                "tokens": col([item.prompt_ids[-1] for item in items], i64),
                "positions": col([item.prompt_len - 1 for item in items], i64),  # where the prompt's last K/V is
                "active": col([True] * n, torch.bool),
                "finished": col([False] * n, torch.bool),
                "reason": col([0] * n, i64),
                "n_out": col([0] * n, i64),
                "copied": col([0] * n, i64),
                "max_new": col([p.max_new_tokens for p in s], i64),
                "min_new": col([p.min_new_tokens for p in s], i64),
                "temperature": col([p.temperature for p in s], f32),
                "top_k": col([p.top_k for p in s], i64),
                "top_p": col([p.top_p for p in s], f32),
                "min_p": col([p.min_p for p in s], f32),
                "seeds": col([item.seed for item in items], i64),
                "stop_ids": stop_table,
                "n_eos": col([item.n_eos for item in items], i64),
                "n_stop": col([len(item.stop_ids) for item in items], i64),
            },
        )

    def prefill(self, row_ids: Sequence[int], items: Sequence[Prepared]) -> None:
        """Run the admitted prompts (right-padded) and sample each row's first token."""
        longest = max(item.prompt_len for item in items)
        tokens = torch.zeros((len(items), longest), dtype=torch.int64)
        for i, item in enumerate(items):
            tokens[i, : item.prompt_len] = torch.tensor(item.prompt_ids)
        lengths = torch.tensor([item.prompt_len for item in items], dtype=torch.int64)
        idx = torch.tensor(list(row_ids), dtype=torch.int64, device=self.device)
        logits = self.model.prefill(
            tokens.to(self.device), lengths.to(self.device), self.rows.slots[idx], self.cache
        )  # [admitted, V]
        part = self.rows.gather(idx)
        level = max(item.filter_level for item in items)
        finish_step(logits, part, self.hooks, self.ops, level, row_ids=idx)
        self.rows.scatter_(idx, part)

    # ---- row lifecycle ----------------------------------------------------------------------------------
    def release(self, row_ids: Sequence[int]) -> None:
        idx = torch.tensor(list(row_ids), dtype=torch.int64, device=self.device)
        self.rows.active[idx] = False
        self.rows.finished[idx] = False
        self.rows.positions[idx] = 0
        for row in row_ids:
            self.hooks.reset_row(row)

    def move(self, moves: Sequence[tuple[int, int]]) -> None:
        src = torch.tensor([m[0] for m in moves], dtype=torch.int64, device=self.device)
        dst = torch.tensor([m[1] for m in moves], dtype=torch.int64, device=self.device)
        self.rows.move_(src, dst)
        for s, d in moves:
            self.hooks.move_row(s, d)
