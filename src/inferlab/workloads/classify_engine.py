"""`inferlab classify` on the engine: the packed prefill (inferlab.engine.Encoder) over batches cut by a token
budget, the tokenizer a chunk ahead on a reader thread and the rows written by a writer thread
(workloads/packed_run.py), so the device goes from one batch to the next without waiting for the host.
Same options, output rows, resume and report as the transformers classifier (workloads/classify.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Iterable

import torch

from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter
from inferlab.workloads.classifier_labels import ClassifierLabels
from inferlab.workloads.classify import ClassifyOptions, ClassifyReport, length_policy, ok_record, \
    require_classification_head
from inferlab.workloads.hf_loading import load_tokenizer
from inferlab.workloads.packed_run import BackgroundWriter, PackedOptions, PrefetchedChunks, run_packed
from inferlab.workloads.rows import RowPreparer, TextRow, text_field_getter


class EngineClassifier:
    def __init__(self, encoder, tokenizer, packed: PackedOptions) -> None:
        self.encoder = encoder  # inferlab.engine.Encoder (task classify)
        self.tokenizer = tokenizer
        self.packed = packed
        self.labels = ClassifierLabels.from_config(encoder.spec.raw)

    def classify_records(self, records: Iterable[InputRecord], writer: ResumableJsonlWriter, options: ClassifyOptions,
                         progress: Callable[[int], None] | None = None) -> tuple[ClassifyReport, list[str]]:
        """As Classifier.classify_records (workloads/classify.py), on the engine."""
        start = time.perf_counter()
        encoder = self.encoder
        report = ClassifyReport(backend="inferlab")
        preparer = RowPreparer(self.tokenizer, text_field_getter(options.text_field),
                               length_policy(options, encoder.max_length), skip_ids=set(writer.done), on_skip=progress)

        def on_results(rows: list[TextRow], logits: list[torch.Tensor], seconds: float) -> None:
            for row, fields in zip(rows, self.labels.row_fields(torch.stack(logits))):
                writer.write(ok_record(row, fields, len(rows), seconds))
            report.record_batch(rows, seconds)
            if progress:
                progress(len(rows))

        def on_error(record: dict) -> None:
            writer.write(record)
            report.rows_error += 1
            if progress:
                progress(1)

        with BackgroundWriter() as background, PrefetchedChunks(preparer, records, self.packed.chunk_rows) as chunks:
            report.backoff = run_packed(
                chunks, background, encoder.config.max_batch_tokens, self.packed, encoder.predict_s,
                run_rows=lambda rows: list(encoder.classify(encoder.pack([r.token_ids for r in rows]))),
                on_results=on_results, on_error=on_error, backoff=options.backoff,
            )
        report.rows_skipped = preparer.skipped
        report.engine = encoder.stats.as_dict()
        report.wall_s = time.perf_counter() - start
        return report, preparer.ids_in_order


def load_engine_classifier(config, packed: PackedOptions = PackedOptions()) -> EngineClassifier:
    """An EngineClassifier from an inferlab.engine.EncoderConfig (its task and pad id are set here: the pad id
    is the tokenizer's, as transformers' classifier reads it)."""
    from inferlab.engine import Encoder

    require_classification_head(config.model)
    tokenizer = load_tokenizer(config.model)
    encoder = Encoder(replace(config, task="classify", pad_id=tokenizer.pad_token_id))
    return EngineClassifier(encoder, tokenizer, packed)
