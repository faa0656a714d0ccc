"""Sequence classification of a JSONL file of texts: labels and probabilities out, latency per request.

Owns: the classify options and report, the transformers classifier (`Classifier`: an
AutoModelForSequenceClassification over length-sorted, dynamically padded batches with OOM back-off), the
output row format shared with the engine's classifier (workloads/classify_engine.py), resume (ids already in
the output are skipped) and restoring input order at the end. Does not own: what classify and hidden-states
share (row_workload.py), loading (hf_loading.py), validation of input rows (rows.py), batching
(batching.py), back-off (oom.py), what the logits mean (classifier_labels.py), the CLI.

Output rows: {"id", "status": "ok", the label fields of classifier_labels.py ("label", "label_id",
"probabilities" for a single-label classifier), "tokens", "truncated", ["original_tokens"], "batch_rows",
"latency_ms"} (latency: from the start of the row's batch to its result), or {"id", "status": "error",
"error", ...}. Padding is on the right: the classifier reads each row's last non-pad token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import torch

from inferlab.errors import ConfigError, InputError
from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter, read_jsonl_records
from inferlab.models.config_file import read_config
from inferlab.workloads.batching import pad_batch, reorder_jsonl
from inferlab.workloads.classifier_labels import ClassifierLabels
from inferlab.workloads.hf_loading import (
    LoadedModel,
    ModelLoadConfig,
    check_model_dir,
    load_hf_model,
    model_max_positions,
)
from inferlab.workloads.oom import BackoffRunner
from inferlab.workloads.row_workload import FinishedRows, RowReport, RowWorkloadOptions
from inferlab.workloads.rows import RowPreparer, TextRow, error_record, padded_cost, plan_row_batches, text_field_getter
from inferlab.workloads.stats import latency_summary_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClassifyOptions(RowWorkloadOptions):
    chunk_rows: int = 4096  # input lines tokenised in one call and length-sorted together

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows={self.chunk_rows} must be >= 1")


@dataclass
class ClassifyReport(RowReport):
    def summary(self) -> dict[str, Any]:
        return self.summary_with({"batches": len(self.batch_seconds),
                                  "batch_latency_ms": latency_summary_ms(self.batch_seconds)}, "samples_per_s")


def write_classified(writer: ResumableJsonlWriter, labels: ClassifierLabels, rows: list[TextRow],
                     logits: list[torch.Tensor], seconds: float) -> None:
    """Write one finished batch's rows (logits: one [labels] tensor per row)."""
    for row, fields in zip(rows, labels.row_fields(torch.stack(logits))):
        writer.write(ok_record(row, fields, len(rows), seconds))


def ok_record(row: TextRow, fields: dict[str, Any], batch_rows: int, batch_s: float) -> dict[str, Any]:
    """The output row of a classified text (fields: ClassifierLabels.row_fields of its logits)."""
    record: dict[str, Any] = {"id": row.id, "status": "ok", **fields, "tokens": len(row.token_ids),
                              "truncated": row.truncated}
    if row.truncated:
        record["original_tokens"] = row.original_tokens
    record["batch_rows"] = batch_rows
    record["latency_ms"] = round(batch_s * 1000.0, 3)
    return record


class AnyClassifier(Protocol):
    """What classify_file runs: the transformers Classifier below or the engine's (classify_engine.py)."""

    labels: ClassifierLabels

    def classify_records(self, records: Iterable[InputRecord], writer: ResumableJsonlWriter, options: ClassifyOptions,
                         progress: Callable[[int], None] | None = None) -> tuple[ClassifyReport, list[str]]: ...


class Classifier:
    """A loaded transformers sequence classifier: token id lists in, logits out, batches padded on the right."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.labels = ClassifierLabels.from_config(loaded.model.config.to_dict())
        self.max_positions = model_max_positions(loaded.model)

    def predict(self, token_ids: list[list[int]]) -> torch.Tensor:
        """Classify one batch: [rows, labels] fp32 logits on the CPU, in order."""
        input_ids, attention_mask = pad_batch(token_ids, self.loaded.pad_id, side="right")
        device = self.loaded.device
        with torch.inference_mode():
            logits = self.loaded.model(
                input_ids=input_ids.to(device, non_blocking=True),
                attention_mask=attention_mask.to(device, non_blocking=True),
            ).logits  # [rows, labels]
            return logits.float().cpu()  # .cpu() waits for the device

    def classify_records(self, records: Iterable[InputRecord], writer: ResumableJsonlWriter, options: ClassifyOptions,
                         progress: Callable[[int], None] | None = None) -> tuple[ClassifyReport, list[str]]:
        """Classify `records`, writing each row to `writer` as its batch finishes; skips ids in writer.done.
        Returns the report and every id read, in input order."""
        start = time.perf_counter()
        report = ClassifyReport(backend="hf")
        finished = FinishedRows(report, writer.write, progress)
        preparer = RowPreparer(self.loaded.tokenizer, text_field_getter(options.text_field),
                               options.length_policy(options.resolved_max_length(self.max_positions)),
                               skip_ids=writer.done, on_skip=progress)

        def on_done(rows: list[TextRow], logits: list[torch.Tensor], seconds: float) -> None:
            write_classified(writer, self.labels, rows, logits, seconds)
            finished.batch(rows, seconds)

        runner: BackoffRunner[TextRow, torch.Tensor] = BackoffRunner(
            run_batch=lambda rows: list(self.predict([r.token_ids for r in rows])),
            cost=padded_cost,
            on_done=on_done,
            on_oom_row=lambda row, message: finished.error(error_record(row.id, message, tokens=len(row.token_ids))),
            policy=options.backoff,
        )
        for rows, errors in preparer.chunks(records, options.chunk_rows):
            for record in errors:
                finished.error(record)
            runner.run(plan_row_batches(rows, options.limits()))
        report.rows_skipped = preparer.skipped
        report.backoff = runner.stats
        report.wall_s = time.perf_counter() - start
        return report, preparer.ids_in_order


def load_classifier(load_config: ModelLoadConfig) -> Classifier:
    """Load a sequence classifier (AutoModelForSequenceClassification) with its tokenizer and pad token."""
    from transformers import AutoModelForSequenceClassification

    require_classification_head(load_config.model_dir)
    return Classifier(load_hf_model(load_config, AutoModelForSequenceClassification))


def require_classification_head(model_dir: str | Path) -> None:
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
    classifier: AnyClassifier,
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
        report, ids_in_order = classifier.classify_records(records, writer, options, progress)
    reorder_jsonl(output_path, ids_in_order)
    return report
