"""What a scenario is: its knobs, its checks on combinations, and the function that measures one cell
in the child process. Scenario modules keep heavy imports (torch, transformers) inside `run`, so a plan
can be validated in a light parent process."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, knob_table
from inferlab.types import Result


@dataclass(frozen=True)
class CellContext:
    """What the child process knows besides the cell: where things live."""

    run_dir: Path
    model_path: Path | None  # the checkpoint directory (a preset is built into the run's cache first)
    cache_dir: Path  # per-run cache shared by cells (e.g. the measured device bandwidth)
    warnings: list[str] = field(default_factory=list)  # run() appends findings the row should carry
    outcome_path: Path | None = None  # where the child writes its outcome (save_partial writes there early)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def add_backend_metrics(self, metrics: dict[str, Any], backend: Any) -> None:
        """The backend's extra_metrics() into `metrics` (the scenario's own figures win); its "warnings"
        become the row's warnings."""
        extra = backend.extra_metrics()
        for warning in extra.pop("warnings", []):
            self.warn(warning)
        for key, value in extra.items():
            metrics.setdefault(key, value)

    def save_partial(self, metrics: dict[str, Any], pending: str) -> None:
        """Record the figures measured so far before an optional step that could crash the process
        (e.g. a profiler over CUDA graphs): if the process dies, the row keeps them, with a warning.
        The final outcome overwrites this one."""
        if self.outcome_path is None:
            return
        data = {"status": "ok", "message": "", "metrics": metrics,
                "warnings": [*self.warnings, f"partial result: the cell process ended during: {pending}"]}
        tmp = self.outcome_path.with_name(self.outcome_path.name + ".partial")
        tmp.write_text(json.dumps(data, default=str))
        os.replace(tmp, self.outcome_path)


def completed(results: Iterable[Result]) -> list[Result]:
    """Every Result of a backend call; an error Result means the cell's requests are broken: RuntimeError."""
    results = list(results)
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(results)} requests failed, e.g. {failed[0].id}: {failed[0].error}")
    return results


def _no_checks(cell: Cell) -> None:
    return None


def _unchanged(config: dict[str, Any]) -> dict[str, Any]:
    return config


def _no_estimate(cell: Cell, accelerator: bool) -> float:
    return 10.0


def _nothing_missing(cell: Cell) -> str | None:
    return None


@dataclass(frozen=True)
class Scenario:
    """A kind of measurement. `run(cell, ctx) -> metrics` executes in the child and may raise: the child
    turns UnsupportedError and torch's "No available kernel" into status `unavailable`, anything else
    into `error`. A scenario module passes its name, description, KNOBS, run, validate and estimate_s
    positionally and only the fields that differ from the defaults by name."""

    name: str
    description: str
    knobs: tuple[Knob, ...]
    run: Callable[[Cell, CellContext], dict[str, Any]]
    validate: Callable[[Cell], None] = _no_checks  # impossible combinations -> ConfigError
    estimate_s: Callable[[Cell, bool], float] = _no_estimate  # rough seconds; bool: an accelerator is present
    resolve: Callable[[dict[str, Any]], dict[str, Any]] = _unchanged  # fill knobs whose default is None
    headline_metric: str = "output_tokens_per_s"  # what reports rank by
    higher_is_better: bool = True
    uses_backends: bool = False  # True: cells name a backend from backends.BACKENDS
    default_backend: str | None = None  # the backend of a sweep that names none (uses_backends only)
    uses_model: bool = True  # True: cells name a model (preset or directory)
    default_timeout_s: float = 600.0
    # Knobs that define the workload (what is being asked) rather than how it is served: reports rank
    # configurations against each other only among rows with equal workload knobs.
    workload_knobs: tuple[str, ...] = ("batch_size",)
    row_backend: Callable[[Cell], str | None] = field(default=lambda cell: cell.backend)  # the row's `backend`
    # Parent side, no torch: the reason this cell certainly cannot run here (a package that is not
    # installed), or None; the launcher then records `unavailable` without starting a process.
    precheck: Callable[[Cell], str | None] = _nothing_missing
    # False: the rows compare something other than serving choices (conformer quality), so `recommend` names
    # no best configuration from them
    recommendable: bool = True

    @property
    def knob_map(self) -> dict[str, Knob]:
        return knob_table(self.knobs)
