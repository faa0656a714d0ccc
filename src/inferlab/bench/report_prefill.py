"""The report's "The packed prefill by kernel family" section (rows with a prefill_profile: the classify and
hidden-states scenarios with knob `profile`): per profiled cell, the device time of each kernel family per pass
over its profiled batches, its share, the GEMMs' and the attention's TFLOP/s and % of the measured matmul peak,
and how busy the device was. Every number is a row's (bench/prefill_profile.py).
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.markdown import md_table, num, pct
from inferlab.bench.results import gpu_of


def profiled_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and (r.get("metrics") or {}).get("prefill_profile")]


def case_name(row: dict[str, Any]) -> str:
    c, m = row.get("config") or {}, row.get("metrics") or {}
    weights = (m.get("engine") or {}).get("weights") or c.get("weights") or "-"
    return (f"{row.get('scenario')} · {row.get('model')} · {row.get('backend')} · weights {weights} · "
            f"{c.get('min_tokens')}-{c.get('max_tokens')} tokens · {gpu_of(row)}")


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
