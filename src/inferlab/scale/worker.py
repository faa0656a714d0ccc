"""One shard, run by one worker: `run_shard(task)` in the current process. Ray tasks and Slurm jobs call it
there; the local launcher's subprocess calls it through `python -m inferlab.scale TASK.json` (__main__.py).
The worker runs the workload adapter's run_shard on the shard's own input and output, and writes its stats
file when it ends well. It never touches other shards or the manifest.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inferlab.scale.adapter import ShardContext, get_adapter
from inferlab.scale.faults import row_counter
from inferlab.outputs.atomic import write_json_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardTask:
    workload: str  # adapter name (or "module:NAME")
    shard: int
    attempt: int  # 1-based, counted over all runs
    input: str  # absolute paths, so the task runs from any working directory
    output: str
    params: dict[str, Any]
    log: str
    stats: str
    device: str  # "cuda" or "cpu"
    threads: int | None = None  # CPU threads for this worker (torch, RDKit); None: library default
    fault_after_rows: int | None = None  # test hook (faults.py)
    launched_at: float | None = None  # time.time() when the coordinator handed the task to the launcher

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, indent=1)

    @staticmethod
    def from_json(text: str) -> ShardTask:
        return ShardTask(**json.loads(text))


def run_shard(task: ShardTask, capture_log: bool = True) -> dict[str, Any]:
    """Run `task` here; returns the stats it also writes to task.stats. With `capture_log`, this process's
    log records go to the shard's log file for the duration (in-process launchers)."""
    handler, root, old_level = None, logging.getLogger(), logging.getLogger().level
    if capture_log:
        Path(task.log).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(task.log, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s", "%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(min(old_level, logging.INFO) if old_level else logging.INFO)
    try:
        if task.threads:
            import torch

            torch.set_num_threads(task.threads)
        adapter = get_adapter(task.workload)
        log.info("shard %d attempt %d on %s (%s, CUDA_VISIBLE_DEVICES=%s)", task.shard, task.attempt,
                 socket.gethostname(), task.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
        ctx = ShardContext(Path(task.input), Path(task.output), task.device, task.threads,
                           row_counter(task.fault_after_rows))
        started = time.time()
        summary = adapter.run_shard(task.params, ctx)
        stats = {
            "shard": task.shard,
            "attempt": task.attempt,
            "host": socket.gethostname(),
            "device": task.device,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "started": started,
            # process start, imports and queueing before this function ran (spawn or cluster scheduling)
            "startup_s": started - task.launched_at if task.launched_at else None,
            "wall_s": time.time() - started,
            "summary": summary,
        }
        write_json_atomic(Path(task.stats), stats)
        log.info("shard %d done in %.1f s", task.shard, stats["wall_s"])
        return stats
    except Exception:
        log.exception("shard %d attempt %d failed", task.shard, task.attempt)
        raise
    finally:
        if handler is not None:
            root.removeHandler(handler)
            root.setLevel(old_level)
            handler.close()

