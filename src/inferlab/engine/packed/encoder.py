"""Encoder: a checkpoint of the engine's families run as an encoder over packed prefill batches: sequence
classifier logits, or pooled hidden states of chosen layers. No KV cache, no decoding, no CUDA graphs (a
batch of thousands of tokens is bound by its matmuls, not by launches).

    encoder = Encoder(EncoderConfig(model="path/to/classifier"))
    batch = encoder.pack([[ids of text 1], [ids of text 2]])   # host side: any thread, pinned on CUDA
    logits = encoder.classify(batch)                          # [2, num_labels] fp32 on the host

Start-up (phases timed in `stats`): device, spec (classify refuses a checkpoint without a classification
head), weights (optionally FP8, fp8_weights.py), the forward, and on CUDA the warm-up: the attention
implementation chosen per kind of layer (attention.py) and the MLP's (wide_mlp.py), then one full batch
whose time seeds the rate estimate `predict_s` reads. Each batch's device time and FLOPs go to `stats`. Rows are the caller's
business (lengths within `max_length`, at least one token). A CUDA out-of-memory error propagates (the
workloads back off on it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from inferlab.engine.forwards.registry import encoder_forward_class
from inferlab.engine.lifetime import release_cached_memory
from inferlab.engine.ops import select_ops
from inferlab.engine.packed import wide_mlp
from inferlab.engine.packed.attention import PackedAttention
from inferlab.engine.packed.batch import PackedBatch, on_device, pack_rows
from inferlab.engine.packed.config import EncoderConfig
from inferlab.engine.packed.flops import prefill_flops
from inferlab.engine.packed.forward import POOLS, PackedForward, RopeTables
from inferlab.engine.packed.fp8_weights import Fp8Gemm, check_fp8_device, quantize_layers
from inferlab.engine.startup import resolve_device, resolve_dtype
from inferlab.errors import ConfigError, EngineClosedError, InputError, UnsupportedError
from inferlab.models.config import read_model_spec
from inferlab.models.loader import load_weights
from inferlab.models.registry import is_classifier

log = logging.getLogger(__name__)

RATE_SMOOTHING = 0.3  # weight of the newest batch in the seconds-per-FLOP estimate


@dataclass
class EncoderStats:
    device: str = ""
    dtype: str = ""
    weights: str = ""
    startup_s: float = 0.0
    load_s: float = 0.0
    warmup_s: float = 0.0
    attention: dict[str, str] = field(default_factory=dict)  # kind of layer -> implementation
    attention_timings_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    mlp: str = "cublas"  # the MLP of a large batch: cuBLAS + act_mul, or the fused gate_up tile (wide_mlp.py)
    mlp_timings_ms: dict[str, float] = field(default_factory=dict)
    batches: int = 0
    rows: int = 0
    tokens: int = 0
    flops: float = 0.0
    device_s: float = 0.0  # the batches' forward time on the device clock (CPU: wall time)

    @property
    def tflops_per_s(self) -> float | None:
        return self.flops / self.device_s / 1e12 if self.device_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tflops_per_s": self.tflops_per_s}


class Encoder:
    def __init__(self, config: EncoderConfig) -> None:
        started = time.perf_counter()
        self.config = config
        self.device = resolve_device(config.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # Triton launches use the current device
        self.spec = spec = read_model_spec(config.model)
        classify = config.task == "classify"
        if classify and not is_classifier(spec.architecture):
            raise InputError(f"{config.model} is a {spec.architecture} checkpoint, without a sequence-classification "
                             "head; classify needs a ...ForSequenceClassification checkpoint")
        model_class = encoder_forward_class(spec.architecture)
        check_windows(spec)
        self.dtype = resolve_dtype(config.dtype, spec, self.device)
        if config.weights == "fp8":
            check_fp8_device(self.device, self.dtype)
        self.max_length = min(config.max_length or spec.max_position_embeddings, spec.max_position_embeddings)
        # the classifier reads each row's last non-pad token
        self.pad_id = (config.pad_id if config.pad_id is not None else spec.pad_token_id) if classify else None
        ops = select_ops(config.kernels, self.device)
        attention = PackedAttention(self.device, _candidates(config.attention, self.device))
        t = time.perf_counter()
        weights = load_weights(config.model, spec, self.dtype, self.device, head="score" if classify else "none")
        tables = RopeTables(spec, self.max_length, self.device)
        model = model_class(spec, weights, ops, tables.of(0))  # its own rotary serves generation only
        if config.weights == "fp8":
            quantize_layers(weights.layers, self.device)
            model.gemm = Fp8Gemm(model.gemm.act_mul)
        self.forward = PackedForward(model, spec, attention, tables)
        self._sync()
        self.stats = EncoderStats(device=str(self.device), dtype=str(self.dtype).removeprefix("torch."),
                                  weights=config.weights, load_s=time.perf_counter() - t)
        self._seconds_per_flop: float | None = None
        self._closed = False
        if self.device.type == "cuda":
            self._warm_up()
        self.stats.startup_s = time.perf_counter() - started
        log.info("encoder ready in %.1f s (load %.1f s, warm-up %.1f s; attention %s; MLP %s)", self.stats.startup_s,
                 self.stats.load_s, self.stats.warmup_s, self.stats.attention, self.stats.mlp)

    # ---- start-up ---------------------------------------------------------------------------------------
    def _warm_up(self) -> None:
        t = time.perf_counter()
        spec, attention = self.spec, self.forward.attention
        row = min(self.max_length, 2048, self.config.max_batch_tokens)
        attention.choose(spec.num_heads, spec.num_kv_heads, spec.head_dim, self.dtype, self.forward.attention_kinds(),
                         timing_tokens=min(self.config.max_batch_tokens, 16384), timing_row=row)
        self.stats.attention = {f"windowed={kind[0]} softcapped={kind[1]}": name for kind, name in attention.chosen.items()}
        self.stats.attention_timings_ms = attention.timings_ms
        model = self.forward.model
        if self.config.weights != "fp8" and model.ops.name == "triton":
            model.gemm, self.stats.mlp, self.stats.mlp_timings_ms = wide_mlp.choose(
                model.gemm, model.weights.layers[0], spec.hidden_size, self.dtype, self.device,
                tokens=min(self.config.max_batch_tokens, 16384))
        rng = np.random.default_rng(0)
        rows = max(1, self.config.max_batch_tokens // row)
        batch = self.pack([rng.integers(0, self.spec.vocab_size, row) for _ in range(rows)])
        for _ in range(2):  # the first call meets cuBLAS heuristics and Triton compiles: not a rate sample
            self._seconds_per_flop = None
            self._run(batch, self._task_output, record=False)
        self.stats.warmup_s = time.perf_counter() - t

    def _task_output(self, batch) -> Any:
        if self.config.task == "classify":
            return self.forward.classify(batch)
        return self.forward.hidden_states(batch, (self.spec.num_layers,), "last")

    # ---- batches ----------------------------------------------------------------------------------------
    def pack(self, rows: Sequence[Sequence[int] | np.ndarray]) -> PackedBatch:
        """Rows of token ids -> a host batch (thread-safe: no device work; pinned memory on CUDA)."""
        return pack_rows(rows, self.pad_id, pin=self.device.type == "cuda")

    def classify(self, batch: PackedBatch) -> torch.Tensor:
        """[B, num_labels] fp32 logits on the host, row order kept."""
        self._require("classify")
        return self._run(batch, self.forward.classify)

    def hidden_states(self, batch: PackedBatch, layers: tuple[int, ...], pool: str) -> dict[int, Any]:
        """{hidden-state number: [B, hidden] fp32 tensor} on the host, or with pool "all" a list of [n_i, hidden]
        per row. `layers`: numbers in 0..num_layers (transformers' output_hidden_states numbering)."""
        self._require("hidden-states")
        if pool not in POOLS:
            raise ConfigError(f"pool {pool!r} is not one of {', '.join(POOLS)}")
        bad = [i for i in layers if not 0 <= i <= self.spec.num_layers]
        if bad or not layers:
            raise ConfigError(f"hidden-state numbers {list(layers)} must lie in 0..{self.spec.num_layers}")
        out = self._run(batch, lambda b: self.forward.hidden_states(b, tuple(sorted(set(layers))), pool))
        if pool == "all":
            return {i: list(t.split(list(batch.lengths))) for i, t in out.items()}
        return out

    def flops(self, lengths: Sequence[int]) -> float:
        return prefill_flops(self.spec, lengths)

    def predict_s(self, lengths: Sequence[int]) -> float | None:
        """Expected device time of a batch of rows of `lengths` tokens (None before any batch was timed)."""
        return None if self._seconds_per_flop is None else self._seconds_per_flop * self.flops(lengths)

    def _run(self, batch: PackedBatch, fn, record: bool = True) -> Any:
        self._check_open()
        cuda = self.device.type == "cuda"
        start_event = end_event = None
        started = time.perf_counter()
        with torch.inference_mode():
            on = on_device(batch, self.device)
            if cuda:
                start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start_event.record()
            out = fn(on)
            if cuda:
                end_event.record()
            host = _to_host(out)  # waits for the device
        seconds = start_event.elapsed_time(end_event) / 1000 if cuda else time.perf_counter() - started
        flops = self.flops(batch.lengths)
        rate = seconds / flops if flops > 0 else None
        if rate is not None:
            old = self._seconds_per_flop
            self._seconds_per_flop = rate if old is None else (1 - RATE_SMOOTHING) * old + RATE_SMOOTHING * rate
        if record:
            s = self.stats
            s.batches += 1
            s.rows += batch.rows
            s.tokens += batch.num_tokens
            s.flops += flops
            s.device_s += seconds
        return host

    def _require(self, task: str) -> None:
        if self.config.task != task:
            raise ConfigError(f"this encoder was started for task {self.config.task!r}; start one with "
                              f"EncoderConfig(task={task!r})")

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("this encoder was closed; start a new Encoder")

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ---- lifetime ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the weights and cached device memory now; later calls raise EngineClosedError."""
        if self._closed:
            return
        self._closed = True
        self.forward = None  # type: ignore[assignment]
        release_cached_memory(self.device)

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _to_host(out: Any) -> Any:
    if isinstance(out, dict):
        return {k: v.cpu() for k, v in out.items()}
    return out.cpu()


def _candidates(attention: str, device: torch.device) -> tuple[str, ...]:
    if attention == "auto":
        return ("triton", "triton-alt", "flash")
    if attention != "torch" and device.type != "cuda":
        raise ConfigError(f"attention={attention!r} needs a CUDA device; use attention='auto' or 'torch' on {device}")
    return {"torch": (), "triton": ("triton", "triton-alt")}.get(attention, (attention,))


def encoder_support(model_dir: str | Path, task: str) -> str | None:
    """None when the encoder runs this checkpoint for `task`, else why not (what `--backend auto` says when it
    falls back to transformers). A missing or broken checkpoint raises InputError as the loaders do."""
    try:
        spec = read_model_spec(model_dir)  # refuses architectures and features the engine does not implement
        if task == "classify" and not is_classifier(spec.architecture):
            return f"{spec.architecture} is not a sequence classifier the engine knows"
        encoder_forward_class(spec.architecture)
        check_windows(spec)
    except UnsupportedError as e:
        return str(e)
    return None


def check_windows(spec) -> None:
    """Qwen2/Qwen3's sliding window applies to some layers only (max_window_layers): not implemented here."""
    if spec.sliding_window is not None and not spec.layer_windows and spec.model_type in ("qwen2", "qwen3"):
        raise UnsupportedError(f"use_sliding_window=true on {spec.model_type} is not supported by the inferlab engine's "
                               "packed prefill")
