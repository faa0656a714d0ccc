"""engine_check part `startup`: the engine started twice, each in a fresh process, with one start-up cache.

The first process starts with an empty cache folder (the GEMM plan is timed and stored); the second is
the same job's next run (the plan is read back, and Triton's own disk cache is warm from the first). Each
child reports Engine(...)'s wall time (`stats.startup_s`, target <= 5 s for the second) and its phases:
CUDA context, weights, tokenizer (in a thread beside the weights), allocation, GEMM plan and its source,
warm-up, graphs; and the process's time before the engine (Python, torch and inferlab imports). A child
that fails or passes --timeout is a row, not a dead run.

    python scripts/gpu/engine_check_startup.py --child --model DIR --device cuda --max-seq-len 1704 --cache-dir DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROCESS_START = time.perf_counter()
MAX_SEQ_LEN = 1704  # the conformer job's (NCI, 20-50 heavy atoms, v3-fixed4, qwen3-chem)


def child(args) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from inferlab.engine import Engine, EngineConfig

    before = time.perf_counter() - PROCESS_START
    t = time.perf_counter()
    engine = Engine(EngineConfig(model=args.model, device=args.device, max_seq_len=args.max_seq_len,
                                 cache_dir=args.cache_dir))
    wall = time.perf_counter() - t
    stats = engine.stats.as_dict()
    stats.pop("gemm_choices")
    print(json.dumps({"engine_wall_s": wall, "before_engine_s": before, "stats": stats}))


def part_startup(ctx) -> dict[str, Any]:
    model = ctx.checkpoint("tiny-qwen3" if ctx.quick else "qwen3-0.6b")
    cache_dir = ctx.cache / "startup-cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    res: dict[str, Any] = {"cache_dir": str(cache_dir)}
    for label in ("first_process", "second_process"):
        command = [sys.executable, __file__, "--child", "--model", str(model), "--device", str(ctx.device),
                   "--max-seq-len", str(256 if ctx.quick else MAX_SEQ_LEN), "--cache-dir", str(cache_dir)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300 if ctx.cuda else 600)
            out = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
        except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
            done, out = None, None
            res[label] = {"error": repr(e)}
        if out is None:
            res.setdefault(label, {"error": (done.stderr[-3000:] if done else "")})
            ctx.row("startup", f"{label}: start-up", "error", "FAIL")
            continue
        res[label] = out
        s = out["stats"]
        verdict = "" if label == "first_process" else ("ok" if s["startup_s"] <= 5.0 else "FAIL > 5 s")
        ctx.row("startup", f"{label}: Engine() wall s (imports before: {out['before_engine_s']:.1f} s)",
                f"{s['startup_s']:.2f}", verdict)
        ctx.row("startup", f"{label}: CUDA / weights / tokenizer / alloc / GEMM / warm-up / capture s",
                f"{s['device_init_s']:.1f} / {s['load_s']:.1f} / {s['tokenizer_s']:.1f} / {s['allocate_s']:.1f} / "
                f"{s['gemm_tune_s']:.1f} / {s['warmup_s']:.1f} / {s['capture_s']:.1f}",
                f"GEMM plan: {s['gemm_plan_source'] or 'none'}; {s['graphs']} decode + {s['prefill_graphs']} "
                "prefill graphs")  # fmt: skip
    second = res.get("second_process", {}).get("stats")
    if ctx.cuda and second is not None and second["gemm_plan_source"] != "cache":
        ctx.row("startup", "second process: GEMM plan from the start-up cache", second["gemm_plan_source"], "FAIL")
    return res


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-seq-len", type=int, default=MAX_SEQ_LEN)
    parser.add_argument("--cache-dir", required=True)
    child(parser.parse_args())
