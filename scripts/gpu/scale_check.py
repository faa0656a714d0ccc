#!/usr/bin/env python
"""Device check of scale-out (issue 6), for the 2-GPU machine (nvidia-h200-x2), in one run.

(1) Throughput: the same workload and input on 1 worker, then on 2 (`--gpus 1` vs `--gpus 2`, local
    launcher): rows/s and output tokens/s end to end (wall clock of the whole scaled run: planning, worker
    start, model load, graph capture, generation, merge) and steady (rows / the slowest worker's run time,
    load excluded), and the 2-over-1 ratios of both.
(2) Kill and rerun: a smaller input on 2 workers; the fault hook ends worker 1 a third of the way into its
    shard (no retries), the run must report that shard failed and merge nothing; a rerun must resume it,
    leave the finished shard alone and merge every output row exactly once.

Workload: `--workload auto` takes the conformer pipeline (`inferlab conformers ... --gpus`) when it exists
in this build, else text generation on the engine (`inferlab.workloads.text`), else transformers' generate.
Random-weight checkpoints (qwen3-0.6b shape) are made in --scratch and reused. Each run is guarded: a
failure or a timeout becomes a row with its status and message, and the next part runs.

GPU:  PYTHONPATH=src python scripts/gpu/scale_check.py --out $OUT         (about 5 minutes on 2 H200s)
CPU:  PYTHONPATH=src python scripts/gpu/scale_check.py --out /tmp/sc --device cpu --quick
Writes scale_check.jsonl (lab rows, BENCHMARKING.md names), reports/<run>.json (each run's scale report)
and summary.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import scale_check_recipes as recipes  # noqa: E402

from inferlab.scale import ScaleConfig, ScaleJob, run_scaled  # noqa: E402
from inferlab.scale.faults import FAULT_ENV  # noqa: E402


class RunTimeout(Exception):
    pass


def environment() -> dict[str, Any]:
    import torch
    import transformers

    def first_line(cmd: list[str]) -> str | None:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            return "; ".join(out) if out else None
        except Exception:  # noqa: BLE001
            return None

    return {  # nvidia-smi, not torch.cuda: this process must not hold a CUDA context on a worker's GPU
        "gpu": first_line(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]),
        "driver": first_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
        "commit": first_line(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"]),
        "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
    }


def pick_workload(name: str) -> str:
    if name != "auto":
        return name
    return "conformers" if recipes.conformer_cli_available() else "generate"


def scaled_run(workload: str, sizes: recipes.Sizes, model: Path, input_path: Path, run_dir: Path, workers: int,
               device: str, fault: str | None, retries: int, timeout_s: float) -> tuple[recipes.RunOutput, float]:
    """One scaled run (fresh unless run_dir holds an earlier one); returns its output and wall seconds."""
    output = recipes.output_path(workload, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    env_fault = {FAULT_ENV: fault} if fault else {}
    start = time.perf_counter()
    if workload == "conformers":  # the pipeline's own CLI: its parameters are its own
        cmd = recipes.conformer_cli(model, input_path, output, sizes, device)
        cmd += ["--gpus", str(workers), "--retries", str(retries)]
        env = {k: v for k, v in os.environ.items() if k != FAULT_ENV} | env_fault
        with (run_dir / "cli.log").open("a") as log:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        report = json.loads((run_dir / (output.name + ".scale") / "report.json").read_text())
    else:
        os.environ.pop(FAULT_ENV, None)
        os.environ.update(env_fault)
        params = recipes.library_params(workload, model, sizes, device)
        job = ScaleJob(workload, str(input_path), str(output), params)
        def on_alarm(signum, frame):  # raised inside run_scaled, which cancels its workers and re-raises
            raise RunTimeout(f"over {timeout_s:.0f} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(int(timeout_s))
        try:
            report = run_scaled(job, ScaleConfig(workers=workers, device=device, retries=retries)).to_json()
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.environ.pop(FAULT_ENV, None)
    wall = time.perf_counter() - start
    ids, tokens = recipes.read_output(workload, output) if report.get("complete") else ([], None)
    return recipes.RunOutput(report, ids, tokens), wall


def metrics_of(run: recipes.RunOutput, wall_s: float) -> dict[str, Any]:
    report = run.report
    stats = [s.get("stats") or {} for s in report["shards"]]
    summaries = [x.get("summary") or {} for x in stats]
    # worker start to model ready: process start and imports, then load (and graph capture for the engine)
    load = [(x.get("startup_s") or 0.0) + (y.get("load_s") or 0.0) for x, y in zip(stats, summaries) if x]
    busy = [x["run_s"] for x in summaries if x.get("run_s") is not None]
    rows, tokens = report["rows_total"], run.output_tokens
    steady = max(busy) if len(busy) == len(summaries) and busy else None
    return {
        "rows": rows, "wall_s": round(wall_s, 3), "requests_per_s": rows / wall_s,
        "output_tokens": tokens, "output_tokens_per_s": tokens / wall_s if tokens else None,
        "first_call_s": max(load) if load else None, "steady_s": steady,
        "steady_requests_per_s": rows / steady if steady else None,
        "steady_output_tokens_per_s": tokens / steady if tokens and steady else None,
        "estimated_tokens": sum(s["est_tokens"] for s in report["shards"]),
        "shard_imbalance_estimated": report["imbalance"],
        "per_shard": [{"rows": s["rows"], "est_tokens": s["est_tokens"], "startup_s": w.get("startup_s"),
                       "load_s": x.get("load_s"), "run_s": x.get("run_s")}
                      for s, w, x in zip(report["shards"], stats, summaries)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for result files")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="tiny presets and sizes (CPU smoke run)")
    ap.add_argument("--workload", default="auto", choices=["auto", "conformers", "generate", "classify"])
    ap.add_argument("--gpus", default="1,2", help="worker counts of the throughput runs (default 1,2)")
    ap.add_argument("--rows", type=int, default=None, help="override the input size of the throughput runs")
    ap.add_argument("--new-tokens", type=int, default=None, help="override the generation length")
    ap.add_argument("--run-timeout-s", type=float, default=150.0, help="limit of one scaled run")
    ap.add_argument("--budget-s", type=float, default=330.0, help="the kill check is skipped past this many seconds")
    ap.add_argument("--scratch", default=str(Path(tempfile.gettempdir()) / "inferlab-scale-check"),
                    help="checkpoints (kept) and run folders; never inside --out")
    args = ap.parse_args()
    out, scratch = Path(args.out), Path(args.scratch)
    (out / "reports").mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run_id = time.strftime("%Y%m%d-%H%M%S")
    env = environment()
    workload = pick_workload(args.workload)
    sizes = recipes.SIZES[(workload, "quick" if args.quick else "gpu")]
    if workload == "generate" and not recipes.engine_text_available() and not args.quick:
        sizes = replace(sizes, rows=sizes.rows // 3, kill_rows=sizes.kill_rows // 2)  # transformers is slower
    sizes = replace(sizes, rows=args.rows or sizes.rows, new_tokens=args.new_tokens or sizes.new_tokens)
    worker_counts = [int(n) for n in args.gpus.split(",")]
    rows: list[dict[str, Any]] = []
    print(f"scale check: workload {workload}, {sizes}, workers {worker_counts}, device {args.device}", flush=True)

    def record(part: str, workers: int | None, status: str, message: str, metrics: dict, config: dict) -> None:
        rows.append({"run_id": run_id, "scenario": "scale-out", "backend": f"inferlab-scale/{workload}",
                     "model": sizes.preset, "batch_size": None, "status": status, "message": message,
                     "config": {"part": part, "workload": workload, "workers": workers, "launcher": "local",
                                "device": args.device, **config}, "env": env, "metrics": metrics})

    try:
        dtype = "bfloat16" if args.device == "cuda" else "float32"
        model = recipes.checkpoint(scratch, sizes.preset, dtype)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        record("setup", None, "error", f"{type(e).__name__}: {e}", {}, {})
        return finish(out, rows, started)
    sizes_config = {"rows": sizes.rows, "new_tokens": sizes.new_tokens, "conformers": sizes.conformers}

    # (1) throughput on 1 and 2 workers
    input_path = recipes.make_input(workload, scratch, sizes.rows)
    by_workers: dict[int, dict] = {}
    for n in worker_counts:
        run_dir = scratch / "runs" / f"throughput-{n}"
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            run, wall = scaled_run(workload, sizes, model, input_path, run_dir, n, args.device, None, 1,
                                   args.run_timeout_s)
            (out / "reports" / f"throughput-{n}.json").write_text(json.dumps(run.report, indent=1))
            complete = run.report.get("complete") and sorted(run.ids) == sorted(
                recipes.expected_ids(workload, input_path, sizes))
            metrics = metrics_of(run, wall)
            by_workers[n] = metrics
            startup_share = (metrics["first_call_s"] or 0.0) / wall
            note = f"worker start+load is {startup_share:.0%} of the wall time" if startup_share > 0.15 else ""
            record("throughput", n, "ok" if complete else "error",
                   note if complete else "incomplete output (see the report)", metrics, sizes_config)
            print(f"  {n} worker(s): {metrics['rows']} rows in {wall:.1f} s = {metrics['requests_per_s']:.1f} rows/s, "
                  f"{_fmt(metrics['output_tokens_per_s'])} tok/s; steady {_fmt(metrics['steady_requests_per_s'])} "
                  f"rows/s (start+load {_fmt(metrics['first_call_s'])} s, slowest run {_fmt(metrics['steady_s'])} s)",
                  flush=True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            record("throughput", n, "timeout" if isinstance(e, (RunTimeout, subprocess.TimeoutExpired)) else "error",
                   f"{type(e).__name__}: {e}", {}, sizes_config)
    if len(by_workers) >= 2:
        lo, hi = min(by_workers), max(by_workers)
        ratio = {key: (by_workers[hi][key] / by_workers[lo][key]) if by_workers[lo].get(key) and by_workers[hi].get(key)
                 else None for key in ("requests_per_s", "output_tokens_per_s", "steady_requests_per_s",
                                       "steady_output_tokens_per_s")}
        message = (f"{hi} workers over {lo}: x{ratio['requests_per_s'] or 0:.2f} rows/s end to end, "
                   f"x{ratio['steady_requests_per_s'] or 0:.2f} steady")
        record("ratio", hi, "ok", message, {f"speedup_{k}": v for k, v in ratio.items()}, sizes_config)
        print(f"  {hi} over {lo} workers: end to end x{ratio['requests_per_s']:.2f} rows/s, steady "
              f"x{(ratio['steady_requests_per_s'] or 0):.2f}", flush=True)

    # (2) kill one worker a third of the way into its shard, then rerun
    if time.perf_counter() - started > args.budget_s - 60:
        record("kill-rerun", None, "skipped", f"over the {args.budget_s:.0f} s budget", {}, {"rows": sizes.kill_rows})
        return finish(out, rows, started)
    try:
        kill_input = recipes.make_input(workload, scratch, sizes.kill_rows)
        run_dir = scratch / "runs" / "kill"
        shutil.rmtree(run_dir, ignore_errors=True)
        workers = max(worker_counts)
        per_shard = sizes.kill_rows * max(sizes.conformers, 1) // workers
        fault = f"shard={workers - 1},after_rows={max(1, per_shard // 3)}"
        first, wall1 = scaled_run(workload, sizes, model, kill_input, run_dir, workers, args.device, fault, 0,
                                  args.run_timeout_s)
        second, wall2 = scaled_run(workload, sizes, model, kill_input, run_dir, workers, args.device, None, 1,
                                   args.run_timeout_s)
        (out / "reports" / "kill-first.json").write_text(json.dumps(first.report, indent=1))
        (out / "reports" / "kill-rerun.json").write_text(json.dumps(second.report, indent=1))
        expected = recipes.expected_ids(workload, kill_input, sizes)
        failed = [s["index"] for s in first.report["shards"] if s["status"] != "done"]
        rerun_tries = [s["attempts_this_run"] for s in second.report["shards"]]
        duplicates = len(second.ids) - len(set(second.ids))
        missing = len(set(expected) - set(second.ids))
        ok = (not first.report["complete"] and failed == [workers - 1] and second.report["complete"]
              and duplicates == 0 and missing == 0 and len(second.ids) == len(expected)
              and all(t == 0 for i, t in enumerate(rerun_tries) if i != workers - 1))
        metrics = {"rows_expected": len(expected), "rows_found": len(second.ids), "duplicates": duplicates,
                   "missing": missing, "failed_shards_first_run": failed, "rerun_attempts": rerun_tries,
                   "rows_done_before_rerun": second.report["rows_before"], "first_wall_s": wall1, "rerun_wall_s": wall2}
        record("kill-rerun", workers, "ok" if ok else "error", fault, metrics, {"rows": sizes.kill_rows})
        print(f"  kill and rerun: {'ok' if ok else 'FAILED'} {metrics}", flush=True)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        record("kill-rerun", None, "error", f"{type(e).__name__}: {e}", {}, {"rows": sizes.kill_rows})
    return finish(out, rows, started)


def finish(out: Path, rows: list[dict], started: float) -> int:
    with (out / "scale_check.jsonl").open("a") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    lines = ["| part | workers | status | rows/s | tok/s | steady rows/s | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["metrics"]
        cells = [r["config"]["part"], r["config"].get("workers"), r["status"], _fmt(m.get("requests_per_s")),
                 _fmt(m.get("output_tokens_per_s")), _fmt(m.get("steady_requests_per_s")),
                 r["message"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    summary = "\n".join(lines)
    (out / "summary.md").write_text(summary + "\n")
    print(summary)
    print(f"done in {time.perf_counter() - started:.0f} s; rows in {out / 'scale_check.jsonl'}")
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


if __name__ == "__main__":
    sys.exit(main())
