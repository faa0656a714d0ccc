"""`inferlab classify` on the engine: its encode backend (workloads/encode_backends.py: the packed prefill) over
batches cut by a token budget, the tokenizer a chunk ahead on a reader thread and the rows written by a writer thread
(workloads/packed_run.py), so the device goes from one batch to the next without waiting for the host.
Same options, output rows, resume and report as the transformers classifier (workloads/classify.py).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch

from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter
from inferlab.workloads.classifier_labels import ClassifierLabels
from inferlab.workloads.classify import ClassifyOptions, ClassifyReport, write_classified
from inferlab.workloads.encode_backends import EngineEncodeBackend
from inferlab.workloads.packed_run import BackgroundWriter, PackedOptions, PrefetchedChunks, run_packed
from inferlab.workloads.row_workload import FinishedRows
from inferlab.workloads.rows import RowPreparer, TextRow, text_field_getter


class EngineClassifier:
    def __init__(self, backend: EngineEncodeBackend, tokenizer, packed: PackedOptions) -> None:
        self.backend = backend  # task classify
        self.encoder = backend.encoder
        self.tokenizer = tokenizer
        self.packed = packed
        self.labels = ClassifierLabels.from_config(self.encoder.spec.raw)

    def classify_records(self, records: Iterable[InputRecord], writer: ResumableJsonlWriter, options: ClassifyOptions,
                         progress: Callable[[int], None] | None = None) -> tuple[ClassifyReport, list[str]]:
        """As Classifier.classify_records (workloads/classify.py), on the engine."""
        start = time.perf_counter()
        encoder = self.encoder
        report = ClassifyReport(backend="inferlab")
        finished = FinishedRows(report, writer.write, progress)
        preparer = RowPreparer(self.tokenizer, text_field_getter(options.text_field),
                               options.length_policy(options.resolved_max_length(encoder.max_length)),
                               skip_ids=writer.done, on_skip=progress)

        def on_results(rows: list[TextRow], logits: list[torch.Tensor], seconds: float) -> None:
            write_classified(writer, self.labels, rows, logits, seconds)
            finished.batch(rows, seconds)

        with BackgroundWriter() as background, PrefetchedChunks(preparer, records, self.packed.chunk_rows) as chunks:
            report.backoff = run_packed(
                chunks, background, encoder.config.max_batch_tokens, self.packed, encoder.predict_s,
                run_rows=lambda rows: list(self.backend.encode([r.token_ids for r in rows])),
                on_results=on_results, on_error=finished.error, backoff=options.backoff,
            )
        report.rows_skipped = preparer.skipped
        report.engine = encoder.stats.as_dict()
        report.wall_s = time.perf_counter() - start
        return report, preparer.ids_in_order
