"""The conformer job's KV-cache gate, derived from the lab's conformer-quality rows: does an FP8 KV cache keep
the reference model's quality within the model-dtype (bf16) cache's spread over sampling seeds?

The rule is the quality report's verdict "fp8 within bf16's spread" (report_quality.fp8_spread_checks): on
every coverage and matching figure and validity, in every sampling group of the rows, fp8's mean over the
seeds is at least the lowest bf16 seed's (at most the highest, for the AMR figures, where lower is better);
a figure either row lacks counts as outside. The gate file is committed beside the reference model
(workloads/conformers/reference_model/kv_dtype_gate.json) and read by `conformers generate --kv-dtype auto`
(pipeline/kv_dtype_choice.py), so the default follows the measured quality, and a new quality run updates it:

    python -m inferlab.bench.kv_dtype_gate ROWS.jsonl... [--out GATE.json]   # write it (default: the committed one)
    python -m inferlab.bench.kv_dtype_gate ROWS.jsonl... --check              # exit 1 when the file disagrees

tests/unit/bench/test_kv_dtype_gate.py regenerates the committed file from the committed rows.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from inferlab.bench import report_quality as rq
from inferlab.bench.results import gpu_of, load_rows
from inferlab.workloads.conformers.reference_model import KV_DTYPE_GATE_FILE

FORMAT = 1
RULE = ("fp8's mean over the sampling seeds within the bf16 cache's seed range, or better, on every coverage and "
        "matching figure and validity, in every sampling group (bench/report_quality.fp8_spread_checks)")


def metric_label(key: str) -> str:
    """A figure's name in the gate and in the pipeline's summary: cov_p_0.75 -> COV-P@0.75, amr_r -> AMR-R."""
    coverage = re.fullmatch(r"cov_([rp])_(.+)", key)
    if coverage:
        return f"COV-{coverage.group(1).upper()}@{coverage.group(2)}"
    return key.replace("_", "-").upper() if key.startswith("amr_") else key


def kv_dtype_gate(rows: list[dict[str, Any]], sources: list[str]) -> dict[str, Any]:
    """The gate of `rows` (read from `sources`, named in the file); ValueError when no group of the rows holds
    both an engine bf16 and an engine fp8 quality row."""
    checks, groups = [], []
    for (model, gpu, sampling), systems in rq.groups(rows).items():
        thresholds = rq.reported_thresholds(list(systems.values()))
        found = rq.fp8_spread_checks(systems, thresholds)
        if not found:
            continue
        groups.append(systems)
        bf16, fp8 = (rq.quality_of(systems[s], False) or {} for s in (rq.ENGINE_BF16, rq.ENGINE_FP8))
        for key, _, within in found:
            low_high = bf16.get(key) or {}
            checks.append({"sampling": sampling, "metric": metric_label(key), "within": bool(within),
                           "fp8_mean": (fp8.get(key) or {}).get("mean"), "bf16_min": low_high.get("min"),
                           "bf16_max": low_high.get("max")})
    if not checks:
        raise ValueError("no conformer-quality group holds both an engine bf16 and an engine fp8 row: run "
                         "`inferlab bench --preset conformer-quality` on the reference model")
    first = groups[0][rq.ENGINE_FP8]
    outside = list(dict.fromkeys(c["metric"] for c in checks if not c["within"]))
    seeds = (first.get("metrics") or {}).get("seeds") or []
    return {"format": FORMAT, "rule": RULE, "sources": sources, "model": first.get("model"), "gpu": gpu_of(first),
            "commit": (first.get("env") or {}).get("commit"), "seeds": seeds, "fp8_within_spread": not outside,
            "outside": outside, "checks": checks}


def gate_text(gate: dict[str, Any]) -> str:
    return json.dumps(gate, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m inferlab.bench.kv_dtype_gate", description=__doc__.split("\n\n")[0])
    p.add_argument("rows", nargs="+", help="conformer-quality rows (JSONL)")
    p.add_argument("--out", default=None, help="where to write the gate (default: the committed file)")
    p.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = p.parse_args(argv)
    gate = gate_text(kv_dtype_gate(load_rows(args.rows), args.rows))
    path = Path(args.out) if args.out else KV_DTYPE_GATE_FILE
    if args.check:
        if not path.is_file() or path.read_text() != gate:
            print(f"{path} does not match the gate of {', '.join(args.rows)}; rerun without --check to write it")
            return 1
        print(f"{path} matches")
        return 0
    path.write_text(gate)
    print(f"wrote {path}: fp8 within spread: {json.loads(gate)['fp8_within_spread']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
