"""EngineConfig: every knob of the engine, frozen and validated when built.

Values left as None or "auto" are resolved at start-up (engine/engine.py): the device, the dtype (the
checkpoint's, bf16 for fp32 checkpoints on CUDA), slots and max length (from the memory plan), CUDA graphs
(on for CUDA), kernels (Triton on CUDA) and the start-up cache's folder (engine/startup_cache.py). A bad
value raises ConfigError naming the field and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import ConfigError

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
BATCHING_MODES = ("continuous", "static")
KERNEL_SETS = ("auto", "torch", "triton")
GEMM_CHOICES = ("auto", "cublas")
KV_DTYPE_NAMES = ("auto", "model", "fp8")
MAX_FORCED_RUN_TOKENS = 7  # the attention kernel keeps (1 + F) x group query rows of one row in a tile


@dataclass(frozen=True)
class EngineConfig:
    model: str | Path  # a local HuggingFace checkpoint folder
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:1", ...
    dtype: str = "auto"
    max_slots: int | None = None  # concurrent rows (= KV slots); None: as many as memory allows (<= slot_cap)
    max_seq_len: int | None = None  # prompt + output tokens per row; None: min(model max, default_max_seq_len)
    gpu_memory_fraction: float = 0.9  # of the device memory free at start-up, for weights + cache + workspace
    memory_budget_bytes: int | None = None  # overrides the fraction (and is how CPU tests size the plan)
    reserve_bytes: int = 512 * 1024**2  # slack for library workspaces and allocator fragmentation
    slot_cap: int = 256  # upper bound of derived max_slots
    default_max_seq_len: int = 4096  # used when max_seq_len is None (capped by the model's max positions)
    max_prefill_tokens: int = 8192  # padded prompt tokens per prefill batch (raised to max_seq_len if smaller)
    prefill_by_length: bool = True  # prefill batches of similar prompt lengths (less padding); False: queue order
    cuda_graphs: bool | None = None  # None: on for CUDA
    kernels: str = "auto"  # "torch", "triton" or "auto" (triton on CUDA)
    gemm: str = "auto"  # decode projections: "auto" (time cuBLAS vs the Triton skinny GEMM at start-up) or "cublas"
    # KV cache: "auto" or "model" (the model dtype; a workload may read "auto" as its own choice: the conformer
    # pipeline's quality gate) or "fp8" (e4m3 + per-position scales; CUDA >= 8.9)
    kv_dtype: str = "auto"
    decode_steps_per_sync: int = 16  # decode steps between host reads of the finished flags
    batching: str = "continuous"  # or "static": admit a full batch, wait until all of it finished
    min_admission: int | None = None  # continuous: free rows a refill prefill waits for; None: max(1, slots // 16)
    compact_rows: bool = True  # move live rows down when the batch drains so the tail runs a smaller graph
    max_stop_ids: int = 8  # EOS ids + per-request stop ids per row
    max_steered_layers: int = 8  # steering entries (layers) per request; the steering table holds rows x this
    seed: int = 0  # requests without a seed get one derived from (seed, request id)
    decode_text: bool = True  # fill Result.text with the tokenizer (off: token ids only)
    # False: no tokenizer in this process (its import of transformers costs seconds of start-up): token ids in
    # and out, Result.text None, text prompts refused; constraints need Engine(config, grammar_set=...)
    load_tokenizer: bool = True
    share_prompts: bool = True  # rows admitted together with equal prompts: one prefill, the K/V copied
    # constrained requests measure how much probability their constraint takes away (Result.constraint_pressure,
    # inside the step; off: None, for measuring what it costs)
    constraint_pressure: bool = True
    # constrained decode steps feed each row up to this many of its forced (copy) tokens after its newest one
    # as extra query positions (forced_runs.py); 0: one token per row and step
    forced_run_tokens: int = 0
    forced_run_budget: float = 0.125  # booked positions a packed step has room for, per row (>= 4 whole runs)
    queue_ahead: int | None = None  # requests pulled ahead of free rows (lazy intake); None: max(min_admission,
    # slots // 8)
    startup_cache: bool = True  # keep start-up measurements (the GEMM plan) on disk and reuse them
    precompile: bool = True  # compile the warm-up's Triton kernels in threads while the weights load (CUDA)
    # the precompile first unpacks the package's Triton kernels for this GPU and software where they exist
    # (engine/kernel_bundles/): a fresh machine reads them instead of compiling
    shipped_kernels: bool = True
    cache_dir: str | Path | None = None  # the start-up cache's folder; None: $INFERLAB_CACHE_DIR or ~/.cache/inferlab
    # torch's intra-op threads while a CPU engine runs its steps (set around them, then put back): a step is
    # hundreds of small ops, which a second thread barely speeds up and an OpenMP barrier slows down
    # badly whenever another process holds a core (cpu_threads.py)
    cpu_threads: int = 1

    def __post_init__(self) -> None:
        if not str(self.model):
            raise ConfigError("model is empty; pass a local HuggingFace checkpoint folder")
        if self.dtype not in DTYPE_NAMES:
            raise ConfigError(f"dtype={self.dtype!r} is not one of {', '.join(DTYPE_NAMES)}")
        if self.batching not in BATCHING_MODES:
            raise ConfigError(f"batching={self.batching!r} is not one of {', '.join(BATCHING_MODES)}")
        if self.kernels not in KERNEL_SETS:
            raise ConfigError(f"kernels={self.kernels!r} is not one of {', '.join(KERNEL_SETS)}")
        if self.gemm not in GEMM_CHOICES:
            raise ConfigError(f"gemm={self.gemm!r} is not one of {', '.join(GEMM_CHOICES)}")
        if self.kv_dtype not in KV_DTYPE_NAMES:
            raise ConfigError(
                f"kv_dtype={self.kv_dtype!r} is not one of {', '.join(KV_DTYPE_NAMES)} (auto, model: the cache in the "
                "model dtype; fp8: float8 e4m3 with per-position scales, half the KV bytes)"
            )
        if not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise ConfigError(f"gpu_memory_fraction={self.gpu_memory_fraction} must be in (0, 1], e.g. 0.9")
        for name in ("max_slots", "max_seq_len", "memory_budget_bytes", "min_admission"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name}={value} must be >= 1 (or left unset to derive it)")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be >= 2 (one prompt token + one new token)")
        for name in ("slot_cap", "default_max_seq_len", "max_prefill_tokens", "decode_steps_per_sync", "max_stop_ids",
                     "max_steered_layers", "cpu_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if not 0 <= self.forced_run_tokens <= MAX_FORCED_RUN_TOKENS:
            raise ConfigError(f"forced_run_tokens={self.forced_run_tokens} must be in 0..{MAX_FORCED_RUN_TOKENS} "
                              "(0: one token per row and step)")
        if not 0.0 < self.forced_run_budget <= MAX_FORCED_RUN_TOKENS:
            raise ConfigError(f"forced_run_budget={self.forced_run_budget} must be in (0, {MAX_FORCED_RUN_TOKENS}], "
                              "e.g. 0.125 (booked positions per step: an eighth of the rows' count)")
        if self.queue_ahead is not None and self.queue_ahead < 0:
            raise ConfigError(f"queue_ahead={self.queue_ahead} must be >= 0 (or None for the default)")
        if self.reserve_bytes < 0:
            raise ConfigError(f"reserve_bytes={self.reserve_bytes} must be >= 0")
