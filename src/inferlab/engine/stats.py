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
    load_s: float = 0.0  # weights read and moved to the device
    warmup_s: float = 0.0  # first calls of prefill and the step (Triton JIT)
    gemm_tune_s: float = 0.0  # timing cuBLAS vs the Triton GEMM per projection and bucket (CUDA)
    gemm_choices: dict = field(default_factory=dict)  # {"qkv@16": "cublas" | "triton n64 k128 split2", ...}
    capture_s: float = 0.0  # CUDA graph capture alone
    graphs: int = 0
    constraint_setup_s: float = 0.0  # grammar set, constraint runtime and its graphs, at the first constrained request
    taps_setup_s: float = 0.0  # steering table, collection buffers and their graph variants, when first needed
    prefill_s: float = 0.0
    prefill_batches: int = 0
    prompt_tokens: int = 0
    decode_s: float = 0.0
    decode_steps: int = 0  # graph replays / eager steps
    row_steps: int = 0  # sum over steps of the bucket size (rows computed, live or not)
    decode_bytes: int = 0  # HBM bytes the decode steps read: weights each step + each row's live KV and its
    # scales (estimate)
    generated_tokens: int = 0  # tokens returned in Results
    syncs: int = 0  # host reads of the finished flags
    row_moves: int = 0  # compaction moves (a request moved to a lower row)
    generate_s: float = 0.0
    peak_memory_bytes: int = 0  # torch.cuda.max_memory_allocated after start-up and after each call

    def as_dict(self) -> dict:
        return asdict(self)

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
