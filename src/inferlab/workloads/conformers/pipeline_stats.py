"""The figures of one conformer run: counts, tokens and where the time went. Filled by pipeline.py as rows
are written; `as_dict` is what the CLI prints and the scale-out workers report.

Times: `wall_s` is the whole call. `engine_start_s` is the engine's construction (weights, memory plan,
GEMM tuning, graph capture). `generate_s` is the time spent inside Engine.stream (decoding, and the
host work the engine overlaps with it). `template_wait_s` is how long the pipeline waited for the pool
(molecules not prepared in time: 0 when preparation keeps ahead). `template_cpu_s` is the pool's own
work (templates, tokenisation, compilation) summed over its processes, mostly hidden behind the engine.
`decode_s` is the strict and plain decoding plus writing, done between the engine's chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PipelineSummary:
    molecules: int = 0  # input records
    molecules_run: int = 0  # molecules with conformers generated in this run
    conformers_ok: int = 0  # rows written by this run
    conformers_error: int = 0  # unusable inputs, molecules that cannot run, and rejected outputs
    conformers_generated: int = 0  # outputs the engine returned (ok or rejected by the strict decoder)
    conformers_rejected: int = 0  # of those, outputs that are not a valid conformer of the input
    conformers_skipped: int = 0  # rows written by earlier runs
    graph_matches: int = 0  # ok rows whose plain decoding gave the input's graph
    prompt_tokens: int = 0
    output_tokens: int = 0
    device: str | None = None  # the engine's, e.g. "cuda:0" or "cpu"
    max_seq_len: int | None = None
    slots: int | None = None
    wall_s: float = 0.0
    engine_start_s: float = 0.0
    generate_s: float = 0.0
    template_wait_s: float = 0.0
    template_cpu_s: float = 0.0
    decode_s: float = 0.0
    waves: int = 0

    @property
    def conformers_written(self) -> int:
        return self.conformers_ok + self.conformers_error

    @property
    def valid_fraction(self) -> float | None:
        """Valid conformers among the engine's outputs (inputs that never ran are not counted)."""
        generated = self.conformers_generated
        return (generated - self.conformers_rejected) / generated if generated else None

    def rate(self, amount: float, seconds: float) -> float | None:
        return amount / seconds if seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "molecules": self.molecules,
            "molecules_run": self.molecules_run,
            "conformers_ok": self.conformers_ok,
            "conformers_error": self.conformers_error,
            "conformers_skipped": self.conformers_skipped,
            "conformers_generated": self.conformers_generated,
            "conformers_rejected": self.conformers_rejected,
            "valid_fraction": self.valid_fraction,
            "graph_matches": self.graph_matches,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.rate(self.output_tokens, self.wall_s),
            "generate_output_tokens_per_s": self.rate(self.output_tokens, self.generate_s),
            "conformers_per_s": self.rate(self.conformers_written, self.wall_s),
            "molecules_per_s": self.rate(self.molecules_run, self.wall_s),
            "device": self.device,
            "max_seq_len": self.max_seq_len,
            "slots": self.slots,
            "waves": self.waves,
            "wall_s": round(self.wall_s, 3),
            "engine_start_s": round(self.engine_start_s, 3),
            "generate_s": round(self.generate_s, 3),
            "template_wait_s": round(self.template_wait_s, 3),
            "template_cpu_s": round(self.template_cpu_s, 3),
            "decode_s": round(self.decode_s, 3),
        }
