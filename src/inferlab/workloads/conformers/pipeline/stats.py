"""The figures of one conformer run: counts, tokens and where the time went. Filled by generate.py as rows
are written; `as_dict` is what the CLI prints and the scale-out workers report.

Times: `wall_s` is the whole call. `engine_start_s` is the engine's construction (weights, memory plan,
GEMM tuning, graph capture). `generate_s` is the time spent inside Engine.stream (decoding, and the
host work the engine overlaps with it, including pulling requests from the feed). `consumer_s` is the
time the engine waited for the pipeline: from a result handed out to the next one asked for (handing
the result to the judge pool and writing the verdicts that are ready; a GPU chunk launched before the
hand-out runs meanwhile, so it idles only where this exceeds a chunk). `judge_wait_s` is the part of it
spent waiting for a full judge window. `drain_s`: waiting for the last verdicts after each engine call.
`template_wait_s` is how long the feed waited for the preparation pool (0 when it keeps ahead),
`template_cpu_s` the pool's own work (templates, tokenisation, compilation) summed over its processes.
`decode_s` is the judges' CPU time (strict and plain decoding, stereo, SDF records) summed over their
processes, `write_s` the writing of rows in this process.
`before_engine_s`: from the call's start to the engine's construction (reading inputs, the resume plan,
starting the pools, importing torch, sizing the engine: engine_sizing.py, of which `length_wait_s` waited for
the largest molecules' programs), and `before_engine_parts` its stages in order: inputs (reading and the
resume plan), pools (starting them, the first molecules handed to them), torch (this process's import of the
engine), sizing (CUDA's initialisation and the memory plan among it, and the length wait); `teardown_s`: from the last result to the return (closing the engine
and the pools). `other_s` is the rest of `wall_s` beyond engine start, generation, consumer and drain (the
two above included).
`engine` holds the engine's own figures (EngineStats: start-up phases, prefill and decode device time).
`pressure`: the conformers' constraint pressures (pressure.py; `constraint_pressure` in as_dict: None
when none was measured).
`errors` groups this run's error rows by reason (workloads/error_groups.py): `errors_by_reason` in as_dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferlab.workloads.conformers.pipeline.pressure import PressureTally
from inferlab.workloads.error_groups import ErrorGroups


@dataclass
class PipelineSummary:
    molecules: int = 0  # input records
    molecules_run: int = 0  # molecules with conformers generated in this run
    conformers_ok: int = 0  # rows written by this run
    conformers_error: int = 0  # unusable inputs, molecules that cannot run, and rejected outputs
    conformers_generated: int = 0  # outputs the engine returned (ok or rejected by the strict decoder)
    conformers_rejected: int = 0  # of those, outputs that are not a valid conformer of the input
    conformers_skipped: int = 0  # rows written by earlier runs
    conformers_retried: int = 0  # error rows of earlier runs generated again (retry_errors)
    graph_matches: int = 0  # ok rows whose plain decoding gave the input's graph
    stereo_checked: int = 0  # ok rows whose input specifies stereo (tetrahedral centres or double bonds)
    stereo_matches: int = 0  # of those, rows whose coordinates have the input's stereo
    stereo_mirrored: int = 0  # of the matches, rows written mirrored (their generation had the other hand)
    stereo_retries: int = 0  # attempts generated again because their geometry contradicted the input
    retry_output_tokens: int = 0  # output tokens of those retries (also in output_tokens)
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
    write_s: float = 0.0
    consumer_s: float = 0.0
    judge_wait_s: float = 0.0
    drain_s: float = 0.0
    before_engine_s: float = 0.0
    length_wait_s: float = 0.0
    before_engine_parts: dict[str, float] = field(default_factory=dict)  # stage -> seconds, in order
    teardown_s: float = 0.0
    stream_calls: int = 0  # Engine.stream calls: 1, plus one per round of retries given after the feed ended
    judge_workers: int = 0
    engine: dict[str, Any] = field(default_factory=dict)  # EngineStats.as_dict() without the GEMM choices
    sizing: dict[str, str] = field(default_factory=dict)  # slots, max_seq_len, kv_cache: the value and why
    pressure: PressureTally = field(default_factory=PressureTally)
    errors: ErrorGroups = field(default_factory=ErrorGroups)  # this run's error rows by reason

    @property
    def conformers_written(self) -> int:
        return self.conformers_ok + self.conformers_error

    @property
    def valid_fraction(self) -> float | None:
        """Valid conformers among the engine's outputs (inputs that never ran are not counted)."""
        generated = self.conformers_generated
        return (generated - self.conformers_rejected) / generated if generated else None

    @property
    def stereo_agreement(self) -> float | None:
        """Ok rows with specified stereo whose coordinates match it (None when no input specifies stereo)."""
        return self.stereo_matches / self.stereo_checked if self.stereo_checked else None

    @property
    def prefill_share(self) -> float | None:
        """The engine's prefill device time over its prefill + decode time."""
        busy = self.engine.get("prefill_s", 0.0) + self.engine.get("decode_s", 0.0)
        return self.engine.get("prefill_s", 0.0) / busy if busy > 0 else None

    def rate(self, amount: float, seconds: float) -> float | None:
        return amount / seconds if seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "molecules": self.molecules,
            "molecules_run": self.molecules_run,
            "conformers_ok": self.conformers_ok,
            "conformers_error": self.conformers_error,
            "errors_by_reason": self.errors.as_list(),
            "conformers_skipped": self.conformers_skipped,
            "conformers_retried": self.conformers_retried,
            "conformers_generated": self.conformers_generated,
            "conformers_rejected": self.conformers_rejected,
            "valid_fraction": self.valid_fraction,
            "graph_matches": self.graph_matches,
            "stereo_checked": self.stereo_checked,
            "stereo_matches": self.stereo_matches,
            "stereo_agreement": self.stereo_agreement,
            "stereo_mirrored": self.stereo_mirrored,
            "stereo_retries": self.stereo_retries,
            "retry_output_tokens": self.retry_output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.rate(self.output_tokens, self.wall_s),
            "generate_output_tokens_per_s": self.rate(self.output_tokens, self.generate_s),
            "conformers_per_s": self.rate(self.conformers_ok, self.wall_s),  # valid ones: error rows are no output
            "molecules_per_s": self.rate(self.molecules_run, self.wall_s),
            "device": self.device,
            "max_seq_len": self.max_seq_len,
            "slots": self.slots,
            "sizing": self.sizing,
            "stream_calls": self.stream_calls,
            "judge_workers": self.judge_workers,
            "prefill_share": self.prefill_share,
            "wall_s": round(self.wall_s, 3),
            "engine_start_s": round(self.engine_start_s, 3),
            "generate_s": round(self.generate_s, 3),
            "template_wait_s": round(self.template_wait_s, 3),
            "template_cpu_s": round(self.template_cpu_s, 3),
            "decode_s": round(self.decode_s, 3),
            "write_s": round(self.write_s, 3),
            "consumer_s": round(self.consumer_s, 3),
            "judge_wait_s": round(self.judge_wait_s, 3),
            "drain_s": round(self.drain_s, 3),
            "before_engine_s": round(self.before_engine_s, 3),
            "length_wait_s": round(self.length_wait_s, 3),
            "before_engine_parts": self.before_engine_parts,
            "teardown_s": round(self.teardown_s, 3),
            "other_s": round(self.wall_s - self.engine_start_s - self.generate_s - self.consumer_s - self.drain_s, 3),
            "constraint_pressure": self.pressure.figures(),
            "engine": self.engine,
        }
