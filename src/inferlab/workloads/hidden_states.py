"""`inferlab hidden-states`: pooled activations of chosen layers for a JSONL file of prompts, resumable.

Owns: the options, the report, HiddenStatesRun (the store, the shards: one per chunk of input lines, written
when the chunk is done, and the final assembly in input order, around a backend's loop); the transformers
loop (a chunk tokenised in one call, length-sorted into padded batches, run with OOM back-off). The engine's
loop is hidden_states_engine.py (packed batches, reader and writer threads). Memory stays bounded by one
chunk of pooled vectors on the host and one batch on the device. Does not own: what it shares with classify
(row_workload.py), hooks and pooling (activations.py), files (activation_store.py), loading
(hf_loading.py), validation (rows.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from inferlab.errors import ConfigError, InputError
from inferlab.jsonl_io import InputRecord, read_jsonl_records
from inferlab.workloads.activation_store import ActivationStore
from inferlab.workloads.activations import POOLERS, HiddenStateCollector
from inferlab.workloads.hf_loading import DTYPES, LoadedModel, ModelLoadConfig, load_hf_model, model_max_positions
from inferlab.workloads.oom import BackoffRunner, BackoffStats
from inferlab.workloads.row_workload import FinishedRows, RowReport, RowWorkloadOptions
from inferlab.workloads.rows import RowPreparer, TextRow, error_record, padded_cost, plan_row_batches, text_field_getter

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class HiddenStatesOptions(RowWorkloadOptions):
    layers: tuple[int, ...]  # transformers' numbering: 0 = embeddings output, L = final normed; negatives from the end
    pool: str = "last"  # "last" real token, "mean" over real tokens, or "all" real tokens (one vector each)
    text_field: str = "prompt"
    shard_rows: int = 1024  # input lines per chunk: one tokenizer call, one length sort, one shard
    save_dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pool not in POOLERS:
            raise ConfigError(f"pool {self.pool!r} is not known; use one of {', '.join(POOLERS)}")
        if self.save_dtype not in DTYPES:
            raise ConfigError(f"save dtype {self.save_dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        if self.shard_rows < 1:
            raise ConfigError(f"shard_rows={self.shard_rows} must be >= 1")


@dataclass
class HiddenStatesReport(RowReport):
    rows_in_output: int = 0
    shards_written: int = 0

    def summary(self) -> dict[str, Any]:
        return self.summary_with({"rows_in_output": self.rows_in_output, "shards_written": self.shards_written},
                                 "prompts_per_s")


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


def per_row(pooled: dict[int, Any], rows: int) -> list[dict[int, Any]]:
    """{layer: [rows, hidden] or a list per row} -> one {layer: row's value} per row."""
    return [{layer: t[i] for layer, t in pooled.items()} for i in range(rows)]


class HiddenStatesRun:
    """One run's store, report, row preparer and shard buffer, around a backend's loop (`run`): the
    transformers loop below and the engine's (hidden_states_engine.py) fill the same store the same way."""

    def __init__(self, input_path: str | Path, output_path: str | Path, options: HiddenStatesOptions, tokenizer, *,
                 model_dir: str, layers: tuple[int, ...], pool: str, hidden_size: int, max_length: int,
                 backend: dict[str, Any], progress: Callable[[int], None] | None) -> None:
        if not Path(input_path).exists():
            raise InputError(f"input file {input_path} does not exist")
        self.start = time.perf_counter()
        self.input_path, self.options, self.layers, self.hidden_size = input_path, options, layers, hidden_size
        self.store = open_store(output_path, model_dir, layers, options, max_length, backend)
        self.report = HiddenStatesReport(backend=backend["backend"])
        self.finished = FinishedRows(self.report, self.store.write_error, progress)
        self.preparer = RowPreparer(tokenizer, text_field_getter(options.text_field), options.length_policy(max_length),
                                    skip_ids=self.store.done_ids, on_skip=progress)
        self.shard = ShardBuffer(self.store, layers, pool, DTYPES[options.save_dtype], self.report)

    def on_results(self, rows: list[TextRow], results: list[dict[int, Any]], seconds: float) -> None:
        self.shard.add(rows, results)
        self.finished.batch(rows, seconds)

    def run(self, loop: Callable[[Iterable[InputRecord]], BackoffStats]) -> HiddenStatesReport:
        """`loop(records)` runs every row (results to on_results, error records to finished.error, the shard
        flushed after each chunk of options.shard_rows lines) and returns its back-off figures; then the
        store is assembled in input order."""
        save_dtype = DTYPES[self.options.save_dtype]
        try:
            records = read_jsonl_records(self.input_path, max_line_chars=self.options.max_line_chars)
            self.report.backoff = loop(records)
            self.report.rows_in_output = self.store.assemble(self.preparer.ids_in_order, self.layers,
                                                             self.hidden_size, save_dtype)
        finally:
            self.store.close()
        self.report.rows_skipped = self.preparer.skipped
        self.report.wall_s = time.perf_counter() - self.start
        return self.report


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
    collector = HiddenStateCollector(loaded, options.layers, options.pool)
    run = HiddenStatesRun(
        input_path, output_path, options, loaded.tokenizer, model_dir=loaded.model_dir, layers=collector.layers,
        pool=options.pool, hidden_size=collector.hidden_size,
        max_length=options.resolved_max_length(model_max_positions(loaded.model)),
        backend={"backend": "hf", "dtype": str(loaded.dtype).removeprefix("torch."),
                 "quantization": loaded.quantization},
        progress=progress,
    )

    def loop(records: Iterable[InputRecord]) -> BackoffStats:
        runner: BackoffRunner[TextRow, dict[int, Any]] = BackoffRunner(
            run_batch=lambda rows: per_row(collector.collect([r.token_ids for r in rows]), len(rows)),
            cost=padded_cost,
            on_done=run.on_results,
            on_oom_row=lambda row, msg: run.finished.error(error_record(row.id, msg, tokens=len(row.token_ids))),
            policy=options.backoff,
        )
        for rows, errors in run.preparer.chunks(records, options.shard_rows):
            for record in errors:
                run.finished.error(record)
            runner.run(plan_row_batches(rows, options.limits()))
            run.shard.flush()
        return runner.stats

    return run.run(loop)


def load_base_model(load_config: ModelLoadConfig) -> LoadedModel:
    """Load the checkpoint's base model (AutoModel: no LM or classification head) and its tokenizer."""
    from transformers import AutoModel

    return load_hf_model(load_config, AutoModel)
