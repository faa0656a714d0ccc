"""`inferlab hidden-states`: pooled activations of chosen layers for a JSONL file of prompts, resumable.

Owns: the options, the report, the shards (one per chunk of input lines, written when the chunk is done) and
the final assembly in input order; the transformers loop (a chunk tokenised in one call, length-sorted into
padded batches, run with OOM back-off). The engine's loop is hidden_states_engine.py (packed batches, reader
and writer threads); both fill the same store. Memory stays bounded by one chunk of pooled vectors on the
host and one batch on the device. Does not own: hooks and pooling (activations.py), files
(activation_store.py), loading (hf_loading.py), validation (rows.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from inferlab.errors import ConfigError, InputError
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, check_max_line_chars
from inferlab.jsonl_io import read_jsonl_records
from inferlab.workloads.activation_store import ActivationStore
from inferlab.workloads.activations import POOLERS, HiddenStateCollector
from inferlab.workloads.batching import BatchLimits
from inferlab.workloads.hf_loading import (
    DTYPES,
    LoadedModel,
    ModelLoadConfig,
    load_hf_model,
    model_max_positions,
    resolve_max_length,
)
from inferlab.workloads.oom import BackoffPolicy, BackoffRunner, BackoffStats
from inferlab.workloads.rows import (
    LengthPolicy,
    RowPreparer,
    TextRow,
    error_record,
    padded_cost,
    plan_row_batches,
    text_field_getter,
)
from inferlab.workloads.stats import latency_summary_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HiddenStatesOptions:
    layers: tuple[int, ...]  # transformers' numbering: 0 = embeddings output, L = final normed; negatives from the end
    pool: str = "last"  # "last" real token, "mean" over real tokens, or "all" real tokens (one vector each)
    batch_size: int = 16
    max_length: int | None = None  # None: the model's maximum positions
    truncate: bool = False
    max_batch_tokens: int | None = 131072
    text_field: str = "prompt"
    shard_rows: int = 1024  # input lines per chunk: one tokenizer call, one length sort, one shard
    save_dtype: str = "float32"
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS  # an input line over it is an error record
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        check_max_line_chars(self.max_line_chars)
        BatchLimits(self.batch_size, self.max_batch_tokens)
        if self.pool not in POOLERS:
            raise ConfigError(f"pool {self.pool!r} is not known; use one of {', '.join(POOLERS)}")
        if self.save_dtype not in DTYPES:
            raise ConfigError(f"save dtype {self.save_dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        if self.shard_rows < 1:
            raise ConfigError(f"shard_rows={self.shard_rows} must be >= 1")


@dataclass
class HiddenStatesReport:
    backend: str = "hf"  # "hf" (transformers) or "inferlab" (the engine)
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0
    rows_in_output: int = 0
    tokens: int = 0  # real (unpadded) tokens run through the model
    batch_seconds: list[float] = field(default_factory=list)
    batch_rows: list[int] = field(default_factory=list)
    shards_written: int = 0
    wall_s: float = 0.0
    backoff: BackoffStats = field(default_factory=BackoffStats)
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's figures (stats), when it ran

    def record_batch(self, rows: list[TextRow], seconds: float) -> None:
        self.rows_ok += len(rows)
        self.tokens += sum(len(r.token_ids) for r in rows)
        self.batch_seconds.append(seconds)
        self.batch_rows.append(len(rows))

    def summary(self) -> dict[str, Any]:
        busy = sum(self.batch_seconds)
        per_request = [s for s, n in zip(self.batch_seconds, self.batch_rows) for _ in range(n)]
        return {
            "backend": self.backend,
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "rows_skipped": self.rows_skipped,
            "rows_in_output": self.rows_in_output,
            "shards_written": self.shards_written,
            "prompts_per_s": self.rows_ok / busy if busy > 0 else None,
            "tokens_per_s": self.tokens / busy if busy > 0 else None,
            "wall_s": round(self.wall_s, 3),
            "latency_ms": latency_summary_ms(per_request),
            "oom_events": self.backoff.oom_events,
            "largest_ok_batch_rows": self.backoff.largest_ok_rows,
            **({"engine": self.engine} if self.engine else {}),
        }


class ShardBuffer:
    """One chunk's finished rows, written to the store as one shard (rows in input order; pool "all": each
    row's vectors one after another, with their lengths)."""

    def __init__(self, store: ActivationStore, layers: tuple[int, ...], pool: str, save_dtype: torch.dtype,
                 report: HiddenStatesReport) -> None:
        self.store, self.layers, self.pool, self.save_dtype, self.report = store, layers, pool, save_dtype, report
        self.rows: list[tuple[TextRow, dict[int, torch.Tensor]]] = []

    def add(self, rows: list[TextRow], results: list[dict[int, torch.Tensor]]) -> None:
        self.rows.extend(zip(rows, results))

    def flush(self) -> None:
        if not self.rows:
            return
        self.rows.sort(key=lambda item: item[0].position)  # shards in input order read back faster
        if self.pool == "all":
            tensors = {layer: torch.cat([r[layer] for _, r in self.rows]).to(self.save_dtype) for layer in self.layers}
            lengths = [len(row.token_ids) for row, _ in self.rows]
        else:
            tensors = {layer: torch.stack([r[layer] for _, r in self.rows]).to(self.save_dtype) for layer in self.layers}
            lengths = None
        self.store.write_shard([r.id for r, _ in self.rows], [len(r.token_ids) for r, _ in self.rows], tensors, lengths)
        self.report.shards_written += 1
        self.rows.clear()


def open_store(output_path: str | Path, model_dir: str, layers: tuple[int, ...], options: HiddenStatesOptions,
               max_length: int, backend: dict[str, Any]) -> ActivationStore:
    """The store with this run's settings (a rerun with other settings is refused; `backend`: which backend and
    how it loaded the model: shards of different numerics are never mixed)."""
    settings = {
        "model": str(Path(model_dir).resolve()),
        "layers": list(layers),
        "pool": options.pool,
        "max_length": max_length,
        "truncate": options.truncate,
        "text_field": options.text_field,
        **backend,
        "save_dtype": options.save_dtype,
    }
    return ActivationStore(output_path, settings)


def length_policy(options: HiddenStatesOptions, max_length: int) -> LengthPolicy:
    return LengthPolicy(max_length, options.truncate, "pass --truncate to keep the first tokens, or raise --max-length")


def collect_hidden_states(
    loaded: Any,
    input_path: str | Path,
    output_path: str | Path,
    options: HiddenStatesOptions,
    progress: Callable[[int], None] | None = None,
) -> HiddenStatesReport:
    """Collect pooled activations of `input_path` into `output_path`; skips ids finished by earlier runs.
    `loaded`: a transformers LoadedModel, or the engine's EngineHiddenStates (hidden_states_engine.py, which
    runs its own loop into the same store)."""
    if not isinstance(loaded, LoadedModel):
        return loaded.collect(input_path, output_path, options, progress)
    if not Path(input_path).exists():
        raise InputError(f"input file {input_path} does not exist")
    start = time.perf_counter()
    collector = HiddenStateCollector(loaded, options.layers, options.pool)
    max_length = resolve_max_length(options.max_length, model_max_positions(loaded.model))
    backend = {"backend": "hf", "dtype": str(loaded.dtype).removeprefix("torch."), "quantization": loaded.quantization}
    store = open_store(output_path, loaded.model_dir, collector.layers, options, max_length, backend)
    report = HiddenStatesReport(backend="hf")
    preparer = RowPreparer(loaded.tokenizer, text_field_getter(options.text_field), length_policy(options, max_length),
                           skip_ids=set(store.done_ids), on_skip=progress)
    shard = ShardBuffer(store, collector.layers, options.pool, DTYPES[options.save_dtype], report)

    def write_error(record: dict) -> None:
        store.write_error(record)
        report.rows_error += 1
        if progress:
            progress(1)

    def on_done(rows: list[TextRow], results, seconds: float) -> None:
        shard.add(rows, results)
        report.record_batch(rows, seconds)
        if progress:
            progress(len(rows))

    def run_batch(rows: list[TextRow]) -> list[dict[int, Any]]:
        pooled = collector.collect([r.token_ids for r in rows])  # {layer: [rows, hidden] or a list per row}
        return [{layer: t[i] for layer, t in pooled.items()} for i in range(len(rows))]

    runner: BackoffRunner[TextRow, dict[int, Any]] = BackoffRunner(
        run_batch=run_batch,
        cost=padded_cost,
        on_done=on_done,
        on_oom_row=lambda row, message: write_error(error_record(row.id, message, tokens=len(row.token_ids))),
        policy=options.backoff,
    )
    limits = BatchLimits(options.batch_size, options.max_batch_tokens)
    try:
        records = read_jsonl_records(input_path, max_line_chars=options.max_line_chars)
        for rows, errors in preparer.chunks(records, options.shard_rows):
            for record in errors:
                write_error(record)
            runner.run(plan_row_batches(rows, limits))
            shard.flush()
        report.rows_in_output = store.assemble(preparer.ids_in_order, collector.layers, collector.hidden_size,
                                               DTYPES[options.save_dtype])
    finally:
        store.close()
    report.rows_skipped = preparer.skipped
    report.backoff = runner.stats
    report.wall_s = time.perf_counter() - start
    return report


def load_base_model(load_config: ModelLoadConfig) -> LoadedModel:
    """Load the checkpoint's base model (AutoModel: no LM or classification head) and its tokenizer."""
    from transformers import AutoModel

    return load_hf_model(load_config, AutoModel)
