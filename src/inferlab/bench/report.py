"""`inferlab report`: result rows -> a Markdown report (one table per scenario x model x GPU, speedup
against a chosen baseline, the winner marked), PNG plots (plots.py) and, where seed-preset rows exist,
the "Do the seeds' findings hold?" section (report_findings.py), with peer rows (vLLM, transformers'
continuous batching, xgrammar), "The engine beside its peers" (report_peers.py), with conformer-quality
rows "Conformer quality" (report_quality.py; its model card table goes to quality-table.md beside the report),
with classify rows checked against transformers "Labels beside transformers'" (report_findings.py), and
"Recommendations", `inferlab recommend`'s whole table (recommend.py). Every number comes from the rows.

Speedup baseline: by default the first configuration of each workload (rows with equal workload knobs,
e.g. the same batch size); with `--baseline attn_implementation=eager`, for each row the row of the
same workload with that value that agrees with it on the most other knobs (e.g. the same KV cache).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from inferlab.bench import (plots, recommend, report_findings, report_peers, report_prefill, report_quality,
                            report_roofline)
from inferlab.bench.markdown import md_table
from inferlab.bench.report_columns import COLUMNS, DEFAULT_COLUMNS, TableContext
from inferlab.bench.results import best_row, field_value, format_value, group_rows, headline, table_key, workload_key
from inferlab.bench.results import label_knobs as results_label_knobs
from inferlab.errors import InputError


def parse_baseline(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    if "=" not in text:
        raise InputError(f"--baseline {text!r}: write it as knob=value, e.g. --baseline attn_implementation=eager")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def check_baseline(spec: tuple[str, str] | None, rows: list[dict[str, Any]]) -> None:
    """A baseline must name a knob of the rows and a value some row with a figure has (else no speedup
    could be computed: every row would say "-")."""
    if spec is None:
        return
    key, wanted = spec
    values = {format_value(field_value(r, key)) for r in rows if headline(r) is not None and field_value(r, key) is not None}
    if not values:
        knobs = sorted({k for r in rows for k in r.get("config", {})} | {"backend"})
        raise InputError(f"--baseline {key}={wanted}: no row has the knob {key!r}; the rows' knobs: {', '.join(knobs)}")
    if not any(_matches(field_value(r, key), wanted) for r in rows if headline(r) is not None):
        raise InputError(f"--baseline {key}={wanted}: no row with a figure has {key}={wanted}; its values: "
                         f"{', '.join(sorted(values))}")


def _matches(value: Any, wanted: str) -> bool:
    if isinstance(value, bool):
        return wanted.lower() in (("true", "on", "yes", "1") if value else ("false", "off", "no", "0"))
    return str(value).lower() == wanted.lower()


def choose_baselines(rows: list[dict[str, Any]], spec: tuple[str, str] | None, label_knobs: list[str]) -> dict[int, dict[str, Any] | None]:
    chosen: dict[int, dict[str, Any] | None] = {}
    for subset in group_rows(rows, workload_key).values():
        ok = [r for r in subset if headline(r) is not None]
        if spec is None:
            for r in subset:
                chosen[id(r)] = ok[0] if ok else None
            continue
        key, wanted = spec
        candidates = [r for r in ok if _matches(field_value(r, key), wanted)]
        others = [k for k in label_knobs if k != key]
        for r in subset:
            if not candidates:
                chosen[id(r)] = None
                continue
            chosen[id(r)] = max(candidates, key=lambda c: sum(field_value(c, k) == field_value(r, k) for k in others))
    return chosen


def render_table(rows: list[dict[str, Any]], spec: tuple[str, str] | None) -> str:
    scenario, model, gpu = table_key(rows[0])
    rows = [r for subset in group_rows(rows, workload_key).values() for r in subset]  # workloads together
    label_knobs = results_label_knobs(rows)
    winners = {id(b) for subset in group_rows(rows, workload_key).values() if (b := best_row(subset)) is not None and len(subset) > 1}
    ctx = TableContext(label_knobs, choose_baselines(rows, spec, label_knobs), winners)
    columns = COLUMNS.get(scenario, DEFAULT_COLUMNS)
    fixed = [k for k in rows[0].get("config", {})
             if k != "tokenizer" and all(r.get("config", {}).get(k) == rows[0]["config"][k] for r in rows)]
    fixed_text = ", ".join(f"{k}={format_value(rows[0]['config'][k])}" for k in fixed)
    if spec is None:
        base_text = "speedup: against the first configuration of each workload (same batch size/shape)"
    else:
        base_text = f"speedup: against {spec[0]}={spec[1]} in the same workload"
    metric = rows[0].get("headline_metric")
    better = "higher" if rows[0].get("higher_is_better", True) else "lower"
    parts = [f"### {scenario} · {model} · {gpu}", "",
             f"Ranked by `{metric}` ({better} is better); {base_text}. Fixed: {fixed_text or '-'}.", "",
             md_table([h for h, _ in columns], [[fn(r, ctx) for _, fn in columns] for r in rows])]
    return "\n".join(parts)


def _env_table(rows: list[dict[str, Any]]) -> str:
    fields = ("gpu", "driver", "cuda", "cudnn", "torch", "transformers", "triton", "flash_attn", "python", "commit")
    seen: list[tuple[str, ...]] = []
    for row in rows:
        env = row.get("env") or {}
        commit = env.get("commit")
        values = [str(env.get(f) if f != "commit" else (commit[:10] + ("+dirty" if env.get("dirty") else "")) if commit else "-")
                  for f in fields]
        values[0] = values[0] if env.get("gpu") else f"cpu: {env.get('cpu', '?')}"
        if tuple(values) not in seen:
            seen.append(tuple(values))
    return md_table(list(fields), [list(v) for v in seen])


def write_report(runs: list[str], rows: list[dict[str, Any]], out_dir: Path, baseline: str | None = None) -> Path:
    """Write report.md and plots/*.png into out_dir; return the Markdown path."""
    if not rows:
        raise InputError("no result rows in " + ", ".join(runs) + "; run `inferlab bench` first")
    spec = parse_baseline(baseline)
    check_baseline(spec, rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r.get("status", "?")] = statuses.get(r.get("status", "?"), 0) + 1
    lines = ["# inferlab lab report", "",
             f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from: "
             + ", ".join(f"`{r}`" for r in runs) + ".",
             f"{len(rows)} cells: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) + ".", "",
             "## Environment", "", _env_table(rows), ""]
    lines += report_findings.render_section(rows)
    lines += report_findings.render_label_section(rows)
    lines += report_peers.render_section(rows)
    lines += report_roofline.render_section(rows)
    lines += report_prefill.render_section(rows)
    lines += report_quality.render_section(rows)
    lines += ["## Results", ""]
    for group in group_rows(rows, table_key).values():
        lines += [render_table(group, spec), ""]
    recommendations = recommend.recommend(rows)
    if recommendations:
        lines += ["## Recommendations", "", "`inferlab recommend` over these rows (a knob is recommended only past "
                  "the measured spread: bench/recommend.py).", "", recommend.format_markdown(recommendations), ""]
    images = plots.write_plots(rows, out_dir / "plots")
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}](plots/{p.name})" for p in images]
        lines.append("")
    card = report_quality.model_card_table(rows)
    if card:
        (out_dir / report_quality.MODEL_CARD_FILE).write_text(card, encoding="utf-8")
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
