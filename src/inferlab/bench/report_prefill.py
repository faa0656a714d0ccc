"""The report's "The packed prefill by kernel family" section (rows with a prefill_profile: the classify and
hidden-states scenarios with knob `profile`): per profiled cell, the device time of each kernel family per pass
over its profiled batches, its share, the GEMMs' and the attention's TFLOP/s and % of the measured matmul peak,
and how busy the device was; a chart of the families' time per cell. Every number is a row's
(bench/prefill_profile.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.markdown import md_table, num, pct
from inferlab.bench.results import gpu_of


def profiled_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and (r.get("metrics") or {}).get("prefill_profile")]


def case_name(row: dict[str, Any]) -> str:
    c, m = row.get("config") or {}, row.get("metrics") or {}
    weights = (m.get("engine") or {}).get("weights") or c.get("weights") or "-"
    extra = [f"pool {c['pool']}" if c.get("pool") else "",
             f"cap {c['max_batch_latency_ms']:g} ms" if c.get("max_batch_latency_ms") else "",
             f"texts {c['texts']}" if c.get("texts") not in (None, "synthetic") else ""]
    return " · ".join([str(row.get("scenario")), str(row.get("model")), str(row.get("backend")), f"weights {weights}",
                       f"{c.get('min_tokens')}-{c.get('max_tokens')} tokens", *filter(None, extra), gpu_of(row)])


def render_section(rows: list[dict[str, Any]]) -> list[str]:
    picked = profiled_rows(rows)
    if not picked:
        return []
    lines = ["## The packed prefill by kernel family", "",
             "A cell's first batches (up to 8) run twice more under torch.profiler after its timing: device time per "
             "pass by family (kernel names: bench/prefill_profile.py), the GEMMs' TFLOP/s over the projections' "
             "FLOPs and the attention's over q.k and p.v, against the measured bf16 matmul rate; busy: the kernels' "
             "time over the profiled wall time (below 100%: the device waited for the host).", ""]  # fmt: skip
    for r in picked:
        p = r["metrics"]["prefill_profile"]
        body = [[f["family"], num(f.get("us"), 0), pct(f.get("share")), num(f.get("tflops"), 0),
                 num(f.get("pct_of_matmul_peak"), 1)] for f in p["families"]]  # fmt: skip
        lines += [f"### {case_name(r)}", "",
                  f"Batches profiled: {p['batches']}; {num(p.get('kernels_us'), 0)} us of kernels per pass in "
                  f"{num(p.get('wall_us'), 0)} us (busy {pct(p.get('busy'))}).", "",
                  md_table(["family", "us per pass", "share", "TFLOP/s", "% of matmul peak"], body), "",
                  md_table(["kernel", "family", "us per pass"],
                           [[k["kernel"], k["family"], num(k["us"], 0)] for k in p.get("top_kernels", [])]), ""]
    return lines


def write_plot(rows: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """One horizontal bar per profiled cell, split by kernel family (us per pass): where a packed prefill's
    time goes, cell beside cell."""
    picked = profiled_rows(rows)
    if not picked:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inferlab.bench.prefill_profile import FAMILIES

    fig, ax = plt.subplots(figsize=(10, 0.6 * len(picked) + 1.6))
    labels = [case_name(r) for r in picked]
    left = [0.0] * len(picked)
    for family in FAMILIES:
        widths = [next((f["us"] for f in r["metrics"]["prefill_profile"]["families"] if f["family"] == family), 0.0)
                  for r in picked]  # fmt: skip
        if any(widths):
            ax.barh(range(len(picked)), widths, left=left, label=family)
            left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(picked)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("device us per pass over the profiled batches")
    ax.legend(fontsize=7, ncol=len(FAMILIES), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "prefill-profile.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
