"""Ray launcher: each shard is a Ray task holding one GPU (`num_gpus=1`), on a local Ray or a cluster
(`--ray-address auto`, `ray://head:10001`). Ray sets each task's CUDA_VISIBLE_DEVICES; `max_calls=1`
gives every shard a fresh worker process (its GPU memory is returned when it ends) and `max_retries=0`
leaves retries to the coordinator, which counts attempts the same way for every launcher.

The task runs worker.run_shard in the Ray worker process; its log goes to the shard's log file, so the
work folder must be on a filesystem every node sees, and inferlab must be importable on every node.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.scale.config import ALL_GPUS, ScaleConfig
from inferlab.scale.launchers.base import Outcome, log_tail
from inferlab.scale.launchers.local import PACKAGE_ROOT
from inferlab.scale.workdir import WorkDir
from inferlab.scale.worker import ShardTask

log = logging.getLogger(__name__)


def _run_shard_in_ray(task_json: str) -> dict[str, Any]:
    from inferlab.scale.worker import ShardTask, run_shard

    return run_shard(ShardTask.from_json(task_json), capture_log=True)


@dataclass
class RayHandle:
    task: ShardTask
    ref: Any  # ray.ObjectRef


class RayLauncher:
    def __init__(self, config: ScaleConfig, work: WorkDir) -> None:
        try:
            import ray
        except ImportError:
            raise UnsupportedError("--launcher ray needs Ray: pip install 'inferlab[scale]' (or ray)") from None
        self._ray = ray
        self._threads = config.ray.cpus_per_task
        self._started_here = not ray.is_initialized()
        if self._started_here:
            env = {"PYTHONPATH": os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
            if config.device == "cpu":
                env["CUDA_VISIBLE_DEVICES"] = ""
            ray.init(address=config.ray.address, runtime_env={"env_vars": env}, include_dashboard=False,
                     log_to_driver=False)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if config.device == "cuda":
            if gpus == 0:
                self.close()
                raise ConfigError("the Ray cluster has no GPU; start Ray on GPU nodes, or pass --device cpu")
            self.workers = gpus if config.workers == ALL_GPUS else int(config.workers)
            if self.workers > gpus:
                log.warning("%d shards on a Ray cluster of %d GPUs: some wait for a free GPU", self.workers, gpus)
        else:
            if config.workers == ALL_GPUS:
                self.close()
                raise ConfigError("--gpus all counts GPUs; with --device cpu give the number of Ray tasks")
            self.workers = int(config.workers)
        self.capacity: int | None = None  # Ray queues tasks until a GPU is free
        self._remote = ray.remote(
            num_gpus=1 if config.device == "cuda" else 0,
            num_cpus=config.ray.cpus_per_task,
            max_retries=0,
            max_calls=1,
        )(_run_shard_in_ray)

    def start(self, tasks: list[ShardTask]) -> list[RayHandle]:
        handles = []
        for task in tasks:
            task = dataclasses.replace(task, threads=self._threads)
            handles.append(RayHandle(task, self._remote.remote(task.to_json())))
        return handles

    def poll(self, handle: RayHandle) -> Outcome | None:
        ready, _ = self._ray.wait([handle.ref], timeout=0)
        if not ready:
            return None
        try:
            self._ray.get(handle.ref)
        except Exception as e:  # RayTaskError (the shard raised) or WorkerCrashedError (the process died)
            text = str(e).strip()
            tail = log_tail(handle.task.log) or "\n".join(text.splitlines()[-25:])
            return Outcome(False, f"Ray task failed: {type(e).__name__}: {text.splitlines()[0] if text else ''}", tail)
        return Outcome(True)

    def cancel(self, handle: RayHandle) -> None:
        self._ray.cancel(handle.ref, force=True)

    def close(self) -> None:
        if self._started_here and self._ray.is_initialized():
            self._ray.shutdown()
