"""Sequence classification of a JSONL file of texts: labels and probabilities out, latency per batch.

Owns: the classify options, running an AutoModelForSequenceClassification over length-sorted, dynamically
padded batches with OOM back-off, the output row format, resume (ids already in the output are skipped)
and restoring input order at the end. Does not own: loading (hf_loading.py), validation of input rows
(rows.py), batching (batching.py), back-off (oom.py), the CLI (cli/classify_cmd.py).

Output rows: {"id", "status": "ok", "label", "label_id", "probabilities": {label: p}, "tokens",
"truncated", ["original_tokens"], "batch_rows", "batch_ms"}, or {"id", "status": "error", "error", ...}.
Padding is on the right: the classifier reads each row's last real token through config.pad_token_id.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from inferlab.errors import ConfigError, InputError
from inferlab.models.config_file import read_config
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, check_max_line_chars
from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter, read_jsonl_records
from inferlab.workloads.batching import BatchLimits, pad_batch, reorder_jsonl
from inferlab.workloads.hf_loading import (
    LoadedModel,
    ModelLoadConfig,
    check_model_dir,
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
class ClassifyOptions:
    batch_size: int = 16
    max_length: int | None = None  # None: the model's maximum positions
    truncate: bool = False  # over-long texts: keep the first max_length tokens instead of an error record
    max_batch_tokens: int | None = 131072  # rows x padded length of one batch
    text_field: str = "text"
    chunk_rows: int = 4096  # input lines tokenised in one call and length-sorted together
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS  # an input line over it is an error record
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        check_max_line_chars(self.max_line_chars)
        BatchLimits(self.batch_size, self.max_batch_tokens)  # validates both
        if self.max_length is not None and self.max_length < 1:
            raise ConfigError(f"max_length={self.max_length} must be >= 1")
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows={self.chunk_rows} must be >= 1")


@dataclass
class ClassifyReport:
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0  # finished by an earlier run
    batch_seconds: list[float] = field(default_factory=list)
    batch_rows: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    backoff: BackoffStats = field(default_factory=BackoffStats)

    def summary(self) -> dict[str, Any]:
        busy = sum(self.batch_seconds)
        return {
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "rows_skipped": self.rows_skipped,
            "batches": len(self.batch_seconds),
            "samples_per_s": self.rows_ok / busy if busy > 0 else None,
            "wall_s": round(self.wall_s, 3),
            "latency_ms": latency_summary_ms(self.batch_seconds),
            "oom_events": self.backoff.oom_events,
            "largest_ok_batch_rows": self.backoff.largest_ok_rows,
        }


class Classifier:
    """A loaded sequence classifier: token id lists in, (label id, probabilities) out."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        config = loaded.model.config
        n_labels = int(config.num_labels)
        id2label = getattr(config, "id2label", None) or {}
        self.labels = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n_labels)]
        self.max_positions = model_max_positions(loaded.model)

    def predict(self, token_ids: list[list[int]]) -> list[tuple[int, list[float]]]:
        """Classify one batch; returns (label id, probabilities) per row, in order."""
        input_ids, attention_mask = pad_batch(token_ids, self.loaded.pad_id, side="right")
        device = self.loaded.device
        with torch.inference_mode():
            logits = self.loaded.model(
                input_ids=input_ids.to(device, non_blocking=True),
                attention_mask=attention_mask.to(device, non_blocking=True),
            ).logits  # [rows, labels]
            probs = logits.float().softmax(dim=-1).cpu()  # [rows, labels] fp32; .cpu() waits for the device
        return [(int(p.argmax()), p.tolist()) for p in probs]

    def ok_record(self, row: TextRow, label_id: int, probs: list[float], batch_rows: int, batch_s: float) -> dict:
        record: dict[str, Any] = {
            "id": row.id,
            "status": "ok",
            "label": self.labels[label_id],
            "label_id": label_id,
            "probabilities": dict(zip(self.labels, probs)),
            "tokens": len(row.token_ids),
            "truncated": row.truncated,
        }
        if row.truncated:
            record["original_tokens"] = row.original_tokens
        record["batch_rows"] = batch_rows
        record["batch_ms"] = round(batch_s * 1000.0, 3)
        return record


def classify_records(
    classifier: Classifier,
    records: Iterable[InputRecord],
    writer: ResumableJsonlWriter,
    options: ClassifyOptions,
    progress: Callable[[int], None] | None = None,
) -> tuple[ClassifyReport, list[str]]:
    """Classify `records`, writing each row to `writer` as its batch finishes; skips ids in writer.done.
    Returns the report and every id read, in input order."""
    start = time.perf_counter()
    report = ClassifyReport()
    max_length = resolve_max_length(options.max_length, classifier.max_positions)
    hint = "pass --truncate to keep the first tokens, or raise --max-length"
    preparer = RowPreparer(
        classifier.loaded.tokenizer,
        text_field_getter(options.text_field),
        LengthPolicy(max_length, options.truncate, hint),
        skip_ids=set(writer.done),
        on_skip=progress,
    )

    def write_error(record: dict) -> None:
        writer.write(record)
        report.rows_error += 1
        if progress:
            progress(1)

    def on_done(rows: list[TextRow], results, seconds: float) -> None:
        for row, (label_id, probs) in zip(rows, results):
            writer.write(classifier.ok_record(row, label_id, probs, len(rows), seconds))
        report.rows_ok += len(rows)
        report.batch_seconds.append(seconds)
        report.batch_rows.append(len(rows))
        if progress:
            progress(len(rows))

    runner: BackoffRunner[TextRow, tuple[int, list[float]]] = BackoffRunner(
        run_batch=lambda rows: classifier.predict([r.token_ids for r in rows]),
        cost=padded_cost,
        on_done=on_done,
        on_oom_row=lambda row, message: write_error(error_record(row.id, message, tokens=len(row.token_ids))),
        policy=options.backoff,
    )
    limits = BatchLimits(options.batch_size, options.max_batch_tokens)
    for rows, errors in preparer.chunks(records, options.chunk_rows):
        for record in errors:
            write_error(record)
        runner.run(plan_row_batches(rows, limits))
    report.rows_skipped = preparer.skipped
    report.backoff = runner.stats
    report.wall_s = time.perf_counter() - start
    return report, preparer.ids_in_order


def load_classifier(load_config: ModelLoadConfig) -> Classifier:
    """Load a sequence classifier (AutoModelForSequenceClassification) with its tokenizer and pad token."""
    from transformers import AutoModelForSequenceClassification

    _require_classification_head(load_config.model_dir)
    return Classifier(load_hf_model(load_config, AutoModelForSequenceClassification))


def _require_classification_head(model_dir: str | Path) -> None:
    """Refuse a checkpoint without a classification head: transformers would give it a random one (and
    random labels) with only a warning."""
    path = check_model_dir(model_dir)
    architectures = read_config(path).get("architectures") or []
    if isinstance(architectures, list) and architectures and not any(
            str(a).endswith("ForSequenceClassification") for a in architectures):
        raise InputError(
            f"{path} is a {architectures[0]} checkpoint, without a sequence-classification head: classify would "
            "get a randomly initialised one. Pass a ...ForSequenceClassification checkpoint as --model (a test "
            "one: inferlab model init --preset tiny-qwen2-cls --out DIR)"
        )


def classify_file(
    classifier: Classifier,
    input_path: str | Path,
    output_path: str | Path,
    options: ClassifyOptions = ClassifyOptions(),
    progress: Callable[[int], None] | None = None,
) -> ClassifyReport:
    """`inferlab classify`: classify a JSONL file into `output_path` (resuming it), then restore input order."""
    if not Path(input_path).exists():
        raise InputError(f"input file {input_path} does not exist")
    with ResumableJsonlWriter(output_path, kind_fields=("status",)) as writer:
        if writer.done:
            log.info("resuming: %d ids already in %s", len(writer.done), output_path)
        records = read_jsonl_records(input_path, max_line_chars=options.max_line_chars)
        report, ids_in_order = classify_records(classifier, records, writer, options, progress)
    reorder_jsonl(output_path, ids_in_order)
    return report
