"""`inferlab hidden-states` on the engine: pooled hidden states from the packed prefill (inferlab.engine.Encoder,
task hidden-states) over batches cut by a token budget, with the reader and writer threads of
workloads/packed_run.py; the same store, shards, options and report as the transformers loop
(workloads/hidden_states.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from inferlab.errors import InputError
from inferlab.jsonl_io import read_jsonl_records
from inferlab.workloads.activations import resolve_layers
from inferlab.workloads.hf_loading import DTYPES, load_tokenizer, resolve_max_length
from inferlab.workloads.hidden_states import HiddenStatesOptions, HiddenStatesReport, ShardBuffer, length_policy, \
    open_store
from inferlab.workloads.packed_run import BackgroundWriter, PackedOptions, PrefetchedChunks, run_packed
from inferlab.workloads.rows import RowPreparer, TextRow, text_field_getter


class EngineHiddenStates:
    """An Encoder for hidden states and the checkpoint's tokenizer."""

    def __init__(self, encoder, tokenizer, packed: PackedOptions) -> None:
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.packed = packed

    def collect(self, input_path: str | Path, output_path: str | Path, options: HiddenStatesOptions,
                progress: Callable[[int], None] | None = None) -> HiddenStatesReport:
        """As workloads.hidden_states.collect_hidden_states, on the engine."""
        if not Path(input_path).exists():
            raise InputError(f"input file {input_path} does not exist")
        start = time.perf_counter()
        encoder, spec = self.encoder, self.encoder.spec
        layers = resolve_layers(options.layers, spec.num_layers)
        max_length = resolve_max_length(options.max_length, spec.max_position_embeddings)
        backend = {"backend": "inferlab", "dtype": encoder.stats.dtype, "weights": encoder.config.weights}
        store = open_store(output_path, str(encoder.config.model), layers, options, max_length, backend)
        report = HiddenStatesReport(backend="inferlab")
        preparer = RowPreparer(self.tokenizer, text_field_getter(options.text_field),
                               length_policy(options, max_length), skip_ids=set(store.done_ids), on_skip=progress)
        shard = ShardBuffer(store, layers, options.pool, DTYPES[options.save_dtype], report)

        def run_rows(rows: list[TextRow]) -> list[dict[int, Any]]:
            pooled = encoder.hidden_states(encoder.pack([r.token_ids for r in rows]), layers, options.pool)
            return [{layer: t[i] for layer, t in pooled.items()} for i in range(len(rows))]

        def on_results(rows: list[TextRow], results: list[dict[int, Any]], seconds: float) -> None:
            shard.add(rows, results)
            report.record_batch(rows, seconds)
            if progress:
                progress(len(rows))

        def on_error(record: dict) -> None:
            store.write_error(record)
            report.rows_error += 1
            if progress:
                progress(1)

        try:
            records = read_jsonl_records(input_path, max_line_chars=options.max_line_chars)
            with BackgroundWriter() as background, PrefetchedChunks(preparer, records, options.shard_rows) as chunks:
                report.backoff = run_packed(chunks, background, encoder.config.max_batch_tokens, self.packed,
                                            encoder.predict_s, run_rows, on_results, on_error, options.backoff,
                                            on_chunk_end=shard.flush)
            report.rows_in_output = store.assemble(preparer.ids_in_order, layers, spec.hidden_size,
                                                   DTYPES[options.save_dtype])
        finally:
            store.close()
        report.rows_skipped = preparer.skipped
        report.engine = encoder.stats.as_dict()
        report.wall_s = time.perf_counter() - start
        return report


def load_engine_hidden_states(config, packed: PackedOptions = PackedOptions()) -> EngineHiddenStates:
    """EngineHiddenStates from an inferlab.engine.EncoderConfig (its task is set here)."""
    from inferlab.engine import Encoder

    tokenizer = load_tokenizer(config.model)
    return EngineHiddenStates(Encoder(replace(config, task="hidden-states")), tokenizer, packed)
