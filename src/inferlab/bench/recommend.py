"""`inferlab recommend RUN...`: the seeds' "TL;DR" table derived from measured rows only: for each
(GPU, scenario, model, workload such as the batch size), the best configuration, its figure and spread, the
runner-up, the margin between them, and which knobs of the best are clear winners.

The rule is `inferlab tune`'s (workloads/winner.py): a row's spread is the relative range of its timed
calls (>= 3 of them, else unknown), and the best row's value of a knob is named only when it beats the
best row with another value of that knob by more than the larger of the two spreads. Rows with a knob at a
baseline value (Knob.baseline: the seeds' Python logits processor, the constraint switched off, vLLM in
eager mode) are references, never recommendations: they are left out here, and so are the rows of a
scenario that does not compare serving choices (Scenario.recommendable: conformer-quality).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inferlab.bench.markdown import md_table, sig, text_table
from inferlab.bench.results import config_label, gpu_of, group_rows, headline, label_knobs, workload_key
from inferlab.workloads.winner import Candidate, MIN_REPEATS, decide, margin

# metrics dicts (timing.Stats.to_dict) holding a row's timed calls, in the order they are looked for
_CALL_STATS = ("call_s_stats", "ms_per_iter_stats")


@dataclass(frozen=True)
class Recommendation:
    gpu: str
    scenario: str
    model: str
    workload: str  # e.g. "batch_size=16"
    best: str
    best_value: float
    metric: str
    spread: float | None  # the best row's (relative range of its timed calls)
    runner_up: str | None
    margin: float | None  # how much better the best is than the runner-up (0.05 = 5%)
    recommended: str  # the knobs the rule names ("-": none)
    verdict: str  # per knob: named past the spread, or why not; "only one configuration"


def row_spread(row: dict[str, Any]) -> tuple[float | None, int]:
    """(relative range of the row's headline over its timed calls, number of calls). The calls are
    timed in seconds: for a rate (higher is better) the range of work/seconds is median/min - median/max."""
    metrics = row.get("metrics") or {}
    stats = next((metrics[k] for k in _CALL_STATS if isinstance(metrics.get(k), dict)), None)
    if stats is None:
        calls = metrics.get("steady_calls")
        return None, calls if isinstance(calls, int) else 0
    n, low, high, median = stats.get("n", 0), stats.get("min"), stats.get("max"), stats.get("median")
    if n < MIN_REPEATS or not low or not high or not median:
        return None, n
    if row.get("higher_is_better", True):
        return median / low - median / high, n
    return (high - low) / median, n


def baseline_values(row: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The baseline values of the knobs of the row's scenario and backend (empty for unknown ones)."""
    from inferlab.bench.backends import BACKENDS
    from inferlab.bench.scenarios import SCENARIOS

    knobs = []
    scenario = SCENARIOS.get(row.get("scenario", ""))
    if scenario is not None:
        knobs += list(scenario.knobs)
    backend = BACKENDS.get((row.get("scenario"), row.get("backend")))
    if backend is not None:
        knobs += list(backend.knobs)
    return {k.name: k.baseline for k in knobs if k.baseline}


def is_baseline(row: dict[str, Any]) -> bool:
    config = row.get("config") or {}
    return any(config.get(name) in values for name, values in baseline_values(row).items())


def _workload_text(row: dict[str, Any], same_scenario: list[dict[str, Any]]) -> str:
    """The workload knobs that tell this group apart from the scenario's others (batch size always)."""
    wl = json.loads(workload_key(row))
    shown = [k for k in wl if k == "batch_size"
             or len({json.dumps(r.get("config", {}).get(k)) for r in same_scenario}) > 1]
    return ", ".join(f"{k}={wl[k]}" for k in shown) or "-"


def _settings(row: dict[str, Any], knobs: list[str]) -> dict[str, Any]:
    return {k: row.get("backend") if k == "backend" else row.get("config", {}).get(k) for k in knobs}


def _telling_knobs(group: list[dict[str, Any]], knobs: list[str]) -> list[str]:
    """The knobs that tell the group's rows apart, in order, each only where it adds to the ones before: a
    knob whose value follows from the earlier kept knobs (one backend's own knobs, fixed for its rows and
    absent from the others', follow from `backend`) would repeat their verdict."""
    told: list[str] = []
    keys: list[tuple[str, ...]] = [() for _ in group]
    for knob in knobs:
        values = [json.dumps(_settings(r, [knob])[knob], sort_keys=True, default=str) for r in group]
        seen: dict[tuple[str, ...], str] = {}
        if any(seen.setdefault(key, value) != value for key, value in zip(keys, values)):
            told.append(knob)
            keys = [key + (value,) for key, value in zip(keys, values)]
    return told


def _recommendable(row: dict[str, Any]) -> bool:
    from inferlab.bench.scenarios import SCENARIOS

    scenario = SCENARIOS.get(row.get("scenario", ""))
    return scenario is None or scenario.recommendable


def recommend(rows: list[dict[str, Any]]) -> list[Recommendation]:
    ok = [r for r in rows if headline(r) is not None and not is_baseline(r) and _recommendable(r)]
    out: list[Recommendation] = []
    buckets = group_rows(ok, lambda r: (gpu_of(r), r.get("scenario"), r.get("model") or "-"))
    knobs_of = {key: label_knobs(rows) for key, rows in buckets.items()}  # labels consistent across workloads
    for (gpu, scenario, model, _), group in group_rows(
            ok, lambda r: (gpu_of(r), r.get("scenario"), r.get("model") or "-", workload_key(r))).items():
        higher = group[0].get("higher_is_better", True)
        knobs = _telling_knobs(group, knobs_of[(gpu, scenario, model)])
        workload = _workload_text(group[0], [r for r in ok if r.get("scenario") == scenario])
        pairs = [(r, Candidate(_settings(r, knobs), headline(r), *row_spread(r)))  # type: ignore[arg-type]
                 for r in group]
        best, verdicts = decide([c for _, c in pairs], knobs, higher)
        best_row = next(r for r, c in pairs if c is best)
        ranked = sorted(group, key=lambda r: headline(r), reverse=higher)  # type: ignore[arg-type, return-value]
        second = next((r for r in ranked if r is not best_row), None)
        out.append(Recommendation(
            gpu, scenario, model, workload, config_label(best_row, knobs), best.figure,
            best_row.get("headline_metric", ""), best.spread,
            config_label(second, knobs) if second is not None else None,
            margin(best.figure, headline(second), higher) if second is not None else None,  # type: ignore[arg-type]
            ", ".join(f"{v.knob}={v.value}" for v in verdicts if v.clear) or "-",
            "; ".join(v.describe() for v in verdicts) or "only one configuration"))
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _table(recs: list[Recommendation]) -> tuple[list[str], list[list[str]]]:
    headers = ["GPU", "scenario", "model", "workload", "best configuration", "figure", "spread", "runner-up", "margin",
               "recommended", "verdict"]
    rows = [[r.gpu, r.scenario, r.model, r.workload, r.best, f"{sig(r.best_value, 4)} {r.metric}", _pct(r.spread),
             r.runner_up or "-", _pct(r.margin), r.recommended, r.verdict] for r in recs]
    return headers, rows


def format_text(recs: list[Recommendation]) -> str:
    return text_table(*_table(recs)) if recs else "no ok rows to recommend from"


def format_markdown(recs: list[Recommendation]) -> str:
    return md_table(*_table(recs)) if recs else "no ok rows to recommend from"
