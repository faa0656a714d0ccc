"""`inferlab hidden-states`: pooled activations of chosen layers for a JSONL file of prompts, resumable.

Owns: the options, the loop (a chunk of input lines is tokenised in one call, length-sorted into padded
batches, run with OOM back-off, and written as one shard when the chunk is done), and the final assembly
in input order. Memory stays bounded by one chunk of pooled vectors on the host and one batch on the
device. Does not own: hooks and pooling (activations.py), files (activation_store.py), loading
(hf_loading.py), validation (rows.py).
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

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HiddenStatesOptions:
    layers: tuple[int, ...]  # transformers' numbering: 0 = embeddings output, L = final normed; negatives from the end
    pool: str = "last"  # "last" real token or "mean" over real tokens
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
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0
    rows_in_output: int = 0
    tokens: int = 0  # real (unpadded) tokens run through the model
    batch_seconds: list[float] = field(default_factory=list)
    shards_written: int = 0
    wall_s: float = 0.0
    backoff: BackoffStats = field(default_factory=BackoffStats)

    def summary(self) -> dict[str, Any]:
        busy = sum(self.batch_seconds)
        return {
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "rows_skipped": self.rows_skipped,
            "rows_in_output": self.rows_in_output,
            "shards_written": self.shards_written,
            "prompts_per_s": self.rows_ok / busy if busy > 0 else None,
            "tokens_per_s": self.tokens / busy if busy > 0 else None,
            "wall_s": round(self.wall_s, 3),
            "oom_events": self.backoff.oom_events,
            "largest_ok_batch_rows": self.backoff.largest_ok_rows,
        }


def collect_hidden_states(
    loaded: LoadedModel,
    input_path: str | Path,
    output_path: str | Path,
    options: HiddenStatesOptions,
    progress: Callable[[int], None] | None = None,
) -> HiddenStatesReport:
    """Collect pooled activations of `input_path` into `output_path`; skips ids finished by earlier runs."""
    if not Path(input_path).exists():
        raise InputError(f"input file {input_path} does not exist")
    start = time.perf_counter()
    collector = HiddenStateCollector(loaded, options.layers, options.pool)
    max_length = resolve_max_length(options.max_length, model_max_positions(loaded.model))
    save_dtype = DTYPES[options.save_dtype]
    settings = {
        "model": str(Path(loaded.model_dir).resolve()),
        "layers": list(collector.layers),
        "pool": options.pool,
        "max_length": max_length,
        "truncate": options.truncate,
        "text_field": options.text_field,
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "quantization": loaded.quantization,
        "save_dtype": options.save_dtype,
    }
    store = ActivationStore(output_path, settings)
    report = HiddenStatesReport()
    preparer = RowPreparer(
        loaded.tokenizer,
        text_field_getter(options.text_field),
        LengthPolicy(max_length, options.truncate, "pass --truncate to keep the first tokens, or raise --max-length"),
        skip_ids=set(store.done_ids),
        on_skip=progress,
    )
    finished: list[tuple[TextRow, dict[int, torch.Tensor]]] = []  # this chunk's rows, waiting for its shard

    def write_error(record: dict) -> None:
        store.write_error(record)
        report.rows_error += 1
        if progress:
            progress(1)

    def on_done(rows: list[TextRow], results, seconds: float) -> None:
        finished.extend(zip(rows, results))
        report.rows_ok += len(rows)
        report.tokens += sum(len(r.token_ids) for r in rows)
        report.batch_seconds.append(seconds)
        if progress:
            progress(len(rows))

    def run_batch(rows: list[TextRow]) -> list[dict[int, torch.Tensor]]:
        pooled = collector.collect([r.token_ids for r in rows])  # {layer: [rows, hidden]}
        return [{layer: t[i] for layer, t in pooled.items()} for i in range(len(rows))]

    runner: BackoffRunner[TextRow, dict[int, torch.Tensor]] = BackoffRunner(
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
            if finished:
                finished.sort(key=lambda item: item[0].position)  # shards in input order read back faster
                tensors = {
                    layer: torch.stack([result[layer] for _, result in finished]).to(save_dtype)
                    for layer in collector.layers
                }
                store.write_shard([r.id for r, _ in finished], [len(r.token_ids) for r, _ in finished], tensors)
                report.shards_written += 1
                finished.clear()
        report.rows_in_output = store.assemble(preparer.ids_in_order, collector.layers, collector.hidden_size, save_dtype)
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
