"""`inferlab recommend RUN...`: the seeds' "TL;DR" table derived from measured rows only: for each
(GPU, scenario, model, workload such as the batch size), the best configuration, its figure, the
runner-up and the margin between them. A margin within the measured spread (IQR/median of the timed
calls) of either row is called a tie; with a single timed call (or a scenario that measures no spread) it
is unknown and said so."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inferlab.bench.markdown import md_table, sig, text_table
from inferlab.bench.results import config_label, gpu_of, group_rows, headline, label_knobs, workload_key


@dataclass(frozen=True)
class Recommendation:
    gpu: str
    scenario: str
    model: str
    workload: str  # e.g. "batch_size=16"
    best: str
    best_value: float
    metric: str
    runner_up: str | None
    margin: float | None  # how much better the best is than the runner-up (0.05 = 5%)
    verdict: str  # "clear", "tie (within spread)", "spread unknown", "only one configuration"


def _spread(row: dict[str, Any]) -> float | None:
    value = row.get("metrics", {}).get("spread")
    return float(value) if isinstance(value, (int, float)) else None


def _workload_text(row: dict[str, Any], same_scenario: list[dict[str, Any]]) -> str:
    """The workload knobs that tell this group apart from the scenario's others (batch size always)."""
    wl = json.loads(workload_key(row))
    shown = [k for k in wl if k == "batch_size"
             or len({json.dumps(r.get("config", {}).get(k)) for r in same_scenario}) > 1]
    return ", ".join(f"{k}={wl[k]}" for k in shown) or "-"


def recommend(rows: list[dict[str, Any]]) -> list[Recommendation]:
    ok = [r for r in rows if headline(r) is not None]
    out: list[Recommendation] = []
    buckets = group_rows(ok, lambda r: (gpu_of(r), r.get("scenario"), r.get("model") or "-"))
    knobs_of = {key: label_knobs(rows) for key, rows in buckets.items()}  # labels consistent across workloads
    for (gpu, scenario, model, _), group in group_rows(
            ok, lambda r: (gpu_of(r), r.get("scenario"), r.get("model") or "-", workload_key(r))).items():
        higher = group[0].get("higher_is_better", True)
        ranked = sorted(group, key=lambda r: headline(r), reverse=higher)  # type: ignore[arg-type, return-value]
        knobs = knobs_of[(gpu, scenario, model)]
        workload = _workload_text(group[0], [r for r in ok if r.get("scenario") == scenario])
        best = ranked[0]
        if len(ranked) == 1:
            out.append(Recommendation(gpu, scenario, model, workload, config_label(best, knobs), headline(best),
                                      best.get("headline_metric", ""), None, None, "only one configuration"))
            continue
        second = ranked[1]
        vb, vs = headline(best), headline(second)
        margin = (vb / vs - 1) if higher else (vs / vb - 1)  # type: ignore[operator]
        spreads = [s for s in (_spread(best), _spread(second)) if s is not None]
        if len(spreads) < 2:
            verdict = "spread unknown (one timed call, or no spread measured)"
        elif margin <= max(spreads):
            verdict = "tie (within spread)"
        else:
            verdict = "clear"
        out.append(Recommendation(gpu, scenario, model, workload, config_label(best, knobs), vb,
                                  best.get("headline_metric", ""), config_label(second, knobs), margin, verdict))
    return out


def _table(recs: list[Recommendation]) -> tuple[list[str], list[list[str]]]:
    headers = ["GPU", "scenario", "model", "workload", "best configuration", "figure", "runner-up", "margin", "verdict"]
    rows = [[r.gpu, r.scenario, r.model, r.workload, r.best, f"{sig(r.best_value, 4)} {r.metric}", r.runner_up or "-",
             f"{r.margin * 100:.1f}%" if r.margin is not None else "-", r.verdict] for r in recs]
    return headers, rows


def format_text(recs: list[Recommendation]) -> str:
    return text_table(*_table(recs)) if recs else "no ok rows to recommend from"


def format_markdown(recs: list[Recommendation]) -> str:
    return md_table(*_table(recs)) if recs else "no ok rows to recommend from"
