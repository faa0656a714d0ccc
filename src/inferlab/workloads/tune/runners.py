"""One candidate of `inferlab tune` measured: the same library functions the commands run
(workloads.text.run_text_generation over the text backend, workloads.classify.classify_file,
workloads.conformers.pipeline.generate_conformers), on the cut sample, writing to a fresh scratch folder
per candidate (removed afterwards: the workloads would resume an earlier run's outputs instead of writing).

Every candidate starts warm: its engine (or model) is started and timed apart, then one untimed warm-up
pass over the whole sample pays what a first pass pays (Triton compiles, the GEMM plan's timing, graph
captures, allocator growth). Then `passes` timed passes (>= 3), each of runs of the sample until
`min_seconds` are timed (at least one run). A candidate's figure is the median of its passes' rates and
its spread their relative range (workloads/winner.py). The conformer pipeline starts its own engine on
every run: a run's timed seconds leave out that start and the graphs its engine captured lazily.
Each runner keeps at most one model loaded (classify reuses it across batch sizes of one dtype and
attention). Does not own the candidates or the choice (candidates.py, sweep.py).
"""

from __future__ import annotations

import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inferlab.engine import EngineConfig
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE
from inferlab.workloads.stats import latency_summary_ms
from inferlab.workloads.winner import MIN_REPEATS, relative_range


@dataclass(frozen=True)
class TuneJob:
    """What every candidate shares."""

    model: str
    sample: Path  # the sample cut to its rows
    scratch: Path  # outputs of the runs (thrown away)
    device: str = "auto"
    dtype: str = "auto"  # generate, conformers: the engine's dtype (classify tunes its own)
    backend: str = "auto"  # generate's backend
    max_new_tokens: int = 64  # generate's default (a sample line may override it)
    num_conformers: int = 2
    profile: str = DEFAULT_PROFILE
    min_seconds: float = 2.0  # timed per pass: runs of the sample until this many seconds
    passes: int = MIN_REPEATS  # timed passes per candidate
    max_seq_len: int | None = None  # generate, conformers: every candidate's row length (None: the engine's)
    gpu_memory_fraction: float = 0.9  # generate, conformers: the engine's share of the free device memory
    memory_budget_bytes: int | None = None  # generate, conformers: a fixed budget instead (tests)

    def engine_config(self, **candidate: Any) -> EngineConfig:
        """The engine every candidate shares, with the candidate's own knobs (max_slots, kv_dtype)."""
        return EngineConfig(model=self.model, device=self.device, dtype=self.dtype,
                            gpu_memory_fraction=self.gpu_memory_fraction, max_seq_len=self.max_seq_len,
                            memory_budget_bytes=self.memory_budget_bytes, **candidate)


MAX_RUNS_PER_PASS = 100
# one run of the sample: (timed seconds, counts such as rows and output tokens)
RunOnce = Callable[[int], tuple[float, dict[str, int]]]


def timed_passes(run_once: RunOnce, passes: int, min_seconds: float) -> list[tuple[float, dict[str, int]]]:
    """`passes` passes, each of runs of the sample until `min_seconds` are timed: [(seconds, summed counts)]."""
    out, run = [], 0
    for _ in range(passes):
        seconds, totals, runs = 0.0, {}, 0
        while runs == 0 or (seconds < min_seconds and runs < MAX_RUNS_PER_PASS):
            run_s, counts = run_once(run)
            seconds += run_s
            run, runs = run + 1, runs + 1
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
        out.append((seconds, totals))
    return out


def pass_figures(passes: list[tuple[float, dict[str, int]]], amount: str, metric: str) -> dict[str, Any]:
    """The candidate's counts and seconds over all passes, its figure (the median of the passes' rates of
    `amount`) with every pass's rate and their spread."""
    rates = [counts[amount] / seconds if seconds > 0 else 0.0 for seconds, counts in passes]
    totals: dict[str, int] = {}
    for _, counts in passes:
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
    seconds = sum(s for s, _ in passes)
    return {"passes": len(passes), **totals, "seconds": round(seconds, 4), metric: statistics.median(rates),
            f"{metric}_per_pass": [round(r, 4) for r in rates], "spread": relative_range(rates)}


def _reset_peak(device: str) -> None:
    if torch.cuda.is_available() and device != "cpu":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(device: str) -> float | None:
    if torch.cuda.is_available() and device != "cpu":
        torch.cuda.synchronize()
        return round(torch.cuda.max_memory_allocated() / 1024**3, 3)
    return None


def _rate(amount: float, seconds: float) -> float | None:
    return amount / seconds if seconds > 0 else None


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def _outputs(job: TuneJob, index: int) -> Iterator[Path]:
    """A fresh folder for one candidate's outputs, removed afterwards: never an earlier run's files, which
    the workloads would resume instead of writing."""
    folder = Path(tempfile.mkdtemp(prefix=f"candidate-{index}-", dir=job.scratch))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _timed(function: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


class GenerateRunner:
    metric = "output_tokens_per_s"

    def __init__(self, job: TuneJob) -> None:
        self.job = job

    def measure(self, candidate: dict[str, Any], index: int) -> dict[str, Any]:
        from inferlab.types import SamplingParams
        from inferlab.workloads.text import borrowed, open_backend, run_text_generation

        job = self.job
        defaults = SamplingParams(max_new_tokens=job.max_new_tokens)
        engine = job.engine_config(**candidate)
        def run(folder: Path, name: str) -> tuple[float, dict[str, int]]:
            seconds, summary = _timed(lambda: run_text_generation(job.sample, folder / f"{name}.jsonl",
                                                                  lambda: borrowed(backend), defaults))
            return seconds, {"rows": summary.written, "error_rows": summary.errors,
                             "output_tokens": summary.output_tokens}

        _reset_peak(job.device)
        start_s, backend = _timed(lambda: open_backend(job.backend, engine))  # closed below
        try:
            with _outputs(job, index) as folder:
                warmup_s, _ = run(folder, "warmup")
                passes = timed_passes(lambda n: run(folder, f"run-{n}"), job.passes, job.min_seconds)
        finally:
            backend.close()
            peak = _peak_gb(job.device)
            _release()
        figures = pass_figures(passes, "output_tokens", self.metric)
        return {**figures, "rows_per_s": _rate(figures["rows"], figures["seconds"]), "start_s": round(start_s, 3),
                "warmup_s": round(warmup_s, 3), "peak_memory_gb": peak}

    def close(self) -> None:
        _release()


class ClassifyRunner:
    metric = "rows_per_s"

    def __init__(self, job: TuneJob) -> None:
        self.job = job
        self.loaded_key: tuple[str, str] | None = None
        self.classifier = None
        self.load_s = 0.0

    def _classifier(self, dtype: str, attn: str):
        from inferlab.workloads.classify import load_classifier
        from inferlab.workloads.hf_loading import ModelLoadConfig

        if self.loaded_key != (dtype, attn):
            self.classifier, self.loaded_key = None, None
            _release()
            self.classifier = load_classifier(ModelLoadConfig(self.job.model, dtype, attn, "none", self.job.device))
            self.loaded_key = (dtype, attn)
            self.load_s = self.classifier.loaded.load_s
        return self.classifier

    def measure(self, candidate: dict[str, Any], index: int) -> dict[str, Any]:
        from inferlab.workloads.classify import ClassifyOptions, classify_file

        job = self.job
        classifier = self._classifier(candidate["dtype"], candidate["attn"])
        options = ClassifyOptions(batch_size=candidate["batch_size"])
        batch_seconds: list[float] = []

        def run(folder: Path, name: str) -> tuple[float, dict[str, int]]:
            seconds, report = _timed(lambda: classify_file(classifier, job.sample, folder / f"{name}.jsonl", options))
            if name != "warmup":
                batch_seconds.extend(report.batch_seconds)
            return seconds, {"rows": report.rows_ok, "error_rows": report.rows_error,
                             "oom_events": report.backoff.oom_events}

        _reset_peak(job.device)
        with _outputs(job, index) as folder:
            warmup_s, _ = run(folder, "warmup")
            passes = timed_passes(lambda n: run(folder, f"run-{n}"), job.passes, job.min_seconds)
        figures = pass_figures(passes, "rows", self.metric)
        return {**figures, "batch_latency_ms": latency_summary_ms(batch_seconds), "load_s": round(self.load_s, 3),
                "warmup_s": round(warmup_s, 3), "peak_memory_gb": _peak_gb(job.device)}

    def close(self) -> None:
        self.classifier, self.loaded_key = None, None
        _release()


class ConformersRunner:
    metric = "conformers_per_s"

    def __init__(self, job: TuneJob) -> None:
        self.job = job

    def measure(self, candidate: dict[str, Any], index: int) -> dict[str, Any]:
        from inferlab.workloads.conformers.pipeline.config import PipelineConfig
        from inferlab.workloads.conformers.pipeline.generate import generate_conformers

        job = self.job
        config = PipelineConfig(num_conformers=job.num_conformers, profile=job.profile)
        # the candidate "auto" is the model dtype's cache, which the pipeline calls "model" ("auto" is its gate)
        kv_dtype = candidate.get("kv_dtype", "auto")
        engine = job.engine_config(**{**candidate, "kv_dtype": "model" if kv_dtype == "auto" else kv_dtype})
        starts: list[float] = []
        excluded = {"captures_s": 0.0}

        def run(folder: Path, name: str) -> tuple[float, dict[str, int]]:
            summary = generate_conformers(engine, job.sample, folder / f"{name}.sdf", config)
            captures = summary.engine.get("lazy_capture_s", 0.0)
            starts.append(summary.engine_start_s)
            if name != "warmup":
                excluded["captures_s"] += captures
            # conformers generated by the engine (error rows of unusable inputs apart)
            return summary.wall_s - summary.engine_start_s - captures, {
                "conformers": summary.conformers_generated, "valid": summary.conformers_ok,
                "error_rows": summary.conformers_error, "output_tokens": summary.output_tokens}

        _reset_peak(job.device)
        try:
            with _outputs(job, index) as folder:
                warmup_s, _ = run(folder, "warmup")
                passes = timed_passes(lambda n: run(folder, f"run-{n}"), job.passes, job.min_seconds)
        finally:
            _release()
        figures = pass_figures(passes, "conformers", self.metric)
        return {**figures, "output_tokens_per_s": _rate(figures["output_tokens"], figures["seconds"]),
                "valid_fraction": figures["valid"] / figures["conformers"] if figures["conformers"] else None,
                "start_s": round(sum(starts) / len(starts), 3), "warmup_s": round(warmup_s, 3),
                "lazy_capture_s_left_out": round(excluded["captures_s"], 3), "peak_memory_gb": _peak_gb(job.device)}

    def close(self) -> None:
        _release()


RUNNERS = {"generate": GenerateRunner, "classify": ClassifyRunner, "conformers": ConformersRunner}
