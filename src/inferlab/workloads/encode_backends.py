"""The prefill-only backends (the protocol's `encode`, workloads/backend.py): sequence classification and pooled
hidden states, on transformers (`hf`) or on the engine's packed prefill (`inferlab`). `inferlab classify` /
`hidden-states` open one through backend_choice.py; the lab's classify and hidden-states cells run the same
classes (bench/backends/hf_encode.py, inferlab_encode.py).

Each batches its own way (`encode_batches`): transformers pads batches of `batch_size` rows (sorted by length,
or consecutive in input order), the engine packs consecutive rows without padding up to a token budget,
cutting a batch whose expected device time is over `max_batch_latency_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.workloads.backend import Backend, Supports, dtype_name

TASKS = ("classify", "hidden-states")


@dataclass(frozen=True)
class EncodeSpec:
    """What an encode backend computes."""

    task: str  # "classify" (logits) or "hidden-states" (pooled states of `layers`)
    layers: tuple[int, ...] = ()  # hidden-states: transformers' numbers (0 = embeddings, L = final, -1 = L)
    pool: str = "last"  # hidden-states: "last", "mean" or "all" per row

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"task {self.task!r} is not one of {', '.join(TASKS)}")


class HFEncodeBackend(Backend):
    """transformers: workloads/classify.py's Classifier, or a base model under workloads/activations.py's
    HiddenStateCollector (hooks on the layers asked for, the forward stopped after the deepest)."""

    name = "hf"
    supports = Supports(encode=True)
    pads = True  # a batch is padded to its longest row

    def __init__(self, spec: EncodeSpec, attn: str = "sdpa", quantization: str = "none", batch_size: int = 16,
                 bucket_by_length: bool = True) -> None:
        self.spec = spec
        self.attn, self.quantization = attn, quantization
        self.batch_size, self.bucket_by_length = batch_size, bucket_by_length
        self.classifier: Any = None  # classify: the Classifier (its classify_records is the command's loop)
        self.collector: Any = None  # hidden-states: the HiddenStateCollector
        self.loaded: Any = None  # the LoadedModel either way

    def load(self, model_dir: str | Path, device: Any = "auto", dtype: Any = "auto") -> None:
        from inferlab.workloads.hf_loading import ModelLoadConfig

        load = ModelLoadConfig(str(model_dir), dtype_name(dtype), self.attn, self.quantization, str(device))
        if self.spec.task == "classify":
            from inferlab.workloads.classify import load_classifier

            self.classifier = load_classifier(load)
            self.loaded = self.classifier.loaded
        else:
            from inferlab.workloads.activations import HiddenStateCollector
            from inferlab.workloads.hidden_states import load_base_model

            self.loaded = load_base_model(load)
            self.collector = HiddenStateCollector(self.loaded, self.spec.layers, self.spec.pool)

    def encode_batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        from inferlab.workloads.batching import BatchLimits, plan_batches

        size = self.batch_size
        if self.bucket_by_length:
            return plan_batches([len(t) for t in token_ids], BatchLimits(size))
        return [list(range(i, min(i + size, len(token_ids)))) for i in range(0, len(token_ids), size)]

    def encode(self, rows: list[list[int]]) -> Any:
        if self.classifier is not None:
            return self.classifier.predict(rows)
        return self.collector.collect(rows)

    def extra_metrics(self) -> dict[str, Any]:
        return {"load_s": self.loaded.load_s, "attn_loaded": self.loaded.attn,
                "quantized_layers": self.loaded.quantized_layers}

    def close(self) -> None:
        self.classifier = self.collector = self.loaded = None


class EngineEncodeBackend(Backend):
    """The engine's packed prefill (inferlab.engine.Encoder): start-up (weights, FP8 quantization, the attention
    choice, a warm-up batch) in load."""

    name = "inferlab"
    supports = Supports(encode=True)
    pads = False  # rows packed without padding

    def __init__(self, spec: EncodeSpec, options: dict[str, Any], max_batch_latency_ms: float | None = None) -> None:
        self.spec = spec
        self.options = options  # EncoderConfig fields besides model, task, device and dtype
        self.max_batch_latency_ms = max_batch_latency_ms
        self.encoder: Any = None
        self.layers: tuple[int, ...] = ()  # hidden-states: spec.layers resolved (0..L)

    def load(self, model_dir: str | Path, device: Any = "auto", dtype: Any = "auto") -> None:
        from inferlab.engine import Encoder, EncoderConfig
        from inferlab.workloads.activations import resolve_layers

        self.encoder = Encoder(EncoderConfig(model=str(model_dir), task=self.spec.task, device=str(device),
                                             dtype=dtype_name(dtype), **self.options))
        if self.spec.task == "hidden-states":
            try:
                self.layers = resolve_layers(self.spec.layers, self.encoder.spec.num_layers)
            except ConfigError:
                self.close()
                raise

    def encode_batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        from inferlab.workloads.packed_run import PackedOptions, plan_packed_batches
        from inferlab.workloads.rows import TextRow

        options = PackedOptions(max_batch_latency_ms=self.max_batch_latency_ms)
        rows = [TextRow(i, str(i), ids, len(ids)) for i, ids in enumerate(token_ids)]
        planned = plan_packed_batches(rows, self.encoder.config.max_batch_tokens, options, self.encoder.predict_s)
        return [[row.position for row in batch] for batch in planned]

    def encode(self, rows: list[list[int]]) -> Any:
        batch = self.encoder.pack(rows)
        if self.spec.task == "classify":
            return self.encoder.classify(batch)
        return self.encoder.hidden_states(batch, self.layers, self.spec.pool)

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.encoder.stats.as_dict()
        return {"load_s": stats["startup_s"], "engine": stats, "attention_chosen": stats["attention"]}

    def close(self) -> None:
        if self.encoder is not None:
            self.encoder.close()
