"""The child side of the launcher: `python -m inferlab.bench.cell_main SPEC.json OUTCOME.json`.

Reads one cell spec, runs its scenario, and writes an Outcome (status, message, metrics, warnings) as
JSON, atomically. A Python exception, or a result that is not a mapping of metric names, becomes an
`error` outcome (or `unavailable` for UnsupportedError
and torch's "No available kernel"); a hang or a crash leaves no outcome file and the launcher records
it. Tracebacks go to stderr, which the launcher keeps as the cell's log. The cell leads its own session:
when the launcher's process dies, however, the cell kills that whole session (child_processes.py), so
nothing of it runs on beside a relaunched sweep.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.plugins import load_plugin_files
from inferlab.bench.rows import UNAVAILABLE_MARKERS, Outcome
from inferlab.child_processes import die_with_parent_from_environment
from inferlab.errors import UnsupportedError

log = logging.getLogger("inferlab.bench.cell")


def classify_exception(exc: BaseException) -> Outcome:
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, UnsupportedError) or any(m in str(exc) for m in UNAVAILABLE_MARKERS):
        return Outcome("unavailable", text)
    if "out of memory" in str(exc).lower():
        return Outcome("error", f"out of memory: {text}")
    return Outcome("error", text)


def execute(spec: dict[str, Any], outcome_path: Path | None = None) -> Outcome:
    from inferlab.bench.scenarios import CellContext, get_scenario

    load_plugin_files(spec.get("plugins", []))
    cell = Cell.from_json(spec["cell"])
    scenario = get_scenario(cell.scenario)
    model_path = spec.get("model_path")
    ctx = CellContext(run_dir=Path(spec["run_dir"]), model_path=Path(model_path) if model_path else None,
                      cache_dir=Path(spec["cache_dir"]), outcome_path=outcome_path)
    try:
        if cell.config.get("cpu_threads"):
            import torch

            torch.set_num_threads(cell.config["cpu_threads"])
        metrics = scenario.run(cell, ctx)
    except Exception as exc:  # every failure is a row, never a dead sweep
        traceback.print_exc(file=sys.stderr)
        outcome = classify_exception(exc)
        outcome.warnings.extend(ctx.warnings)
        return outcome
    if not isinstance(metrics, dict) or not all(isinstance(k, str) for k in metrics):
        return Outcome("error", f"scenario {cell.scenario!r} returned a {type(metrics).__name__}, not a mapping of "
                                "metric names to values; a scenario's run() returns a dict", {}, list(ctx.warnings))
    return Outcome("ok", "", metrics, list(ctx.warnings))


def json_safe(value: Any) -> Any:
    """NaN and infinities become None (JSON has no spelling for them); tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_safe(data), allow_nan=False, default=str))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    die_with_parent_from_environment(kill_group=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    spec_path, outcome_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text())
    outcome = execute(spec, outcome_path)
    write_atomically(outcome_path, outcome.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
