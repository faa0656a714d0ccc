"""The device side of the loop: admit rows, prefill them, run decode steps (graph replays or eager), release.

ModelRunner owns the model, the KV cache, the batch's row features (batch/features.py: sampling and stop
state, KV slots, constraints, steering, collection) and the decode and prefill graphs. It knows rows, not
requests: the scheduler (scheduler.py) decides which request goes to which row and hands each sync point's
StepPlan (its prefill batches with their lanes, the decode bucket, variant and steps) to the loop (loop.py),
which runs it here and turns rows back into Results. Every lifecycle call (check, admit, release, move, the
state a preserved step keeps) goes to each feature in turn. Host-side input preparation (padding prompts,
per-row parameter tensors) happens here, apart from the device calls, and only between decode chunks.

Shared prompts: rows of one prefill batch with equal prompts are prefilled once (one lane per distinct
prompt, as the scheduler grouped them); the other rows get the prompt's K/V by a device copy from the lane's
slot (KVCache.copy_prefix) and sample their own first token (their own seed) from the lane's logits.

Decode graphs are captured when a (bucket, variant) is first needed (graphs.py), possibly while requests
are live: the capture's warm-up step runs inside `preserved_rows`, so no row advances. Its K/V writes are
harmless: it writes each row's current position with the values the next real step writes there again,
and the position after it, which a row always writes before it reads.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from inferlab.engine.batch.feature import RowMoves, RowSet
from inferlab.engine.batch.features import RowFeatures, Variant
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.forced_runs import ForcedRuns
from inferlab.engine.forwards.llama import LlamaModel
from inferlab.engine.graphs import Capturer, DecodeGraphs, bucket_sizes
from inferlab.engine.intake import Prepared
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.prefill_graphs import PrefillGraphs, right_padded
from inferlab.engine.residual_hooks import HookTables
from inferlab.engine.sampler import FILTER_LEVELS
from inferlab.engine.scheduler import Admission, StepPlan
from inferlab.engine.step import finish_step
from inferlab.engine.transfer import tensor_on, to_device
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
    def __init__(self, model: LlamaModel, cache: KVCache, features: RowFeatures, ops: Ops,
                 share_prompts: bool = True, forced_runs: ForcedRuns | None = None) -> None:
        self.model = model
        self.cache = cache
        self.features = features
        self.rows = features.sampling.rows  # the per-row state every step reads (rows.RowState)
        self.slots = features.kv_slots.slots  # [R] row -> KV slot
        self.ops = ops
        self.share_prompts = share_prompts  # the warm-up's and the probe's batches (the loop's: the scheduler's)
        self.forced_runs = forced_runs  # constrained steps take forced runs as extra positions (forced_runs.py)
        self.hook_tables = HookTables(ops, self.rows, model.spec.num_layers, features.steering, features.collection)
        self.device = cache.k.device
        self.num_rows = self.rows.tokens.shape[0]
        self.sizes = bucket_sizes(self.num_rows)
        self.graphs: DecodeGraphs | None = None
        self.prefill_graphs: PrefillGraphs | None = None

    @classmethod
    def build(cls, spec: ModelSpec, model_class: type, weights: ModelWeights, ops: Ops, kv_dtype: torch.dtype,
              slots: int, max_len: int, max_stop_ids: int, share_prompts: bool, max_steered_layers: int = 8,
              seed: int = 0, grammar_set: Any = None, constraint_pressure: bool = True,
              runtime_job: Any = None, forced_run_tokens: int = 0,
              forced_run_budget: float = 0.125) -> "ModelRunner":
        """The model (`model_class`: the registry's forward) over `weights`, with its rope tables, a KV cache
        of `slots` x `max_len` and the row features, on the weights' device (the engine's, or "meta" for the
        kernel precompile's dry run: engine/kernel_precompile.py). `seed`, `grammar_set`,
        `constraint_pressure`: the intake's (the engine's seed, the constraints' GrammarSet, whether
        constrained rows measure their pressure); `runtime_job`: the constraint runtime's build, when the engine
        started it (batch/constrained_rows.start_runtime_build); `forced_run_tokens`, `forced_run_budget`:
        EngineConfig's (tokens > 0: the cache gets one more slot, the packed steps' scratch)."""
        device = weights.embed.device
        rotary = RotaryTables.build(spec.rope, spec.head_dim, max_len, device)
        model = model_class(spec, weights, ops, rotary)
        scratch = 1 if forced_run_tokens else 0
        cache = KVCache.allocate(spec, slots + scratch, max_len, kv_dtype, device, ops.name)
        setup = BatchSetup(spec, ops, weights.embed.dtype, device, slots, max_len, max_stop_ids, max_steered_layers,
                           seed, grammar_set, constraint_pressure, runtime_job)
        forced_runs = None
        if forced_run_tokens:
            forced_runs = ForcedRuns(forced_run_tokens, scratch_slot=slots, triton=ops.name == "triton",
                                     share=forced_run_budget)
        return cls(model, cache, RowFeatures(setup), ops, share_prompts, forced_runs)

    @property
    def constraints(self):
        """The ConstraintRuntime once a constrained request arrived, else None."""
        return self.features.constraints.runtime

    # ---- intake -----------------------------------------------------------------------------------------
    def check(self, item: Prepared, tokenizer: Any) -> str | None:
        """Each feature's intake check of `item` in turn (they fill its fields): None, or the first problem.
        Graphs that captured buffers a check replaced are dropped."""
        for feature in self.features.all:
            problem = feature.check(item, tokenizer)
            if feature.buffers_replaced():
                bit = feature.bit
                self.drop_graphs(lambda key: getattr(key, bit, False))
            if problem is not None:
                return problem
        return None

    def batch_of(self, rows: Sequence[int], items: Sequence[Prepared]) -> Admission[Prepared]:
        """items[i] into rows[i] as one prefill batch (shared prompts as one lane): the warm-up's and the
        probe's, outside the scheduler."""
        key = (lambda item: item.prompt_key) if self.share_prompts else (lambda item: None)
        return Admission.grouped(rows, items, key, self.features.variant_of(items))

    # ---- decode -------------------------------------------------------------------------------------
    def decode_step(self, b: int, variant: Variant, len_hint: int | None = None) -> None:
        """One eager decode step over rows [0, b) (what each graph captured; also used to profile)."""
        variant = Variant(*variant)
        r = self.rows
        if self.packs(variant):
            pressure = self.features.pressure.buffers
            step = self.forced_runs.pack(r.view(b), self.slots[:b], self.constraints, pressure is not None)
            logits, bulk = self.model.decode_packed(step, self.cache)  # [b, V], [E, V] | None
            if bulk is not None:
                self.forced_runs.measure(step, bulk, pressure, self.constraints)
        else:
            hooks = self.hook_tables.for_decode(b, variant.steered, variant.collecting)
            logits = self.model.decode(r.tokens[:b], r.positions[:b], self.slots[:b], self.cache, len_hint,
                                       residual_hooks=hooks)  # [b, V]
        finish_step(logits, r.view(b), self.features.logits_hooks(variant), self.ops, variant.level)

    def packs(self, variant: Variant) -> bool:
        """Whether a decode step of `variant` packs its rows' forced runs (forced_runs.py): a constrained step,
        neither steered nor collecting, on an engine with forced_run_tokens > 0."""
        return self.forced_runs is not None and variant.constrained and not (variant.steered or variant.collecting)

    def use_graphs(self, max_prefill_tokens: int, capturer: Capturer | None = None) -> None:
        """Replay decode steps and the prefill forward from CUDA graphs, each captured when first needed
        (graphs.py, prefill_graphs.py), all in one memory pool (`capturer`: a Capturer() unless given)."""
        capturer = capturer if capturer is not None else Capturer()
        self.graphs = DecodeGraphs(self.sizes, capturer)
        lanes = min(self.num_rows, max_prefill_tokens)
        self.prefill_graphs = PrefillGraphs(self.model, self.cache, self.slots, lanes, self.cache.max_len,
                                            max_prefill_tokens, capturer, self.hook_tables)

    def ensure_graph(self, b: int, variant: Variant) -> None:
        """Capture the decode graph of (bucket b, variant) unless it exists (rows may be live)."""
        self.graphs.ensure(b, Variant(*variant), self._graph_step, self.preserved_rows)

    def _graph_step(self, b: int, variant: Variant) -> None:
        self.decode_step(b, variant, None)  # no host length hint: a graph replays with any lengths

    def drop_graphs(self, predicate) -> None:
        """Forget captured decode variants and prefill graphs whose buffers were replaced (a feature's check
        grew them): `predicate` reads a feature's bit, `.collecting` say, which Variant and PrefillKey share."""
        for graphs in (self.graphs, self.prefill_graphs):
            if graphs is not None:
                graphs.drop(predicate)

    def decode(self, plan: StepPlan) -> None:
        """The plan's decode chunk: `steps` decode steps over rows [0, bucket) with its variant; len_hint bounds
        positions + 1 at the first step (used by the eager torch attention only). A (bucket, variant) without
        a graph yet is captured first, live rows or not (preserved_rows)."""
        b, variant, steps, len_hint = plan.bucket, Variant(*plan.variant), plan.steps, plan.len_hint
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
        out[row, n_out] is overwritten by the row's next real step), and what the features save (the row
        state, the constraint state) is saved before and put back after, whatever a step wrote."""
        state = self.features.saved()
        saved = [t.clone() for t in state]
        self.rows.active.zero_()
        try:
            yield
        finally:
            for t, copy in zip(state, saved):
                t.copy_(copy)

    # ---- admission and prefill (host inputs staged through pinned memory: transfer.py) ----------------
    def admit(self, batch: Admission[Prepared]) -> None:
        """Write the admitted requests' values into their rows (each feature its own)."""
        self.features.admit(batch.rows, batch.items)

    def prefill(self, batch: Admission[Prepared]) -> PrefillDone:
        """Run the batch's distinct prompts, one lane each (right-padded; from a graph when a bucket fits), give
        the rows that repeat a prompt its K/V (copy_prefix from the slot of the row that ran it), and sample
        every row's first token."""
        row_ids, items, lanes, leaders, variant = batch.rows, batch.items, batch.lanes, batch.leaders, batch.variant
        n = len(items)
        steered, collecting = variant.steered, variant.collecting
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
            logits = self.prefill_graphs.run(shape, block, steered, collecting)[:u]  # [u, V], residual hooks inside
        else:
            lengths, lane_rows = lane_inputs
            tokens = staged[sum(sizes) :].view(u, longest)
            hooks = self.hook_tables.for_prefill(lane_rows, lengths, longest, steered, collecting)
            logits = self.model.prefill(tokens, lengths, self.slots[lane_rows], self.cache,
                                        residual_hooks=hooks)  # [u, V]
        if m:
            length = max(items[i].prompt_len for i in followers)
            self.cache.copy_prefix(self.slots[source_rows], self.slots[follower_rows], length)
            logits = logits.index_select(0, lane_idx)  # [n, V]: each row samples from its lane's logits
        part = self.rows.gather(idx)
        finish_step(logits, part, self.features.logits_hooks(variant), self.ops, variant.level, row_ids=idx)
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
        batch = self.batch_of(range(len(items)), items)
        self.admit(batch)
        self.prefill(batch)

    # ---- row lifecycle ----------------------------------------------------------------------------------
    def release(self, row_ids: Sequence[int]) -> None:
        ids = list(row_ids)
        self.features.release(RowSet(ids, tensor_on(ids, torch.int64, self.device)))

    def close(self) -> None:
        """Drop every device buffer the runner owns (Engine.close): the decode and prefill graphs and their
        pool first (they address the buffers), then every feature's buffers (the rows, the constraint state,
        the steering and collection tables), the KV cache and the model's weights."""
        if self.graphs is not None:
            self.graphs.close()
            self.prefill_graphs.close()
            self.graphs.capturer.close()
        self.graphs = self.prefill_graphs = self.hook_tables = None
        self.features.close()
        self.features = self.cache = self.rows = self.slots = self.model = None

    def move(self, moves: Sequence[tuple[int, int]]) -> None:
        pairs = tensor_on([list(m) for m in moves], torch.int64, self.device)  # [m, 2] (src, dst)
        self.features.move(RowMoves(list(moves), pairs[:, 0], pairs[:, 1]))
