"""Engine statistics for the lab: start-up phases apart from steady state, and what the loop did.

Prefill and decode time are measured on the device clock (CUDA events, resolved at sync points; wall clock
on CPU), so they never include host-side waiting; `generate_s` is the wall time of generate/stream calls.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch


@dataclass
class EngineStats:
    device: str = ""
    dtype: str = ""
    kv_dtype: str = ""  # the KV cache's element type: the model dtype, or "float8_e4m3fn" (with fp32 scales)
    kernels: str = ""
    cuda_graphs: bool = False
    max_slots: int = 0
    max_seq_len: int = 0
    weight_bytes: int = 0
    kv_cache_bytes: int = 0  # K, V and (fp8) their scales
    planned_bytes: int = 0  # the memory plan's estimate of everything
    budget_bytes: int = 0
    startup_s: float = 0.0  # wall time of Engine(...): every phase below, and what is not attributed to one
    device_init_s: float = 0.0  # the CUDA context (set_device + first allocation)
    load_s: float = 0.0  # weights read, checked, fused and moved to the device
    tokenizer_s: float = 0.0  # the tokenizer (its snapshot, or transformers' import and build), in a thread beside load_s
    tokenizer_wait_s: float = 0.0  # what start-up waited for that thread (both 0 with load_tokenizer=False)
    allocate_s: float = 0.0  # KV cache, row state, host buffers
    warmup_s: float = 0.0  # prefill at its largest shapes and the start-up graphs' warm-up steps (Triton JIT)
    gemm_tune_s: float = 0.0  # the GEMM plan: timing cuBLAS vs the Triton GEMM, or reading it (cache, shipped)
    # "cache" (this machine's start-up cache), "shipped" (the package's plans, engine/gemm_plans/), "timed",
    # or "" (no plan: CPU, torch kernels, gemm="cublas")
    gemm_plan_source: str = ""
    gemm_choices: dict = field(default_factory=dict)  # {"qkv@16": "cublas" | "triton n64 k128 split2", ...}
    startup_cache_dir: str = ""  # where start-up measurements are kept ("" when the cache is off)
    # the warm-up's Triton kernels compiled in background threads while the weights loaded
    # (kernel_precompile.py; all 0 where nothing is precompiled: CPU, torch kernels, precompile=False)
    precompile_kernels: int = 0  # kernels compiled (or read from Triton's disk cache) in the background
    precompile_s: float = 0.0  # its wall time, from before the weights to its last compile
    precompile_compile_s: float = 0.0  # compile time summed over its threads
    precompile_phases: dict = field(default_factory=dict)  # kernel_precompile.PrecompileReport.phases
    precompile_wait_s: float = 0.0  # what start-up waited for it after the weights and allocation
    precompile_error: str = ""  # why its dry run stopped early ("": it ran to the end)
    # why it did not run though it would have: Triton's cache holds its kernels (precompile_record.py); "": it ran
    precompile_skipped: str = ""
    # what the package's Triton kernels gave it (kernel_bundles/): "" nothing, "all" every kernel (nothing
    # compiled), else "<n> files" put in Triton's cache before it compiled the rest
    precompile_shipped: str = ""
    warmup_compiles: int = 0  # Triton kernels the warm-up still compiled as it launched them (-1: not counted)
    warmup_compile_s: float = 0.0  # their time, on the critical path (inside warmup_s and capture_s)
    capture_s: float = 0.0  # CUDA graph capture alone, at start-up (decode and prefill graphs)
    graphs: int = 0  # decode graphs captured so far (start-up + lazily)
    prefill_graphs: int = 0  # prefill graphs captured so far, one per (lanes, length) bucket used
    lazy_graphs: int = 0  # graphs (decode or prefill) captured during generate/stream calls, when first needed
    lazy_capture_s: float = 0.0  # their capture, eager warm-up run and wait for the device
    constraint_setup_s: float = 0.0  # the first constrained request's wait for the grammar set and constraint runtime
    constraint_build_s: float = 0.0  # the runtime's build (in a thread from start-up when the caller gave the GrammarSet)
    constraint_grammar_wait_s: float = 0.0  # of the build: waiting for the caller's GrammarSet (a Future)
    steering_collection_setup_s: float = 0.0  # steering table and collection buffers, when first needed (captures: lazy_capture_s)
    prefill_s: float = 0.0  # device clock, from admission to the last prefill kernel (host launch gaps included)
    prefill_host_s: float = 0.0  # host time spent admitting and launching prefills
    prefill_batches: int = 0
    prompt_tokens: int = 0  # prompt tokens of the admitted requests
    prefill_tokens: int = 0  # prompt tokens actually run through the model (each distinct prompt once per batch)
    prefill_padded_tokens: int = 0  # tokens the prefill forwards computed, right padding and graph buckets included
    prefill_lanes: int = 0  # distinct prompts prefilled
    shared_prompt_rows: int = 0  # rows that got their prompt's K/V by a copy instead of a prefill
    decode_s: float = 0.0
    decode_steps: int = 0  # graph replays / eager steps
    row_steps: int = 0  # sum over steps of the bucket size (rows computed, live or not)
    # sum over steps of the rows live when their chunk began (a row that finishes inside a chunk counts to its
    # end): live_row_steps / row_steps is how full the buckets ran, output tokens / live_row_steps how much of
    # a live row's chunk made tokens
    live_row_steps: int = 0
    decode_bytes: int = 0  # HBM bytes the decode steps read: weights each step + each row's live KV and its
    # scales (estimate)
    generated_tokens: int = 0  # tokens returned in Results
    syncs: int = 0  # host reads of the finished flags
    row_moves: int = 0  # compaction moves (a request moved to a lower row)
    generate_s: float = 0.0
    intake_s: float = 0.0  # pulling requests from the caller's iterable (their intake included)
    intake_blocking_s: float = 0.0  # the part pulled before a launch, while the device may have had nothing queued
    peak_memory_bytes: int = 0  # torch.cuda.max_memory_allocated after start-up and after each call

    def as_dict(self) -> dict:
        return asdict(self)

    def startup_phases(self) -> str:
        """One line of the start-up phases, for logs."""
        source = f" ({self.gemm_plan_source})" if self.gemm_plan_source else ""
        precompile = (f"Triton precompile {self.precompile_kernels} kernels in {self.precompile_s:.1f} s (in threads, "
                      f"waited {self.precompile_wait_s:.1f} s), " if self.precompile_kernels or self.precompile_s else "")
        if self.precompile_skipped:
            precompile = "Triton precompile skipped (its kernels cached), "
        elif self.precompile_shipped == "all":
            precompile = f"Triton kernels from the package ({self.precompile_kernels}, {self.precompile_s:.1f} s), "
        compiles = f" ({self.warmup_compiles} compiles {self.warmup_compile_s:.1f} s)" if self.warmup_compiles else ""
        return (f"CUDA init {self.device_init_s:.1f} s, weights {self.load_s:.1f} s, "
                f"tokenizer {self.tokenizer_s:.1f} s (in a thread, waited {self.tokenizer_wait_s:.1f} s), allocation {self.allocate_s:.1f} s, "
                f"{precompile}GEMM plan {self.gemm_tune_s:.1f} s{source}, warm-up {self.warmup_s:.1f} s{compiles}, "
                f"{self.graphs} graphs {self.capture_s:.1f} s")

    @property
    def decode_gb_per_s(self) -> float:
        """Achieved memory bandwidth of the decode steps (decode_bytes / decode_s)."""
        return self.decode_bytes / self.decode_s / 1e9 if self.decode_s > 0 else 0.0


@dataclass
class PhaseClock:
    """Accumulates device time of phases: CUDA events resolved lazily, or perf_counter on CPU."""

    cuda: bool
    pending: list[tuple[str, object, object]] = field(default_factory=list)
    totals: dict[str, float] = field(default_factory=dict)

    def start(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, name: str, started: object) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pending.append((name, started, end))
        else:
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - started

    def resolve(self) -> None:
        """Fold finished CUDA event pairs into totals (call after a sync)."""
        still = []
        for name, begin, end in self.pending:
            if end.query():
                self.totals[name] = self.totals.get(name, 0.0) + begin.elapsed_time(end) / 1000.0
            else:
                still.append((name, begin, end))
        self.pending = still
