#!/usr/bin/env python
"""Device check of the transformers-backed workloads (issue 5), in one run.

(a) classify matrix as in seed 004: qwen2-cls preset (random weights), batch 1/8/16/32/64 x dtype fp16/bf16 x
    attention sdpa/eager x quantization none/int8/fp8 (torchao), texts of 100-2000 tokens; samples/s,
    p50/p95/p99 batch latency, peak memory. One extra cell batches consecutive rows (the seeds' way) to show
    what length bucketing buys. An unavailable quantization is a row with status `unavailable` and the reason.
(b) hidden-state collection throughput, llama-380m shape: batch 8/32/64, layers 4/8/16, mean pooling; plus
    one end-to-end `collect_hidden_states` run through files (shards, assembly).
(c) OOM back-off, gemma-2b shape: hidden states with batch 4096 at max length 1024, and HF generate with batch
    4096; each must finish with every row written exactly once. On the CPU (--quick) the OOM is simulated by a
    memory limit on the model wrapper, and the rows say so.

GPU:  python scripts/gpu/workloads_check.py --out $OUT            (under 6 minutes on an H100)
CPU:  python scripts/gpu/workloads_check.py --out /tmp/wl --device cpu --quick
Cells past --budget-s are recorded as `skipped`. Each part is guarded: a failure prints its traceback and
the next part runs. Writes classify.jsonl, hidden_states.jsonl, oom.jsonl (lab rows) and summary.md to --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import torch  # noqa: E402

from workloads_check_context import PROFILES, CheckContext, write_summary  # noqa: E402
from workloads_check_parts import (  # noqa: E402
    run_classify_matrix,
    run_hidden_throughput,
    run_oom_generate,
    run_oom_hidden,
)

PARTS = {
    "classify": run_classify_matrix,
    "hidden": run_hidden_throughput,
    "oom-hidden": run_oom_hidden,
    "oom-generate": run_oom_generate,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for result files")
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--quick", action="store_true", help="tiny presets and shapes (CPU smoke run)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of: {', '.join(PARTS)}")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting new cells after this many seconds")
    scratch = Path(tempfile.gettempdir()) / "inferlab-workloads-check"
    ap.add_argument("--scratch", default=str(scratch),
                    help="where random checkpoints (reused if present) and work files go; never inside --out")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device visible; use --device cpu --quick for the CPU smoke run", file=sys.stderr)
        return 2
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = CheckContext(PROFILES["quick" if args.quick else "gpu"], torch.device(args.device), out, Path(args.scratch),
                       time.perf_counter() + args.budget_s)
    print(f"workloads check: profile {ctx.profile.name}, device {ctx.device}, env {json.dumps(ctx.env)}", flush=True)
    for name in [p.strip() for p in args.parts.split(",") if p.strip()]:
        if name not in PARTS:
            print(f"unknown part {name!r}; choose from {', '.join(PARTS)}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        print(f"\n=== part {name} ===", flush=True)
        try:
            PARTS[name](ctx)
        except Exception:  # noqa: BLE001 - one part's failure must not hide the others
            traceback.print_exc()
            ctx.failures.append(name)
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"=== part {name} done in {time.perf_counter() - start:.1f} s", flush=True)
    summary = write_summary(ctx)
    print("\n" + summary)
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
