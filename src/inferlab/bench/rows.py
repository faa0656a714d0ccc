"""Result rows: the one place a row is assembled, with the shared field names of BENCHMARKING.md
(run_id, scenario, backend, model, batch_size, status, message, config, env, metrics) plus the lab's own
(cell_key, headline_metric, higher_is_better, workload_knobs, timeout_s, wall_s, started_at, warnings,
gpu_idle, log).

The child process reports an Outcome (status, message, metrics, warnings); the launcher adds what only
it knows (timeouts, crashes, wall time, the GPU-idle check) and writes the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.results import row_shape_problem
from inferlab.bench.scenarios import SCENARIOS

STATUSES = ("ok", "error", "timeout", "unavailable", "skipped")
FINISHED_STATUSES = ("ok", "error", "timeout", "unavailable")  # a resumed run does not repeat these
# torch's words for "no SDPA kernel accepts these inputs" (older and newer releases): status unavailable.
UNAVAILABLE_MARKERS = ("No available kernel", "No viable backend")


@dataclass
class Outcome:
    status: str
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.status in STATUSES, self.status

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "metrics": self.metrics, "warnings": self.warnings}

    @classmethod
    def from_json(cls, data: Any) -> "Outcome":
        """The outcome a cell wrote; anything that is not one (a cell's own code may write the file) is an
        `error` outcome saying so."""
        problem = row_shape_problem(data, ("status", "message", "metrics", "warnings"))
        if problem is None and data["status"] not in STATUSES:
            problem = f"its status {data['status']!r} is not one of {', '.join(STATUSES)}"
        if problem is not None:
            return cls("error", f"the cell's outcome file is unusable ({problem}); the cell's code wrote something "
                                "else there")
        return cls(status=data["status"], message=data.get("message", ""), metrics=data.get("metrics", {}),
                   warnings=list(data.get("warnings", [])))


def make_row(cell: Cell, outcome: Outcome, *, run_id: str, env: dict[str, Any], started_at: str | None = None,
             wall_s: float | None = None, gpu_idle: dict[str, Any] | None = None, log: str | None = None,
             extra_warnings: list[str] | None = None) -> dict[str, Any]:
    scenario = SCENARIOS.get(cell.scenario)
    return {
        "run_id": run_id,
        "cell_key": cell.key,
        "scenario": cell.scenario,
        "backend": scenario.row_backend(cell) if scenario else cell.backend,
        "model": cell.model,
        "batch_size": cell.batch_size,
        "status": outcome.status,
        "message": outcome.message,
        "config": dict(cell.config),
        "env": env,
        "metrics": outcome.metrics,
        "headline_metric": scenario.headline_metric if scenario else None,
        "higher_is_better": scenario.higher_is_better if scenario else True,
        "workload_knobs": list(scenario.workload_knobs) if scenario else ["batch_size"],
        "timeout_s": cell.timeout_s,
        "started_at": started_at,
        "wall_s": wall_s,
        "warnings": list(outcome.warnings) + list(extra_warnings or []),
        "gpu_idle": gpu_idle,
        "log": log,
    }
