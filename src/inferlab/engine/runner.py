"""The device side of the loop: admit rows, prefill them, run decode steps (graph replays or eager), release.

ModelRunner owns the model, the KV cache, the per-row state (with its steering and collection tables,
taps.py) and the decode graphs. It knows rows, not
requests: the engine (engine.py) decides which request goes to which row (scheduler.py) and turns rows
back into Results. Host-side input preparation (padding prompts, building per-row parameter tensors)
happens here, apart from the device calls, and only between decode chunks.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from inferlab.engine.graphs import DecodeGraphs, Variant, bucket_sizes
from inferlab.engine.hooks import NO_CONSTRAINTS
from inferlab.engine.intake import Prepared
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.rows import RowState
from inferlab.engine.sampler import FILTER_LEVELS
from inferlab.engine.step import finish_step
from inferlab.engine.taps import RowTaps
from inferlab.engine.transfer import tensor_on, to_device
from inferlab.models.llama import LlamaModel
from inferlab.types import Request, SamplingParams, Timings

log = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: KVCache, rows: RowState, ops: Ops) -> None:
        self.model = model
        self.cache = cache
        self.rows = rows
        self.ops = ops
        self.constraints = None  # a ConstraintRuntime once the engine met a constrained request
        self.taps = RowTaps(ops, rows, model.spec.num_layers)  # steering and collection, made on first use
        self.device = cache.k.device
        self.num_rows = rows.tokens.shape[0]
        self.sizes = bucket_sizes(self.num_rows)
        self.graphs: DecodeGraphs | None = None

    # ---- decode -------------------------------------------------------------------------------------
    def decode_step(self, b: int, variant: Variant, len_hint: int | None = None) -> None:
        """One eager decode step over rows [0, b) (what each graph captured; also used to profile)."""
        variant = Variant(*variant)
        r = self.rows
        taps = self.taps.for_decode(b, variant.steered, variant.collecting)
        logits = self.model.decode(r.tokens[:b], r.positions[:b], r.slots[:b], self.cache, len_hint, taps=taps)  # [b, V]
        hooks = self.constraints if variant.constrained else NO_CONSTRAINTS
        finish_step(logits, r.view(b), hooks, self.ops, variant.level)

    def capture_graphs(self) -> DecodeGraphs:
        """The plain graphs of every bucket and filter level (start-up, every row idle)."""
        self.graphs = DecodeGraphs(self.sizes)
        self.graphs.capture(self._graph_step, [Variant(level) for level in FILTER_LEVELS])
        return self.graphs

    def _graph_step(self, b: int, variant: Variant) -> None:
        self.decode_step(b, variant, None)  # no host length hint: a graph replays with any lengths

    def attach_constraints(self, runtime) -> None:
        """Enable constrained steps (a ConstraintRuntime sized for every row); with graphs, capture the
        constrained variants now."""
        self.constraints = runtime
        if self.graphs is not None:
            self.capture_variants([Variant(level, True) for level in FILTER_LEVELS])

    def capture_variants(self, variants: list[Variant]) -> None:
        """Capture graphs of `variants` now, also between chunks of a running batch: the warm-up steps run
        with every row marked inactive, so no row advances or finishes (the token a step writes at
        out[row, n_out] is overwritten by the row's next real step) and no constraint or collection state
        moves; their K/V writes land at each row's newest position, which its next real step rewrites
        with the same values."""
        if self.graphs is None:
            return
        with torch.inference_mode():
            active = self.rows.active.clone()
            self.rows.active.zero_()
            try:
                self.graphs.capture(self._graph_step, variants)
            finally:
                self.rows.active.copy_(active)

    def ensure_captured(self, variant: Variant) -> bool:
        """Capture `variant` if graphs are in use and it has none yet; True when it did."""
        if self.graphs is None or self.graphs.has(variant):
            return False
        self.capture_variants([variant])
        return True

    def drop_graphs(self, predicate) -> None:
        """Forget captured variants whose buffers were replaced (tap_support.py grows collection buffers)."""
        if self.graphs is not None:
            self.graphs.drop(predicate)

    def decode(self, b: int, variant: Variant, steps: int, len_hint: int | None) -> None:
        """`steps` decode steps over rows [0, b) with `variant` (graphs.Variant); len_hint bounds positions + 1
        at the first step (used by the eager torch attention only). A variant without graphs yet is captured
        first (capture_variants)."""
        variant = Variant(*variant)
        self.ensure_captured(variant)
        for i in range(steps):
            if self.graphs is not None:
                self.graphs.replay(b, variant)
            else:
                hint = None if len_hint is None or not self.ops.needs_len_hint else len_hint + i
                self.decode_step(b, variant, hint)

    # ---- admission and prefill (host inputs staged through pinned memory: transfer.py) ----------------
    def admit(self, row_ids: Sequence[int], items: Sequence[Prepared]) -> None:
        """Write the admitted requests' parameters (and constraint programs) into their rows."""
        n, width = len(items), self.rows.stop_ids.shape[1]
        stop_table = torch.zeros((n, width), dtype=torch.int64)
        for i, item in enumerate(items):
            ids = item.stop_ids or [0]
            stop_table[i] = torch.tensor((ids + [ids[0]] * width)[:width])  # pad by repeating entry 0
        if self.constraints is not None:
            self.constraints.assign_rows(list(row_ids), [item.constraint for item in items])
        else:
            assert all(item.constraint is None for item in items), "constrained request without a runtime"
        self.taps.admit(row_ids, items)

        def col(values, dtype):
            return torch.tensor(values, dtype=dtype)

        i64, f32 = torch.int64, torch.float32
        s = [item.sampling for item in items]
        self.rows.write_(
            tensor_on(list(row_ids), i64, self.device),
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
        host = torch.zeros((len(items), longest + 2), dtype=torch.int64)  # [n, tokens | length | row id]
        for i, item in enumerate(items):
            host[i, : item.prompt_len] = torch.tensor(item.prompt_ids)
            host[i, longest:] = torch.tensor([item.prompt_len, row_ids[i]])
        staged = to_device(host, self.device)
        # columns of one staged block; made unit-stride because kernels index [n] inputs by lane
        tokens, lengths, idx = (staged[:, :longest].contiguous(), staged[:, longest].contiguous(),
                                staged[:, longest + 1].contiguous())
        steered = any(item.steering for item in items)
        taps = self.taps.for_prefill(idx, lengths, longest, steered, any(item.collect is not None for item in items))
        logits = self.model.prefill(tokens, lengths, self.rows.slots[idx], self.cache, taps=taps)  # [admitted, V]
        part = self.rows.gather(idx)
        level = max(item.filter_level for item in items)
        constrained = any(item.constraint is not None for item in items)
        finish_step(logits, part, self.constraints if constrained else NO_CONSTRAINTS, self.ops, level, row_ids=idx)
        self.rows.scatter_(idx, part)

    def warm_prefill(self, max_seq_len: int, max_prefill_tokens: int) -> None:
        """Prefill at the most tokens and at the most rows one batch may have (both bounds), with every
        sampler filter on: the largest buffers a prefill allocates, allocated at start-up."""
        longest = max_seq_len - 1  # a prompt leaves room for at least one new token
        widest = min(self.num_rows, max_prefill_tokens)
        sampling = SamplingParams(temperature=1.0, top_k=5, top_p=0.5, min_p=0.01, max_new_tokens=1)
        for batch, length in {(1, longest), (widest, max_prefill_tokens // widest)}:
            length = max(1, min(length, longest))
            items = [
                Prepared(i, Request(id=f"warm{i}", prompt_ids=(0,)), [0] * length, sampling, 0, [], 0, Timings())
                for i in range(batch)
            ]
            self.admit(range(batch), items)
            self.prefill(range(batch), items)

    # ---- row lifecycle ----------------------------------------------------------------------------------
    def release(self, row_ids: Sequence[int]) -> None:
        idx = tensor_on(list(row_ids), torch.int64, self.device)
        self.rows.active[idx] = False
        self.rows.finished[idx] = False
        self.rows.positions[idx] = 0
        if self.constraints is not None:
            self.constraints.release_rows(idx)
        self.taps.release(row_ids)

    def close(self) -> None:
        """Drop every device buffer the runner owns (Engine.close): the graphs and their pool first (they
        address the buffers), then the constraint state, the rows, the KV cache and the model's weights."""
        if self.graphs is not None:
            self.graphs.close()
        self.graphs = self.constraints = self.cache = self.rows = self.model = None

    def move(self, moves: Sequence[tuple[int, int]]) -> None:
        pairs = tensor_on([list(m) for m in moves], torch.int64, self.device)  # [m, 2] (src, dst)
        src, dst = pairs[:, 0], pairs[:, 1]
        self.rows.move_(src, dst)
        if self.constraints is not None:
            self.constraints.move_rows(src, dst)
        self.taps.move(src, dst, moves)
