"""Engine: load a checkpoint once, then generate for any number of requests. Owns the loop.

    engine = Engine(EngineConfig(model="path/to/checkpoint"))
    results = engine.generate([Request(id="a", prompt="Hello", sampling=SamplingParams(max_new_tokens=32))])

Start-up (in order, each timed in `engine.stats`): plan memory (refuse what cannot fit), load weights,
allocate the KV cache and row state, warm the prefill at its largest shape, capture the decode graphs.
The loop, per sync point: admit waiting requests into free rows (prefill), launch up to
`decode_steps_per_sync` decode steps and a snapshot of the rows' progress, then read the previous
chunk's snapshot (snapshots.py) while this chunk runs: deliver tokens, retire finished requests into
Results (their rows refill at the next sync point), compact the batch when it drains. Bad requests
become error Results, never exceptions. A request that collects hidden states gets its Result one sync
point after retirement: its rows' buffers are copied to the host behind the running chunk meanwhile.

Lifetime: `engine.close()`, or `with Engine(config) as engine:`, gives the weights, KV cache, graphs and
workspaces back at once (engine/lifetime.py); a closed engine refuses calls with EngineClosedError. An
engine dropped without close is freed by reference counting alone (no reference cycle holds it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch

from inferlab.engine.config import EngineConfig
from inferlab.engine.collection import AwaitingResults
from inferlab.engine.constraint_support import EngineConstraints
from inferlab.engine.gemm_plan import tune_gemm_plan
from inferlab.engine.graphs import Variant, bucket_for
from inferlab.engine.intake import Prepared, finished_result, prepare
from inferlab.engine.kv_cache import KVCache, kv_bytes_per_token
from inferlab.engine.lifetime import RELEASED, closed_error, release_cached_memory
from inferlab.engine.ops import select_ops
from inferlab.engine.rows import REASON_NAMES, RowState
from inferlab.engine.runner import ModelRunner
from inferlab.engine.scheduler import Scheduler
from inferlab.engine.snapshots import HEADER, Snapshot, SnapshotBuffers
from inferlab.engine.startup import make_plan, resolve_device, resolve_dtype, resolve_kv_dtype
from inferlab.engine.stats import EngineStats, PhaseClock
from inferlab.engine.steering_vectors import SteeringVectors
from inferlab.engine.tap_support import EngineTaps
from inferlab.errors import CapacityError, ConfigError
from inferlab.models.config import read_model_spec
from inferlab.models.loader import load_tokenizer, load_weights
from inferlab.models.registry import implementation_for
from inferlab.models.rope import RotaryTables
from inferlab.types import Request, Result

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self._closed = False
        self.config = config
        self.device = resolve_device(config.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # Triton launches and graph capture use the current device
        self.spec = read_model_spec(config.model)
        implementation = implementation_for(self.spec.architecture)
        self.dtype = resolve_dtype(config.dtype, self.spec, self.device)
        self.kv_dtype = resolve_kv_dtype(config.kv_dtype, self.dtype, self.device)  # the cache's element type
        use_graphs = self.device.type == "cuda" if config.cuda_graphs is None else config.cuda_graphs
        if use_graphs and self.device.type != "cuda":
            raise ConfigError("cuda_graphs=True needs a CUDA device; set cuda_graphs=None or False on CPU")
        self.plan = make_plan(config, self.spec, self.dtype, self.device, self.kv_dtype)
        self.max_prefill_tokens = max(config.max_prefill_tokens, self.plan.max_seq_len)
        self.kv_bytes_per_token = kv_bytes_per_token(self.spec, self.kv_dtype)  # fp8: with its scales

        self.ops = select_ops(config.kernels, self.device)

        t0 = time.perf_counter()
        weights = load_weights(config.model, self.spec, self.dtype, self.device)
        self.tokenizer = load_tokenizer(config.model)
        rotary = RotaryTables.build(self.spec.rope, self.spec.head_dim, self.plan.max_seq_len, self.device)
        model = implementation.load()(self.spec, weights, self.ops, rotary)
        slots, max_len = self.plan.slots, self.plan.max_seq_len
        cache = KVCache.allocate(self.spec, slots, max_len, self.kv_dtype, self.device)
        rows = RowState.allocate(slots, config.max_stop_ids, max_len, self.device)
        self.runner = ModelRunner(model, cache, rows, self.ops)
        self.gemm_timings: dict = {}  # start-up timings of cuBLAS vs the Triton GEMM, {"qkv@16": {impl: us}}
        # programs are at most as long as their output (holes apart): max_seq_len ops per row
        self.constraints = EngineConstraints(
            self.tokenizer,
            self.spec.vocab_size,
            slots,
            max_len,
            self.device,
            "triton" if self.ops.name == "triton" else "torch",
            self.runner.attach_constraints,
        )
        self.taps = EngineTaps(self.spec, self.dtype, self.device, slots, config.max_steered_layers, self.runner.taps,
                               self.runner.drop_graphs)
        self._snapshots = SnapshotBuffers(slots, config.decode_steps_per_sync + 1, self.device)
        self._sync_device()
        self.stats = EngineStats(
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            kv_dtype=str(self.kv_dtype).removeprefix("torch."),
            kernels=self.ops.name,
            cuda_graphs=use_graphs,
            max_slots=slots,
            max_seq_len=max_len,
            weight_bytes=weights.nbytes(),
            kv_cache_bytes=cache.nbytes,
            planned_bytes=self.plan.total_bytes,
            budget_bytes=self.plan.budget_bytes,
            load_s=time.perf_counter() - t0,
        )
        del weights, rotary, model, cache, rows  # from here on only `self` holds them, and close() drops them
        try:
            self._warm_up(use_graphs)
        except BaseException:
            self.close()  # a failed start-up gives its memory back now, though its traceback holds this frame
            raise

    # ---- lifetime (engine/lifetime.py) ----------------------------------------------------------------------
    def close(self) -> None:
        """Release the KV cache, the decode graphs and their pool, the workspaces, the constraint runtime and
        the weights, and empty PyTorch's caches. Idempotent; afterwards generate/stream raise
        EngineClosedError, while config, plan and stats stay readable."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sync_device()  # nothing in flight may still use the buffers freed below
        except RuntimeError as e:  # a device fault: release what we can all the same
            log.warning("closing the engine after a device error: %s", e)
        self.runner.close()
        self.constraints.close()
        for name in RELEASED:
            self.__dict__.pop(name, None)
        release_cached_memory(self.device)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Engine":
        if self._closed:
            raise closed_error("with")
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __getattr__(self, name: str):
        """Reached only for attributes that are not set: after close, the released ones."""
        if name in RELEASED and self.__dict__.get("_closed"):
            raise closed_error(f"engine.{name}")
        raise AttributeError(f"'Engine' object has no attribute {name!r}")

    # ---- start-up ---------------------------------------------------------------------------------------
    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _warm_up(self, use_graphs: bool) -> None:
        """Run the largest prefill shapes and capture the graphs now, so a run never allocates mid-way."""
        try:
            with torch.inference_mode():
                t0 = time.perf_counter()
                if self.device.type == "cuda" and self.ops.name == "triton" and self.config.gemm == "auto":
                    self._tune_gemms()
                t1 = time.perf_counter()
                if self.device.type == "cuda":
                    self.runner.warm_prefill(self.plan.max_seq_len, self.max_prefill_tokens)
                    self._sync_device()
                if use_graphs:
                    graphs = self.runner.capture_graphs()
                    self.stats.capture_s, self.stats.graphs = graphs.capture_s, len(graphs.graphs)
                self._sync_device()
                self.stats.warmup_s = time.perf_counter() - t1 - self.stats.capture_s
                self.stats.gemm_tune_s = t1 - t0
        except torch.cuda.OutOfMemoryError as e:
            raise CapacityError(
                f"start-up ran out of device memory ({e}); the plan was {self.plan.slots} slots x "
                f"{self.plan.max_seq_len} tokens: lower max_slots, max_seq_len, max_prefill_tokens or "
                "gpu_memory_fraction"
            ) from None
        self.runner.release(range(self.plan.slots))
        if self.device.type == "cuda":
            self.stats.peak_memory_bytes = torch.cuda.max_memory_allocated(self.device)

    def _tune_gemms(self) -> None:
        """Choose cuBLAS or the skinny Triton GEMM per projection and decode bucket (engine/gemm_plan.py)."""
        model = self.runner.model
        model.gemm, self.gemm_timings = tune_gemm_plan(
            model.weights, self.runner.sizes, model.gemm.act_mul, self.device, model.gemm.activation
        )
        self.stats.gemm_choices = model.gemm.describe(self.runner.sizes)

    # ---- generation ---------------------------------------------------------------------------------
    def add_steering_vectors(self, vectors: SteeringVectors) -> None:
        """Register a named set (SteeringVectors.load(path)): requests then name its entries,
        `Steer(layer, vector="name", scale)`. Each vector reaches the device when a request using it is
        admitted and stays there while in use (engine/steering.py)."""
        self.taps.add_vectors(vectors)

    def generate(self, requests: Iterable[Request]) -> list[Result]:
        """Results in the order of `requests` (errors included, as finish_reason "error")."""
        results: dict[int, Result] = dict(self._run(requests))
        return [results[i] for i in range(len(results))]

    def stream(self, requests: Iterable[Request]) -> Iterator[Result]:
        """Results as they finish (errors first, as they are found). One generate/stream at a time."""
        for _, result in self._run(requests):
            yield result

    def _run(self, requests: Iterable[Request]) -> Iterator[tuple[int, Result]]:
        if self._closed:
            raise closed_error("generate/stream")
        started = time.perf_counter()
        loop = _Loop(
            scheduler=Scheduler(self.plan.slots, self.max_prefill_tokens, self.config.batching, lambda p: p.prompt_len,
                                self.config.min_admission or max(1, self.plan.slots // 16)),
            clock=PhaseClock(cuda=self.device.type == "cuda"),
            snapshots=self._snapshots,
            steps_done=[0] * self.plan.slots,
            last_len=[0] * self.plan.slots,
        )
        self.runner.release(range(self.plan.slots))  # rows an abandoned stream left behind
        for index, request in enumerate(requests):
            item = prepare(
                index,
                request,
                self.tokenizer,
                self.spec.vocab_size,
                self.plan.max_seq_len,
                self.spec.eos_token_ids,
                self.config.max_stop_ids,
                self.config.seed,
                started,
                self._check_constraint,
                self.taps.check,
            )
            if isinstance(item, Result):
                yield index, item
            else:
                loop.scheduler.submit(item)
        while loop.scheduler.has_work() or loop.pending is not None:
            yield from self._sync_point(loop)  # inference mode only inside: it must not leak to the caller
        yield from loop.awaiting.deliver()
        self._sync_device()
        loop.clock.resolve()
        self.stats.prefill_s += loop.clock.totals.get("prefill", 0.0)
        self.stats.decode_s += loop.clock.totals.get("decode", 0.0)
        self.stats.generate_s += time.perf_counter() - started
        self.stats.constraint_setup_s = self.constraints.setup_s
        self.taps.setup_s += loop.capture_s
        self.stats.taps_setup_s = self.taps.setup_s
        if self.device.type == "cuda":
            self.stats.peak_memory_bytes = max(self.stats.peak_memory_bytes, torch.cuda.max_memory_allocated())

    def _check_constraint(self, program) -> str | None:
        """Intake's check of a request's program; builds the constraint runtime on first use (every row is
        idle during intake, which the capture of the constrained graphs needs). Outside inference mode: the
        runtime's buffers are updated in place between chunks, outside it too."""
        return self.constraints.check(program)

    @torch.inference_mode()
    def _sync_point(self, loop: "_Loop") -> list[tuple[int, Result]]:
        """Admit, launch a decode chunk and its snapshot, then read the *previous* snapshot (retire,
        build results) while the new chunk runs; compact when the batch drains."""
        scheduler, fresh, steps = loop.scheduler, None, 0
        if scheduler.live_rows or scheduler.waiting:
            self._admit(loop)
            steps = self._decode_chunk(loop)
            b = bucket_for(scheduler.live_rows[-1] + 1, self.runner.sizes)
            holders = [(r, scheduler.item(r)) for r in scheduler.live_rows]
            fresh = loop.snapshots.take(self.runner.rows, b, steps + 1, holders)
        results = []
        if loop.pending is not None:
            results += self._read(loop, loop.pending)
        loop.pending = fresh
        if fresh is not None and steps == 0 and not results:  # nothing ran that the wait could overlap
            results += self._read(loop, fresh)
            loop.pending = None
        if self.config.compact_rows and not scheduler.waiting:  # with a queue, free rows refill instead
            moves = scheduler.compaction(lambda n: bucket_for(n, self.runner.sizes))
            if moves:
                self.runner.move(moves)
                self.stats.row_moves += len(moves)
                for src, dst in moves:
                    scheduler.item(dst).row = dst
                    loop.steps_done[dst], loop.last_len[dst] = loop.steps_done[src], loop.last_len[src]
        return results

    def _admit(self, loop: "_Loop") -> None:
        for admission in loop.scheduler.admissions():
            now = time.perf_counter()
            for row, item in zip(admission.rows, admission.items):
                item.timings.admitted_s, item.row = now, row
                loop.steps_done[row], loop.last_len[row] = 0, item.prompt_len + 1  # at the first decode step
            t = loop.clock.start()
            self.runner.admit(admission.rows, admission.items)
            self.runner.prefill(admission.rows, admission.items)
            loop.clock.stop("prefill", t)
            self.stats.prefill_batches += 1
            self.stats.prompt_tokens += sum(item.prompt_len for item in admission.items)

    def _decode_chunk(self, loop: "_Loop") -> int:
        """Launch up to decode_steps_per_sync steps over the live rows' bucket; returns the step count."""
        scheduler, stats = loop.scheduler, self.stats
        live = scheduler.live_rows
        b = bucket_for(live[-1] + 1, self.runner.sizes)
        # a live row needs at most max_new - 1 decode steps after its prefill token
        remaining = max(scheduler.item(r).sampling.max_new_tokens - 1 - loop.steps_done[r] for r in live)
        steps = max(0, min(self.config.decode_steps_per_sync, remaining))
        if steps == 0:
            return 0
        items = [scheduler.item(r) for r in live]
        variant = Variant(max(item.filter_level for item in items), any(item.constraint is not None for item in items),
                          any(item.steering for item in items), any(item.collect is not None for item in items))
        t0 = time.perf_counter()
        if self.runner.ensure_captured(variant):  # a steered / collecting variant's first use
            loop.capture_s += time.perf_counter() - t0
        t = loop.clock.start()
        self.runner.decode(b, variant, steps, max(loop.last_len[r] for r in live))
        loop.clock.stop("decode", t)
        # bytes read: all weights per step, and each row's KV up to its length (1 for idle rows)
        lengths = sum(loop.last_len[r] for r in live) + (b - len(live))
        kv_tokens = steps * lengths + len(live) * steps * (steps - 1) // 2
        stats.decode_bytes += steps * stats.weight_bytes + kv_tokens * self.kv_bytes_per_token
        for r in range(b):
            loop.steps_done[r] += steps
            loop.last_len[r] += steps
        stats.decode_steps += steps
        stats.row_steps += steps * b
        return steps

    def _read(self, loop: "_Loop", snapshot: Snapshot) -> list[tuple[int, Result]]:
        """Deliver a snapshot's tokens to their requests; retire the finished ones into Results."""
        data = snapshot.rows()
        self.stats.syncs += 1
        loop.clock.resolve()  # fold the finished phase events now: a long run must not hoard them
        results, released = loop.awaiting.deliver(), []
        collected: list[tuple[int, Result, Prepared]] = []
        for row, item in snapshot.holders:
            if item.retired:  # retired from an earlier snapshot; its row may hold someone else now
                continue
            start, n_out, finished, reason = data[row][:HEADER]
            item.tokens.extend(data[row][HEADER : HEADER + n_out - start])
            if finished:
                item.retired = True
                item.timings.finished_s = time.perf_counter()
                released.append(item.row)
                loop.scheduler.retire(item.row)
                self.stats.generated_tokens += len(item.tokens)
                result = finished_result(
                    item, item.tokens, REASON_NAMES[reason], self.tokenizer, self.config.decode_text
                )
                if item.collect is not None:
                    collected.append((item.index, result, item))
                else:
                    results.append((item.index, result))
        if collected:  # copied behind the running chunk, delivered at the next read
            loop.awaiting.add(self.runner.taps.collection, collected)
        if released:
            self.runner.release(released)
        return results


@dataclass
class _Loop:
    """Host bookkeeping of one generate/stream call."""

    scheduler: Scheduler[Prepared]
    clock: PhaseClock
    snapshots: SnapshotBuffers
    steps_done: list[int]  # decode steps since admission, per row
    last_len: list[int]  # per row: its KV length at the next decode step (exact while it runs; an upper bound
    # once it finished unseen), which bounds the torch attention's work and counts decode bytes
    pending: Snapshot | None = None  # the snapshot of the chunk in flight, read at the next sync point
    awaiting: AwaitingResults = field(default_factory=AwaitingResults)  # collecting Results, activations in flight
    capture_s: float = 0.0  # steered / collecting graph variants captured during this call
