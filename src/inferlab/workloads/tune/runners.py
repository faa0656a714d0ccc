"""One candidate of `inferlab tune` measured: the same library functions the commands run
(workloads.text.run_text_generation over the text backend, workloads.classify.classify_file,
workloads.conformers.pipeline.generate_conformers), on the cut sample, writing to scratch outputs.

Start-up (engine construction, model loading) is timed apart from the run; generate and classify run a
few warm-up rows first (first-call costs: allocator, kernel selection). The sample then runs in passes
(each to a fresh output) until `min_seconds` are timed, so a small sample still gives a steady figure.
Figures: passes, rows written, error rows, the timed seconds, rates over them, the peak device memory. Each runner
keeps at most one model loaded (classify reuses it across batch sizes of one dtype and attention).
Does not own the candidates or the choice (candidates.py, sweep.py).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inferlab.workloads.conformers.profiles import DEFAULT_PROFILE
from inferlab.workloads.stats import latency_summary_ms


@dataclass(frozen=True)
class TuneJob:
    """What every candidate shares."""

    model: str
    sample: Path  # the sample cut to its rows
    warmup: Path  # its first few rows
    scratch: Path  # outputs of the runs (thrown away)
    device: str = "auto"
    dtype: str = "auto"  # generate, conformers: the engine's dtype (classify tunes its own)
    backend: str = "auto"  # generate's backend
    max_new_tokens: int = 64  # generate's default (a sample line may override it)
    num_conformers: int = 2
    profile: str = DEFAULT_PROFILE
    min_seconds: float = 2.0  # timed passes over the sample until this many seconds
    kv_dtype: str = "auto"  # generate, conformers: the engine's KV cache ("auto" or "fp8")


MAX_PASSES = 100


def timed_passes(run_once: Callable[[int], dict[str, int]], min_seconds: float) -> tuple[int, float, dict[str, int]]:
    """Run `run_once(pass_index)` (returns counts) until `min_seconds` are timed: (passes, seconds, summed counts)."""
    passes, seconds, totals = 0, 0.0, {}
    while passes == 0 or (seconds < min_seconds and passes < MAX_PASSES):
        started = time.perf_counter()
        counts = run_once(passes)
        seconds += time.perf_counter() - started
        passes += 1
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
    return passes, seconds, totals


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


class GenerateRunner:
    metric = "output_tokens_per_s"

    def __init__(self, job: TuneJob) -> None:
        self.job = job

    def measure(self, candidate: dict[str, Any], index: int) -> dict[str, Any]:
        from inferlab.types import SamplingParams
        from inferlab.workloads.text import borrowed, close_backend, open_backend, run_text_generation

        job = self.job
        defaults = SamplingParams(max_new_tokens=job.max_new_tokens)
        options = {"device": job.device, "dtype": job.dtype, "kv_dtype": job.kv_dtype, "max_slots": candidate["max_slots"]}
        _reset_peak(job.device)
        started = time.perf_counter()
        backend = open_backend(job.backend, job.model, options)  # closed before the next candidate
        start_s = time.perf_counter() - started
        try:
            run_text_generation(job.warmup, job.scratch / f"warmup-{index}.jsonl", lambda: borrowed(backend), defaults)

            def run_once(n: int) -> dict[str, int]:
                out = job.scratch / f"run-{index}-{n}.jsonl"
                summary = run_text_generation(job.sample, out, lambda: borrowed(backend), defaults)
                return {"rows": summary.written, "error_rows": summary.errors, "output_tokens": summary.output_tokens}

            passes, seconds, totals = timed_passes(run_once, job.min_seconds)
        finally:
            close_backend(backend)
            peak = _peak_gb(job.device)
            _release()
        return {"passes": passes, **totals, "seconds": round(seconds, 4),
                "output_tokens_per_s": _rate(totals["output_tokens"], seconds),
                "rows_per_s": _rate(totals["rows"], seconds), "start_s": round(start_s, 3), "peak_memory_gb": peak}

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
        classify_file(classifier, job.warmup, job.scratch / f"warmup-{index}.jsonl", options)
        _reset_peak(job.device)
        batch_seconds: list[float] = []

        def run_once(n: int) -> dict[str, int]:
            report = classify_file(classifier, job.sample, job.scratch / f"run-{index}-{n}.jsonl", options)
            batch_seconds.extend(report.batch_seconds)
            return {"rows": report.rows_ok, "error_rows": report.rows_error, "oom_events": report.backoff.oom_events}

        passes, seconds, totals = timed_passes(run_once, job.min_seconds)
        return {"passes": passes, **totals, "seconds": round(seconds, 4), "rows_per_s": _rate(totals["rows"], seconds),
                "batch_latency_ms": latency_summary_ms(batch_seconds), "load_s": round(self.load_s, 3),
                "peak_memory_gb": _peak_gb(job.device)}

    def close(self) -> None:
        self.classifier, self.loaded_key = None, None
        _release()


class ConformersRunner:
    metric = "conformers_per_s"

    def __init__(self, job: TuneJob) -> None:
        self.job = job

    def measure(self, candidate: dict[str, Any], index: int) -> dict[str, Any]:
        from inferlab.workloads.conformers.pipeline import generate_conformers
        from inferlab.workloads.conformers.pipeline_config import PipelineConfig

        job = self.job
        config = PipelineConfig(num_conformers=job.num_conformers, profile=job.profile)
        options = {"device": job.device, "dtype": job.dtype, "kv_dtype": job.kv_dtype, "max_slots": candidate["max_slots"]}
        _reset_peak(job.device)
        passes, seconds, start_s, totals = 0, 0.0, 0.0, {}
        try:  # each pass starts its own engine (the pipeline owns it): only the time after the start counts
            while passes == 0 or (seconds < job.min_seconds and passes < MAX_PASSES):
                out = job.scratch / f"run-{index}-{passes}.sdf"
                summary = generate_conformers(job.model, job.sample, out, config, options)
                seconds += summary.wall_s - summary.engine_start_s
                start_s += summary.engine_start_s
                passes += 1
                # conformers generated by the engine (error rows of unusable inputs apart)
                for key, value in (("conformers", summary.conformers_generated), ("valid", summary.conformers_ok),
                                   ("error_rows", summary.conformers_error), ("output_tokens", summary.output_tokens)):
                    totals[key] = totals.get(key, 0) + value
        finally:
            _release()
        return {"passes": passes, **totals, "seconds": round(seconds, 4),
                "conformers_per_s": _rate(totals["conformers"], seconds),
                "output_tokens_per_s": _rate(totals["output_tokens"], seconds),
                "valid_fraction": totals["valid"] / totals["conformers"] if totals["conformers"] else None,
                "start_s": round(start_s / passes, 3), "peak_memory_gb": _peak_gb(job.device)}

    def close(self) -> None:
        _release()


RUNNERS = {"generate": GenerateRunner, "classify": ClassifyRunner, "conformers": ConformersRunner}
