"""Engine: load a checkpoint once, then generate for any number of requests. Owns start-up and the public API.

    engine = Engine(EngineConfig(model="path/to/checkpoint"))
    results = engine.generate([Request(id="a", prompt="Hello", sampling=SamplingParams(max_new_tokens=32))])

Start-up, each phase timed in `engine.stats`: the CUDA context, the memory plan (refuse what cannot fit),
the weights (meanwhile threads compile the warm-up's Triton kernels: kernel_precompile.py), the KV cache and
row state, the GEMM plan (start-up cache, shipped plans, else timed), and the warm-up (runner.warm_up). The
tokenizer loads in a thread beside them unless `load_tokenizer=False`. Other graphs are captured when first
needed. A generate/stream call is loop.py's; bad requests become error Results, never exceptions.

Lifetime: `engine.close()`, or `with Engine(config) as engine:`, gives the device memory back at once
(lifetime.py); a closed engine refuses calls with EngineClosedError. An engine dropped without close is
freed by reference counting alone (no reference cycle holds it).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Iterable, Iterator

import torch

from inferlab.engine.batch.constrained_rows import start_runtime_build
from inferlab.engine.config import EngineConfig
from inferlab.engine.forwards.registry import forward_class
from inferlab.engine.gemm_plan import plan_from_json, plan_to_json, tune_gemm_plan
from inferlab.engine.gemm_plans import known_plan
from inferlab.engine.intake import Prepared, prepare
from inferlab.engine.jit_compiles import jit_compiles_counted
from inferlab.engine.kernel_precompile import DryRun, KernelPrecompile, can_precompile
from inferlab.engine.kv_cache import kv_bytes_per_token
from inferlab.engine.lifetime import RELEASED, closed_error, release_cached_memory
from inferlab.engine.loop import GenerationLoop, LoopParts
from inferlab.engine.kernel_bundles import install
from inferlab.engine.precompile_record import decide, machine_fields, precompile_key, record, triton_cache_dir
from inferlab.engine.ops import select_ops
from inferlab.engine.runner import ModelRunner
from inferlab.engine.snapshots import SnapshotBuffers
from inferlab.engine.startup import graphs_wanted, make_plan, resolve_device, resolve_dtype, resolve_kv_dtype
from inferlab.engine.startup_cache import StartupCache
from inferlab.engine.stats import EngineStats
from inferlab.engine.steering_vectors import SteeringVectors
from inferlab.errors import CapacityError
from inferlab.models.config import read_model_spec
from inferlab.models.loader import load_weights
from inferlab.models.tokenizer_loading import load_tokenizer_timed
from inferlab.types import Request, Result

log = logging.getLogger(__name__)


def _timed(fn, *args) -> tuple[Any, float]:
    t = time.perf_counter()
    return fn(*args), time.perf_counter() - t


class Engine:
    def __init__(self, config: EngineConfig, grammar_set: Any = None) -> None:
        """`grammar_set`: the GrammarSet (or a Future of one) constrained requests run with, instead of the one
        built from this engine's tokenizer: what an engine without a tokenizer (load_tokenizer=False) needs to
        constrain, so that a caller's process need not import transformers."""
        started = time.perf_counter()
        self._closed = False
        self.config = config
        # the tokenizer is host work (its snapshot in the start-up cache, else transformers' import and build):
        # a thread loads it while this one creates the CUDA context, plans memory and loads the weights
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferlab-tokenizer")
        self.startup_cache = StartupCache.at(config.startup_cache, config.cache_dir)
        cache_root = self.startup_cache.root  # None: the cache is off, and so are tokenizer snapshots
        tokenizer_job = pool.submit(load_tokenizer_timed, config.model, cache_root, cache_root is not None) \
            if config.load_tokenizer else None
        try:
            self._load(config, tokenizer_job, grammar_set)
        finally:
            pool.shutdown(wait=False)  # on an error, the thread finishes on its own
        try:
            self._warm_up(self.stats.cuda_graphs)
        except BaseException:
            self.close()  # a failed start-up gives its memory back now, though its traceback holds this frame
            raise
        self.stats.startup_s = time.perf_counter() - started
        log.info("engine ready in %.1f s (%s)", self.stats.startup_s, self.stats.startup_phases())

    # ---- start-up ---------------------------------------------------------------------------------------
    def _load(self, config: EngineConfig, tokenizer_job: Future | None, grammar_set: Any) -> None:
        """Device, plan, weights, cache and rows, the tokenizer joined; fills self.stats."""
        self.device = resolve_device(config.device)
        device_init_s = 0.0
        if self.device.type == "cuda":
            t = time.perf_counter()
            torch.cuda.set_device(self.device)  # Triton launches and graph capture use the current device
            torch.empty(1, device=self.device)  # the CUDA context now, timed apart from the weights
            torch.cuda.synchronize(self.device)
            device_init_s = time.perf_counter() - t
        self.spec = read_model_spec(config.model)
        forward = forward_class(self.spec.architecture)
        self.dtype = resolve_dtype(config.dtype, self.spec, self.device)
        self.kv_dtype = resolve_kv_dtype(config.kv_dtype, self.dtype, self.device)  # the cache's element type
        use_graphs = graphs_wanted(config.cuda_graphs, self.device)
        self.plan = make_plan(config, self.spec, self.dtype, self.device, self.kv_dtype)
        self.max_prefill_tokens = max(config.max_prefill_tokens, self.plan.max_seq_len)
        self.kv_bytes_per_token = kv_bytes_per_token(self.spec, self.kv_dtype)  # fp8: with its scales
        self.ops = select_ops(config.kernels, self.device)
        model_class = forward
        self._precompile = self._start_precompile(config, model_class, use_graphs)
        # a caller that gives the GrammarSet will constrain: its runtime is built beside the weights' load
        runtime_job = None if grammar_set is None else start_runtime_build(
            grammar_set, self.plan.slots, self.plan.max_seq_len, self.spec.vocab_size, self.device, self.ops)
        weights, load_s = _timed(load_weights, config.model, self.spec, self.dtype, self.device)
        t = time.perf_counter()
        slots, max_len = self.plan.slots, self.plan.max_seq_len
        self.runner = ModelRunner.build(self.spec, model_class, weights, self.ops, self.kv_dtype, slots, max_len,
                                        config.max_stop_ids, config.share_prompts, config.max_steered_layers,
                                        config.seed, grammar_set, config.constraint_pressure, runtime_job,
                                        config.forced_run_tokens, config.forced_run_budget)
        # a chunk's tokens per row: the prefill's, then up to (1 + forced_run_tokens) per step
        self._snapshots = SnapshotBuffers(slots, config.decode_steps_per_sync * (1 + config.forced_run_tokens) + 1,
                                          self.device,
                                          self.runner.features.snapshot_width)
        self._sync_device()
        allocate_s = time.perf_counter() - t
        t = time.perf_counter()
        self.tokenizer, tokenizer_s = tokenizer_job.result() if tokenizer_job is not None else (None, 0.0)
        tokenizer_wait_s = time.perf_counter() - t
        self.gemm_timings: dict = {}  # start-up timings of cuBLAS vs the Triton GEMM, {"qkv@16": {impl: us}}
        self.stats = EngineStats(
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            kv_dtype=str(self.kv_dtype).removeprefix("torch."),
            kernels=self.ops.name,
            cuda_graphs=use_graphs,
            max_slots=slots,
            max_seq_len=max_len,
            weight_bytes=weights.nbytes(),
            kv_cache_bytes=self.runner.cache.nbytes,
            planned_bytes=self.plan.total_bytes,
            budget_bytes=self.plan.budget_bytes,
            device_init_s=device_init_s,
            load_s=load_s,
            tokenizer_s=tokenizer_s,
            tokenizer_wait_s=tokenizer_wait_s,
            allocate_s=allocate_s,
            startup_cache_dir=str(self.startup_cache.root or ""),
        )
        del weights  # from here on only `self` holds it, and close() drops it

    def _start_precompile(self, config: EngineConfig, model_class: type, use_graphs: bool) -> KernelPrecompile | None:
        """The warm-up's Triton kernels compiled in background threads while the weights load
        (kernel_precompile.py), on its dry run of this engine's warm-up; None where nothing would compile (CPU,
        torch kernels), where it is off, and where a record says Triton's cache holds its kernels already
        (precompile_record.py: then no thread runs beside the weights' load)."""
        self._precompile_key: dict | None = None
        self._precompile_skipped = ""
        if not (config.precompile and self.device.type == "cuda" and self.ops.name == "triton" and can_precompile()):
            return None
        cache, device = self.startup_cache, self.device

        def gemm_plan(weights, buckets: list[int], activation: str) -> dict | None:  # what _gemm_plan will find
            return known_plan(cache, weights, buckets, device, activation)[0]

        dry = DryRun(self.spec, model_class, self.ops, self.dtype, self.kv_dtype, self.plan.slots,
                     self.plan.max_seq_len, self.max_prefill_tokens, config.max_stop_ids, config.share_prompts,
                     use_graphs, gemm_plan if config.gemm == "auto" else None)
        key = precompile_key(dry.key_fields(), machine_fields(self.device))
        decision = decide(cache, key)
        if not decision.run:
            self._precompile_skipped = decision.reason
            log.info("start-up precompile skipped: %s", decision.reason)
            return None
        log.debug("start-up precompile: %s", decision.reason)
        self._precompile_key = key
        shipped = partial(install, key, device, triton_cache_dir()) if config.shipped_kernels else None
        return KernelPrecompile(dry, self.device, shipped=shipped)

    # ---- lifetime (engine/lifetime.py) ----------------------------------------------------------------------
    def close(self) -> None:
        """Release the KV cache, the decode and prefill graphs and their pool, the workspaces, the constraint
        runtime and the weights, and empty PyTorch's caches. Idempotent; afterwards generate/stream raise
        EngineClosedError, while config, plan and stats stay readable."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sync_device()  # nothing in flight may still use the buffers freed below
        except RuntimeError as e:  # a device fault: release what we can all the same
            log.warning("closing the engine after a device error: %s", e)
        if "runner" in self.__dict__:  # a start-up that failed before the runner existed has nothing to free
            self.runner.close()
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

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _warm_up(self, use_graphs: bool) -> None:
        """The GEMM plan, then the largest prefill shapes and the start-up graphs, so what a run allocates is
        allocated now (an out-of-memory here becomes a CapacityError naming the knobs)."""
        try:
            with torch.inference_mode():
                self._join_precompile()  # before any Triton launch and any graph capture
                t0 = time.perf_counter()
                if self.device.type == "cuda" and self.ops.name == "triton" and self.config.gemm == "auto":
                    self._gemm_plan()
                t1 = time.perf_counter()
                if self.device.type == "cuda" or use_graphs:  # (graphs imply CUDA outside tests)
                    with jit_compiles_counted() as compiles:
                        self.runner.warm_up(self.plan.max_seq_len, self.max_prefill_tokens, use_graphs)
                    self.stats.warmup_compiles, self.stats.warmup_compile_s = compiles.count, compiles.seconds
                if use_graphs:
                    graphs = self.runner.graphs
                    self.stats.capture_s = graphs.capturer.capture_s
                    self.stats.graphs = len(graphs.graphs)
                    self.stats.prefill_graphs = len(self.runner.prefill_graphs.graphs)
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
        graphs = self.runner.graphs
        capturer = graphs.capturer if graphs is not None else None
        self._startup_captures = (capturer.count, capturer.capture_s + capturer.warmup_s) if capturer else (0, 0.0)
        if self.device.type == "cuda":
            self.stats.peak_memory_bytes = torch.cuda.max_memory_allocated(self.device)

    def _join_precompile(self) -> None:
        self.stats.precompile_skipped = self._precompile_skipped
        if self._precompile is None:
            return
        report, self._precompile = self._precompile.wait(), None
        stats = self.stats
        stats.precompile_kernels, stats.precompile_s, stats.precompile_compile_s = (report.kernels, report.wall_s,
                                                                                    report.compile_s)
        stats.precompile_wait_s, stats.precompile_error = report.wait_s, report.error
        stats.precompile_phases, stats.precompile_shipped = report.phases, report.shipped
        record(self.startup_cache, self._precompile_key, report.kernels, report.files, report.clean)

    def _gemm_plan(self) -> None:
        """cuBLAS or the skinny Triton GEMM per projection and decode bucket (engine/gemm_plan.py): the plan
        stored (gemm_plans.known_plan: this machine's start-up cache, else the package's shipped plans) when
        one exists for this GPU, shapes and versions, else timed and stored in the cache."""
        model, sizes = self.runner.model, self.runner.sizes
        act_mul, activation = model.gemm.act_mul, model.gemm.activation  # the model's MLP (Gemma: GELU-tanh)
        stored, source, key = known_plan(self.startup_cache, model.weights, sizes, self.device, activation)
        if stored is not None:
            try:
                model.gemm, self.gemm_timings = plan_from_json(stored, act_mul, model.weights, self.device, activation)
                self.stats.gemm_plan_source = source
            except ValueError as e:
                log.warning("ignoring the %s GEMM plan (%s); timing the plan again", source, e)
        if not self.stats.gemm_plan_source:
            model.gemm, self.gemm_timings = tune_gemm_plan(model.weights, sizes, act_mul, self.device, activation)
            self.stats.gemm_plan_source = "timed"
            self.startup_cache.store("gemm_plan", key, plan_to_json(model.gemm, self.gemm_timings))
        self.stats.gemm_choices = model.gemm.describe(sizes)

    def _update_late_stats(self) -> None:
        """Figures that change after start-up: graphs captured lazily, the constraint set-up, peak memory."""
        stats, graphs = self.stats, self.runner.graphs
        if graphs is not None:
            count, seconds = self._startup_captures
            capturer = graphs.capturer
            stats.graphs = len(graphs.graphs)
            stats.prefill_graphs = len(self.runner.prefill_graphs.graphs)
            stats.lazy_graphs = capturer.count - count
            stats.lazy_capture_s = capturer.capture_s + capturer.warmup_s - seconds
        features = self.runner.features
        stats.constraint_setup_s = features.constraints.setup_s
        stats.constraint_build_s = features.constraints.build_s
        stats.constraint_grammar_wait_s = features.constraints.grammar_wait_s
        stats.steering_collection_setup_s = features.steering.setup_s + features.collection.setup_s
        if self.device.type == "cuda":
            stats.peak_memory_bytes = max(stats.peak_memory_bytes, torch.cuda.max_memory_allocated(self.device))

    # ---- generation ---------------------------------------------------------------------------------
    def add_steering_vectors(self, vectors: SteeringVectors) -> None:
        """Register a named set (SteeringVectors.load(path)): requests then name its entries,
        `Steer(layer, vector="name", scale)`. Each vector reaches the device when a request using it is
        admitted and stays there while in use (engine/steering.py)."""
        self.runner.features.steering.add_vectors(vectors)

    def generate(self, requests: Iterable[Request], on_tokens: Callable[[int], None] | None = None) -> list[Result]:
        """Results in the order of `requests` (errors included, as finish_reason "error"). `on_tokens`: as
        in `stream`."""
        results: dict[int, Result] = dict(self._run(requests, on_tokens))
        return [results[i] for i in range(len(results))]

    def stream(self, requests: Iterable[Request], on_tokens: Callable[[int], None] | None = None) -> Iterator[Result]:
        """Results as they finish (errors as they are found). `requests` is consumed lazily, at sync points,
        as free rows and a short queue need it (loop.py): it may be a generator of any length, and it may
        yield more requests after results came back. A slow iterable stalls the engine (stats.intake_s).
        One generate/stream at a time. `on_tokens(n)`, when given, is called at each sync point with the n
        output tokens that reached the host there, finished or not (a progress bar's token rate from the
        first decode chunk; it runs on the engine's path, so it must be quick)."""
        for _, result in self._run(requests, on_tokens):
            yield result

    def _run(self, requests: Iterable[Request],
             on_tokens: Callable[[int], None] | None = None) -> Iterator[tuple[int, Result]]:
        if self._closed:
            raise closed_error("generate/stream")
        return GenerationLoop(self._loop_parts(), requests, on_tokens).run()

    def _loop_parts(self) -> LoopParts:
        """What a generate/stream call uses of this engine (loop.py)."""
        return LoopParts(
            config=self.config,
            stats=self.stats,
            slots=self.plan.slots,
            max_prefill_tokens=self.max_prefill_tokens,
            kv_bytes_per_token=self.kv_bytes_per_token,
            cuda=self.device.type == "cuda",
            runner=lambda: self.runner,
            snapshots=lambda: self._snapshots,
            tokenizer=lambda: self.tokenizer,
            prepare=self._prepare_request,
            sync_device=self._sync_device,
            after_run=self._update_late_stats,
        )

    def _prepare_request(self, index: int, request: Request) -> Prepared | Result:
        """Intake of one request pulled from the caller's iterable (intake.prepare: the runner's row features
        check it, with this engine's tokenizer)."""
        runner, tokenizer = self.runner, self.tokenizer
        return prepare(index, request, lambda item: runner.check(item, tokenizer), time.perf_counter())
