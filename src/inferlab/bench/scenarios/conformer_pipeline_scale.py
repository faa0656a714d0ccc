"""The figures of a scaled-out `inferlab conformers generate --gpus N` run (scenario conformer-pipeline,
knob gpus), read from its scale report (inferlab.scale's report.json: per shard the worker's stats and the
pipeline summary of its shard).

End to end: the command's wall clock (planning, worker start, model load, generation, merge). Steady: the
rows and tokens over the slowest worker's generation time (its engine start-up excluded), what N GPUs
give once running.
"""

from __future__ import annotations

from typing import Any


def figures_from_scale_report(report: dict[str, Any], wall: float) -> dict[str, Any]:
    if not report.get("complete"):
        failed = [s["index"] for s in report["shards"] if s["status"] != "done"]
        raise RuntimeError(f"the scaled run did not complete: shards {failed} failed (report {report['work_dir']})")
    shards = [(s.get("stats") or {}).get("summary") or {} for s in report["shards"]]
    ok, error = sum(s["conformers_ok"] for s in shards), sum(s["conformers_error"] for s in shards)
    generated = sum(s["conformers_generated"] for s in shards)
    rejected = sum(s["conformers_rejected"] for s in shards)
    tokens = sum(s["output_tokens"] for s in shards)
    slowest = max(s["run_s"] for s in shards)
    return {
        "wall_s": wall,
        "workers": report["workers"],
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall,
        "molecules_per_s": sum(s["molecules_run"] for s in shards) / wall,
        "conformers_per_s": (ok + error) / wall,
        "engine_start_s": max(s["engine_start_s"] for s in shards),
        "steady_s": slowest,
        "steady_output_tokens_per_s": tokens / slowest if slowest else None,
        "steady_conformers_per_s": (ok + error) / slowest if slowest else None,
        "shard_imbalance_estimated": report["imbalance"],
        "conformers_ok": ok,
        "conformers_error": error,
        "conformers_generated": generated,
        "conformers_rejected": rejected,
        "valid_fraction": (generated - rejected) / generated if generated else None,
        "per_shard": [{"rows": s["rows"], "est_tokens": s["est_tokens"], "run_s": shard.get("run_s"),
                       "engine_start_s": shard.get("engine_start_s")}
                      for s, shard in zip(report["shards"], shards)],
    }
