"""The report's "The decode step against its bound" section (rows of scenario decode-profile): per GPU, a summary
of every profiled case (the step's time and bandwidth, the families that miss their bound), then per case the
family table of bench/roofline.py (time, share of the step, achieved GB/s and TFLOP/s, the three bounds, % of
the bound, what bounds it, and why a family misses it), and a bar chart of each family's time against its
bound. Every number is a row's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.markdown import md_table, num, pct, sig
from inferlab.bench.results import gpu_of

SCENARIO = "decode-profile"


def roofline_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("scenario") == SCENARIO and r.get("status") == "ok"
            and (r.get("metrics") or {}).get("families")]  # fmt: skip


def case_name(row: dict[str, Any]) -> str:
    c, m = row.get("config") or {}, row.get("metrics") or {}
    kv = m.get("kv_cache_dtype") or c.get("kv_dtype")
    name = (f"{row.get('model')} · {c.get('batch_size')} rows · context {c.get('context_tokens')} · KV {kv} · "
            f"T {c.get('temperature')} top-p {c.get('top_p')}")
    if c.get("constraint") == "on":  # the constrained step, packed (forced runs) or one token per row
        packed = m.get("packed_positions")
        name += " · constrained" + (f" · forced runs {c.get('forced_run_tokens')}, {packed} positions" if packed else "")
    return name


def _us(value: Any) -> str:
    return "-" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.1f}")


def family_table(families: list[dict[str, Any]]) -> str:
    headers = ["family", "launches", "us", "share", "GB/s", "TFLOP/s", "bytes us", "FLOPs us", "floor us",
               "% of bound", "bound by", "verdict"]  # fmt: skip
    body = []
    for f in families:
        verdict = ("ok" if f.get("meets") else "**below**") + (f": {f['reason']}" if f.get("reason") else "")
        body.append([f["family"], num(f.get("launches"), 0), _us(f.get("us")), pct(f.get("share")), num(f.get("gb_per_s"), 0),
                     sig(f.get("tflops")), _us(f.get("bytes_us")), _us(f.get("flops_us")), _us(f.get("floor_us")),
                     pct(f.get("pct_of_bound")), f.get("limit") or "-", verdict])  # fmt: skip
    return md_table(headers, body)


def _summary(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        m = r["metrics"]
        body.append([case_name(r), _us(m.get("step_us")), num(m.get("step_gb_per_s"), 0), pct(m.get("step_bandwidth_fraction")),
                     _us(m.get("kernel_us")), _us(m.get("gaps_us")), ", ".join(m.get("below_bound") or []) or "none",
                     m.get("profile_source", "-")])  # fmt: skip
    return md_table(["case", "step us", "step GB/s", "of copy", "kernels us", "gaps us", "below their bound",
                     "profile"], body)  # fmt: skip


def render_section(rows: list[dict[str, Any]]) -> list[str]:
    picked = roofline_rows(rows)
    if not picked:
        return []
    lines = ["## The decode step against its bound", "",
             "Each family's fewest bytes and FLOPs at the device's measured copy bandwidth, bf16 matrix rate and "
             "launch floor (bench/roofline.py); a family meets its bound at >= 60% of it, one under 5% of the step "
             "is not held to it. Step GB/s: weights + every row's K/V over the step time.", ""]  # fmt: skip
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for r in picked:
        by_gpu.setdefault(gpu_of(r), []).append(r)
    for gpu, group in by_gpu.items():
        c = group[0]["metrics"].get("ceilings") or {}
        gap = c.get("graph_gap_us")
        lines += [f"### {gpu}", "",
                  f"Ceilings: copy {num(c.get('copy_gb_per_s'), 0)} GB/s, matrix {sig(c.get('matmul_tflops'))} TFLOP/s, "
                  f"kernel floor {sig(c.get('kernel_floor_us'))} us" + (f", gap in a graph {sig(gap)} us." if gap else "."),
                  "", _summary(group), ""]  # fmt: skip
        for r in group:
            lines += [f"#### {case_name(r)}", "", family_table(r["metrics"]["families"]), ""]
    return lines


def write_plot(rows: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """Per case, each family's time against its bound (bars, log scale): where a step's time goes and how far
    from its bound each part is."""
    picked = roofline_rows(rows)
    if not picked:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(picked), 1, figsize=(10, 2.6 * len(picked)), squeeze=False)
    for ax, r in zip(axes[:, 0], picked):
        families = r["metrics"]["families"]
        names = [f["family"] for f in families]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [f.get("us") or 0 for f in families], width=0.4, label="measured us")
        ax.bar([x + 0.2 for x in xs], [f.get("bound_us") or 0 for f in families], width=0.4, label="bound us")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"{case_name(r)} · {gpu_of(r)}", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "decode-roofline.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
