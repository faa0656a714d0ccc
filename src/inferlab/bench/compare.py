"""`inferlab compare RUN_A RUN_B`: cells matched by their key (the same scenario, backend, model and
knobs), headline figures side by side with absolute and relative deltas, status changes, and the cells
present in only one run. Works from rows only. A cell is named by the knobs that vary among the cells; the
text fits TEXT_WIDTH columns (a table where it fits, else a block per cell, wrapped); `markdown=True` is
the whole table."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from inferlab.bench.markdown import md_table, num, sig, text_table
from inferlab.bench.results import config_label, group_rows, headline, varying_knobs

TEXT_WIDTH = 100
HEADERS = ["cell", "metric", "A", "B", "B-A", "B-A %", ""]


@dataclass
class Comparison:
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    only_a: list[dict[str, Any]] = field(default_factory=list)
    only_b: list[dict[str, Any]] = field(default_factory=list)


def compare_rows(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> Comparison:
    by_key_b = {r.get("cell_key"): r for r in rows_b}
    keys_a = {r.get("cell_key") for r in rows_a}
    result = Comparison()
    for row in rows_a:
        match = by_key_b.get(row.get("cell_key"))
        if match is None:
            result.only_a.append(row)
        else:
            result.pairs.append((row, match))
    result.only_b = [r for r in rows_b if r.get("cell_key") not in keys_a]
    return result


def delta(a: dict[str, Any], b: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """(B - A, (B - A) / A, 'better'/'worse'/'') on the headline metric."""
    va, vb = headline(a), headline(b)
    if va is None or vb is None:
        return None, None, ""
    d = vb - va
    rel = d / va if va else None
    higher = a.get("higher_is_better", True)
    verdict = "" if d == 0 else ("better" if (d > 0) == higher else "worse")
    return d, rel, verdict


def _describe(row: dict[str, Any], knobs: dict[str, list[str]]) -> str:
    label = config_label(row, knobs.get(row.get("scenario", ""), []))
    return " ".join(p for p in (row.get("scenario"), row.get("model") or "", label) if p)


def format_comparison(cmp: Comparison, name_a: str, name_b: str, markdown: bool = False,
                      width: int = TEXT_WIDTH) -> str:
    everything = [r for pair in cmp.pairs for r in pair] + cmp.only_a + cmp.only_b
    knobs = {scenario: varying_knobs(rows) for scenario, rows in group_rows(everything, lambda r: r.get("scenario", "")).items()}
    table = []
    for a, b in cmp.pairs:
        d, rel, verdict = delta(a, b)
        value_a = _figure(headline(a)) if headline(a) is not None else a.get("status")
        value_b = _figure(headline(b)) if headline(b) is not None else b.get("status")
        table.append([_describe(a, knobs), a.get("headline_metric", ""), value_a, value_b, _figure(d, 3),
                      "-" if rel is None else f"{rel * 100:+.1f}%", verdict])
    lines = [f"A = {name_a}", f"B = {name_b}", ""]
    if not table:
        lines.append("no cell in both runs")
    elif markdown:
        lines.append(md_table(HEADERS, table))
    else:
        lines.append(_fitted(table, width))
    for title, rows in ((f"only in A ({len(cmp.only_a)})", cmp.only_a), (f"only in B ({len(cmp.only_b)})", cmp.only_b)):
        if rows:
            lines += ["", title + ":"]
            lines += [textwrap.fill(f"{_describe(r, knobs)} [{r.get('status')}]", width, initial_indent="  ",
                                    subsequent_indent="    ") for r in rows]
    return "\n".join(lines)


def _figure(value: float | None, digits: int = 4) -> str:
    """50,230 rather than 5.023e+04; small figures (ms/iter) with their significant digits."""
    return num(value, 0) if value is not None and abs(value) >= 1000 else sig(value, digits)


def _fitted(table: list[list[str]], width: int) -> str:
    """The table when its lines fit `width`; else each cell's name wrapped, its figures on the line below."""
    text = text_table(HEADERS, table)
    if max(len(line) for line in text.splitlines()) <= width:
        return text
    blocks = []
    for cell, metric, a, b, d, rel, verdict in table:
        figures = f"{metric}: A {a}, B {b}, B-A {d} ({rel}) {verdict}".rstrip()
        blocks.append(textwrap.fill(cell, width, subsequent_indent="  ") + "\n"
                      + textwrap.fill(figures, width, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(blocks)
