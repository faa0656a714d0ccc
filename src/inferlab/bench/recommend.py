"""`inferlab recommend RUN...`: the seeds' "TL;DR" table derived from measured rows only: for each
(GPU, scenario, model, workload such as the batch size), the best configuration, its figure and spread, the
runner-up, the margin between them, and which knobs of the best are clear winners.

The rule is `inferlab tune`'s (workloads/winner.py): a configuration's spread is the relative range of its
repeats, and the best one's value of a knob is named only when it beats the best configuration with another
value of that knob by more than the larger of the two spreads (or, with no spread measured, by more than
any run-to-run variation could: winner.LEAD_BEYOND_ANY_SPREAD). A configuration's repeats are its rows in
the runs given, when there are at least MIN_REPEATS of them (the same cell of a preset run three times),
else the timed calls of its row (row_spread: the figure `inferlab report` shows too). Rows with a knob at a
baseline value (Knob.baseline: the seeds' Python logits processor, the constraint switched off, vLLM in
eager mode) are references, never recommendations: they are left out here, and so are the rows of a
scenario that does not compare serving choices (Scenario.recommendable: conformer-quality).

The text output is one block per recommendation, wrapped to TEXT_WIDTH columns; `--markdown` (and the
report's "Recommendations" section) is the whole table.
"""

from __future__ import annotations

import json
import statistics
import textwrap
from dataclasses import dataclass
from typing import Any

from inferlab.bench.markdown import md_table, sig
from inferlab.bench.results import (config_label, gpu_of, group_rows, headline, label_knobs, row_spread,
                                    workload_key)
from inferlab.workloads.winner import MIN_REPEATS, Candidate, decide, margin

TEXT_WIDTH = 100  # a terminal's columns the text output fits in


@dataclass(frozen=True)
class Recommendation:
    gpu: str
    scenario: str
    model: str
    workload: str  # e.g. "batch_size=16"
    best: str
    best_value: float
    metric: str
    spread: float | None  # the best configuration's (relative range of its repeats)
    runner_up: str | None
    margin: float | None  # how much better the best is than the runner-up (0.05 = 5%)
    recommended: str  # the knobs the rule names ("-": none)
    verdict: str  # per knob: named past the spread, or why not; "only one configuration"


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


def _candidate(cell_rows: list[dict[str, Any]], knobs: list[str]) -> Candidate:
    """One configuration from its rows in the runs given: their figures as repeats when there are enough of
    them, else the timed calls of its row (several rows, too few to be repeats: their median figure, and the
    larger of their own spreads)."""
    settings = _settings(cell_rows[0], knobs)
    figures = [headline(r) for r in cell_rows]
    if len(cell_rows) >= MIN_REPEATS:
        return Candidate.from_repeats(settings, figures)  # type: ignore[arg-type]
    spreads = [row_spread(r) for r in cell_rows]
    measured = [spread for spread, _ in spreads if spread is not None]
    spread = max(measured) if len(measured) == len(spreads) else None
    repeats = min(n for _, n in spreads) if spread is not None else max(len(cell_rows), max(n for _, n in spreads))
    return Candidate(settings, statistics.median(figures), spread, repeats)  # type: ignore[arg-type]


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
        cells = list(group_rows(group, lambda r: r.get("cell_key") or id(r)).values())  # a cell's rows across runs
        pairs = [(cell[0], _candidate(cell, knobs)) for cell in cells]
        best, verdicts = decide([c for _, c in pairs], knobs, higher)
        best_row = next(r for r, c in pairs if c is best)
        ranked = sorted(pairs, key=lambda pair: pair[1].figure, reverse=higher)
        second = next((pair for pair in ranked if pair[1] is not best), None)
        out.append(Recommendation(
            gpu, scenario, model, workload, config_label(best_row, knobs), best.figure,
            best_row.get("headline_metric", ""), best.spread,
            config_label(second[0], knobs) if second is not None else None,
            margin(best.figure, second[1].figure, higher) if second is not None else None,
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


def format_text(recs: list[Recommendation], width: int = TEXT_WIDTH) -> str:
    """One block per recommendation, every line wrapped to `width` columns (the whole table: format_markdown)."""
    if not recs:
        return "no ok rows to recommend from"
    blocks = []
    for r in recs:
        lines = [f"{r.gpu} · {r.scenario} · {r.model} · {r.workload}"]
        fields = [("best", f"{r.best}: {sig(r.best_value, 4)} {r.metric} (spread {_pct(r.spread)})"),
                  ("runner-up", "-" if r.runner_up is None else f"{r.runner_up}, {_pct(r.margin)} behind"),
                  ("recommended", r.recommended), ("verdict", r.verdict)]
        for name, text in fields:
            lines += textwrap.wrap(text, width, initial_indent=f"  {name + ':':<13}", subsequent_indent=" " * 15,
                                   break_on_hyphens=False)
        blocks.append("\n".join(lines))
    note = ("Repeats: a configuration's rows in the runs given (the same preset run three times: recommend RUN_1 "
            "RUN_2 RUN_3) or, with fewer, its row's timed calls. The whole table: inferlab recommend --markdown.")
    return "\n\n".join([*blocks, textwrap.fill(note, width)])


def format_markdown(recs: list[Recommendation]) -> str:
    return md_table(*_table(recs)) if recs else "no ok rows to recommend from"
