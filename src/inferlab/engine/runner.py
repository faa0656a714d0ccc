"""The device side of the loop: admit rows, prefill them, run decode steps (graph replays or eager), release.

ModelRunner owns the model, the KV cache, the per-row state (with its steering and collection tables,
taps.py) and the decode and prefill graphs. It knows rows, not requests: the engine (engine.py, loop.py)
decides which request goes to which row (scheduler.py) and turns rows back into Results. Host-side input
preparation (padding prompts, building per-row parameter tensors)
happens here, apart from the device calls, and only between decode chunks.

Shared prompts: the rows of one prefill batch whose prompts are equal are prefilled once (one lane per
distinct prompt); the other rows get the prompt's K/V by a device copy from the lane's slot
(KVCache.copy_prefix) and sample their own first token (their own seed) from the lane's logits.

Decode graphs are captured when a (bucket, variant) is first needed (graphs.py), possibly while requests
are live: the capture's warm-up step runs inside `preserved_rows`, which saves the rows' state and puts
it back, so no row advances. Its K/V writes are harmless: it writes each row's current position with the
values the next real step writes there again, and the position after it, which a row always writes
before it reads.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Iterator, Sequence

import torch

from inferlab.engine.forwards.llama import LlamaModel
from inferlab.engine.graphs import Capturer, DecodeGraphs, Variant, bucket_sizes
from inferlab.engine.hooks import NO_CONSTRAINTS
from inferlab.engine.intake import Prepared
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.prefill_graphs import PrefillGraphs, right_padded
from inferlab.engine.rows import RowState
from inferlab.engine.sampler import FILTER_LEVELS
from inferlab.engine.step import finish_step
from inferlab.engine.taps import RowTaps
from inferlab.engine.transfer import tensor_on, to_device
from inferlab.engine.forwards.llama import LlamaModel
from inferlab.models.config import ModelSpec
from inferlab.models.rope import RotaryTables
from inferlab.models.weights import ModelWeights
from inferlab.types import Request, SamplingParams, Timings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefillDone:
    lanes: int  # distinct prompts run through the model
    tokens: int  # their prompt tokens
    padded: int  # the tokens the forward computed: lanes x padded length (a graph's bucket, or the longest)


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: KVCache, rows: RowState, ops: Ops, share_prompts: bool = True) -> None:
        self.model = model
        self.cache = cache
        self.rows = rows
        self.ops = ops
        self.share_prompts = share_prompts
        self.constraints = None  # a ConstraintRuntime once the engine met a constrained request
        self.taps = RowTaps(ops, rows, model.spec.num_layers)  # steering and collection, made on first use
        self.device = cache.k.device
        self.num_rows = rows.tokens.shape[0]
        self.sizes = bucket_sizes(self.num_rows)
        self.graphs: DecodeGraphs | None = None
        self.prefill_graphs: PrefillGraphs | None = None

    @classmethod
    def build(cls, spec: ModelSpec, model_class: type, weights: ModelWeights, ops: Ops, kv_dtype: torch.dtype,
              slots: int, max_len: int, max_stop_ids: int, share_prompts: bool) -> "ModelRunner":
        """The model (`model_class`: the registry's forward) over `weights`, with its rope tables, a KV cache
        of `slots` x `max_len` and the row state, on the weights' device (the engine's, or "meta" for the
        kernel precompile's dry run: engine/kernel_precompile.py)."""
        device = weights.embed.device
        rotary = RotaryTables.build(spec.rope, spec.head_dim, max_len, device)
        model = model_class(spec, weights, ops, rotary)
        cache = KVCache.allocate(spec, slots, max_len, kv_dtype, device, ops.name)
        rows = RowState.allocate(slots, max_stop_ids, max_len, device)
        return cls(model, cache, rows, ops, share_prompts)

    # ---- decode -------------------------------------------------------------------------------------
    def decode_step(self, b: int, variant: Variant, len_hint: int | None = None) -> None:
        """One eager decode step over rows [0, b) (what each graph captured; also used to profile)."""
        variant = Variant(*variant)
        r = self.rows
        taps = self.taps.for_decode(b, variant.steered, variant.collecting)
        logits = self.model.decode(r.tokens[:b], r.positions[:b], r.slots[:b], self.cache, len_hint, taps=taps)  # [b, V]
        hooks = self.constraints if variant.constrained else NO_CONSTRAINTS
        finish_step(logits, r.view(b), hooks, self.ops, variant.level)

    def use_graphs(self, max_prefill_tokens: int, capturer: Capturer | None = None) -> None:
        """Replay decode steps and the prefill forward from CUDA graphs, each captured when first needed
        (graphs.py, prefill_graphs.py), all in one memory pool (`capturer`: a Capturer() unless given)."""
        capturer = capturer if capturer is not None else Capturer()
        self.graphs = DecodeGraphs(self.sizes, capturer)
        lanes = min(self.num_rows, max_prefill_tokens)
        self.prefill_graphs = PrefillGraphs(self.model, self.cache, self.rows.slots, lanes, self.cache.max_len,
                                            max_prefill_tokens, capturer, self.taps)

    def ensure_graph(self, b: int, variant: Variant) -> None:
        """Capture the decode graph of (bucket b, variant) unless it exists (rows may be live)."""
        self.graphs.ensure(b, Variant(*variant), self._graph_step, self.preserved_rows)

    def _graph_step(self, b: int, variant: Variant) -> None:
        self.decode_step(b, variant, None)  # no host length hint: a graph replays with any lengths

    def attach_constraints(self, runtime) -> None:
        """Enable constrained steps (a ConstraintRuntime sized for every row); their graph variants are
        captured when first needed, like the others."""
        self.constraints = runtime

    def drop_graphs(self, predicate) -> None:
        """Forget captured decode variants and prefill graphs whose buffers were replaced (tap_support.py grows
        collection buffers): `predicate` reads `.steered` / `.collecting`, which Variant and PrefillKey share."""
        for graphs in (self.graphs, self.prefill_graphs):
            if graphs is not None:
                graphs.drop(predicate)

    def decode(self, b: int, variant: Variant, steps: int, len_hint: int | None) -> None:
        """`steps` decode steps over rows [0, b) with `variant` (graphs.Variant); len_hint bounds positions + 1
        at the first step (used by the eager torch attention only). A (bucket, variant) without a graph yet
        is captured first, live rows or not (preserved_rows)."""
        variant = Variant(*variant)
        if self.graphs is not None and steps > 0:
            self.ensure_graph(b, variant)
        for i in range(steps):
            if self.graphs is not None:
                self.graphs.replay(b, variant)
            else:
                hint = None if len_hint is None or not self.ops.needs_len_hint else len_hint + i
                self.decode_step(b, variant, hint)

    @contextmanager
    def preserved_rows(self) -> Iterator[None]:
        """Whatever decode steps run inside leave every row's state as it was: the rows are marked inactive
        (no row advances or finishes, no constraint or collection state moves, the token a step writes at
        out[row, n_out] is overwritten by the row's next real step), and the row state and constraint state
        are saved before and put back after, whatever a step wrote."""
        state = [getattr(self.rows, f.name) for f in fields(self.rows)]
        if self.constraints is not None:
            state += [self.constraints.ptr, self.constraints.state]
        saved = [t.clone() for t in state]
        self.rows.active.zero_()
        try:
            yield
        finally:
            for t, copy in zip(state, saved):
                t.copy_(copy)

    # ---- admission and prefill (host inputs staged through pinned memory: transfer.py) ----------------
    def admit(self, row_ids: Sequence[int], items: Sequence[Prepared]) -> None:
        """Write the admitted requests' parameters (and constraint programs) into their rows."""
        n, width = len(items), self.rows.stop_ids.shape[1]
        padded_stops = []
        for item in items:
            ids = list(item.stop_ids) or [0]
            padded_stops.append((ids + [ids[0]] * width)[:width])  # pad by repeating entry 0
        stop_table = torch.tensor(padded_stops, dtype=torch.int64).reshape(n, width)
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

    def prefill(self, row_ids: Sequence[int], items: Sequence[Prepared]) -> PrefillDone:
        """Run the admitted rows' distinct prompts (right-padded; from a graph when a bucket fits), give the
        rows that repeat a prompt its K/V (copy_prefix from the slot of the row that ran it), and sample
        every row's first token."""
        n = len(items)
        steered = any(item.steering for item in items)
        collecting = any(item.collect is not None for item in items)
        lane_of: dict = {}  # prompt key -> lane
        leaders: list[int] = []  # lane -> position in items of the row whose slot the prompt is run into
        lanes: list[int] = []  # position in items -> lane
        for i, item in enumerate(items):
            key = item.prompt_key if self.share_prompts else None  # None: its own lane (e.g. a steered row)
            lane = lane_of.setdefault(key if key is not None else ("row", i), len(leaders))
            if lane == len(leaders):
                leaders.append(i)
            lanes.append(lane)
        followers = [i for i in range(n) if leaders[lanes[i]] != i]
        u, m = len(leaders), len(followers)
        prompts = [items[i].prompt_ids for i in leaders]
        longest = max(len(p) for p in prompts)
        shape = self.prefill_graphs.bucket(u, longest) if self.prefill_graphs is not None else None
        # one staged block: [rows n | lanes n | follower rows m | their lanes' rows m], and for an eager
        # prefill [lane lengths u | lane rows u | lane tokens u x longest]
        sources = [row_ids[leaders[lanes[i]]] for i in followers]
        columns = [list(row_ids), lanes, [row_ids[i] for i in followers], sources]
        if shape is None:
            columns += [[len(p) for p in prompts], [row_ids[i] for i in leaders]]
        sizes = [len(c) for c in columns]
        host = torch.zeros(sum(sizes) + (0 if shape else u * longest), dtype=torch.int64)
        at = 0
        for values in columns:
            host[at : at + len(values)] = torch.tensor(values, dtype=torch.int64)
            at += len(values)
        if shape is None:
            host[at:] = right_padded(prompts, longest)
        staged = to_device(host, self.device)
        idx, lane_idx, follower_rows, source_rows, *lane_inputs = torch.split(staged[: sum(sizes)], sizes)
        if shape is not None:
            block = self.prefill_graphs.host_block(shape, prompts, [row_ids[i] for i in leaders])
            logits = self.prefill_graphs.run(shape, block, steered, collecting)[:u]  # [u, V], taps inside
        else:
            lengths, lane_rows = lane_inputs
            tokens = staged[sum(sizes) :].view(u, longest)
            taps = self.taps.for_prefill(lane_rows, lengths, longest, steered, collecting)
            logits = self.model.prefill(tokens, lengths, self.rows.slots[lane_rows], self.cache, taps=taps)  # [u, V]
        if m:
            length = max(items[i].prompt_len for i in followers)
            self.cache.copy_prefix(self.rows.slots[source_rows], self.rows.slots[follower_rows], length)
            logits = logits.index_select(0, lane_idx)  # [n, V]: each row samples from its lane's logits
        part = self.rows.gather(idx)
        level = max(item.filter_level for item in items)
        constrained = any(item.constraint is not None for item in items)
        finish_step(logits, part, self.constraints if constrained else NO_CONSTRAINTS, self.ops, level, row_ids=idx)
        self.rows.scatter_(idx, part)
        padded = shape[0] * shape[1] if shape is not None else u * longest
        return PrefillDone(lanes=u, tokens=sum(len(p) for p in prompts), padded=padded)

    def warm_up(self, max_seq_len: int, max_prefill_tokens: int, use_graphs: bool,
                capturer: Capturer | None = None) -> None:
        """What start-up runs before the first request (Engine._warm_up; the kernel precompile's dry run runs
        the same on meta tensors, so both launch the same kernels at the same shapes): an eager two-row
        prefill (the prefill attention's backends are chosen before any capture), then with graphs the
        largest prefill shapes through their graphs and the largest decode bucket's graph of each plain
        filter level (it sizes the graphs' shared pool), without them the largest prefills eagerly."""
        self.warm_prefill()
        if use_graphs:
            self.use_graphs(max_prefill_tokens, capturer)
        self.warm_prefill(max_seq_len, max_prefill_tokens)
        if use_graphs:
            for level in FILTER_LEVELS:
                self.ensure_graph(self.sizes[-1], Variant(level))

    def warm_prefill(self, max_seq_len: int | None = None, max_prefill_tokens: int | None = None) -> None:
        """Without bounds: two rows sharing a one-token prompt (an eager prefill, before any graph capture:
        the prefill attention's backends are chosen then; the K/V copy's first launch). With them: the most
        tokens and the most rows one batch may have, with every sampler filter on: the largest buffers a
        prefill allocates (in the graphs' pool once they are on), allocated at start-up."""
        sampling = SamplingParams(temperature=1.0, top_k=5, top_p=0.5, min_p=0.01, max_new_tokens=1)
        if max_seq_len is None or max_prefill_tokens is None:
            self._warm([[0], [0]], sampling)
            return
        longest = max_seq_len - 1  # a prompt leaves room for at least one new token
        widest = min(self.num_rows, max_prefill_tokens)
        vocab = self.model.spec.vocab_size
        for batch, length in {(1, longest), (widest, max_prefill_tokens // widest)}:
            length = max(1, min(length, longest))  # distinct prompts (two first tokens): every row is a lane
            self._warm([([i % vocab, i // vocab % vocab] + [0] * (length - 2))[:length] for i in range(batch)],
                       sampling)

    def _warm(self, prompts: list[list[int]], sampling: SamplingParams) -> None:
        items = [Prepared(i, Request(id=f"warm{i}", prompt_ids=(0,)), p, sampling, 0, [], 0, Timings())
                 for i, p in enumerate(prompts)]
        self.admit(range(len(items)), items)
        self.prefill(range(len(items)), items)

    # ---- row lifecycle ----------------------------------------------------------------------------------
    def release(self, row_ids: Sequence[int]) -> None:
        idx = tensor_on(list(row_ids), torch.int64, self.device)
        # index_fill_, not `t[idx] = False`: a Python scalar assigned by index is copied to the device from
        # pageable memory, which synchronises with the stream (the H100 trace: ~95 ms per release, the host
        # waiting out the running chunk and the device then idle while the host admitted and launched)
        self.rows.active.index_fill_(0, idx, False)
        self.rows.finished.index_fill_(0, idx, False)
        self.rows.positions.index_fill_(0, idx, 0)
        if self.constraints is not None:
            self.constraints.release_rows(idx)
        self.taps.release(row_ids)

    def close(self) -> None:
        """Drop every device buffer the runner owns (Engine.close): the decode and prefill graphs and their
        pool first (they address the buffers), then the constraint state, the steering and collection
        tables, the rows, the KV cache and the model's weights."""
        if self.graphs is not None:
            self.graphs.close()
            self.prefill_graphs.close()
            self.graphs.capturer.close()
        self.graphs = self.prefill_graphs = self.constraints = self.taps = None
        self.cache = self.rows = self.model = None

    def move(self, moves: Sequence[tuple[int, int]]) -> None:
        pairs = tensor_on([list(m) for m in moves], torch.int64, self.device)  # [m, 2] (src, dst)
        src, dst = pairs[:, 0], pairs[:, 1]
        self.rows.move_(src, dst)
        if self.constraints is not None:
            self.constraints.move_rows(src, dst)
        self.taps.move(src, dst, moves)
