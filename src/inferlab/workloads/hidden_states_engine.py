"""`inferlab hidden-states` on the engine: pooled hidden states from its encode backend (workloads/encode_backends.py:
the packed prefill) over batches cut by a token budget, with the reader and writer threads of
workloads/packed_run.py; the same store, shards, options and report as the transformers loop
(workloads/hidden_states.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from inferlab.jsonl_io import InputRecord
from inferlab.workloads.encode_backends import EngineEncodeBackend
from inferlab.workloads.hidden_states import HiddenStatesOptions, HiddenStatesReport, HiddenStatesRun, per_row
from inferlab.workloads.oom import BackoffStats
from inferlab.workloads.packed_run import BackgroundWriter, PackedOptions, PrefetchedChunks, run_packed
from inferlab.workloads.rows import TextRow


class EngineHiddenStates:
    """The engine's encode backend for hidden states (its layers and pool the options') and the checkpoint's
    tokenizer."""

    def __init__(self, backend: EngineEncodeBackend, tokenizer, packed: PackedOptions) -> None:
        self.backend = backend
        self.encoder = backend.encoder
        self.tokenizer = tokenizer
        self.packed = packed

    def collect(self, input_path: str | Path, output_path: str | Path, options: HiddenStatesOptions,
                progress: Callable[[int], None] | None = None) -> HiddenStatesReport:
        """As workloads.hidden_states.collect_hidden_states, on the engine."""
        encoder, spec = self.encoder, self.encoder.spec
        run = HiddenStatesRun(
            input_path, output_path, options, self.tokenizer, model_dir=str(encoder.config.model),
            layers=self.backend.layers, pool=self.backend.spec.pool, hidden_size=spec.hidden_size,
            max_length=options.resolved_max_length(spec.max_position_embeddings),
            backend={"backend": "inferlab", "dtype": encoder.stats.dtype, "weights": encoder.config.weights},
            progress=progress,
        )

        def loop(records: Iterable[InputRecord]) -> BackoffStats:
            def run_rows(rows: list[TextRow]) -> list[dict[int, Any]]:
                return per_row(self.backend.encode([r.token_ids for r in rows]), len(rows))

            with BackgroundWriter() as writer, PrefetchedChunks(run.preparer, records, options.shard_rows) as chunks:
                return run_packed(chunks, writer, encoder.config.max_batch_tokens, self.packed, encoder.predict_s,
                                  run_rows, run.on_results, run.finished.error, options.backoff,
                                  on_chunk_end=run.shard.flush)

        report = run.run(loop)
        report.engine = encoder.stats.as_dict()
        return report
