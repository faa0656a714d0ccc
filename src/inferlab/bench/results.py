"""Reading result rows back: from run directories or JSONL files, the latest row per cell, and the
helpers reports share (a row's headline value, the knobs that vary within a group). No torch here."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable

from inferlab.errors import InputError
from inferlab.workloads.winner import MIN_REPEATS

RESULTS_FILE = "results.jsonl"
log = logging.getLogger(__name__)


def results_path(run: str | Path) -> Path:
    """A run directory's results.jsonl, or the path itself when it is a .jsonl file."""
    p = Path(run)
    if p.is_dir():
        return p / RESULTS_FILE
    return p


def load_rows(runs: Iterable[str | Path], latest_only: bool = True) -> list[dict[str, Any]]:
    """All rows of the given runs; within one file only the last row of each cell (a resumed run appends
    a new row for a cell that was skipped or retried). A torn last line is ignored. A run directory with no
    rows yet (a run stopped before its first cell ended) is passed over with a warning when another run
    has rows, as `runs/*` names every run."""
    runs = list(runs)
    missing = [run for run in runs if not results_path(run).is_file()]
    if missing and (len(missing) == len(runs) or not all(Path(run).is_dir() for run in missing)):
        raise InputError(f"{missing[0]}: no {RESULTS_FILE} there; pass a run directory written by `inferlab bench` "
                         "or a .jsonl file")
    for run in missing:
        log.warning("%s: no %s yet (no cell of that run has ended); left out", run, RESULTS_FILE)
    rows: list[dict[str, Any]] = []
    for run in runs:
        path = results_path(run)
        if run in missing:
            continue
        file_rows = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():  # a bad byte spoils one line
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and isinstance(row.get("scenario"), str):
                row = readable_row(row)
                row.setdefault("_source", str(path))
                file_rows.append(row)
        rows.extend(latest_per_cell(file_rows) if latest_only else file_rows)
    return rows


# The types a row's fields must have for the reports to read it (a field may also be missing).
FIELD_TYPES = {"status": str, "message": str, "metrics": dict, "warnings": list, "config": dict, "env": dict,
               "scenario": str, "cell_key": str}


def row_shape_problem(data: Any, fields: tuple[str, ...]) -> str | None:
    """Why `data` is not a row (or a cell's outcome) with `fields` of the right types, or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    wrong = [f"{name} is a {type(data[name]).__name__}" for name in fields
             if name in data and not isinstance(data[name], FIELD_TYPES[name])]
    if "status" in fields and "status" not in data:
        wrong.insert(0, "it has no status")
    return "; ".join(wrong) or None


def readable_row(row: dict[str, Any]) -> dict[str, Any]:
    """`row` as the reports read it: a row whose fields have other types (a cell that returned a list as its
    metrics, written by an older lab) becomes an error row saying so, its knobs and environment kept where
    they are readable."""
    problem = row_shape_problem(row, tuple(FIELD_TYPES))
    if problem is None:
        return row
    fixed = {k: v for k, v in row.items() if k not in FIELD_TYPES or isinstance(v, FIELD_TYPES[k])}
    fixed.update(status="error", metrics={}, message=f"an unreadable row ({problem}); rerun the cell",
                 config=fixed.get("config", {}), env=fixed.get("env", {}), warnings=fixed.get("warnings", []))
    return fixed


def latest_per_cell(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the last row of each cell_key, in first-seen order of the keys."""
    order: list[str] = []
    last: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows):
        key = row.get("cell_key") or f"row-{i}"
        if key not in last:
            order.append(key)
        last[key] = row
    return [last[k] for k in order]


def headline(row: dict[str, Any]) -> float | None:
    """The row's ranking figure (its `headline_metric`), or None when it did not run ok."""
    if row.get("status") != "ok":
        return None
    value = row.get("metrics", {}).get(row.get("headline_metric") or "output_tokens_per_s")
    return float(value) if isinstance(value, (int, float)) else None


def gpu_of(row: dict[str, Any]) -> str:
    env = row.get("env") or {}
    return env.get("gpu") or f"cpu ({env.get('cpu', 'unknown')})"


# Knobs that shape how long a cell measures, not what it measures: never part of a configuration label.
PROTOCOL_KNOBS = frozenset({"warmup", "min_repeats", "min_duration_s", "seed", "profile_kernels", "device", "tokenizer"})


def field_value(row: dict[str, Any], name: str) -> Any:
    """A knob of the row's config, or its backend (which is a row field, not a knob)."""
    if name == "backend":
        return row.get("backend")
    return row.get("config", {}).get(name)


def varying_knobs(rows: list[dict[str, Any]], exclude: Iterable[str] = ()) -> list[str]:
    """`backend` and the config knobs whose values differ across `rows` (first-seen order): what tells
    the rows of one table apart."""
    skip = set(exclude) | PROTOCOL_KNOBS
    names: list[str] = ["backend"]
    for row in rows:
        for name in row.get("config", {}):
            if name not in names:
                names.append(name)
    varying = []
    for name in names:
        if name in skip:
            continue
        values = {json.dumps(field_value(r, name), sort_keys=True) for r in rows}
        if len(values) > 1:
            varying.append(name)
    return varying


def label_knobs(rows: list[dict[str, Any]]) -> list[str]:
    """What tells configurations apart in a table whose workload (batch size, shape) has its own column:
    the varying knobs minus the workload knobs, and minus any knob that only restates the backend."""
    workload = set(rows[0].get("workload_knobs") or ["batch_size"]) | {"num_prompts"} if rows else set()
    knobs = varying_knobs(rows, exclude=workload)
    if "backend" in knobs:
        def partition(name: str) -> set[frozenset[int]]:
            groups: dict[str, set[int]] = {}
            for i, r in enumerate(rows):
                groups.setdefault(json.dumps(field_value(r, name), sort_keys=True), set()).add(i)
            return {frozenset(g) for g in groups.values()}

        knobs = [k for k in knobs if k == "backend" or partition(k) != partition("backend")]
    return knobs


def config_label(row: dict[str, Any], knobs: list[str]) -> str:
    """`knob=value, ...` of `knobs`, leaving out those the row does not have (another backend's knobs)."""
    parts = [f"{k}={format_value(field_value(row, k))}" for k in knobs if field_value(row, k) is not None]
    return ", ".join(parts) if parts else (row.get("backend") or row.get("scenario") or "default")


def format_value(value: Any) -> str:
    """A knob value as reports print it (booleans as on/off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def workload_key(row: dict[str, Any]) -> str:
    """Rows with equal workload knobs ask for the same work and may be ranked against each other."""
    knobs = row.get("workload_knobs") or ["batch_size"]
    return json.dumps({k: row.get("config", {}).get(k) for k in knobs}, sort_keys=True)


def group_rows(rows: list[dict[str, Any]], key: Any) -> dict[Any, list[dict[str, Any]]]:
    """Rows by key(row), keys in first-seen order."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def table_key(row: dict[str, Any]) -> tuple[str, str, str]:
    """One report table per (scenario, model, GPU)."""
    return (row.get("scenario", "?"), row.get("model") or "-", gpu_of(row))


def speedup(row: dict[str, Any], baseline: dict[str, Any] | None) -> float | None:
    """How many times better than the baseline (>1 is better), respecting higher_is_better."""
    value, base = headline(row), headline(baseline) if baseline else None
    if value is None or base is None or value == 0 or base == 0:
        return None
    return value / base if row.get("higher_is_better", True) else base / value


# metrics dicts (timing.Stats.to_dict) holding a row's timed calls, in the order they are looked for
CALL_STATS = ("call_s_stats", "ms_per_iter_stats")


def row_spread(row: dict[str, Any]) -> tuple[float | None, int]:
    """(the spread of the row's headline over its timed calls, the number of calls): their relative range
    (workloads/winner.py), None below MIN_REPEATS calls. The calls are timed in seconds: for a rate (higher is
    better) the range of work/seconds is median/min - median/max. What `report` and `recommend` both show."""
    metrics = row.get("metrics") or {}
    stats = next((metrics[k] for k in CALL_STATS if isinstance(metrics.get(k), dict)), None)
    if stats is None:
        calls = metrics.get("steady_calls")
        return None, calls if isinstance(calls, int) else 0
    n, low, high, median = stats.get("n", 0), stats.get("min"), stats.get("max"), stats.get("median")
    if n < MIN_REPEATS or not low or not high or not median:
        return None, n
    if row.get("higher_is_better", True):
        return median / low - median / high, n
    return (high - low) / median, n


def best_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if headline(r) is not None]
    if not ok:
        return None
    sign = 1 if ok[0].get("higher_is_better", True) else -1
    return max(ok, key=lambda r: sign * headline(r))  # type: ignore[operator]
