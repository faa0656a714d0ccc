"""What a scenario is: its knobs, its checks on combinations, and the function that measures one cell
in the child process. Scenario modules keep heavy imports (torch, transformers) inside `run`, so a plan
can be validated in a light parent process."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, knob_table


@dataclass(frozen=True)
class CellContext:
    """What the child process knows besides the cell: where things live."""

    run_dir: Path
    model_path: Path | None  # the checkpoint directory (a preset is built into the run's cache first)
    cache_dir: Path  # per-run cache shared by cells (e.g. the measured device bandwidth)
    warnings: list[str] = field(default_factory=list)  # run() appends findings the row should carry

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def _no_checks(cell: Cell) -> None:
    return None


def _unchanged(config: dict[str, Any]) -> dict[str, Any]:
    return config


def _no_estimate(cell: Cell, accelerator: bool) -> float:
    return 10.0


@dataclass(frozen=True)
class Scenario:
    """A kind of measurement. `run(cell, ctx) -> metrics` executes in the child and may raise: the child
    turns UnsupportedError and torch's "No available kernel" into status `unavailable`, anything else
    into `error`."""

    name: str
    description: str
    knobs: tuple[Knob, ...]
    run: Callable[[Cell, CellContext], dict[str, Any]]
    validate: Callable[[Cell], None] = _no_checks  # impossible combinations -> ConfigError
    resolve: Callable[[dict[str, Any]], dict[str, Any]] = _unchanged  # fill knobs whose default is None
    estimate_s: Callable[[Cell, bool], float] = _no_estimate  # rough seconds; bool: an accelerator is present
    headline_metric: str = "output_tokens_per_s"  # what reports rank by
    higher_is_better: bool = True
    uses_backends: bool = False  # True: cells name a backend from backends.BACKENDS
    uses_model: bool = True  # True: cells name a model (preset or directory)
    default_timeout_s: float = 600.0
    # Knobs that define the workload (what is being asked) rather than how it is served: reports rank
    # configurations against each other only among rows with equal workload knobs.
    workload_knobs: tuple[str, ...] = ("batch_size",)
    row_backend: Callable[[Cell], str | None] = field(default=lambda cell: cell.backend)  # the row's `backend`

    @property
    def knob_map(self) -> dict[str, Knob]:
        return knob_table(self.knobs)
