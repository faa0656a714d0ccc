"""The sweep of `inferlab tune`: cut the sample to its rows, plan the candidates (candidates.py: on the engine,
max_slots up to what its memory plan fits at the sample's row length, x the KV dtypes the device runs),
measure each with the workload's runner (runners.py), and choose by the rule `inferlab recommend` uses
(workloads/winner.py): a knob's value is recommended only when the best candidate beats the best one with
another value by more than the measured spread; otherwise the file sets nothing for it (the command's
default applies) and says so. The TunedConfig holds every candidate's figures (or the error that stopped
it: an out-of-memory or an unsupported setting is a row, not the end of the sweep), the verdicts, how the
grid was bounded and the environment (inferlab.environment).

On the engine's own grid (no --sizes) each KV dtype's sizes are measured from the largest down and the
smaller ones left out once a size falls clearly below a larger one (descent.py). With --work-dir, measured
candidates are kept there (measured_store.py) and a rerun measures only the rest; --budget-s stops before a
candidate that would pass the budget (TuneIncomplete)."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from inferlab.errors import CapacityError, ConfigError, InferlabError, InputError
from inferlab.models.checkpoint_identity import checkpoint_identity
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE
from inferlab.workloads.tune.candidates import (
    FORCED_RUN_TOKENS,
    SizeLimit,
    engine_candidates,
    engine_kv_dtypes,
    fixed_candidates,
    forced_runs_at,
    size_limit,
)
from inferlab.workloads.tune.descent import Descent, largest_first
from inferlab.workloads.tune.measured_store import MeasuredStore, fingerprint
from inferlab.workloads.tune.runners import RUNNERS, TuneJob
from inferlab.workloads.tune.tuned_file import TUNABLE, TunedConfig, check_workload
from inferlab.workloads.winner import MIN_REPEATS, Candidate, decide, margin

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_ROWS = {"generate": 256, "classify": 512, "conformers": 32}
TABLE_SUFFIXES = (".csv", ".tsv")  # a header line heads the sample
KV_DTYPES = ("auto", "fp8")

# (candidate index, candidate, its figures or its error message, whether an earlier run measured it)
CandidateCallback = Callable[[int, dict[str, Any], dict[str, Any] | str, bool], None]


class TuneIncomplete(Exception):
    """--budget-s was reached before every candidate was measured; a rerun with the same --work-dir goes on."""

    def __init__(self, measured: int, total: int, work_dir: str) -> None:
        super().__init__(f"{measured} of {total} candidates measured within --budget-s; rerun the same command "
                         f"(--work-dir {work_dir} keeps them) to measure the rest")
        self.measured, self.total = measured, total


@dataclass(frozen=True)
class TuneSettings:
    workload: str
    model: str
    sample: str  # the workload's own input format
    sample_rows: int | None = None  # None: DEFAULT_SAMPLE_ROWS
    sizes: tuple[int, ...] | None = None  # None: the workload's grid (engine: up to the memory plan's largest)
    device: str = "auto"
    dtype: str = "auto"  # generate/conformers: the engine's; classify: "auto" tries the device's dtypes
    backend: str = "auto"
    kv_dtypes: tuple[str, ...] | None = None  # engine: None = the model dtype, and fp8 where the device runs it
    max_new_tokens: int = 64
    num_conformers: int = 2
    profile: str = DEFAULT_PROFILE
    min_seconds: float = 2.0  # timed per pass (runs of the sample)
    passes: int = MIN_REPEATS  # timed passes per candidate
    max_seq_len: int | None = None  # engine: every candidate's row length; None: what the sample needs
    gpu_memory_fraction: float = 0.9  # engine: its share of the free device memory
    memory_budget_bytes: int | None = None  # engine: a fixed budget instead of the fraction (tests)
    work_dir: str | None = None  # scratch outputs and measured candidates; None: a temporary folder
    budget_s: float | None = None  # stop before a candidate that would pass this many seconds
    # conformers on the engine: the forced-run width tried at each KV dtype's best max_slots (0: not tried)
    forced_run_tokens: int = FORCED_RUN_TOKENS

    def __post_init__(self) -> None:
        check_workload(self.workload)
        if self.sample_rows is not None and self.sample_rows < 1:
            raise ConfigError(f"sample_rows={self.sample_rows} must be >= 1")
        if self.max_new_tokens < 1 or self.num_conformers < 1:
            raise ConfigError("max_new_tokens and num_conformers must be >= 1")
        if self.min_seconds < 0:
            raise ConfigError(f"min_seconds={self.min_seconds} must be >= 0")
        if self.passes < MIN_REPEATS:
            raise ConfigError(f"passes={self.passes}: a spread needs at least {MIN_REPEATS} timed passes")
        unknown = sorted(set(self.kv_dtypes or ()) - set(KV_DTYPES))
        if unknown:
            raise ConfigError(f"kv_dtypes {unknown} are not among {', '.join(KV_DTYPES)} (auto: the model dtype)")
        if self.workload == "classify" and (self.kv_dtypes or self.max_seq_len is not None):
            raise ConfigError("kv_dtypes and max_seq_len are engine settings of generate and conformers; classify has "
                              "no KV cache")
        if self.forced_run_tokens < 0:
            raise ConfigError(f"forced_run_tokens={self.forced_run_tokens} must be >= 0 (0: not tried)")
        if not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise ConfigError(f"gpu_memory_fraction={self.gpu_memory_fraction} must be in (0, 1], e.g. 0.9")
        if self.budget_s is not None and (self.budget_s <= 0 or self.work_dir is None):
            raise ConfigError("budget_s (--budget-s) needs a value > 0 and a work_dir (--work-dir: where the measured "
                              "candidates are kept for the rerun that measures the rest)")

    def figure_settings(self) -> dict[str, Any]:
        """What changes a candidate's figures (a measured candidate is reused only under equal ones)."""
        fields = asdict(self)
        return {k: v for k, v in fields.items() if k not in ("work_dir", "budget_s", "sample")}


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
    from inferlab.engine import resolve_device

    return resolve_device(device).type


def uses_engine(settings: TuneSettings) -> bool:
    """Whether the candidates run on the inferlab engine (its memory plan and KV dtypes apply)."""
    if settings.workload == "conformers" or settings.backend == "inferlab":
        return True
    if settings.workload == "classify" or settings.backend == "hf":
        return False
    from inferlab.workloads.text import engine_architecture_problem

    return engine_architecture_problem(settings.model) is None


def run_sweep(settings: TuneSettings, on_plan: Callable[[list[dict[str, Any]], list[SizeLimit]], None] | None = None,
              on_candidate: CandidateCallback | None = None) -> TunedConfig:
    with tempfile.TemporaryDirectory(prefix="inferlab-tune-") as temporary:
        scratch = Path(settings.work_dir or temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        return _sweep(settings, scratch, on_plan, on_candidate)


def _sweep(settings: TuneSettings, scratch: Path, on_plan, on_candidate) -> TunedConfig:
    started = time.monotonic()
    source = Path(settings.sample)
    suffix = source.suffix or ".jsonl"
    sample = scratch / f"sample{suffix}"
    rows = cut_sample(source, sample, settings.sample_rows or DEFAULT_SAMPLE_ROWS[settings.workload])
    kind = device_kind(settings.device)
    requests = rows * (settings.num_conformers if settings.workload == "conformers" else 1)  # rows run at once
    job = TuneJob(settings.model, sample, scratch, settings.device, settings.dtype, settings.backend,
                  settings.max_new_tokens, settings.num_conformers, settings.profile, settings.min_seconds,
                  settings.passes, gpu_memory_fraction=settings.gpu_memory_fraction,
                  memory_budget_bytes=settings.memory_budget_bytes)
    limits: list[SizeLimit] = []
    descent = None  # the engine's own grid only (descent.py)
    if uses_engine(settings):
        job = replace(job, max_seq_len=settings.max_seq_len or _row_length(settings, sample))
        limits = [size_limit(job.engine_config(), kv, requests)
                  for kv in engine_kv_dtypes(settings.device, settings.kv_dtypes)]
        candidates = engine_candidates(settings.workload, kind, limits, settings.sizes)
        if settings.sizes is None:
            candidates = largest_first(candidates)
            descent = Descent(RUNNERS[settings.workload].metric)
    else:
        candidates = fixed_candidates(settings.workload, kind, requests, settings.sizes)
        if settings.workload == "classify" and settings.dtype != "auto":
            candidates = [dict(c, dtype=settings.dtype) for c in candidates if c["dtype"] == candidates[0]["dtype"]]
    if on_plan is not None:
        on_plan(candidates, limits)
    store = MeasuredStore(Path(settings.work_dir) if settings.work_dir else None,
                          fingerprint(settings.figure_settings(), sample))
    runner = RUNNERS[settings.workload](job)
    measured: list[dict[str, Any]] = []
    longest, measured_now = 0.0, 0  # wall seconds of the longest candidate measured by this run; how many
    try:
        for index, candidate in enumerate(candidates):
            skipped = descent.skip_reason(candidate) if descent is not None and not candidate.get(
                "forced_run_tokens") else None
            if skipped is not None:
                measured.append({"settings": candidate, "skipped": skipped})
                if on_candidate is not None:
                    on_candidate(index, candidate, skipped, False)
                continue
            earlier = store.get(candidate)
            if earlier is None:
                elapsed = time.monotonic() - started
                if settings.budget_s is not None and measured_now and elapsed + longest > settings.budget_s:
                    raise TuneIncomplete(len(measured), len(candidates), str(settings.work_dir))  # >= 1 per run
                t0 = time.monotonic()
                outcome = _measure(runner, candidate, index)
                longest, measured_now = max(longest, time.monotonic() - t0), measured_now + 1
                entry = {"settings": candidate,
                         **({"error": outcome} if isinstance(outcome, str) else {"figures": outcome})}
                store.add(entry)
            else:
                entry = earlier
            if descent is not None and not candidate.get("forced_run_tokens"):
                descent.saw(candidate, entry.get("figures"))
            measured.append(entry)
            if on_candidate is not None:
                on_candidate(index, candidate, entry.get("figures", entry.get("error")), earlier is not None)
            follow_up = _forced_runs_after(settings, candidates, index, measured, runner.metric)
            if follow_up is not None:
                candidates.insert(index + 1, follow_up)  # measured next (the callbacks see its index)
    finally:
        runner.close()
    return _choose(settings, runner.metric, measured, rows, kind, limits, job.max_seq_len)


def _forced_runs_after(settings: TuneSettings, candidates: list[dict[str, Any]], index: int,
                       measured: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """After the last candidate of a KV dtype's group (conformers, one token per step): the forced-runs
    candidate at that group's best size (candidates.forced_runs_at), where the settings try one."""
    candidate = candidates[index]
    if settings.workload != "conformers" or not settings.forced_run_tokens or candidate.get("forced_run_tokens") != 0:
        return None
    following = candidates[index + 1] if index + 1 < len(candidates) else None
    if following is not None and following.get("kv_dtype") == candidate.get("kv_dtype"):
        return None
    return forced_runs_at(measured, candidate["kv_dtype"], metric, settings.forced_run_tokens)


def _row_length(settings: TuneSettings, sample: Path) -> int:
    from inferlab.workloads.tune.row_lengths import conformers_row_length, generate_row_length

    if settings.workload == "conformers":
        return conformers_row_length(sample, settings.model, settings.profile, settings.num_conformers)
    return generate_row_length(sample, settings.model, settings.max_new_tokens)


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


def _choose(settings: TuneSettings, metric: str, measured: list[dict[str, Any]], rows: int, kind: str,
            limits: list[SizeLimit], max_seq_len: int | None) -> TunedConfig:
    from inferlab.environment import capture_environment

    ran = [m for m in measured if (m.get("figures") or {}).get(metric)]
    if not ran:
        problems = "; ".join(f"{m['settings']}: {_why_no_figure(m, metric)}" for m in measured)
        raise CapacityError(f"no candidate produced {metric} ({problems}); check the sample and the model")
    candidates = [Candidate(m["settings"], m["figures"][metric], m["figures"].get("spread"), m["figures"]["passes"])
                  for m in ran]
    best, verdicts = decide(candidates, TUNABLE[settings.workload])
    ranked = sorted(candidates, key=lambda c: c.figure, reverse=True)
    environment = {**capture_environment(), "device_kind": kind, "device": settings.device}
    sample = {"path": str(Path(settings.sample).resolve()), "rows": rows, "max_new_tokens": settings.max_new_tokens,
              "num_conformers": settings.num_conformers, "profile": settings.profile, "backend": settings.backend,
              "dtype": settings.dtype, "min_seconds": settings.min_seconds, "passes": settings.passes,
              "max_seq_len": max_seq_len}
    return TunedConfig(workload=settings.workload, model=str(Path(settings.model).resolve()),
                       model_identity=checkpoint_identity(settings.model), metric=metric,
                       recommended={v.knob: v.value for v in verdicts if v.clear}, best=dict(best.settings),
                       verdicts=[v.as_dict() for v in verdicts], candidates=measured,
                       runner_up_margin=round(margin(ranked[0].figure, ranked[1].figure), 4) if ranked[1:] else None,
                       grid=[limit.as_dict() for limit in limits], sample=sample, environment=environment)
