"""The sweep of `inferlab tune`: cut the sample to its rows, measure every candidate (candidates.py) with
the workload's runner (runners.py), pick the one with the best figure, and return the TunedConfig with
every candidate's figures (or the error that stopped it: an out-of-memory or an unsupported setting is a
row, not the end of the sweep) and the environment (inferlab.environment)."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import CapacityError, ConfigError, InferlabError, InputError
from inferlab.workloads.conformers.profiles import DEFAULT_PROFILE
from inferlab.workloads.tune.candidates import candidates_for
from inferlab.workloads.tune.runners import RUNNERS, TuneJob
from inferlab.workloads.tune.tuned_file import TunedConfig, check_workload

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_ROWS = {"generate": 256, "classify": 512, "conformers": 32}
WARMUP_ROWS = 4
TABLE_SUFFIXES = (".csv", ".tsv")  # a header line heads the sample

# (candidate index, candidate, its figures or its error message)
CandidateCallback = Callable[[int, dict[str, Any], dict[str, Any] | str], None]


@dataclass(frozen=True)
class TuneSettings:
    workload: str
    model: str
    sample: str  # the workload's own input format
    sample_rows: int | None = None  # None: DEFAULT_SAMPLE_ROWS
    sizes: tuple[int, ...] | None = None  # None: the workload's grid for the device
    device: str = "auto"
    dtype: str = "auto"  # generate/conformers: the engine's; classify: "auto" tries the device's dtypes
    backend: str = "auto"
    kv_dtype: str = "auto"  # generate/conformers: the engine's KV cache ("auto" or "fp8")
    max_new_tokens: int = 64
    num_conformers: int = 2
    profile: str = DEFAULT_PROFILE
    min_seconds: float = 2.0  # timed per candidate (passes over the sample)
    work_dir: str | None = None  # scratch outputs; None: a temporary folder, removed afterwards

    def __post_init__(self) -> None:
        check_workload(self.workload)
        if self.sample_rows is not None and self.sample_rows < 1:
            raise ConfigError(f"sample_rows={self.sample_rows} must be >= 1")
        if self.max_new_tokens < 1 or self.num_conformers < 1:
            raise ConfigError("max_new_tokens and num_conformers must be >= 1")
        if self.min_seconds < 0:
            raise ConfigError(f"min_seconds={self.min_seconds} must be >= 0")
        if self.kv_dtype not in ("auto", "fp8"):
            raise ConfigError(f"kv_dtype={self.kv_dtype!r} is not one of auto, fp8")
        if self.kv_dtype != "auto" and self.workload == "classify":
            raise ConfigError("kv_dtype is an engine setting of generate and conformers; classify has no KV cache")


def cut_sample(source: Path, destination: Path, rows: int) -> int:
    """The first `rows` non-blank lines of `source` (after its header line for .csv/.tsv); returns the count."""
    if not source.is_file():
        raise InputError(f"--sample {source} does not exist; pass a file in the workload's input format")
    lines = source.read_text().splitlines()
    header = lines[:1] if source.suffix.lower() in TABLE_SUFFIXES else []
    body = [line for line in lines[len(header):] if line.strip()][:rows]
    if not body:
        raise InputError(f"--sample {source} has no rows")
    destination.write_text("\n".join(header + body) + "\n")
    return len(body)


def device_kind(device: str) -> str:
    from inferlab.workloads.hf_loading import resolve_device

    return resolve_device(device).type


def run_sweep(settings: TuneSettings, on_plan: Callable[[list[dict[str, Any]]], None] | None = None,
              on_candidate: CandidateCallback | None = None) -> TunedConfig:
    with tempfile.TemporaryDirectory(prefix="inferlab-tune-") as temporary:
        scratch = Path(settings.work_dir or temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        return _sweep(settings, scratch, on_plan, on_candidate)


def _sweep(settings: TuneSettings, scratch: Path, on_plan, on_candidate) -> TunedConfig:
    source = Path(settings.sample)
    suffix = source.suffix or ".jsonl"
    rows = cut_sample(source, scratch / f"sample{suffix}", settings.sample_rows or DEFAULT_SAMPLE_ROWS[settings.workload])
    cut_sample(source, scratch / f"warmup{suffix}", min(rows, WARMUP_ROWS))
    kind = device_kind(settings.device)
    requests = rows * (settings.num_conformers if settings.workload == "conformers" else 1)  # rows run at once
    candidates = candidates_for(settings.workload, kind, requests, settings.sizes)
    if settings.workload == "classify" and settings.dtype != "auto":
        candidates = [dict(c, dtype=settings.dtype) for c in candidates if c["dtype"] == candidates[0]["dtype"]]
    if on_plan is not None:
        on_plan(candidates)
    job = TuneJob(settings.model, scratch / f"sample{suffix}", scratch / f"warmup{suffix}", scratch, settings.device,
                  settings.dtype, settings.backend, settings.max_new_tokens, settings.num_conformers, settings.profile,
                  settings.min_seconds, kv_dtype=settings.kv_dtype)
    runner = RUNNERS[settings.workload](job)
    measured: list[dict[str, Any]] = []
    try:
        for index, candidate in enumerate(candidates):
            outcome = _measure(runner, candidate, index)
            measured.append({"settings": candidate, **({"error": outcome} if isinstance(outcome, str)
                                                      else {"figures": outcome})})
            if on_candidate is not None:
                on_candidate(index, candidate, outcome)
    finally:
        runner.close()
    return _choose(settings, runner.metric, measured, rows, kind)


def _measure(runner, candidate: dict[str, Any], index: int) -> dict[str, Any] | str:
    import torch

    try:
        return runner.measure(candidate, index)
    except (InferlabError, torch.OutOfMemoryError, ImportError, ValueError) as e:  # cannot run here: a row
        log.warning("candidate %s failed: %s", candidate, e)
        return f"{type(e).__name__}: {e}"


def _why_no_figure(measured: dict[str, Any], metric: str) -> str:
    if "error" in measured:
        return measured["error"]
    figures = measured.get("figures") or {}
    if figures.get("error_rows"):
        return (f"{figures['error_rows']} rows of the sample were error rows: is --sample in the workload's input "
                "format? Run the workload on it (its output rows say why)")
    return f"no {metric}"


def _choose(settings: TuneSettings, metric: str, measured: list[dict[str, Any]], rows: int, kind: str) -> TunedConfig:
    from inferlab.environment import capture_environment

    ranked = sorted((m for m in measured if (m.get("figures") or {}).get(metric)),
                    key=lambda m: m["figures"][metric], reverse=True)
    if not ranked:
        problems = "; ".join(f"{m['settings']}: {_why_no_figure(m, metric)}" for m in measured)
        raise CapacityError(f"no candidate produced {metric} ({problems}); check the sample and the model")
    best = ranked[0]["figures"][metric]
    margin = best / ranked[1]["figures"][metric] - 1.0 if len(ranked) > 1 else None
    environment = {**capture_environment(), "device_kind": kind, "device": settings.device}
    sample = {"path": str(Path(settings.sample).resolve()), "rows": rows, "max_new_tokens": settings.max_new_tokens,
              "num_conformers": settings.num_conformers, "profile": settings.profile, "backend": settings.backend,
              "dtype": settings.dtype, "kv_dtype": settings.kv_dtype, "min_seconds": settings.min_seconds}
    return TunedConfig(workload=settings.workload, model=str(Path(settings.model).resolve()), metric=metric,
                       recommended=dict(ranked[0]["settings"]), candidates=measured,
                       runner_up_margin=None if margin is None else round(margin, 4), sample=sample,
                       environment=environment)
