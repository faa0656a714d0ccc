"""PNG plots for reports (matplotlib, Agg backend): tok/s against batch size per configuration for
generate-like scenarios, ms/iter per attention kernel and shape, each decode-profile case's family times
against their bounds (report_roofline.py), and COV-R against the threshold per conformer-quality system
(report_quality.py). Only `ok` rows are drawn; every point comes from a row, and every configuration in a
legend is drawn: a row without a batch size (the engine's packed batches, sized by a token budget) is a
dashed level across the batch sizes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from inferlab.bench import report_prefill, report_quality, report_roofline
from inferlab.bench.results import config_label, group_rows, headline, label_knobs, table_key


def _slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(parts)).strip("-").lower()[:80]


def write_plots(rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    written: list[Path] = []
    for (scenario, model, gpu), group in group_rows(rows, table_key).items():
        ok = [r for r in group if headline(r) is not None]
        if not ok:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        if scenario == "attention-kernels":
            written.append(_kernel_bars(ok, out_dir / f"{_slug('attention', gpu)}.png", gpu))
        elif scenario in (report_roofline.SCENARIO, report_quality.NAME):
            continue  # one chart of every case below
        elif any(r.get("batch_size") is not None for r in ok):
            written.append(_throughput_lines(ok, out_dir / f"{_slug(scenario, model, gpu)}.png", scenario, model, gpu))
    extra = [report_roofline.write_plot(rows, out_dir), report_quality.write_plot(rows, out_dir),
             report_prefill.write_plot(rows, out_dir)]
    return written + [path for path in extra if path]


def throughput_series(rows: list[dict[str, Any]]) -> list[tuple[str, list[tuple[int, float]], list[float]]]:
    """Per configuration: its label, its (batch size, figure) points, and the figures of its rows without a
    batch size (drawn as levels). The batch size is the x axis, never part of a label."""
    knobs = [k for k in label_knobs(rows) if k != "batch_size"]
    series = []
    for label, group in group_rows(rows, lambda r: config_label(r, knobs)).items():
        points = sorted((r["batch_size"], headline(r)) for r in group if r.get("batch_size") is not None)
        levels = [headline(r) for r in group if r.get("batch_size") is None]
        series.append((label, points, levels))  # type: ignore[arg-type]
    return series


def _throughput_lines(rows: list[dict[str, Any]], path: Path, scenario: str, model: str, gpu: str) -> Path:
    import matplotlib.pyplot as plt

    metric = rows[0].get("headline_metric", "output_tokens_per_s")
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points, levels in throughput_series(rows):
        color = None
        if points:
            (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
            color = line.get_color()
        for i, level in enumerate(levels):
            line = ax.axhline(level, linestyle="--", color=color,
                              label=f"{label} (no batch size: packed batches)" if not points and i == 0 else None)
            color = line.get_color()
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{scenario} · {model} · {gpu}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _kernel_bars(rows: list[dict[str, Any]], path: Path, gpu: str) -> Path:
    import matplotlib.pyplot as plt

    knobs = label_knobs(rows)  # the backend, and gqa where it varies
    shapes = list(dict.fromkeys(r["metrics"].get("shape", "?") for r in rows))
    kernels = list(dict.fromkeys(config_label(r, knobs) for r in rows))
    width = 0.8 / max(len(kernels), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(shapes)), 5))
    for i, kernel in enumerate(kernels):
        xs, ys = [], []
        for j, shape in enumerate(shapes):
            match = [r for r in rows if config_label(r, knobs) == kernel and r["metrics"].get("shape") == shape]
            if match:
                xs.append(j + i * width)
                ys.append(headline(match[0]))
        ax.bar(xs, ys, width=width, label=kernel)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))])
    ax.set_xticklabels(shapes, rotation=20, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms per call (log)")
    ax.set_title(f"attention kernels · {gpu}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
